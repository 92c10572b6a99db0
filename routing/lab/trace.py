"""`trace get`: a public block-hash trace, from its repository at its published commit or
from a copy (`--from`), checked against the digest that commit names; `trace export`: your own
requests as a block-hash trace, hashed locally, with no text leaving the machine
(routing/lab/export.py)."""

from __future__ import annotations

import argparse
import hashlib
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from routing.lab import export
from routing.traces import TraceError, read_trace

# Mooncake's FAST'25 release at the commit that added it ("add FAST25 release", 2025-02-21); the
# files are unchanged at the repository's head of 2026-08-22. Each is checked by its git blob id
# (what the commit's tree names) and, where it was read here, its SHA-256.
MOONCAKE_COMMIT = "3cca71daccf2a7afb8fe3f0295358f70e3a69fdb"
MOONCAKE_RAW = f"https://raw.githubusercontent.com/kvcache-ai/Mooncake/{MOONCAKE_COMMIT}/FAST25-release/traces/"


@dataclass(frozen=True)
class PublicTrace:
    file: str
    git_blob: str
    sha256: str | None
    size: int | None
    summary: str

    @property
    def url(self) -> str:
        return MOONCAKE_RAW + self.file


PUBLIC_TRACES: Mapping[str, PublicTrace] = {
    "conversation": PublicTrace(
        "conversation_trace.jsonl", "5a371794b81d7fc7487ec8a02a2c631bcc7fbdf8",
        "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df", 3_029_533,
        "Kimi's chat traffic: 12,031 requests over 59 minutes, 12,035 tokens in and 343 out on average"),
    "synthetic": PublicTrace(
        "synthetic_trace.jsonl", "e4838049c0dcfc358a5f24ab08251279475cba94",
        "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131", 1_136_313,
        "3,993 requests with Poisson arrivals over 17 minutes, 15,325 tokens in on average"),
    # Named by the commit's tree, not read here (the release's README: 23,608 requests).
    "toolagent": PublicTrace(
        "toolagent_trace.jsonl", "b765599d1e0828b37f68d481563c385d3c11de54", None, None,
        "tool and agent traffic: 23,608 requests, 8,596 tokens in and 182 out on average (the README's figures)"),
}


class TraceFetchError(RuntimeError):
    """A trace that could not be had, or not the one the commit names."""


def git_blob_id(data: bytes) -> str:
    """The id git gives a file of these bytes (`git hash-object`)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check(name: str, data: bytes, source: str) -> None:
    trace = PUBLIC_TRACES[name]
    if git_blob_id(data) != trace.git_blob or (trace.sha256 and hashlib.sha256(data).hexdigest() != trace.sha256):
        raise TraceFetchError(f"{source}: is not Mooncake's {trace.file} at {MOONCAKE_COMMIT[:12]} (git blob "
                              f"{git_blob_id(data)}, expected {trace.git_blob}); get it again, or from {trace.url}")


def download(url: str, progress: bool) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            total = int(response.headers.get("Content-Length") or 0)
            chunks, got = [], 0
            while chunk := response.read(1 << 18):
                chunks.append(chunk)
                got += len(chunk)
                if progress and total:
                    print(f"\r  {got / 1e6:.1f} of {total / 1e6:.1f} MB", end="", file=sys.stderr, flush=True)
            if progress and total:
                print(file=sys.stderr)
            return b"".join(chunks)
    except (urllib.error.URLError, OSError) as error:
        raise TraceFetchError(f"{url}: {getattr(error, 'reason', error)}; on a machine that cannot reach GitHub, "
                              "download the file elsewhere and pass it with --from FILE") from None


def get(name: str, out: Path, source: Path | None, progress: bool = True) -> Path:
    """The trace `name` at `out`, downloaded or copied from `source`, checked; a file already at
    `out` that checks out is kept."""
    trace = PUBLIC_TRACES[name]
    if out.exists() and source is None:
        data = out.read_bytes()
        if git_blob_id(data) == trace.git_blob:
            return out
    if source is not None:
        try:
            data = source.read_bytes()
        except OSError as error:
            raise TraceFetchError(f"--from {source}: {error.strerror or error}") from None
        check(name, data, f"--from {source}")
    else:
        data = download(trace.url, progress)
        check(name, data, trace.url)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return out


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("trace", help="get a public block-hash trace, or export your requests as one",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="trace_command", required=True, metavar="get|export")
    fetch = commands.add_parser("get", help="a public trace, checked against its commit's digest",
                                description="\n".join(f"{name}: {trace.summary}" for name, trace in PUBLIC_TRACES.items()))
    fetch.add_argument("name", choices=tuple(PUBLIC_TRACES))
    fetch.add_argument("--out", type=Path, metavar="FILE",
                       help="where to write it (default: traces/<file> here; traces/ is not committed)")
    fetch.add_argument("--from", dest="source", type=Path, metavar="FILE",
                       help="check and copy a local copy instead of downloading (machines that cannot reach GitHub)")
    fetch.set_defaults(func=run_get)
    export.add_parser(commands)


def run_get(args: argparse.Namespace) -> int:
    trace = PUBLIC_TRACES[args.name]
    out = args.out or Path("traces") / trace.file
    try:
        path = get(args.name, out, args.source)
        read = read_trace(path)
    except (TraceFetchError, TraceError) as error:
        print(f"trace get: {error}", file=sys.stderr)
        return 1
    print(f"{path}: Mooncake's {trace.file} at {MOONCAKE_COMMIT[:12]}, checked; {len(read.requests):,} requests, "
          f"{read.repeated_share():.1%} of their blocks seen before in the trace")
    print(f"predict on it: .venv/bin/python -m routing predict --pods 8 --workload {path} --block-size 16 ...")
    return 0
