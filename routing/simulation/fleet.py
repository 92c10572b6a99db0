"""Replay a workload through a picker onto simulated vLLM servers and count prefix-cache hits.

A `SimulatedServer` keeps what vLLM's automatic prefix caching keeps: full blocks of prompt
tokens, keyed by their whole prefix, evicted least-recently-used first. It counts what vLLM's
`vllm:prefix_cache_{queries,hits}_total` count, in tokens. The picker never looks inside
these caches; like the real one it sees only the pods' metrics and its own index.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import random
from collections import OrderedDict, deque
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from routing.metrics import DeltaReport, PodDelta
from routing.picker.endpoint_picker import (DEFAULT_LRU_CAPACITY_PER_SERVER, Decision, Hashed, HashPlan, KvEvent,
                                            Picker, PodMetrics, PrecisePlan, Request)
from routing.picker.prefix import Tokenizer, server_block_keys, server_tokens
from routing.simulation.engine import CLEARED, REMOVED, STORED, Engine, EngineRequest, Published
from routing.simulation.latency import EngineLimits, LatencyModel
from routing.simulation.load_plan import LoadPlan

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
        # The KV-cache events since they were last taken, when recorded (engine.BlockPool.events).
        self.events: list[tuple[str, Sequence[int], int | None]] | None = None

    @property
    def cached_blocks(self) -> int:
        return len(self._cache)

    def counters(self) -> PodDelta:
        """Requests, hits and queries counted so far (what verify reads as a delta from zero)."""
        return PodDelta(self.name, self.requests, self.hits, self.queries)

    def metrics(self) -> PodMetrics:
        """The pod's /metrics as the picker scrapes them between two serial requests.

        Idle: nothing waiting or running, and KV usage 0 — a finished request's blocks stay
        cached but are free (reusable on demand), and vLLM's kv_cache_usage_perc counts
        free-but-cached blocks as free. Block size and capacity come from
        vllm:cache_config_info, which the picker's autoTune reads.
        """
        return PodMetrics(name=self.name, block_size=self.block_size, num_gpu_blocks=self.capacity_blocks)

    def serve(self, num_tokens: int, block_keys: Sequence[int]) -> int:
        """Serves a prompt of `num_tokens` tokens, cut into this server's block keys (full blocks
        only, `prefix.server_block_keys`), counts its prefix-cache lookup and returns its hit
        in tokens."""
        # Every key looked up in C, then cut at the first miss: faster than stopping there.
        cached = list(map(self._cache.__contains__, block_keys))
        cached_run = cached.index(False) if False in cached else len(cached)
        # vLLM v1 must compute at least the prompt's last token to sample from it, so a prompt
        # that is entirely cached still misses its last block: hits ≤ ((n-1)//block)·block.
        hit_blocks = min(cached_run, max(0, num_tokens - 1) // self.block_size)
        self.requests += 1
        self.hits += hit_blocks * self.block_size
        self.queries += num_tokens
        if self.events is not None and hit_blocks < len(block_keys):
            # vLLM caches the blocks it computes: those after the hit.
            self.events.append((STORED, block_keys[hit_blocks:], block_keys[hit_blocks - 1] if hit_blocks else None))
        self._remember(block_keys)
        return hit_blocks * self.block_size

    def _remember(self, block_keys: Sequence[int]) -> None:
        # When a request finishes vLLM frees its blocks in reverse order, so among them the
        # tail is evicted first and the shared head last; generated tokens are not modelled
        # (a reply's blocks rarely match a later prompt).
        cache = self._cache
        for key in reversed(block_keys):
            if key in cache:
                cache.move_to_end(key)
            else:
                cache[key] = None
        if self.capacity_blocks is not None:
            evicted = []
            while len(self._cache) > self.capacity_blocks:
                evicted.append(self._cache.popitem(last=False)[0])
            if evicted and self.events is not None:
                self.events.append((REMOVED, evicted, None))

    def reset(self) -> None:
        """vLLM's /reset_prefix_cache: nothing stays cached."""
        self._cache.clear()
        if self.events is not None:
            self.events.append((CLEARED, (), None))


@dataclass(frozen=True)
class Explained:
    """One pick as the picker made it: what it saw of each pod, and its decision."""

    index: int
    replica: int
    at: float
    seen: tuple[PodMetrics, ...]
    decision: Decision


@dataclass(frozen=True)
class SimulationResult(DeltaReport):
    """A fleet's counters after a replay (the shape `verify` measures) and, per request in
    order, where it went, its prompt length and its prefix-cache hit (tokens)."""

    placements: tuple[str, ...] = ()
    prompt_lens: tuple[int, ...] = ()
    hit_tokens: tuple[int, ...] = ()
    explained: Explained | None = None


# How long after the engine step that made them a pod's KV-cache events reach the picker's
# index: vLLM publishes each step's events from a background thread over ZMQ, and the picker's
# subscriber decodes and indexes them. Measured on the two vLLM CPU servers behind `serve
# --prefix-index precise` (docs/benchmarks.md, "KV-event delivery").
DEFAULT_EVENT_DELAY = 0.004


class KvEventLog:
    """The pods' KV-cache events in the order they were published, each with its time: the feed
    a precise picker reads (endpoint_picker.KvEventFeed). A cursor is a one-item list, the
    position of the first event not yet read."""

    def __init__(self) -> None:
        self._times: list[float] = []
        self._events: list[KvEvent] = []

    def publish(self, pod: str, at: float, events: list[tuple[str, Sequence[int], int | None]]) -> None:
        """Publishes a pod's recorded events at `at` (later than any published before) and empties the record."""
        for kind, keys, parent in events:
            self._times.append(at)
            self._events.append(KvEvent(pod, kind, keys, parent))
        events.clear()

    def cursor(self) -> list[int]:
        return [len(self._events)]

    def drain(self, cursor: list[int], until: float) -> list[KvEvent]:
        times = self._times
        start = end = cursor[0]
        count = len(times)
        while end < count and times[end] <= until:
            end += 1
        cursor[0] = end
        return self._events[start:end]


def attach_precise(pickers: Sequence[Picker], log: KvEventLog) -> list[bool]:
    """Attaches to `log` every picker (or replica of one) that routes on the pods' KV-cache events;
    per picker, whether it does."""
    reading = []
    for picker in pickers:
        replicas = getattr(picker, "replicas", (picker,))
        precise = [replica for replica in replicas if getattr(replica, "reads_kv_events", False)]
        for replica in precise:
            replica.attach(log)
        reading.append(bool(precise))
    return reading


# A serial replay's clock for precise pickers, per request: each request has finished, and its
# events have arrived, before the next is sent, and a speculative entry (upstream's TTL: 2 s)
# has expired by then too (the events say what the pod holds).
_SERIAL_SECONDS_PER_REQUEST = 3600.0


def simulate_side_by_side(workload: Iterable[Request],
                          fleets: Sequence[tuple[Sequence[SimulatedServer], Picker]],
                          tokenizer: Tokenizer, explain: int | None = None) -> list[SimulationResult]:
    """Replays one workload through several independent fleets, tokenizing each request once.

    Requests are serial, like the seed's curl loop: each one finishes before the next is
    picked, so every pick sees idle pods (see `SimulatedServer.metrics`) and no load in flight
    (picks carry no request key, so a picker counts none). The counters
    returned are each server's totals, so a fleet of fresh servers reports just this replay.
    `explain` keeps the first fleet's decision for that request (0 = the first).
    """
    by_name = [{server.name: server for server in servers} for servers, _ in fleets]
    for (servers, _), named in zip(fleets, by_name):
        if not servers or len(named) != len(servers):
            raise ValueError(f"each fleet needs at least one server and unique names, got "
                             f"{[server.name for server in servers]}")
    placements: list[list[str]] = [[] for _ in fleets]
    hits: list[list[int]] = [[] for _ in fleets]
    lens: list[int] = []
    explained = None
    logs = [KvEventLog() for _ in fleets]
    precise = [attach_precise([picker], log)[0] for (_, picker), log in zip(fleets, logs)]
    for (servers, _), reads in zip(fleets, precise):
        for server in servers:
            server.events = [] if reads else None
    for index, request in enumerate(workload):
        # What the server computes: one sequence per prompt (several for a batch completion),
        # a chat through the model's chat template when the tokenizer has one.
        traced = request.traced
        sequences = server_tokens(tokenizer, request) if traced is None else ()
        lengths = [len(tokens) for tokens in sequences] if traced is None else [traced.length]
        lens.append(sum(lengths))
        keys_by_block_size: dict[int, list[Sequence[int]]] = {}
        for fleet, ((servers, picker), named, placed) in enumerate(zip(fleets, by_name, placements)):
            seen = [server.metrics() for server in servers]
            if precise[fleet]:
                now = index * _SERIAL_SECONDS_PER_REQUEST
                for replica in getattr(picker, "replicas", (picker,)):
                    replica.advance(now)
            decision = picker.pick(request, seen)
            if index == explain and fleet == 0:
                explained = Explained(index, 0, 0.0, tuple(seen), decision)
            server = named[decision.pod]
            keys = keys_by_block_size.get(server.block_size)
            if keys is None:
                keys = keys_by_block_size[server.block_size] = (
                    [server_block_keys(tokens, server.block_size) for tokens in sequences] if traced is None
                    else [traced.keys(server.block_size)])
            hits[fleet].append(sum(server.serve(length, sequence_keys)
                                   for length, sequence_keys in zip(lengths, keys)))
            placed.append(server.name)
            if precise[fleet]:
                logs[fleet].publish(server.name, index * _SERIAL_SECONDS_PER_REQUEST, server.events)
    return [SimulationResult(tuple(server.counters() for server in servers), tuple(placed),
                             tuple(lens), tuple(fleet_hits), explained if fleet == 0 else None)
            for fleet, ((servers, _), placed, fleet_hits) in enumerate(zip(fleets, placements, hits))]


# -- under load ----------------------------------------------------------------------------------

# The picker refreshes every pod's metrics this often (LDR server/options.go@v0.10.0,
# --refresh-metrics-interval 50ms).
DEFAULT_SCRAPE_INTERVAL = 0.05


@contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a replay runs or a workload is prepared for one:
    they make millions of objects and no garbage cycles of their own, so each collection would
    walk every one of them for nothing (a tenth of a large replay's time, more of preparing it).
    Collection resumes, as it was, when they end."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class Prepared:
    """A workload's requests tokenized once for every fleet: lengths and the server's block
    keys, and the picker's block hashes by `hash_plan` (None: not computed; a picker hashing
    by another plan hashes each request as it picks it). Keys and hashes are arrays of 64-bit
    numbers ('Q'): compact, and read without an int object per block."""

    requests: tuple[Request, ...]
    prompt_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    keys: tuple[Sequence[int], ...]
    block_size: int
    # A precise picker's plan needs no hashes of its own: it keys blocks as the servers do.
    hash_plan: HashPlan | PrecisePlan | None = None
    picker_hashes: tuple[Sequence[Sequence[int]], ...] = ()


def prepare(requests: Sequence[Request], output_lens: Sequence[int], tokenizer: Tokenizer,
            block_size: int, hash_plan: HashPlan | PrecisePlan | None = None) -> Prepared:
    """The workload tokenized and hashed once for every fleet.

    Not split over a forked child as the fleets are: a child and its parent each copy every page
    they write to after the fork, and preparing touches every request, so the copies cost what
    the second core saved (measured on 100,000 requests: 0.95 s split, 0.72 s here)."""
    problem = precise_block_size_problem(hash_plan, block_size)
    if problem:
        raise UnsupportedRequest(problem)
    picker_hashes = isinstance(hash_plan, HashPlan)
    with collection_paused():
        lens, keys, hashes = [], [], []
        for index, request in enumerate(requests):
            if request.traced is not None:
                lens.append(request.traced.length)
                keys.append(request.traced.keys(block_size))
            else:
                sequences = server_tokens(tokenizer, request, packed=True)
                if len(sequences) != 1:
                    raise UnsupportedRequest(f"workload request {index} holds {len(sequences)} prompts in one "
                                             "completion: under load each request is simulated as one sequence; "
                                             "predict it serially (no --rate/--concurrency, no \"at\" times) or split "
                                             "it into one request per prompt")
                lens.append(len(sequences[0]))
                keys.append(server_block_keys(sequences[0], block_size))
            if picker_hashes:
                hashes.append(hash_plan.hashes(request))
    return Prepared(tuple(requests), tuple(lens), tuple(output_lens), tuple(keys), block_size, hash_plan, tuple(hashes))


class UnsupportedRequest(ValueError):
    """A request the simulation under load does not model, with what to do instead."""


def precise_block_size_problem(plan: HashPlan | PrecisePlan | None, block_size: int) -> str | None:
    """Why a precise index's plan cannot key servers caching blocks of `block_size`, or None."""
    if not isinstance(plan, PrecisePlan) or plan.block_tokens == block_size:
        return None
    return (f"--block-size {block_size}: the precise prefix index keys blocks of {plan.block_tokens} tokens "
            "(tokenProcessorConfig.blockSizeTokens), so its keys would never match the servers' events; predict "
            f"with --block-size {plan.block_tokens}, the block size the stack gives vLLM")


@dataclass(frozen=True)
class Fleet:
    """Servers and the picker in front of them.

    `pickers` are the picker's replicas: each request goes to one of them at random, and
    each keeps its own prefix index and scrapes every pod on its own clock.
    """

    names: tuple[str, ...]
    pickers: tuple[Picker, ...]
    num_gpu_blocks: int
    limits: EngineLimits
    latency: LatencyModel
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL
    reads_metrics: bool = True  # False for round-robin, which never looks at the pods
    # Fresh replicas for the plan's weight change number n (weights, n); None: weights never change.
    repick: Callable[[Mapping[str, int], int], tuple[Picker, ...]] | None = None
    # Seconds apart at which requests sent together reach the picker, one at a time: each is
    # picked then, from the scrapes of its own moment. A load generator in one process and a
    # gateway on one event loop (the benchmark's client and `serve`) take each request in
    # turn; 0: each is picked the moment it is sent, as many clients and a concurrent gateway
    # (Envoy with the picker) would have it.
    send_spacing: float = 0.0
    # How long a pod's KV-cache events take to reach a precise picker's index.
    event_delay: float = DEFAULT_EVENT_DELAY
    # Whether to count an approximate picker's stale picks (LoadResult.stale).
    count_stale: bool = False
    # Replicas that follow the load (routing/simulation/scaling.py): a factory of the run's scaler,
    # which adds pods to the pool and takes them out; None: the pods of `names`, throughout.
    scaling: Callable[[], Any] | None = None


@dataclass(frozen=True)
class LoadResult(SimulationResult):
    """A replay under load: the counters, where each request went, and per request (in
    workload order) its TTFT and time in the server's waiting queue, in seconds."""

    ttfts: tuple[float, ...] = ()
    queue_times: tuple[float, ...] = ()
    duration: float = 0.0
    # Per request: when it was sent and when its last token came back (simulated seconds).
    sent_at: tuple[float, ...] = ()
    finished_at: tuple[float, ...] = ()
    stale: StalePicks | None = None


@dataclass(frozen=True)
class StalePicks:
    """Where an approximate picker's index was wrong about what the pods held, pick by pick.
    `stale`: picks that went to a pod the index credited with more of the prompt than the pod's
    cache held, the first block missing being one the pod had cached and evicted or lost (a
    block the pod has yet to cache, of a request in flight to it, is not stale); `elsewhere`,
    those where another pod held more of the prompt; `tokens`, the prompt tokens credited and
    not held over them. `blind`: picks where another pod held more of the prompt than the chosen
    one and the index credited it with less than it held (its record had aged out, or the pod
    cached it for another picker). An index of what each pod holds (the precise one) sees both."""

    picks: int  # picks with a prefix to match
    stale: int
    elsewhere: int
    blind: int
    tokens: int

    def to_json(self) -> dict:
        return {"picks": self.picks, "stale": self.stale, "elsewhere": self.elsewhere, "blind": self.blind,
                "tokensNotHeld": self.tokens}


class _Scrapes:
    """What one pod published over time, as the picker's scrapes read it."""

    __slots__ = ("history",)

    def __init__(self, idle: PodMetrics):
        # Pods existed, idle and scraped, before the workload started.
        self.history: deque[tuple[float, PodMetrics]] = deque([(float("-inf"), idle)])

    def publish(self, now: float, metrics: PodMetrics) -> None:
        self.history.append((now, metrics))

    def seen_at(self, scrape_time: float, keep_after: float) -> PodMetrics:
        history = self.history
        # No later pick reads a scrape older than one interval before now: drop what it replaced.
        while len(history) > 1 and history[1][0] <= keep_after:
            history.popleft()
        for at, metrics in reversed(history):
            if at <= scrape_time:
                return metrics
        return history[0][1]


def simulate_under_load(prepared: Prepared, plan: LoadPlan, fleet: Fleet, *, seed: int | None = None,
                        explain: int | None = None) -> LoadResult:
    """Replays `prepared` as `plan` sends it onto `fleet`, in simulated time.

    The picker picks when a request is sent, from each pod's gauges as of its last scrape
    (each (replica, pod) scraped every `scrape_interval` from its own random phase); the
    request reaches the engine the gateway's hop and the server's overhead later; TTFT runs
    from the send to the end of the step that samples its first token.
    """
    with collection_paused():
        return _LoadReplay(prepared, plan, fleet, seed, explain).run()


# A replay's events, by kind. At equal times the event made first runs first.
_SEND, _ARRIVE, _STEP_END, _WEIGHTS, _PICK, _POD_RESTART, _CACHE_RESET, _SCALE = 0, 1, 2, 3, 4, 5, 6, 7


class EventQueue:
    """A replay's events, earliest first, and at equal times the first made first: each gets the
    next number of one count (`next_order`), which events planned apart from the queue share.

    `pop` returns the earliest event's time and leaves its kind and payload in `kind` and
    `payload`: the loop reads them without a tuple made for every event."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int]] = []
        self._count = itertools.count()
        self.kind = self.payload = 0

    def next_order(self) -> int:
        return next(self._count)

    def push(self, at: float, kind: int, payload: int) -> None:
        heapq.heappush(self._heap, (at, next(self._count), kind, payload))

    def before(self, at: float, order: int) -> bool:
        """Whether the earliest event comes before (at, order)."""
        return bool(self._heap) and self._heap[0][:2] < (at, order)

    def pop(self) -> float:
        at, _, self.kind, self.payload = heapq.heappop(self._heap)
        return at


try:  # the same queue in C (events.pyx) when the simulator's core is compiled (routing/compiled.py)
    from routing.simulation.events import EventQueue as _EVENTS
except ImportError:
    _EVENTS = EventQueue


class _LoadReplay:
    """One replay under load (simulate_under_load): its servers, pickers, clocks and per-request
    records, and the event loop that drives them."""

    def __init__(self, prepared: Prepared, plan: LoadPlan, fleet: Fleet, seed: int | None, explain: int | None):
        self.prepared = prepared
        self.plan = plan
        self.fleet = fleet
        self.explain = explain
        self.rng = rng = random.Random(seed)
        count = self.count = len(prepared.requests)
        block_size = prepared.block_size
        self.engines = engines = [Engine(name, block_size, fleet.num_gpu_blocks, fleet.limits, fleet.latency, rng)
                                  for name in fleet.names]
        for prompt_len, output_len in zip(prepared.prompt_lens, prepared.output_lens):
            engines[0].check_fits(prompt_len, output_len)
        self.by_name = {engine.name: index for index, engine in enumerate(engines)}
        self.idle = idle = [PodMetrics(name=name, block_size=block_size, num_gpu_blocks=fleet.num_gpu_blocks)
                            for name in fleet.names]
        self.scrapes = [_Scrapes(pod) for pod in idle]
        self.published_metrics = [engine.published for engine in engines]  # per engine, the gauges last published
        self.metrics_of: list[dict[Published, PodMetrics]] = [{} for _ in engines]  # per engine, its gauges as scraped
        self.interval = interval = fleet.scrape_interval
        self.phases = [[rng.random() * interval for _ in engines] for _ in fleet.pickers]
        # Per replica and pod, the scrape time of its last read and what it read.
        self.last_read_at: list[list[float | None]] = [[None] * len(engines) for _ in fleet.pickers]
        self.read = [list(idle) for _ in fleet.pickers]
        self.fresh_until = [float("-inf")] * len(fleet.pickers)
        self.arrival = fleet.latency.arrival_seconds
        self.reads_metrics = fleet.reads_metrics  # round-robin reads none: nothing to publish
        self.hash_plan, self.picker_hashes = prepared.hash_plan, prepared.picker_hashes
        self.requests, self.keys = prepared.requests, prepared.keys
        self.prompt_lens, self.output_lens = prepared.prompt_lens, prepared.output_lens

        self.sent_at = [0.0] * count
        self.ttfts = [0.0] * count
        self.queue_times = [0.0] * count
        self.hit_tokens = [0] * count
        self.finished_at = [0.0] * count
        self.placements: list[str] = [""] * count
        # The replica that picked each request (the object: a weight change replaces the list), told
        # when the request's first token and its end come back, for the load it counts in flight.
        # A stand-in without those calls (a recording, a test's picker) counts none and gets no key.
        self.picked_by: list[Picker | None] = [None] * count
        self.explained: Explained | None = None
        # Weight changes and sends are known up front: they run from one sorted list of (time, order,
        # kind, payload), so the queue holds only the few events the run makes (arrivals at engines
        # and step ends).
        self.events = _EVENTS()
        self.stepping = [False] * len(engines)
        self.pending_resets = [0] * len(engines)  # per engine: a reset (1) or restart (2) due when its step ends
        self.pickers = list(fleet.pickers)
        self.counts_load = [hasattr(picker, "finished") for picker in self.pickers]
        self.planned: list[tuple[float, int, int, int]] = []
        if fleet.repick is not None:
            self.planned += [(change.at, self.events.next_order(), _WEIGHTS, number)
                             for number, change in enumerate(plan.weight_changes)]
        self.planned += [(restart.at, self.events.next_order(), _CACHE_RESET if restart.reset else _POD_RESTART,
                          restart.pod) for restart in plan.pod_restarts]
        # Precise pickers read the engines' KV-cache events, published when each step ends; an
        # approximate one's stale picks are told by them too.
        self.kv_log = KvEventLog()
        self.event_delay = fleet.event_delay
        self.precise_keyed = isinstance(prepared.hash_plan, PrecisePlan)
        self.precise = attach_precise(self.pickers, self.kv_log)
        self.count_stale = fleet.count_stale
        self.counts_stale = self._counting_stale()
        self.reads_events = any(self.precise)
        self.records_events = self.reads_events or any(self.counts_stale)
        if self.records_events:
            for engine in engines:
                engine.pool.events = []
        # Per engine, the prompt keys it holds and those it held and dropped, by its events.
        self.held: list[set[int]] = [set() for _ in engines]
        self.gone: list[set[int]] = [set() for _ in engines]
        self.stale_counts = [0, 0, 0, 0, 0]  # picks, stale, elsewhere, blind, tokens (StalePicks)
        self.send_spacing = fleet.send_spacing
        self.spaced_until = float("-inf")
        # Per engine, whether it is in the pool the picker sees: a scaled-in pod leaves it and
        # finishes what it holds.
        self.live = [True] * len(engines)
        self.scaling = fleet.scaling() if fleet.scaling is not None else None

        # Sessions: a turn waits for its session's previous turn.
        self.session_of = plan.sessions
        self.turns: dict[str, deque[int]] = {}
        for index, session in enumerate(self.session_of):
            if session is not None:
                self.turns.setdefault(session, deque()).append(index)
        self.busy_sessions: set[str] = set()
        self.deferred: dict[str, deque[int]] = {}
        self.ready: list[int] = []  # closed loop: requests whose session is free, in workload order
        self.in_flight = 0
        self.concurrency = plan.concurrency
        # Requests sent at one instant (a closed loop's start, turns one step's finishes free, a
        # timed burst) reach the gateway in no order the workload sets: they are picked in a random
        # order of their own (a stream apart from the run's, so runs without such ties draw what
        # they always drew). Sending them in workload order made round-robin keep every chat of
        # the benchmark's multi-turn workload on its pod (68.9% predicted in every seed, against
        # 48.1-68.9% measured, 61.7% in 25 of 52 runs).
        self.send_order = random.Random(None if seed is None else f"{seed}/sends at one instant")
        self.freed: list[int] = []  # open loop: deferred turns freed by the step that just ended

    def send(self, index: int, now: float) -> None:
        self.sent_at[index] = now  # TTFT runs from here, the moment the client means to send
        if self.send_spacing:
            self.spaced_until = max(now, self.spaced_until) + self.send_spacing
            self.events.push(self.spaced_until, _PICK, index)
        else:
            self.pick(index, now)

    def pick(self, index: int, now: float) -> None:
        replica = self.rng.randrange(len(self.fleet.pickers)) if len(self.fleet.pickers) > 1 else 0
        if self.reads_metrics:
            seen = self.read[replica]
            # Until the replica's next scrape of any pod it reads what it read last: most sends.
            if now >= self.fresh_until[replica]:
                interval = self.interval
                read_at = self.last_read_at[replica]
                scrapes = self.scrapes
                keep_after = now - interval
                next_scrape = float("inf")
                for pod, phase in enumerate(self.phases[replica]):
                    scrape_time = now - (now - phase) % interval
                    if scrape_time != read_at[pod]:
                        seen[pod] = scrapes[pod].seen_at(scrape_time, keep_after)
                        # Pods publish at later times only, but possibly at this very time.
                        read_at[pod] = scrape_time if scrape_time < now else None
                    next_scrape = min(next_scrape, scrape_time + interval)
                self.fresh_until[replica] = now if None in read_at else next_scrape
        else:
            seen = self.idle
        if self.scaling is not None:
            seen = [metrics for metrics, live in zip(seen, self.live) if live]
        picker = self.pickers[replica]
        request = self.requests[index]
        if self.precise[replica]:
            picker.advance(now, now - self.event_delay)
        # A stand-in without lifecycle calls (a recording, a test's picker) counts no load and gets no key.
        counts_load = self.counts_load[replica]
        if counts_load:
            self.picked_by[index] = picker
        if self.picker_hashes:
            hashed = (self.hash_plan, self.picker_hashes[index])
        elif self.precise_keyed:
            hashed = (self.hash_plan, ((self.keys[index],), self.prompt_lens[index]))
        else:
            hashed = None
        if index == self.explain:
            decision = picker.pick(request, seen, key=index) if counts_load else picker.pick(request, seen)
            self.explained = Explained(index, replica, now, tuple(seen), decision)
            self.placements[index] = decision.pod
        else:
            self.placements[index] = (picker.choose(request, seen, hashed, key=index) if counts_load
                                      else picker.choose(request, seen, hashed))
        if self.counts_stale[replica]:
            self.check_stale(picker, index)
        self.events.push(now + self.arrival(self.prompt_lens[index]), _ARRIVE, index)

    def check_stale(self, picker: Picker, index: int) -> None:
        """Counts the pick of request `index` against what each pod held when it was made: stale
        when the picker credited the chosen pod with more of the prompt than it held and the first
        block it lacked is one it had dropped; blind when another pod held more than the chosen
        one and the picker credited that pod with less than it held."""
        credits, total = picker.last_credits()
        keys = self.keys[index]
        blocks = len(keys)
        if not total or not blocks:
            return
        counts = self.stale_counts
        counts[0] += 1
        chosen = self.by_name[self.placements[index]]
        held = [len(engine.pool.cached_run(keys, blocks)) for engine in self.engines]
        # What was credited and held, as fractions of the prompt: the picker's blocks and the
        # server's need not be the same size. A difference under one of the picker's blocks is none.
        slack = 1 / total
        over = credits.get(self.placements[index], 0) / total - held[chosen] / blocks
        if over >= slack and held[chosen] < blocks and keys[held[chosen]] in self.gone[chosen]:
            counts[1] += 1
            counts[4] += round(over * self.prompt_lens[index])
            if max(held) > held[chosen]:
                counts[2] += 1
        for other, engine in enumerate(self.engines):
            if held[other] > held[chosen] and credits.get(engine.name, 0) / total < held[other] / blocks - slack:
                counts[3] += 1
                break

    def _counting_stale(self) -> list[bool]:
        # Only an approximate prefix index can be stale; a precise one reads what the pods hold.
        return [self.count_stale and hasattr(picker, "last_credits") and not picker.reads_kv_events
                and picker.prefix_index is not None for picker in self.pickers]

    def took_events(self, engine_index: int, events: list) -> None:
        """Keeps what engine `engine_index` holds and dropped by the events it just recorded."""
        held, gone = self.held[engine_index], self.gone[engine_index]
        for kind, keys, _ in events:
            if kind == STORED:
                held.update(keys)
                gone.difference_update(keys)
            elif kind == REMOVED:
                held.difference_update(keys)
                gone.update(keys)
            else:
                gone.update(held)
                held.clear()

    def send_together(self, indexes: list[int], now: float) -> None:
        if len(indexes) > 1:
            self.send_order.shuffle(indexes)
        for index in indexes:
            self.send(index, now)

    def dispatch(self, now: float) -> None:
        batch = []
        ready = self.ready
        while ready and self.in_flight < self.concurrency:
            index = heapq.heappop(ready)
            self.in_flight += 1
            if self.session_of[index] is not None:
                self.busy_sessions.add(self.session_of[index])
            batch.append(index)
        self.send_together(batch, now)

    def on_first_token(self, seq: EngineRequest, now: float) -> None:
        index = seq.index
        self.hit_tokens[index] = seq.hit_tokens
        self.ttfts[index] = now - self.sent_at[index]
        self.queue_times[index] = seq.scheduled_at - seq.engine_arrival
        # The first chunk reaches the picker when the step that sampled it ends (the hop back is not modelled).
        picker = self.picked_by[index]
        if picker is not None:
            picker.first_chunk(index)

    def on_finish(self, seq: EngineRequest, now: float) -> None:
        index = seq.index
        self.finished_at[index] = now
        picker = self.picked_by[index]
        if picker is not None:
            picker.finished(index)
        session = self.session_of[index]
        if self.concurrency is not None:
            self.in_flight -= 1
            if session is not None:
                self.busy_sessions.discard(session)
                queue = self.turns[session]
                queue.popleft()
                if queue:
                    heapq.heappush(self.ready, queue[0])
        elif session is not None:
            self.busy_sessions.discard(session)
            waiting = self.deferred.get(session)
            if waiting:
                self.busy_sessions.add(session)
                self.freed.append(waiting.popleft())

    def start_step(self, engine_index: int, now: float) -> None:
        duration = self.engines[engine_index].schedule(now)
        self.stepping[engine_index] = True
        self.events.push(now + duration, _STEP_END, engine_index)

    def step_ended(self, engine_index: int, now: float) -> None:
        engine = self.engines[engine_index]
        self.stepping[engine_index] = False
        finished = engine.finished
        engine.finish_step(now, self.on_first_token, self.on_finish)
        if engine.finished != finished:
            # Every request the step's finishes let go, sent together.
            if self.concurrency is not None:
                self.dispatch(now)
            elif self.freed:
                freed, self.freed = self.freed, []
                self.send_together(freed, now)
        if self.records_events and engine.pool.events:
            self.publish_events(engine_index, now)
        published = engine.published
        if published is not self.published_metrics[engine_index] and self.reads_metrics:
            # A new object only when a gauge changed: pickers reuse their scores for the very same
            # pods, and a scrape reads the same object from the step that published it or a later one.
            self.published_metrics[engine_index] = published
            metrics_of = self.metrics_of[engine_index]
            metrics = metrics_of.get(published)
            if metrics is None:
                # Gauges recur (a pod's few running counts, its usage at each block count): one object each.
                metrics = metrics_of[published] = PodMetrics(
                    name=engine.name, waiting=published.waiting, running=published.running,
                    kv_usage=published.kv_usage, block_size=self.prepared.block_size,
                    num_gpu_blocks=self.fleet.num_gpu_blocks)
            self.scrapes[engine_index].publish(now, metrics)
        if self.pending_resets[engine_index]:
            reset, self.pending_resets[engine_index] = self.pending_resets[engine_index] == 1, 0
            self.restart_pod(engine_index, now, reset)  # it starts the next step, if there is work
        elif engine.busy:
            self.start_step(engine_index, now)

    def publish_events(self, engine_index: int, now: float) -> None:
        events = self.engines[engine_index].pool.events
        if self.count_stale:
            self.took_events(engine_index, events)
        if self.reads_events:
            self.kv_log.publish(self.engines[engine_index].name, now, events)
        else:
            events.clear()

    def restart_pod(self, engine_index: int, now: float, reset: bool) -> None:
        """The pod's cache emptied, between two of its steps (a step under way ends first: vLLM's
        engine core takes the reset between steps). `reset` (vLLM's /reset_prefix_cache with
        reset_running_requests): its running requests wait again and recompute; vLLM queues the
        AllBlocksCleared and publishes it with the events of its next step (seen on vLLM 0.32: an
        idle pod's reset reaches the picker when the pod next serves). A restart: modelled as that
        reset (a real restart fails the running requests instead), but the new vLLM publishes
        nothing of it, and the precise producer clears the pod when its endpoint leaves the pool
        (extractor.go@v0.10.0), taken here as at once. What the pod holds, for stale picks,
        changes now."""
        if self.stepping[engine_index]:
            self.pending_resets[engine_index] = 1 if reset else 2
            return
        engine = self.engines[engine_index]
        engine.reset_prefix_cache()
        if engine.busy:
            self.start_step(engine_index, now)
        if not reset and self.records_events:
            engine.pool.events.pop()  # no AllBlocksCleared from a new process
            if self.reads_events:
                self.kv_log.publish(engine.name, now, [(CLEARED, (), None)])
        if self.count_stale:
            self.gone[engine_index].update(self.held[engine_index])
            self.held[engine_index].clear()

    def add_engine(self, name: str) -> int:
        """A pod joins the pool, cold, as a scaler's new replica turns Ready; its engine's index."""
        fleet, block_size = self.fleet, self.prepared.block_size
        engine = Engine(name, block_size, fleet.num_gpu_blocks, fleet.limits, fleet.latency, self.rng)
        if self.records_events:
            engine.pool.events = []
        index = len(self.engines)
        self.engines.append(engine)
        self.by_name[name] = index
        idle = PodMetrics(name=name, block_size=block_size, num_gpu_blocks=fleet.num_gpu_blocks)
        self.idle.append(idle)
        self.scrapes.append(_Scrapes(idle))
        self.published_metrics.append(engine.published)
        self.metrics_of.append({})
        for replica in range(len(self.pickers)):
            self.phases[replica].append(self.rng.random() * self.interval)
            self.last_read_at[replica].append(None)
            self.read[replica].append(idle)
            self.fresh_until[replica] = float("-inf")
        self.stepping.append(False)
        self.pending_resets.append(0)
        self.held.append(set())
        self.gone.append(set())
        self.live.append(True)
        return index

    def has_work(self) -> bool:
        """Whether anything is left to run besides a scaler's own clock: events, or planned sends."""
        return self.events.before(float("inf"), 0) or self.next_planned < self.last_planned

    def arrived(self, index: int, now: float) -> None:
        engine_index = self.by_name[self.placements[index]]
        engine = self.engines[engine_index]
        engine.add(EngineRequest(index, self.prompt_lens[index], self.keys[index], self.output_lens[index], now))
        if not self.stepping[engine_index]:
            self.start_step(engine_index, now)

    def sent_as_planned(self, first: int, now: float) -> None:
        """Every send planned for this instant (a timed workload's burst), sent together."""
        planned_at, planned_kind, planned_payload = self.planned_at, self.planned_kind, self.planned_payload
        batch = [first]
        while (self.next_planned < self.last_planned and planned_at[self.next_planned] == now
               and planned_kind[self.next_planned] == _SEND):
            batch.append(planned_payload[self.next_planned])
            self.next_planned += 1
        sendable = []
        for index in batch:  # in workload order, so a session's earlier turn goes first
            session = self.session_of[index]
            if session is not None:
                if session in self.busy_sessions:
                    self.deferred.setdefault(session, deque()).append(index)
                    continue
                self.busy_sessions.add(session)
            sendable.append(index)
        self.send_together(sendable, now)

    def run(self) -> LoadResult:
        plan, planned = self.plan, self.planned
        if self.concurrency is not None:
            ready = [index for index, session in enumerate(self.session_of) if session is None]
            ready += [queue[0] for queue in self.turns.values()]
            heapq.heapify(ready)
            self.ready = ready
            self.dispatch(0.0)
        else:
            planned += [(at, self.events.next_order(), _SEND, index) for index, at in enumerate(plan.send_at)]
        planned.sort()
        planned.append((float("inf"), self.events.next_order(), _SEND, -1))  # a sentinel: never reached while events remain
        self.planned_at = [entry[0] for entry in planned]
        self.planned_order = [entry[1] for entry in planned]
        self.planned_kind = [entry[2] for entry in planned]
        self.planned_payload = [entry[3] for entry in planned]
        if self.scaling is not None:
            self.scaling.begin(self, _SCALE)
        now = self.loop()
        engines = self.engines
        pods = tuple(PodDelta(engine.name, engine.finished, engine.hits, engine.queries) for engine in engines)
        start = min(self.sent_at) if self.count else 0.0
        stale = StalePicks(*self.stale_counts) if self.count_stale and self.stale_counts[0] else None
        return LoadResult(pods, tuple(self.placements), self.prepared.prompt_lens, tuple(self.hit_tokens),
                          self.explained, tuple(self.ttfts), tuple(self.queue_times), now - start,
                          tuple(self.sent_at), tuple(self.finished_at), stale)

    def loop(self) -> float:
        """Runs every event, earliest first; returns the time of the last."""
        plan, events = self.plan, self.events
        planned_at, planned_order = self.planned_at, self.planned_order
        planned_kind, planned_payload = self.planned_kind, self.planned_payload
        now = 0.0
        self.next_planned = 0
        self.last_planned = len(planned_at) - 1
        while True:
            next_planned = self.next_planned
            if events.before(planned_at[next_planned], planned_order[next_planned]):
                now = events.pop()
                kind, payload = events.kind, events.payload
            elif next_planned < self.last_planned:
                now, kind, payload = planned_at[next_planned], planned_kind[next_planned], planned_payload[next_planned]
                self.next_planned = next_planned + 1
            else:
                break
            if kind == _STEP_END:  # the most frequent event, tested first
                self.step_ended(payload, now)
            elif kind == _ARRIVE:
                self.arrived(payload, now)
            elif kind == _PICK:
                self.pick(payload, now)
            elif kind == _SEND:
                self.sent_as_planned(payload, now)
            elif kind == _POD_RESTART or kind == _CACHE_RESET:
                self.restart_pod(payload, now, kind == _CACHE_RESET)
            elif kind == _SCALE:
                self.scaling.on_event(self, payload, now)
            else:
                self.pickers[:] = self.fleet.repick(plan.weight_changes[payload].weights, payload)
                self.counts_load = [hasattr(picker, "finished") for picker in self.pickers]
                # A restarted precise picker reads the events published from now on (no replay).
                self.precise = attach_precise(self.pickers, self.kv_log)
                self.counts_stale = self._counting_stale()
        return now


class _RecordedPlacements:
    """A replay's picker: each request goes to the pod a recorded run sent it to."""

    def __init__(self, requests: Sequence[Request], pods: Sequence[str]):
        self._pod_of = {id(request): pod for request, pod in zip(requests, pods)}

    def choose(self, request: Request, pods: Sequence[PodMetrics], hashed: Hashed | None = None) -> str:
        return self._pod_of[id(request)]


def replay_recorded(prepared: Prepared, sent_at: Sequence[float], pods: Sequence[str], names: Sequence[str], *,
                    num_gpu_blocks: int, limits: EngineLimits, latency: LatencyModel,
                    seed: int | None = None, send_spacing: float = 0.0, concurrency: int | None = None,
                    sessions: Sequence[str | None] | None = None) -> LoadResult:
    """The simulated servers alone, on a recorded run's traffic: each request sent to the pod
    the run sent it to. No picker decides anything, so what this gets wrong against the run is
    the engine and latency model's error alone, apart from where the prediction would have
    sent the requests.

    Without `concurrency` each request is sent at its recorded time. With it (the run's
    clients, a closed loop), the requests go in their recorded order, each when one of the
    `concurrency` clients is free in the simulation and, with `sessions`, when its session's
    previous turn has finished: a closed loop's sends follow its replies, so sent at the
    recorded times they would reach servers the simulation has not yet freed wherever it runs
    a little slower than the real ones, and queue behind prefills the run never queued behind.
    Either way the result is per request in the order given."""
    count = len(prepared.requests)
    if not len(sent_at) == len(pods) == count:
        raise ValueError(f"a replay needs a send time and a pod for each of the {count} requests, "
                         f"not {len(sent_at)} and {len(pods)}")
    if sessions is not None and len(sessions) != count:
        raise ValueError(f"a replay needs a session (or None) for each of the {count} requests, not {len(sessions)}")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"a closed-loop replay needs at least one client, not concurrency={concurrency}")
    unknown = sorted(set(pods) - set(names))
    if unknown:
        raise ValueError(f"recorded pods {unknown} are not among the replay's servers {list(names)}")
    fleet = Fleet(tuple(names), (_RecordedPlacements(prepared.requests, pods),), num_gpu_blocks, limits, latency,
                  reads_metrics=False, send_spacing=send_spacing)
    if concurrency is None:
        plan = LoadPlan(sessions=(None,) * count, send_at=tuple(sent_at))
        return simulate_under_load(prepared, plan, fleet, seed=seed)
    # The closed loop sends the lowest-numbered ready request first: number them in the order
    # the run sent them (sends at one instant in the order given), then put the results back.
    order = sorted(range(count), key=sent_at.__getitem__)
    plan = LoadPlan(sessions=tuple(sessions[index] for index in order) if sessions is not None else (None,) * count,
                    concurrency=concurrency)
    result = simulate_under_load(_reordered(prepared, order), plan, fleet, seed=seed)
    restore = [0] * count
    for position, index in enumerate(order):
        restore[index] = position
    return replace(result, **{name: tuple(getattr(result, name)[position] for position in restore)
                              for name in _PER_REQUEST})


# LoadResult's fields that hold one value per request, in the workload's order.
_PER_REQUEST = ("placements", "prompt_lens", "hit_tokens", "ttfts", "queue_times", "sent_at", "finished_at")


def _reordered(prepared: Prepared, order: Sequence[int]) -> Prepared:
    def pick(values: Sequence) -> tuple:
        return tuple(values[index] for index in order)

    return replace(prepared, requests=pick(prepared.requests), prompt_lens=pick(prepared.prompt_lens),
                   output_lens=pick(prepared.output_lens), keys=pick(prepared.keys),
                   picker_hashes=pick(prepared.picker_hashes) if prepared.picker_hashes else ())
