"""`trace export`: your own requests as a block-hash trace, with nothing of their text.

Reads any of three forms, line by line (detected per file from its first line):
- the project's workload files (`predict --workload`: bodies, or {"at", "session", "body"});
- OpenAI batch input: {"custom_id", "method", "url", "body"};
- request logs: {"timestamp", "body" or "request", "response"?}, the timestamp in Unix seconds
  (`--timestamp-unit ms` for milliseconds) or ISO 8601, made relative to the first; a
  response's usage.completion_tokens, when logged, is the reply's real length.

Each prompt is turned into the tokens vLLM would compute (the model's tokenizer.json, chats
through its chat template) and cut into blocks of 512 tokens; block k's id is the first 63 bits
of HMAC-SHA256(salt, id k-1 ‖ the block's tokens), so equal ids mean equal prefixes, and
without the salt nobody can test a guess of a prompt against the ids. The salt stays in a file
of yours (`--salt-file`, created with 32 random bytes when absent); exports with the same salt
give the same prefixes the same ids. Only ids, lengths and times are written.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import secrets
import sys
from array import array
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Sequence

from routing.options import positive_int
from routing.picker.endpoint_picker import Request
from routing.picker.prefix import HFTokenizerFile, TokenizerFileError, server_tokens
from routing.picker.traced import TracedPrompt
from routing.traces import MOONCAKE_BLOCK_TOKENS, TracedRequest, is_trace_line, write_trace
from routing.workloads import DEFAULT_OUTPUT_TOKENS, OUTPUT_LENGTH_KEYS, WorkloadError, load_arrivals

BATCH_KEYS = frozenset({"custom_id", "method", "url", "body"})
LOG_BODY_KEYS = ("body", "request")
SALT_BYTES = 32
MIN_SALT_BYTES = 16
ID_BITS = 63  # JSON readers in any language keep a signed 64-bit integer


class ExportError(ValueError):
    """Input that cannot be exported, with the line and the fix."""


@dataclass(frozen=True)
class Logged:
    """One request to export: when it was sent (seconds from the first, None when unknown), its
    body, the reply's length when the input says it, and where it came from."""

    at: float | None
    body: dict[str, Any]
    output_tokens: int | None
    where: str


def load_salt(path: Path) -> bytes:
    """The salt in `path`, made (32 random bytes, readable by you alone) when the file is absent."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(secrets.token_bytes(SALT_BYTES))
        print(f"trace export: made a new salt in {path}; keep it private, and reuse it so that later exports give "
              "the same prefixes the same ids", file=sys.stderr)
    salt = path.read_bytes()
    if len(salt) < MIN_SALT_BYTES:
        raise ExportError(f"--salt-file {path}: holds {len(salt)} bytes; a salt needs at least {MIN_SALT_BYTES} "
                          "(delete the file to have a new one made)")
    return salt


def block_ids(tokens: Sequence[int], salt: bytes, block_tokens: int) -> list[int]:
    """The chained, salted id of each block of `tokens` (the last one partial)."""
    ids, previous = [], b""
    for start in range(0, len(tokens), block_tokens):
        digest = hmac.new(salt, previous + array("I", tokens[start:start + block_tokens]).tobytes(),
                          hashlib.sha256).digest()
        previous = digest[:8]
        ids.append(int.from_bytes(previous, "big") >> (64 - ID_BITS))
    return ids


def _stated_output(body: dict[str, Any]) -> int | None:
    for key in OUTPUT_LENGTH_KEYS:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return None


def _timestamp(value: Any, unit: str, where: str) -> float:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise ExportError(f"{where}: timestamp {value!r} is neither a number nor ISO 8601") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExportError(f"{where}: timestamp {value!r} must be Unix time (seconds, or --timestamp-unit ms) or ISO "
                          "8601")
    return value / 1000.0 if unit == "ms" else float(value)


def read_requests(path: Path, unit: str = "s") -> Iterator[Logged]:
    """The requests of `path` in any of the three forms, with times relative to the first."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ExportError(f"{path}: cannot be read ({error})") from None
    values = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                values.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise ExportError(f"{path} line {number}: not JSON ({error.msg})") from None
    if not values:
        raise ExportError(f"{path}: holds no requests")
    first = values[0][1]
    if is_trace_line(first):
        raise ExportError(f"{path}: is a block-hash trace already; predict reads it as it is")
    if isinstance(first, dict) and BATCH_KEYS <= set(first):
        yield from _batch(path, values)
    elif isinstance(first, dict) and "timestamp" in first and any(key in first for key in LOG_BODY_KEYS):
        yield from _logs(path, values, unit)
    else:
        try:
            arrivals = load_arrivals(str(path))
        except WorkloadError as error:
            raise ExportError(f"{error} (trace export reads workload files, OpenAI batch input, or logs of "
                              '{"timestamp", "body"} lines)') from None
        for number, arrival in enumerate(arrivals, start=1):
            yield Logged(arrival.at, dict(arrival.body), arrival.stated_output_tokens, f"{path} request {number}")


def _batch(path: Path, values: list[tuple[int, Any]]) -> Iterator[Logged]:
    for number, value in values:
        where = f"{path} line {number}"
        if not isinstance(value, dict) or not BATCH_KEYS <= set(value) or not isinstance(value["body"], dict):
            raise ExportError(f"{where}: the file is OpenAI batch input (its first line is), so every line needs "
                              "custom_id, method, url and a body object")
        if value["url"] not in ("/v1/completions", "/v1/chat/completions"):
            raise ExportError(f"{where}: url {value['url']!r}: only /v1/completions and /v1/chat/completions "
                              "requests have prompts a prefix cache keeps")
        yield Logged(None, value["body"], _stated_output(value["body"]), where)


def _logs(path: Path, values: list[tuple[int, Any]], unit: str) -> Iterator[Logged]:
    start = None
    for number, value in values:
        where = f"{path} line {number}"
        body = next((value[key] for key in LOG_BODY_KEYS if isinstance(value, dict) and key in value), None)
        if not isinstance(body, dict) or "timestamp" not in value:
            raise ExportError(f'{where}: the file is a request log (its first line is), so every line needs '
                              '"timestamp" and a "body" (or "request") object')
        at = _timestamp(value["timestamp"], unit, where)
        start = at if start is None else start
        usage = (value.get("response") or {}).get("usage") if isinstance(value.get("response"), dict) else None
        completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
        output = completion if isinstance(completion, int) and completion >= 1 else _stated_output(body)
        yield Logged(at - start, body, output, where)


def export(path: Path, out: Path, tokenizer: HFTokenizerFile, salt: bytes,
           block_tokens: int = MOONCAKE_BLOCK_TOKENS, unit: str = "s") -> dict[str, int]:
    """Writes `path`'s requests to `out` as a block-hash trace; returns what it wrote and
    assumed: {"requests", "defaultedOutputs"}."""
    logs = list(read_requests(path, unit))
    timed = all(logged.at is not None for logged in logs)
    if timed:
        logs.sort(key=lambda logged: logged.at)
    traced: list[TracedRequest] = []
    defaulted = 0
    for logged in logs:
        try:
            request = Request.from_openai_body(logged.body)
        except ValueError as error:
            raise ExportError(f"{logged.where}: {error}") from None
        output = logged.output_tokens
        if output is None:
            output, defaulted = DEFAULT_OUTPUT_TOKENS, defaulted + 1
        for tokens in server_tokens(tokenizer, request):
            if tokens:
                prompt = TracedPrompt(tuple(block_ids(tokens, salt, block_tokens)), len(tokens), block_tokens)
                traced.append(TracedRequest(logged.at if timed else None, prompt, output, len(traced) + 1))
    if not traced:
        raise ExportError(f"{path}: no request has a prompt to export")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_trace(out, traced)
    return {"requests": len(traced), "defaultedOutputs": defaulted}


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("export", help="your requests as a block-hash trace, with no text",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", type=Path, help="a workload file, OpenAI batch input, or a request log (JSONL)")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE", help="the trace to write")
    parser.add_argument("--tokenizer", required=True, metavar="PATH",
                        help="the model's tokenizer.json (or its directory, with its chat template)")
    parser.add_argument("--salt-file", type=Path, default=Path("trace-salt"), metavar="FILE",
                        help="the salt's file, made when absent (default: ./trace-salt); keep it private")
    parser.add_argument("--block-tokens", type=positive_int, default=MOONCAKE_BLOCK_TOKENS, metavar="TOKENS",
                        help=f"tokens per id (default {MOONCAKE_BLOCK_TOKENS}, Mooncake's)")
    parser.add_argument("--timestamp-unit", choices=("s", "ms"), default="s",
                        help="a request log's numeric timestamps: Unix seconds (default) or milliseconds")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        tokenizer = HFTokenizerFile(args.tokenizer)
        salt = load_salt(args.salt_file)
        written = export(args.input, args.out, tokenizer, salt, args.block_tokens, args.timestamp_unit)
    except (ExportError, TokenizerFileError) as error:
        print(f"trace export: {error}", file=sys.stderr)
        return 1
    print(f"{args.out}: {written['requests']} requests as ids of {args.block_tokens}-token blocks, lengths and times; "
          "no text")
    if written["defaultedOutputs"]:
        print(f"  {written['defaultedOutputs']} request(s) state no max_tokens and log no usage: their replies are "
              f"written as {DEFAULT_OUTPUT_TOKENS} tokens", file=sys.stderr)
    return 0
