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
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from routing.picker.endpoint_picker import Request
from routing.picker.traced import TracedPrompt

# Mooncake's FAST'25 README: "The block size is 512 tokens."
MOONCAKE_BLOCK_TOKENS = 512
TRACE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
# The name predict and serve give a trace's requests when no model is named.
TRACE_MODEL = "trace"
# A synthesized prompt's token ids: clear of the special tokens most vocabularies start with,
# and within the tiny lab model's vocabulary (1,094 tokens; vLLM refuses an id past it); any
# real model's is larger.
SYNTHETIC_TOKEN_FIRST = 100
SYNTHETIC_TOKEN_COUNT = 900


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

    def body(self, model: str, prompt: bool = False) -> dict[str, Any]:
        """A completions body of the model and the reply's length; with `prompt`, also the
        synthesized prompt (`synthetic_tokens`) that verify and the benchmarks send."""
        if not prompt:
            return {"model": model, "max_tokens": self.output_tokens}
        return {"model": model, "prompt": synthetic_tokens(self.prompt), "max_tokens": self.output_tokens}

    def scaled(self, id_tokens: int, max_output: int | None = None) -> TracedRequest:
        """The request with each id standing for `id_tokens` tokens (the last, partial block
        scaled alike, at least one token), and its reply capped at `max_output`."""
        old = self.prompt.id_tokens
        tail = self.prompt.length - (len(self.prompt.ids) - 1) * old
        length = (len(self.prompt.ids) - 1) * id_tokens + max(1, -(-tail * id_tokens // old))
        output = self.output_tokens if max_output is None else min(self.output_tokens, max_output)
        return replace(self, prompt=TracedPrompt(self.prompt.ids, length, id_tokens), output_tokens=output)


def synthetic_tokens(prompt: TracedPrompt) -> list[int]:
    """Token ids with the prompt's block structure: each id's block the same ids wherever it
    appears (drawn from a generator seeded with the id), so a server's prefix cache and a
    picker's hashes see exactly the trace's sharing; sent as a token-id prompt, its length is
    the trace's whatever the model's tokenizer."""
    tokens: list[int] = []
    for block_id in prompt.ids:
        draw = random.Random(block_id)
        count = min(prompt.id_tokens, prompt.length - len(tokens))
        tokens += [SYNTHETIC_TOKEN_FIRST + draw.randrange(SYNTHETIC_TOKEN_COUNT) for _ in range(count)]
    return tokens


def distinct_blocks(prompts: Iterable[TracedPrompt]) -> int:
    return len({block for prompt in prompts for block in prompt.ids})


def repeated_share(prompts: Iterable[TracedPrompt]) -> float:
    """The share of the prompts' blocks that an earlier prompt already named: the hit rate of a
    placement with one cache that never evicts, counted in blocks (the figure Mooncake-style
    traces are compared by)."""
    prompts = list(prompts)
    total = sum(len(prompt.ids) for prompt in prompts)
    return (total - distinct_blocks(prompts)) / total if total else 0.0


@dataclass(frozen=True)
class BlockTrace:
    """A trace's requests in file order, and the size of the blocks its ids stand for."""

    requests: tuple[TracedRequest, ...]
    id_tokens: int

    @property
    def timed(self) -> bool:
        return bool(self.requests) and self.requests[0].at is not None

    @property
    def distinct_blocks(self) -> int:
        return distinct_blocks(request.prompt for request in self.requests)

    def repeated_share(self) -> float:
        return repeated_share(request.prompt for request in self.requests)


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
    return BlockTrace(tuple(requests), id_tokens)


def write_trace(path: Path, requests: Iterable[TracedRequest]) -> None:
    """`requests` in the format `read_trace` reads (times in ms, when they have any)."""
    with path.open("w", encoding="utf-8") as out:
        for request in requests:
            line = {"input_length": request.prompt.length, "output_length": request.output_tokens,
                    "hash_ids": list(request.prompt.ids)}
            if request.at is not None:
                line = {"timestamp": round(request.at * 1000), **line}
            out.write(json.dumps(line) + "\n")
