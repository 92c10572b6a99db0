"""Block-hash traces: real traffic as the prefix blocks its requests share, with no text.

Mooncake's FAST'25 release (github kvcache-ai/Mooncake, FAST25-release/traces, README) has one
JSON object per line: `timestamp` (ms from the start), `input_length` and `output_length`
(tokens) and `hash_ids`, one id per block of 512 tokens, equal for equal blocks behind equal
blocks ("remapped block hash"), so prefix sharing survives while the prompt is gone. A file is
read as one when its first line has `hash_ids` and `input_length`; `export-trace` writes one
from a user's own requests (routing/lab/export.py).

The reader refuses, with the line, what would make the keys wrong: an id under two different
parents (ids would no longer name their prefix), a count of ids that disagrees with the length
at the trace's block size, and lengths or times that are not numbers a request can have. Ids
are renumbered densely in order of first appearance (routing/picker/traced.py keys them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from routing.picker.endpoint_picker import Request
from routing.picker.traced import TracedPrompt

# Mooncake's FAST'25 README: "The block size is 512 tokens."
MOONCAKE_BLOCK_TOKENS = 512
TRACE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
# The name predict and serve give a trace's requests when no model is named.
TRACE_MODEL = "trace"


class TraceError(ValueError):
    """A block-hash trace that cannot be read, with the line and the fix."""


def is_trace_line(value: Any) -> bool:
    """A decoded line is a block-hash trace's: it has `hash_ids` and `input_length`."""
    return isinstance(value, dict) and "hash_ids" in value and "input_length" in value


@dataclass(frozen=True)
class TracedRequest:
    """One line of a trace: when it arrives (seconds, None without timestamps), its prompt by
    its blocks, and its reply's length."""

    at: float | None
    prompt: TracedPrompt
    output_tokens: int
    line: int

    def request(self, model: str) -> Request:
        return Request(model=model, prompt="", max_output_tokens=self.output_tokens, traced=self.prompt)

    def body(self, model: str) -> dict[str, Any]:
        """What predict's arrival holds for it: the model and the reply's length, no prompt."""
        return {"model": model, "max_tokens": self.output_tokens}


@dataclass(frozen=True)
class BlockTrace:
    """A trace's requests in file order, the size of the blocks its ids stand for, and how many
    distinct blocks it names."""

    requests: tuple[TracedRequest, ...]
    id_tokens: int
    distinct_blocks: int

    @property
    def timed(self) -> bool:
        return bool(self.requests) and self.requests[0].at is not None

    def repeated_share(self) -> float:
        """The share of the trace's blocks that an earlier request already named: the hit rate
        of a placement with one cache that never evicts, counted in blocks (the figure
        Mooncake-style traces are compared by)."""
        total = sum(len(request.prompt.ids) for request in self.requests)
        return (total - self.distinct_blocks) / total if total else 0.0


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def read_trace(path: str | Path, lines: Sequence[str] | None = None,
               id_tokens: int = MOONCAKE_BLOCK_TOKENS) -> BlockTrace:
    """The trace at `path` (its `lines` when the caller has read them), its ids standing for
    blocks of `id_tokens` tokens."""
    if not _whole(id_tokens, 1):
        raise TraceError(f"--trace-block-tokens {id_tokens!r}: must be a whole number of tokens, at least 1 "
                         f"(Mooncake's traces use {MOONCAKE_BLOCK_TOKENS})")
    path = Path(path)
    if lines is None:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise TraceError(f"trace {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as error:
            raise TraceError(f"trace {path}: cannot be read as UTF-8 text ({error})") from None
    dense: dict[int, int] = {}
    parents: list[int] = []  # by dense id: the dense id before it, -1 at a prompt's start
    first_line: list[int] = []  # by dense id: the line that named it first
    requests = []
    timed: bool | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"trace {path} line {number}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise TraceError(f"{where}: not JSON ({error.msg} at column {error.colno}); write one object per line "
                             "with timestamp, input_length, output_length and hash_ids") from None
        if not is_trace_line(value):
            raise TraceError(f"{where}: has no hash_ids and input_length; every line of a block-hash trace holds "
                             f"{', '.join(TRACE_FIELDS)}")
        ids, length, output = value["hash_ids"], value["input_length"], value.get("output_length")
        if not _whole(length, 1):
            raise TraceError(f"{where}: input_length {length!r} must be a whole number of tokens, at least 1")
        if not _whole(output, 1):
            raise TraceError(f"{where}: output_length {output!r} must be a whole number of tokens, at least 1 "
                             "(a reply's max_tokens)")
        if not isinstance(ids, list) or not all(_whole(block, 0) for block in ids):
            raise TraceError(f"{where}: hash_ids must be a list of whole numbers of at least 0")
        expected = -(-length // id_tokens)
        if len(ids) != expected:
            raise TraceError(f"{where}: {len(ids)} hash_ids for input_length {length}: blocks of {id_tokens} tokens "
                             f"make {expected}; fix the line, or pass --trace-block-tokens with the trace's block size")
        stamp = value.get("timestamp")
        if timed is None:
            timed = stamp is not None
        if (stamp is not None) != timed:
            raise TraceError(f"{where}: {'has no' if timed else 'has a'} timestamp where the first line "
                             f"{'has one' if timed else 'has none'}: give every line a timestamp (ms) or none")
        if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not stamp >= 0):
            raise TraceError(f"{where}: timestamp {stamp!r} must be milliseconds from the start, a number of at least 0")
        numbered = []
        parent = -1
        for block in ids:
            number_of = dense.get(block)
            if number_of is None:
                number_of = dense[block] = len(parents)
                parents.append(parent)
                first_line.append(number)
            elif parents[number_of] != parent:
                before = "the start of the prompt" if parent == -1 else "another id"
                raise TraceError(f"{where}: hash id {block} follows {before} here and a different one on line "
                                 f"{first_line[number_of]}: an id names its block and every block before it, so it "
                                 "always follows the same id")
            numbered.append(number_of)
            parent = number_of
        requests.append(TracedRequest(None if stamp is None else stamp / 1000.0,
                                      TracedPrompt(tuple(numbered), length, id_tokens), output, number))
    if not requests:
        raise TraceError(f"trace {path}: holds no requests")
    return BlockTrace(tuple(requests), id_tokens, len(parents))
