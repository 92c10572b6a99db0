"""Prompts known only by their prefix blocks: the requests of a block-hash trace (Mooncake's
FAST'25 format, routing/traces.py), keyed for any index without their text or tokens.

A trace gives each request its length and one id per block of `id_tokens` tokens (512 in
Mooncake's), equal ids standing for equal blocks behind equal blocks. A block of b tokens that
ends at token e lies in id block k = (e - 1) // id_tokens and holds the prompt up to offset
e - k * id_tokens in it, so (id k, offset) names its content and all before it: equal ids give
equal keys at every block size, and a block across two id blocks takes the later id, which
names both. Keys are id * (id_tokens + 1) + offset: distinct for distinct (id, offset), and
made by `range` a whole id block at a time where b divides id_tokens (an id is 8 of the
picker's 64-token blocks and 32 of vLLM's 16-token ones).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

KEY_TYPECODE = "Q"  # 64-bit, as every block key and hash chain of the toolkit


@dataclass(frozen=True)
class TracedPrompt:
    """A prompt of `length` tokens whose blocks of `id_tokens` carry `ids` (numbered densely by
    the reader, so that keys stay well below 2**64)."""

    ids: tuple[int, ...]
    length: int
    id_tokens: int

    def keys(self, block_tokens: int, *, partial: bool = False, max_blocks: int | None = None) -> array:
        """One key per block of `block_tokens`: full blocks, and the last partial one with
        `partial` (the approximate picker's token hashing); at most `max_blocks`."""
        span, length = self.id_tokens, self.length
        full = length // block_tokens
        if max_blocks is not None:
            full = min(full, max_blocks)
        keys = array(KEY_TYPECODE)
        if span % block_tokens == 0:
            stride, remaining = span + 1, full * block_tokens
            for block_id in self.ids:
                if remaining <= 0:
                    break
                base = block_id * stride
                within = min(span, remaining)
                keys.extend(range(base + block_tokens, base + within + 1, block_tokens))
                remaining -= within
        else:
            keys.extend(self._key(end) for end in range(block_tokens, full * block_tokens + 1, block_tokens))
        if partial and length % block_tokens and (max_blocks is None or full < max_blocks):
            keys.append(self._key(length))
        return keys

    def _key(self, end: int) -> int:
        block = (end - 1) // self.id_tokens
        return self.ids[block] * (self.id_tokens + 1) + end - block * self.id_tokens
