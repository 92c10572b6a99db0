"""Replay a workload through a picker onto simulated vLLM servers and count prefix-cache hits.

A `SimulatedServer` keeps what vLLM's automatic prefix caching keeps: full blocks of prompt
tokens, keyed by their whole prefix, evicted least-recently-used first. It counts what vLLM's
`vllm:prefix_cache_{queries,hits}_total` count, in tokens. The picker never looks inside
these caches; like the real one it sees only the pods' metrics and its own index.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Sequence

from .metrics import DeltaReport, PodDelta
from .picker import DEFAULT_LRU_CAPACITY_PER_SERVER, Picker, PodMetrics, Request
from .prefix import Tokenizer, server_block_keys

# vLLM's default KV block size on GPUs (on CPU it is 128).
DEFAULT_BLOCK_SIZE = 16
# The picker's own fallback for a pod that reports no num_gpu_blocks (lruCapacityPerServer):
# 500K tokens of KV cache at block size 16, a Llama-3-8B on an 80 GB GPU by upstream's sizing.
# For a real deployment pass the "# GPU blocks" figure vLLM logs at startup.
DEFAULT_CAPACITY_BLOCKS = DEFAULT_LRU_CAPACITY_PER_SERVER


class SimulatedServer:
    """A vLLM server with automatic prefix caching, reduced to its cache and its counters
    (requests, and prefix-cache hits and queries in tokens, counted from zero).

    `capacity_blocks=None` means a cache that never evicts.
    """

    def __init__(self, name: str, block_size: int = DEFAULT_BLOCK_SIZE,
                 capacity_blocks: int | None = DEFAULT_CAPACITY_BLOCKS):
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size={block_size!r}: must be a whole number of tokens, at least 1 (vLLM uses 16 "
                             "on GPUs, 128 on CPUs)")
        if capacity_blocks is not None and (isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, int)
                                            or capacity_blocks < 1):
            raise ValueError(f"capacity_blocks={capacity_blocks!r}: must be a whole number of blocks, at least 1, "
                             "or None for a cache that never evicts")
        self.name = name
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self.requests = 0
        self.hits = 0
        self.queries = 0
        # Cached block keys, next to be evicted first.
        self._cache: OrderedDict[int, None] = OrderedDict()

    @property
    def cached_blocks(self) -> int:
        return len(self._cache)

    def metrics(self) -> PodMetrics:
        """The pod's /metrics as the picker scrapes them between two serial requests.

        Idle: nothing waiting or running, and KV usage 0 — a finished request's blocks stay
        cached but are free (reusable on demand), and vLLM's kv_cache_usage_perc counts
        free-but-cached blocks as free. Block size and capacity come from
        vllm:cache_config_info, which the picker's autoTune reads.
        """
        return PodMetrics(name=self.name, block_size=self.block_size, num_gpu_blocks=self.capacity_blocks)

    def serve(self, num_tokens: int, block_keys: Sequence[int]) -> None:
        """Serves a prompt of `num_tokens` tokens, cut into this server's block keys (full blocks
        only, `prefix.server_block_keys`), and counts its prefix-cache lookup."""
        cached_run = 0
        for key in block_keys:
            if key not in self._cache:
                break
            cached_run += 1
        # vLLM v1 must compute at least the prompt's last token to sample from it, so a prompt
        # that is entirely cached still misses its last block: hits ≤ ((n-1)//block)·block.
        hit_blocks = min(cached_run, max(0, num_tokens - 1) // self.block_size)
        self.requests += 1
        self.hits += hit_blocks * self.block_size
        self.queries += num_tokens
        self._remember(block_keys)

    def _remember(self, block_keys: Sequence[int]) -> None:
        # When a request finishes vLLM frees its blocks in reverse order, so among them the
        # tail is evicted first and the shared head last; generated tokens are not modelled
        # (a reply's blocks rarely match a later prompt).
        for key in reversed(block_keys):
            self._cache.pop(key, None)
            self._cache[key] = None
        if self.capacity_blocks is not None:
            while len(self._cache) > self.capacity_blocks:
                self._cache.popitem(last=False)


@dataclass(frozen=True)
class SimulationResult(DeltaReport):
    """A fleet's counters after a replay (the shape `verify` measures) and where each request
    went, in order."""

    placements: tuple[str, ...] = ()


def simulate_side_by_side(workload: Iterable[Request],
                          fleets: Sequence[tuple[Sequence[SimulatedServer], Picker]],
                          tokenizer: Tokenizer) -> list[SimulationResult]:
    """Replays one workload through several independent fleets, tokenizing each request once.

    Requests are serial, like the seed's curl loop: each one finishes before the next is
    picked, so every pick sees idle pods (see `SimulatedServer.metrics`). The counters
    returned are each server's totals, so a fleet of fresh servers reports just this replay.
    """
    by_name = [{server.name: server for server in servers} for servers, _ in fleets]
    for (servers, _), named in zip(fleets, by_name):
        if not servers or len(named) != len(servers):
            raise ValueError(f"each fleet needs at least one server and unique names, got "
                             f"{[server.name for server in servers]}")
    placements: list[list[str]] = [[] for _ in fleets]
    for request in workload:
        tokens = tokenizer.encode(request.prompt)
        keys_by_block_size: dict[int, list[int]] = {}
        for (servers, picker), named, placed in zip(fleets, by_name, placements):
            decision = picker.pick(request, [server.metrics() for server in servers])
            server = named[decision.pod]
            keys = keys_by_block_size.get(server.block_size)
            if keys is None:
                keys = keys_by_block_size[server.block_size] = server_block_keys(tokens, server.block_size)
            server.serve(len(tokens), keys)
            placed.append(server.name)
    return [SimulationResult(tuple(PodDelta(s.name, s.requests, s.hits, s.queries) for s in servers), tuple(placed))
            for (servers, _), placed in zip(fleets, placements)]
