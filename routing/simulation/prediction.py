"""A prediction: a workload replayed onto simulated vLLM servers three times, routed by the
endpoint picker, by round-robin (a plain Kubernetes Service), and onto a single pod whose cache
never evicts (the best hit rate any placement could reach); serially, or under load in
simulated time. `predict` (the command), `sweep` and the lab's demo call `run_prediction`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from routing.picker.endpoint_picker import (DEFAULT_PICKER_VERSION, Decision, EndpointPicker, Hashed, HashPlan, Picker,
                                            PickerConfigError, PodMetrics, Request, RoundRobinPicker,
                                            with_default_weights)
from routing.picker.prefix import EstimateTokenizer, Tokenizer, server_tokens
from routing.simulation.engine import CapacityError
from routing.simulation.fleet import (DEFAULT_BLOCK_SIZE, DEFAULT_CAPACITY_BLOCKS, DEFAULT_EVENT_DELAY,
                                      DEFAULT_SCRAPE_INTERVAL, Fleet, StalePicks,
                                      LoadResult, Prepared, SimulatedServer, SimulationResult, UnsupportedRequest,
                                      precise_block_size_problem, prepare, simulate_side_by_side,
                                      simulate_under_load)
from routing.simulation.latency import DEFAULT_LATENCY, DEFAULT_LIMITS, EngineLimits, LatencyModel, percentile
from routing.simulation.load_plan import LoadPlan
from routing.simulation.parallel import run_beside
from routing.workloads import WorkloadError, to_requests
from settings.picker_config import (EndpointPickerConfig, PreciseIndex, load_endpoint_picker_config,
                                    render_endpoint_picker_config)

PERCENTILES = (0.5, 0.95, 0.99)
# Below this many requests a replay under load takes well under a second, and forking a child
# for round-robin's fleet (tens of ms with its result's pickling) is not worth it.
PARALLEL_MIN_REQUESTS = 2000


class PredictError(ValueError):
    """Options predict cannot work with, with the fix."""


@dataclass(frozen=True)
class Load:
    """How to replay a workload in simulated time: when requests are sent, how long replies run,
    and the servers' and pickers' timing."""

    plan: LoadPlan
    output_lens: tuple[int, ...]
    limits: EngineLimits = DEFAULT_LIMITS
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL
    send_spacing: float = 0.0  # Fleet.send_spacing: requests sent together reach the picker this far apart
    event_delay: float = DEFAULT_EVENT_DELAY  # Fleet.event_delay: KV-cache events' way to a precise picker
    count_stale: bool = False  # Fleet.count_stale: count an approximate picker's stale picks


class ReplicatedPicker:
    """The picker's replicas behind one Service: each request goes to one of them at random,
    and each keeps its own prefix index (they share nothing)."""

    def __init__(self, replicas: Sequence[Picker], seed: int | None):
        self.replicas = tuple(replicas)
        self._rng = random.Random(seed)

    def pick(self, request: Request, pods: Sequence[PodMetrics]) -> Decision:
        return self.replicas[self._rng.randrange(len(self.replicas))].pick(request, pods)

    def choose(self, request: Request, pods: Sequence[PodMetrics],
               hashed: Hashed | None = None) -> str:
        return self.replicas[self._rng.randrange(len(self.replicas))].choose(request, pods, hashed)

    def hash_plan(self, reported_block_size: int | None) -> HashPlan | None:
        return self.replicas[0].hash_plan(reported_block_size)


def replica_pickers(configuration: Mapping[str, int] | EndpointPickerConfig, count: int, seed: int | None,
                    picker_version: str = DEFAULT_PICKER_VERSION, tokenizer: Tokenizer | None = None,
                    precise: PreciseIndex | None = None) -> tuple[EndpointPicker, ...]:
    """`count` fresh picker replicas of weights or a whole EndpointPickerConfig (a weight change
    rolls them: fresh indexes); one replica keeps `seed` itself, so a single picker breaks ties
    as `serve --seed` does. Weights run on the precise prefix index with `precise`, as the
    stack renders them; a precise index keys the servers' tokens: `tokenizer`'s."""
    tokenizer = tokenizer or EstimateTokenizer()
    if precise is not None and not isinstance(configuration, EndpointPickerConfig):
        configuration = load_endpoint_picker_config(render_endpoint_picker_config(configuration, precise))

    def engine_tokens(request: Request) -> list:
        return server_tokens(tokenizer, request)

    if count == 1:
        return (EndpointPicker(configuration, seed=seed, picker_version=picker_version, engine_tokens=engine_tokens),)
    seeds = random.Random(seed)
    return tuple(EndpointPicker(configuration, seed=seeds.randrange(2 ** 32), picker_version=picker_version,
                                engine_tokens=engine_tokens)
                 for _ in range(count))


def percentile_figures(seconds: Sequence[float]) -> dict[str, float | None]:
    return {f"p{round(q * 100)}": percentile(seconds, q) for q in PERCENTILES}


@dataclass(frozen=True)
class Baseline:
    """What a replay under load computes that the picker's weights do not change: the workload
    tokenized, round-robin's fleet and the never-evicting pod. Valid only for the same workload,
    seed, load and servers; a sweep computes it once per seed and reuses it for every setting."""

    prepared: Prepared
    round_robin: LoadResult
    best: SimulationResult
    best_cache_blocks: int


@dataclass(frozen=True)
class Prediction:
    # The picker's weights: the overrides run_prediction was given, over the default profile.
    weights: Mapping[str, int]
    picker: SimulationResult
    round_robin: SimulationResult
    best: SimulationResult
    # Blocks the never-evicting pod ends up holding: the workload's distinct full blocks.
    best_cache_blocks: int
    capacity_blocks: int | None
    latency: LatencyModel = DEFAULT_LATENCY
    limits: EngineLimits = DEFAULT_LIMITS
    # Per request (workload order), for the picker and round-robin: TTFT and queue time, s.
    ttfts: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    queue_times: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    under_load: bool = False
    # Under load: what another prediction with other weights can reuse (see Baseline).
    baseline: Baseline | None = field(default=None, compare=False, repr=False)

    @property
    def best_fits_one_pod(self) -> bool:
        """Whether one pod's cache holds the whole workload, so sending everything there reaches
        bestHitRate; otherwise bestHitRate is an upper bound that may be out of reach."""
        return self.capacity_blocks is None or self.best_cache_blocks <= self.capacity_blocks

    @property
    def stale(self) -> StalePicks | None:
        """The approximate picker's stale picks, when counted (Load.count_stale)."""
        return getattr(self.picker, "stale", None)

    def to_json(self) -> dict:
        stale = {"stalePicks": self.stale.to_json()} if self.stale is not None else {}
        return {**self.picker.to_json(), "ttft": percentile_figures(self.ttfts[0]),
                "queue": percentile_figures(self.queue_times[0]),
                "roundRobin": {**self.round_robin.to_json(), "ttft": percentile_figures(self.ttfts[1]),
                               "queue": percentile_figures(self.queue_times[1])},
                "bestHitRate": self.best.hit_rate, **stale}


def serial_ttfts(result: SimulationResult, latency: LatencyModel, limits: EngineLimits) -> tuple[float, ...]:
    """TTFT of each request of a serial replay: alone on an idle server, its uncached prompt
    tokens prefilled in chunks of the step's token budget."""
    budget = limits.max_num_batched_tokens
    return tuple(latency.arrival_seconds(prompt_len) + latency.prefill_seconds(prompt_len - hit, hit, budget)
                 for prompt_len, hit in zip(result.prompt_lens, result.hit_tokens))


def run_prediction(requests: Sequence[Request], *, weights: Mapping[str, int] | None = None, replicas: int,
                   pod_prefix: str = "pod", block_size: int = DEFAULT_BLOCK_SIZE,
                   capacity_blocks: int | None = DEFAULT_CAPACITY_BLOCKS, tokenizer: Tokenizer | None = None,
                   seed: int | None = None, load: Load | None = None, latency: LatencyModel = DEFAULT_LATENCY,
                   limits: EngineLimits = DEFAULT_LIMITS, picker_replicas: int = 1,
                   explain: int | None = None, picker_config: EndpointPickerConfig | None = None,
                   baseline: Baseline | None = None, picker_version: str = DEFAULT_PICKER_VERSION,
                   precise: PreciseIndex | None = None) -> Prediction:
    """Replays `requests` onto `replicas` pods named `<pod_prefix>-<i>`, routed by a picker with
    `weights` laid over the default profile (as `serve` and the cluster's picker do):
    serially, or under `load` in simulated time. Under load, `baseline` (an earlier
    prediction's, with everything but the weights the same) spares tokenizing the workload and
    replaying round-robin and the best case again. `precise`: weights route on the precise
    prefix index (a `picker_config` carries its own)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise PredictError(f"replicas={replicas!r}: must be a whole number of at least 1 (--replicas N)")
    if not requests:
        raise WorkloadError("the workload has no requests")
    if explain is not None and not 0 <= explain < len(requests):
        raise PredictError(f"--explain {explain}: the workload has requests 0 to {len(requests) - 1}")
    tokenizer = tokenizer or EstimateTokenizer()
    if picker_config is not None:
        # The user's whole configuration: its scorers and weights are what run, nothing laid over.
        pickers = replica_pickers(picker_config, picker_replicas, seed, picker_version, tokenizer, precise)
        weights = dict(pickers[0].weights)
    else:
        weights = with_default_weights(weights)
        pickers = replica_pickers(weights, picker_replicas, seed, picker_version, tokenizer, precise)
    plan = pickers[0].hash_plan(block_size)
    problem = precise_block_size_problem(plan, block_size)
    if problem:
        raise PredictError(problem)
    names = tuple(f"{pod_prefix}-{i}" for i in range(replicas))

    # The best any placement could do: a request can only hit blocks some earlier request left
    # in a cache, and at most its longest full-block prefix shared with any earlier request.
    # One pod whose cache never evicts holds every earlier block, so serving everything there
    # reaches that maximum for every request at once: an upper bound for any number of pods.
    # When capacity binds (the workload's blocks outgrow one pod) real pods evict, so the
    # bound may not be reachable by any placement; `best_fits_one_pod` says which case it is.
    best_pod = SimulatedServer(f"{pod_prefix}-unbounded", block_size, capacity_blocks=None)
    if load is None:
        def fleet() -> list[SimulatedServer]:
            return [SimulatedServer(name, block_size, capacity_blocks) for name in names]

        picker = pickers[0] if picker_replicas == 1 else ReplicatedPicker(pickers, seed)
        picked, round_robin, best = simulate_side_by_side(
            requests, [(fleet(), picker), (fleet(), RoundRobinPicker()), ([best_pod], RoundRobinPicker())],
            tokenizer, explain=explain)
        ttfts = (serial_ttfts(picked, latency, limits), serial_ttfts(round_robin, latency, limits))
        queue_times = ((0.0,) * len(requests),) * 2
        return Prediction(weights, picked, round_robin, best, best_pod.cached_blocks, capacity_blocks, latency, limits,
                          ttfts, queue_times)

    if capacity_blocks is None:
        raise PredictError("a replay under load needs a KV cache size: pass --capacity-blocks N")
    try:
        # The picker's block hashes are computed once with the server's keys, before round-robin's
        # fleet forks: the picker's fleet, the critical path, then only looks them up, and a
        # sweep's every setting reuses them.
        prepared = (baseline.prepared if baseline is not None
                    else prepare(requests, load.output_lens, tokenizer, block_size, plan))
    except UnsupportedRequest as error:
        raise PredictError(str(error)) from None

    def fleet_result(fleet_pickers: tuple[Picker, ...], reads_metrics: bool, keep: int | None,
                     repick: Any = None) -> LoadResult:
        fleet = Fleet(names, fleet_pickers, capacity_blocks, load.limits, latency, load.scrape_interval,
                      reads_metrics, repick, load.send_spacing, load.event_delay, load.count_stale and reads_metrics)
        return simulate_under_load(prepared, load.plan, fleet, seed=seed, explain=keep)

    def repick(overrides: Mapping[str, int], number: int) -> tuple[EndpointPicker, ...]:
        # New pods draw their own tie-breaks: a seed of their own, repeatable from the run's.
        restarted = None if seed is None else random.Random(f"{seed}/{number}").randrange(2 ** 32)
        configuration = picker_config if picker_config is not None and not overrides else {**weights, **overrides}
        return replica_pickers(configuration, picker_replicas, restarted, picker_version, tokenizer, precise)

    def round_robin_and_best() -> tuple[LoadResult, SimulationResult, int]:
        round_robin = fleet_result((RoundRobinPicker(),), False, None)
        for prompt_len, keys in zip(prepared.prompt_lens, prepared.keys):
            best_pod.serve(prompt_len, keys)
        return round_robin, SimulationResult((best_pod.counters(),)), best_pod.cached_blocks

    try:
        if baseline is not None:
            picked = fleet_result(pickers, True, explain, repick)
        else:
            # The fleets share only their inputs: on a second core round-robin's runs beside the picker's.
            picked, (round_robin, best, best_blocks) = run_beside(
                lambda: fleet_result(pickers, True, explain, repick), round_robin_and_best,
                parallel=len(requests) >= PARALLEL_MIN_REQUESTS)
            baseline = Baseline(prepared, round_robin, best, best_blocks)
    except CapacityError as error:
        raise PredictError(str(error)) from None
    except PickerConfigError as error:
        raise PredictError(f"a weight change in the workload: {error}") from None
    round_robin = baseline.round_robin
    return Prediction(weights, picked, round_robin, baseline.best, baseline.best_cache_blocks, capacity_blocks,
                      latency, load.limits, (picked.ttfts, round_robin.ttfts),
                      (picked.queue_times, round_robin.queue_times), under_load=True, baseline=baseline)


def predict(workload: Sequence[Mapping[str, Any]], **options: Any) -> dict:
    """`run_prediction` of `workload` (OpenAI request bodies) as the JSON `predict --json` prints:
    {"pods": [{"pod", "requests", "hits", "queries", "hitRate"}], "hitRate", "ttft": {"p50",
     "p95", "p99"}, "queue": {"p50", "p95", "p99"}, "roundRobin": {"pods": [...], "hitRate",
     "ttft", "queue"}, "bestHitRate"} — hits and queries in tokens, TTFT and time in the
    server's waiting queue in seconds (queue 0 serially), hit rates None where there were no
    queries."""
    return run_prediction(to_requests(workload), **options).to_json()
