"""The precise prefix index: what each pod holds, as its own KV-cache events say.

llm-d router v0.10.0 (LDR) `precise-prefix-cache-producer` and the index under it
(pkg/kvcache/kvblock, pkg/kvevents). vLLM publishes `BlockStored` when it computes and caches a
full block, `BlockRemoved` when it reuses a freed cached block for another, `AllBlocksCleared`
when its prefix cache is reset; the picker subscribes to each pod and keeps block key -> pods.
A request is matched by walking its block keys from the first: a pod's match is the run of
consecutive blocks from block 0 it holds (no credit past its first missing block, unlike the
approximate producer). With speculative indexing a pick also enters the request's blocks for
the chosen pod, each entry lasting a TTL from the first pick that entered it.

Block keys: upstream cuts the engine's own tokens into full blocks (a partial last block is
dropped) and chains FNV-1a 64 over canonical CBOR of [parent, tokens, extra] (`block_keys`, kept
to upstream's one published golden value). Any chain of equal tokens in equal blocks matches
the same way, so the simulation keys blocks as its servers do (prefix.server_block_keys) and
`serve` uses upstream's chain.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

# pkg/kvcache/kvblock/token_processor.go@v0.10.0: hash/fnv New64a.
_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK64 = 2 ** 64 - 1


def fnv1a64(data: bytes) -> int:
    digest = _FNV64_OFFSET
    for byte in data:
        digest = ((digest ^ byte) * _FNV64_PRIME) & _MASK64
    return digest


def _cbor_head(major: int, number: int) -> bytes:
    if number < 24:
        return bytes([major << 5 | number])
    for size, extra in ((1, 24), (2, 25), (4, 26), (8, 27)):
        if number < 1 << (8 * size):
            return bytes([major << 5 | extra]) + number.to_bytes(size, "big")
    raise ValueError(f"{number} does not fit CBOR's 64-bit head")


def canonical_cbor(value: object) -> bytes:
    """RFC 8949 canonical CBOR of what the token processor hashes (fxamacker/cbor v2.9.2
    CanonicalEncOptions): unsigned and negative integers, text, arrays, maps (keys sorted by
    length, then bytes) and null."""
    if value is None:
        return b"\xf6"
    if isinstance(value, bool):
        return b"\xf5" if value else b"\xf4"
    if isinstance(value, int):
        return _cbor_head(0, value) if value >= 0 else _cbor_head(1, -1 - value)
    if isinstance(value, str):
        encoded = value.encode("utf-8")
        return _cbor_head(3, len(encoded)) + encoded
    if isinstance(value, (list, tuple)):
        return _cbor_head(4, len(value)) + b"".join(canonical_cbor(item) for item in value)
    if isinstance(value, Mapping):
        pairs = sorted(((canonical_cbor(key), canonical_cbor(item)) for key, item in value.items()),
                       key=lambda pair: (len(pair[0]), pair[0]))
        return _cbor_head(5, len(value)) + b"".join(key + item for key, item in pairs)
    raise TypeError(f"the token processor hashes no {type(value).__name__}")


def _chained(parent: int, tokens: Sequence[int] | None, extra: object) -> int:
    return fnv1a64(canonical_cbor([parent, None if tokens is None else list(tokens), extra]))


def block_keys(tokens: Sequence[int], model: str, block_size: int, hash_seed: str = "", parent: int = 0,
               extras: Sequence[Sequence[str] | None] | None = None) -> list[int]:
    """token_processor.go TokensToKVBlockKeys@v0.10.0: one key per full block of `tokens`, each
    FNV-1a 64 of canonical CBOR [previous key, the block's tokens, its extra features], the
    first chained from `parent` or, with none (0), from [FNV-1a(hash_seed), null, model].
    `extras`: per full block, the multimodal identifiers and cache salt it carries (None: none)."""
    previous = parent or _chained(fnv1a64(hash_seed.encode("utf-8")), None, model)
    count = len(tokens) // block_size
    if extras is not None and len(extras) != count:
        raise ValueError(f"{len(extras)} extra features for {count} full blocks: one per block")
    keys = []
    for block in range(count):
        extra = None if extras is None or extras[block] is None else [{"Hash": item} for item in extras[block]]
        previous = _chained(previous, tokens[block * block_size:(block + 1) * block_size], extra)
        keys.append(previous)
    return keys


# pkg/kvcache/backend.go@v0.10.0 default tier weights; a tier not listed (a speculative entry's) weighs 1.
DEFAULT_TIER_WEIGHTS: Mapping[str, float] = {"gpu": 1.0, "cpu": 0.8}


def longest_prefix_scores(keys: Sequence[int], holders: Mapping[int, Iterable[tuple[str, str]]],
                          tier_weights: Mapping[str, float] = DEFAULT_TIER_WEIGHTS) -> dict[str, float]:
    """kvblock_scorer.go LongestPrefixScorer.Score@v0.10.0: per pod, over the keys from the first
    while it holds each, the best weight of the tiers it holds the key on. A pod that does not
    hold the first key scores nothing (it is not in the result). `holders`: key -> (pod, tier)."""
    scores: dict[str, float] = {}
    alive: set[str] | None = None
    for key in keys:
        best: dict[str, float] = {}
        for pod, tier in holders.get(key, ()):
            weight = tier_weights.get(tier, 1.0)
            if weight > best.get(pod, -1.0):
                best[pod] = weight
        alive = set(best) if alive is None else alive & set(best)
        if not alive:
            break
        for pod in alive:
            scores[pod] = scores.get(pod, 0.0) + best[pod]
    return scores


class KvBlockIndex:
    """One picker replica's view of what its pods hold: block key -> pods, from their events, and
    the speculative entries its picks add (the in-memory index's defaults hold 10^8 keys and 10
    entries a key: far more than a simulation fills, so no capacity is modelled). Every pod holds
    its blocks on the GPU tier (vLLM 0.32 reports medium GPU even on a CPU): weight 1, as a
    speculative entry's, so a pod's match is its run of consecutive blocks."""

    def __init__(self) -> None:
        self._holders: dict[int, set[str]] = {}
        # key -> pod -> when its speculative entry ends (the earliest TTL of the picks that made it).
        self._speculative: dict[int, dict[str, float]] = {}
        self.dropped_events = 0  # BlockStored events dropped for an unknown parent
        # Keys the index can resolve a parent to (the engine-to-request-key mapping).
        self._mapped: set[int] = set()

    def stored(self, pod: str, keys: Iterable[int], parent: int | None = None) -> bool:
        """BlockStored: `pod` now holds these blocks, which follow the block keyed `parent` (None:
        they start a prompt). pool.go@v0.10.0 drops the whole event when the index has no mapping
        for the parent: no pod told it of that block since the picker started, or every pod that
        did has evicted it (an AllBlocksCleared keeps the mapping: in_memory.go Clear). vLLM's
        default block hash (sha256, seeded alike on every pod) names equal blocks alike on every
        pod, so the mapping is shared. Returns whether the event was taken."""
        if parent is not None and parent not in self._mapped:
            self.dropped_events += 1
            return False
        holders, mapped = self._holders, self._mapped
        for key in keys:
            pods = holders.get(key)
            if pods is None:
                holders[key] = {pod}
            else:
                pods.add(pod)
            mapped.add(key)
        return True

    def removed(self, pod: str, keys: Iterable[int]) -> None:
        """BlockRemoved: `pod` no longer holds these blocks (its speculative entries stay to their
        TTL); a block no pod holds any more loses its mapping (in_memory.go Evict)."""
        self._forget(pod, keys)
        for key in keys:
            if key not in self._holders:
                self._mapped.discard(key)

    def _forget(self, pod: str, keys: Iterable[int]) -> None:
        holders = self._holders
        for key in keys:
            pods = holders.get(key)
            if pods is not None:
                pods.discard(pod)
                if not pods:
                    del holders[key]

    def cleared(self, pod: str) -> None:
        """AllBlocksCleared (pool.go clearPod): `pod` holds nothing, its speculative entries included."""
        self._forget(pod, [key for key, pods in self._holders.items() if pod in pods])
        for key in [key for key, entries in self._speculative.items() if pod in entries]:
            entries = self._speculative[key]
            del entries[pod]
            if not entries:
                del self._speculative[key]

    def speculate(self, pod: str, keys: Iterable[int], until: float, now: float) -> None:
        """prerequest.go PreRequest@v0.10.0: `pod` is entered as holding `keys` until `until`; an entry
        already there keeps its end (upstream's first expiry evicts it)."""
        speculative = self._speculative
        for key in keys:
            entries = speculative.setdefault(key, {})
            if entries.get(pod, now) <= now:
                entries[pod] = until

    def holds(self, key: int, pod: str, now: float) -> bool:
        if pod in self._holders.get(key, ()):
            return True
        end = self._speculative.get(key, {}).get(pod)
        return end is not None and end > now

    def match(self, keys: Sequence[int], position: Mapping[str, int], matched: list[int], now: float) -> None:
        """Adds to `matched` (by the candidate's `position`) the run of consecutive blocks from
        the first that each candidate holds (utils.go matchedBlockCount@v0.10.0)."""
        holders, speculative = self._holders, self._speculative
        alive = None
        for key in keys:
            # The lookup is filtered to the candidates, so the walk stops where none holds a block.
            here = {pod for pod in holders.get(key, ()) if pod in position}
            here.update(pod for pod, end in speculative.get(key, {}).items() if end > now and pod in position)
            alive = here if alive is None else alive & here
            if not alive:
                return
            for pod in alive:
                matched[position[pod]] += 1

    def blocks_held(self, pod: str) -> int:
        """How many blocks the index has `pod` holding (events only)."""
        return sum(1 for pods in self._holders.values() if pod in pods)
