"""One vLLM server under load: continuous batching over a paged KV cache with prefix caching.

It follows vLLM v1's scheduler and block pool (vllm/v1/core/sched/scheduler.py,
kv_cache_manager.py, block_pool.py), reduced to what routing depends on:

- KV blocks: `num_gpu_blocks` of `block_size` tokens, one of them the reserved null block. A
  running request holds ceil(tokens / block_size) blocks, its last one partial. Full prompt
  blocks are cached (keyed by their whole prefix) as soon as they are scheduled, so a
  request admitted a step later can share them while the first is still running.
- Free blocks wait in one queue, least recently freed first; a finished request frees its
  blocks tail first. Allocating takes the queue's head and, if it was cached, evicts it: only
  blocks no running request holds can be evicted.
- Each step schedules running requests first (a decode token each, or the next prefill
  chunk), then admits waiting ones in arrival order while there are sequence slots
  (`max_num_seqs`), token budget (`max_num_batched_tokens`, chunked prefill) and free blocks;
  the first waiting request that does not fit blocks the rest. A running request that cannot
  get a block preempts the newest running one (recompute: its blocks are freed).
- Prefix-cache counters count what vLLM counts: on every admission attempt of a request never
  preempted, its prompt tokens as queries and the cached full blocks (never its last token)
  as hits.
- Gauges (`vllm:num_requests_running/waiting`, `vllm:kv_cache_usage_perc`) are published at
  the end of each step, as vLLM's frontend logs the scheduler's stats with each output. A
  request that reaches the server during a step joins the scheduler only when the step ends
  (EngineCore.run_busy_loop reads its input queue between steps), so the gauges do not count
  it until the next step's end, when it is running or still waiting.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import OrderedDict, deque
from typing import Callable, Sequence

from routing.simulation.latency import EngineLimits, LatencyModel, prefill_pairs as chunk_pairs

# Keys for full blocks that hold generated tokens: unique, so they never match a prompt.
_OUTPUT_KEYS = itertools.count(1)

# The pool's KV-cache events, as vLLM publishes them (vllm/distributed/kv_events.py): BlockStored
# with the keys of the full prompt blocks one call cached and the key of the block before them
# (None: they start the prompt), BlockRemoved when a cached block is evicted, AllBlocksCleared
# on a reset. Blocks of generated tokens are left out: their keys match no prompt.
STORED, REMOVED, CLEARED = "stored", "removed", "cleared"


class CapacityError(ValueError):
    """A request that no amount of waiting would let a server run."""


class EngineRequest:
    """One request inside a server (vLLM's Request): tokens, progress and the blocks it holds."""

    __slots__ = ("index", "prompt_len", "keys", "output_len", "engine_arrival", "computed", "generated", "tokens",
                 "blocks", "cached_blocks", "hit_tokens", "scheduled_at", "first_token_at", "preemptions", "step_tokens")

    def __init__(self, index: int, prompt_len: int, keys: Sequence[int], output_len: int, engine_arrival: float):
        self.index = index
        self.prompt_len = prompt_len
        self.keys = keys  # full prompt blocks' prefix keys: non-negative 64-bit (prefix.server_block_keys)
        self.output_len = output_len
        self.engine_arrival = engine_arrival
        self.computed = 0  # tokens whose KV is computed
        self.generated = 0  # output tokens sampled
        self.tokens = prompt_len  # prompt and generated tokens, kept with `generated` (read every step)
        self.blocks: list[int] = []
        self.cached_blocks = 0  # leading blocks already offered to the cache
        self.hit_tokens = 0  # prefix-cache hit of the admission that got it running
        self.scheduled_at: float | None = None
        self.first_token_at: float | None = None
        self.preemptions = 0
        self.step_tokens = 0  # tokens scheduled in the current step


class Published:
    """The gauges a scrape of this server reads, from the end of the last step (one is made at
    most steps, so it is kept small: equal gauges are equal and hash alike)."""

    __slots__ = ("waiting", "running", "kv_usage")

    def __init__(self, waiting: int, running: int, kv_usage: float):
        self.waiting = waiting
        self.running = running
        self.kv_usage = kv_usage

    def _gauges(self) -> tuple[int, int, float]:
        return self.waiting, self.running, self.kv_usage

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Published) and self._gauges() == other._gauges()

    def __hash__(self) -> int:
        return hash(self._gauges())

    def __repr__(self) -> str:
        return f"Published(waiting={self.waiting}, running={self.running}, kv_usage={self.kv_usage})"


class BlockPool:
    """vLLM's KV block pool: reference counts, a cache of full blocks by key, and the free queue.

    vLLM's free queue is one list; its three parts are kept apart here because each part is
    only ever taken from one end: freed blocks without a key (reused first, last freed first),
    then blocks never used yet, then freed cached blocks, least recently freed first, which
    are evicted as they are taken (block_pool.py free_blocks, get_new_blocks).
    """

    def __init__(self, num_gpu_blocks: int):
        self.usable = num_gpu_blocks - 1  # block 0 is the null block, never handed out
        self.ref = [0] * num_gpu_blocks
        self.key_of: list[int | None] = [None] * num_gpu_blocks
        self.cached: dict[int, int] = {}
        self._uncached_free: list[int] = []
        self._next_unused = 1
        self._end = num_gpu_blocks
        self._cached_free: OrderedDict[int, None] = OrderedDict()
        self.free = self.usable  # blocks in the free queue, all three parts
        # The KV-cache events since the engine last took them, when recorded (None: not).
        self.events: list[tuple[str, Sequence[int], int | None]] | None = None

    @property
    def usage(self) -> float:
        """vllm:kv_cache_usage_perc: blocks held by requests, over all but the null block."""
        return 1.0 - self.free / self.usable

    def cached_run(self, keys: Sequence[int], limit: int) -> list[int]:
        """The blocks caching the longest run of `keys` from the first, at most `limit` of them."""
        # Looking every key up and cutting at the first miss runs in C: faster than stopping there.
        run = list(map(self.cached.get, keys[:limit]))
        if None in run:
            del run[run.index(None):]
        return run

    def touch(self, blocks: Sequence[int]) -> None:
        ref = self.ref
        cached_free = self._cached_free
        for block in blocks:
            count = ref[block]
            if count == 0:
                del cached_free[block]
                self.free -= 1
            ref[block] = count + 1

    def allocate(self, count: int) -> list[int]:
        """`count` blocks, in the order vLLM's free queue hands them out (see the class)."""
        self.free -= count
        uncached = self._uncached_free
        reused = min(count, len(uncached))
        if reused:
            blocks = uncached[-reused:]
            blocks.reverse()
            del uncached[-reused:]
        else:
            blocks = []
        if reused < count:
            fresh = min(count - reused, self._end - self._next_unused)
            if fresh:
                blocks += range(self._next_unused, self._next_unused + fresh)
                self._next_unused += fresh
            key_of = self.key_of
            evicted = []
            for _ in range(count - reused - fresh):
                block, _ = self._cached_free.popitem(last=False)
                key = key_of[block]
                del self.cached[key]
                key_of[block] = None
                blocks.append(block)
                if key >= 0:
                    evicted.append(key)
            if evicted and self.events is not None:
                self.events.append((REMOVED, evicted, None))
        ref = self.ref
        for block in blocks:
            ref[block] = 1
        return blocks

    def cache_prefix(self, blocks: Sequence[int], keys: Sequence[int], start: int, end: int) -> None:
        """Caches `blocks[start:end]`, full blocks of a request whose prompt's blocks have `keys`:
        each under its key, unless it is cached already or another block caches that key. A
        block past the prompt's holds generated tokens and gets a key of its own, which keeps
        it in the cached part of the free queue, as vLLM does, and matches no prompt."""
        key_of = self.key_of
        cached = self.cached
        prompt_blocks = len(keys)
        for position in range(start, end):
            block = blocks[position]
            key = keys[position] if position < prompt_blocks else -next(_OUTPUT_KEYS)
            if key_of[block] is None and key not in cached:
                cached[key] = block
                key_of[block] = key
        stop = min(end, prompt_blocks)
        if self.events is not None and start < stop:
            self.events.append((STORED, keys[start:stop], keys[start - 1] if start else None))

    def reset(self) -> None:
        """vLLM's reset_prefix_cache: no block is cached any more (blocks requests hold stay held,
        keyless, and are not cached again)."""
        self.cached.clear()
        self.key_of = [None] * len(self.key_of)
        self._uncached_free.extend(self._cached_free)
        self._cached_free.clear()
        if self.events is not None:
            self.events.append((CLEARED, (), None))

    def unheld(self, blocks: Sequence[int]) -> int:
        """How many of `blocks` no request holds: cached blocks in the free queue."""
        return list(map(self.ref.__getitem__, blocks)).count(0)

    def cached_blocks(self) -> dict[int, int]:
        """Each cached prompt key's block (for reports and tests; the keys of blocks of generated
        tokens, which match nothing, are left out)."""
        return {key: block for key, block in self.cached.items() if key >= 0}

    def release(self, blocks: Sequence[int]) -> None:
        """Frees a request's blocks tail first, so its shared head is evicted last."""
        ref = self.ref
        key_of = self.key_of
        uncached = self._uncached_free
        cached_free = self._cached_free
        freed = 0
        for block in reversed(blocks):
            count = ref[block] - 1
            ref[block] = count
            if count == 0:
                freed += 1
                if key_of[block] is None:
                    uncached.append(block)
                else:
                    cached_free[block] = None
        self.free += freed


try:  # the same pool in C (block_pool.pyx) when the simulator's core is compiled (routing/compiled.py)
    from routing.simulation.block_pool import BlockPool as _POOL
except ImportError:
    _POOL = BlockPool


class Engine:
    """One server: `add` requests as they reach it, `step` while `busy`; `on_first_token` and
    `on_finish` are called with the sequence and the time."""

    def __init__(self, name: str, block_size: int, num_gpu_blocks: int, limits: EngineLimits,
                 latency: LatencyModel, rng: random.Random | None = None):
        self.name = name
        self.block_size = block_size
        self.num_gpu_blocks = num_gpu_blocks
        self.limits = limits
        self.latency = latency
        self._step_seconds = latency.step_seconds  # every step asks it
        # Read every step: kept here as numbers.
        self.max_num_batched_tokens = limits.max_num_batched_tokens
        self.max_num_seqs = limits.max_num_seqs
        # Steps vary by latency.jitter; without an rng (or jitter) every step takes the model's time.
        self._jitter = latency.jitter if rng is not None else 0.0
        self._rng = rng
        if num_gpu_blocks < 2:
            raise CapacityError(f"num_gpu_blocks={num_gpu_blocks}: vLLM needs at least 2 (one is the null block)")
        self.pool = _POOL(num_gpu_blocks)
        # Requests that reached the server since its step began. vLLM's engine core takes new
        # requests into its scheduler only between steps (EngineCore.run_busy_loop), so the
        # gauges a step publishes when it ends do not count these yet.
        self.incoming: list[EngineRequest] = []
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.hits = 0
        self.queries = 0
        self.finished = 0
        self.published = Published(0, 0, 0.0)
        self.step_work: tuple[int, int, int, float] = (0, 0, 0, 0.0)
        self._scheduled: list[EngineRequest] = []

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def check_fits(self, prompt_len: int, output_len: int) -> None:
        needed = self.blocks_for(prompt_len + output_len)
        if needed > self.pool.usable:
            raise CapacityError(f"a request of {prompt_len} prompt and {output_len} output tokens needs {needed} KV "
                                f"blocks of {self.block_size} tokens, more than the {self.pool.usable} a server has "
                                f"({self.num_gpu_blocks} less the null block): raise --capacity-blocks or shorten it")

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting or self.incoming)

    def add(self, seq: EngineRequest) -> None:
        self.incoming.append(seq)

    def schedule(self, now: float) -> float:
        """Takes in the requests that arrived, picks this step's batch (vLLM Scheduler.schedule),
        starting at `now`, and returns how long the step takes."""
        if self.incoming:
            self.waiting.extend(self.incoming)
            self.incoming.clear()
        budget = self.max_num_batched_tokens
        scheduled = self._scheduled = []
        prefill_tokens = decode_seqs = context_tokens = 0
        prefill_pairs = 0.0  # the prefill chunks' attention: each chunk's tokens × what they attend to
        preempted = False
        pool = self.pool
        block_size = self.block_size
        running = self.running
        count = len(running)
        index = 0
        while index < count and budget > 0:
            seq = running[index]
            computed = seq.computed
            if seq.generated and computed + 1 == seq.tokens:
                # The common case, a decode step: one token, a new block only at a block
                # boundary, and a block to cache only when this token fills one.
                offset = computed % block_size
                needs_block = not offset and computed // block_size == len(seq.blocks)
                if not needs_block or pool.free:
                    if needs_block:
                        seq.blocks += pool.allocate(1)
                    if offset == block_size - 1:
                        self._cache_full_blocks(seq, computed + 1)
                    seq.step_tokens = 1
                    scheduled.append(seq)
                    budget -= 1
                    context_tokens += computed
                    decode_seqs += 1
                    index += 1
                    continue
            new_tokens = min(seq.tokens - computed, budget)
            needed = -(-(computed + new_tokens) // block_size) - len(seq.blocks)
            while needed > pool.free:
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                count = len(running)
                if needed > 0:
                    seq.blocks += pool.allocate(needed)
                self._cache_full_blocks(seq, computed + new_tokens)
                seq.step_tokens = new_tokens
                scheduled.append(seq)
                budget -= new_tokens
                context_tokens += computed
                if seq.generated and computed + 1 == seq.tokens:
                    decode_seqs += 1
                else:
                    prefill_tokens += new_tokens  # a prefill chunk, or recomputing after preemption
                    prefill_pairs += chunk_pairs(new_tokens, computed)
                index += 1
                continue
            break  # the request itself was preempted: nothing after it runs this step
        if not preempted:
            waiting = self.waiting
            max_num_seqs = self.max_num_seqs
            while waiting and budget > 0 and len(running) < max_num_seqs:
                seq = waiting[0]
                if not self._admit(seq, budget):
                    break
                waiting.popleft()
                if seq.scheduled_at is None:
                    seq.scheduled_at = now
                running.append(seq)
                scheduled.append(seq)
                budget -= seq.step_tokens
                prefill_tokens += seq.step_tokens
                context_tokens += seq.computed
                prefill_pairs += chunk_pairs(seq.step_tokens, seq.computed)
        # What the step did, in the latency model's terms (calibrate's replay reads it).
        self.step_work = (prefill_tokens, decode_seqs, context_tokens, prefill_pairs)
        seconds = self._step_seconds(prefill_tokens, decode_seqs, context_tokens, prefill_pairs)
        if self._jitter:
            sigma = self._jitter
            seconds *= math.exp(self._rng.gauss(-sigma * sigma / 2, sigma))
        return seconds

    def _admit(self, seq: EngineRequest, budget: int) -> bool:
        pool = self.pool
        block_size = self.block_size
        tokens = seq.tokens
        # vLLM must compute at least the last prompt token, so a hit stops a block short of it.
        hit_blocks = pool.cached_run(seq.keys, (tokens - 1) // block_size)
        hits = len(hit_blocks)
        hit_tokens = hits * block_size
        new_tokens = min(tokens - hit_tokens, budget)
        # Cached blocks no request holds sit in the free queue: sharing them uses up free blocks.
        evictable_hits = pool.unheld(hit_blocks)
        # vLLM 0.32 admits a request only if its whole prompt fits (scheduler_reserve_full_isl),
        # then allocates for this step's chunk.
        if -(-tokens // block_size) - hits + evictable_hits > pool.free:
            return False
        pool.touch(hit_blocks)
        hit_blocks += pool.allocate(-(-(hit_tokens + new_tokens) // block_size) - hits)
        seq.blocks = hit_blocks
        seq.cached_blocks = hits
        seq.computed = hit_tokens
        seq.hit_tokens = hit_tokens
        seq.step_tokens = new_tokens
        # Counted on admission only ("so unscheduled lookups are not counted"), and not again
        # after a preemption (those go to vLLM's preempted_* stats).
        if seq.preemptions == 0:
            self.queries += tokens
            self.hits += hit_tokens
        self._cache_full_blocks(seq, hit_tokens + new_tokens)
        return True

    def _cache_full_blocks(self, seq: EngineRequest, tokens: int) -> None:
        # vLLM caches every block that is full once this step's tokens are in (allocate_slots).
        full = tokens // self.block_size
        start = seq.cached_blocks
        if full <= start:
            return
        self.pool.cache_prefix(seq.blocks, seq.keys, start, full)
        seq.cached_blocks = full

    def reset_prefix_cache(self) -> None:
        """vLLM's reset_prefix_cache(reset_running_requests=True), between two steps: the running
        requests are preempted (they wait again, and recompute), then no block stays cached."""
        running = self.running
        while running:
            self._preempt(running.pop())
        self.pool.reset()

    def _preempt(self, seq: EngineRequest) -> None:
        self.pool.release(seq.blocks)
        seq.blocks = []
        seq.computed = seq.cached_blocks = 0
        seq.preemptions += 1
        self.waiting.appendleft(seq)

    def finish_step(self, now: float, on_first_token: Callable[[EngineRequest, float], None],
                    on_finish: Callable[[EngineRequest, float], None]) -> None:
        """Applies the step's work (vLLM update_from_output) at `now`, the step's end, then
        publishes the gauges (a new Published only when one changed)."""
        done = False
        for seq in self._scheduled:
            computed = seq.computed = seq.computed + seq.step_tokens
            if computed < seq.tokens:
                continue  # a prefill chunk: no token sampled yet
            generated = seq.generated = seq.generated + 1
            seq.tokens += 1
            if generated == 1:
                seq.first_token_at = now
                on_first_token(seq, now)
            if generated >= seq.output_len:
                self.pool.release(seq.blocks)
                seq.blocks = []
                self.finished += 1
                done = True
                on_finish(seq, now)
        if done:
            self.running = [seq for seq in self.running if seq.generated < seq.output_len]
        self._scheduled = []
        published = self.published
        waiting, running, usage = len(self.waiting), len(self.running), self.pool.usage
        if published.waiting != waiting or published.running != running or published.kv_usage != usage:
            self.published = Published(waiting, running, usage)
