"""`trace get`: a public block-hash trace, from its repository at its published commit or
from a copy (`--from`), checked against the digest that commit names; `trace export`: your own
requests as a block-hash trace, hashed locally, with no text leaving the machine
(routing/lab/export.py); `trace slice`: some of a trace's conversations, scaled down for
small servers (the lab's two vLLM CPU servers), for predict and verify to replay alike."""

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
from routing.options import nonnegative_seconds, positive_int
from routing.traces import BlockTrace, TraceError, TracedRequest, read_trace, repeated_share, write_trace

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
    part = commands.add_parser("slice", help="some conversations of a trace, scaled to a small model",
                               description=slice_conversations.__doc__)
    part.add_argument("input", type=Path, help="a block-hash trace")
    part.add_argument("--out", type=Path, required=True, metavar="FILE", help="the slice to write")
    part.add_argument("--started-before", type=nonnegative_seconds, default=20.0, metavar="S",
                      help="take the conversations whose first request comes before S seconds (default 20)")
    part.add_argument("--block-tokens", type=positive_int, default=64, metavar="TOKENS",
                      help="tokens each id stands for in the slice (default 64, an eighth of Mooncake's 512)")
    part.add_argument("--max-output", type=positive_int, default=16, metavar="TOKENS",
                      help="cap each reply at this many tokens (default 16)")
    part.add_argument("--max-model-len", type=positive_int, default=4096, metavar="TOKENS",
                      help="leave out requests whose scaled prompt and reply exceed it (default 4096, the tiny lab "
                           "model's context)")
    part.set_defaults(func=run_slice)


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


def conversation_key(request: TracedRequest) -> tuple[int, ...]:
    # A conversation's turns resend its first blocks: the first is shared by every request of
    # Mooncake's conversation trace (a system prompt), the second is the conversation's own.
    return request.prompt.ids[:2]


def slice_conversations(trace: BlockTrace, started_before: float, block_tokens: int, max_output: int,
                        max_model_len: int) -> tuple[list[TracedRequest], int]:
    """The requests of every conversation (requests sharing their first two blocks) whose first
    request comes before `started_before` seconds, in trace order, each id scaled to
    `block_tokens` tokens and each reply capped at `max_output`; requests whose prompt and
    reply would exceed `max_model_len` are left out and counted."""
    starts: dict[tuple[int, ...], float] = {}
    for request in trace.requests:
        starts.setdefault(conversation_key(request), request.at or 0.0)
    kept, too_long = [], 0
    for request in trace.requests:
        if starts[conversation_key(request)] >= started_before:
            continue
        scaled = request.scaled(block_tokens, max_output)
        if scaled.prompt.length + scaled.output_tokens > max_model_len:
            too_long += 1
            continue
        kept.append(scaled)
    return kept, too_long


def run_slice(args: argparse.Namespace) -> int:
    try:
        trace = read_trace(args.input)
    except TraceError as error:
        print(f"trace slice: {error}", file=sys.stderr)
        return 1
    if not trace.timed:
        print(f"trace slice: {args.input} has no timestamps to take conversations by", file=sys.stderr)
        return 1
    kept, too_long = slice_conversations(trace, args.started_before, args.block_tokens, args.max_output,
                                         args.max_model_len)
    if not kept:
        print(f"trace slice: no conversation starts before {args.started_before:g} s", file=sys.stderr)
        return 1
    write_trace(args.out, kept)
    share = repeated_share(request.prompt for request in kept)
    print(f"{args.out}: {len(kept)} requests of the conversations starting before {args.started_before:g} s, ids of "
          f"{args.block_tokens} tokens, {share:.1%} of their blocks seen before"
          + (f"; {too_long} left out, longer than {args.max_model_len} tokens" if too_long else ""))
    print(f"predict and verify it with --workload {args.out} --trace-block-tokens {args.block_tokens}")
    return 0
