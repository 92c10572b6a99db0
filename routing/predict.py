"""`python -m routing predict`: where the endpoint picker will send a workload, before deploying.

Replays the workload through three fleets of simulated vLLM servers: one routed by the
endpoint picker with the stack's weights, one by round-robin (a plain Kubernetes Service),
and a single pod with a cache that never evicts, which gives the best hit rate any
placement could reach.

A workload of bare request bodies is replayed serially, each request on idle pods, as the
seed page's curl loop sends it. With `--rate`, `--concurrency` or a workload whose lines say
when they are sent (`{"at", "session", "body"}`), it is replayed in simulated time: servers
batch continuously and hold KV blocks for running requests, and the picker sees them only as
its last scrape did. TTFT and queue times come from a latency model (`--latency-profile`
from `python -m routing calibrate`, else a documented default).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from settings import lru_conflict

from .arrivals import (DEFAULT_OUTPUT_TOKENS, Arrival, LoadPlan, WeightChange, load_arrivals, load_weight_changes,
                       plan_load, replays_in_time)
from .engine import CapacityError
from .latency import (DEFAULT_LATENCY, DEFAULT_LATENCY_NOTE, DEFAULT_LIMITS, EngineLimits, LatencyModel,
                      LatencyProfile, ProfileError, percentile)
from .plugins import EndpointPickerConfig, load_endpoint_picker_config
from .parallel import run_beside
from .options import (OptionError, add_model_options, load_stack_model, positive_int, positive_rate,
                      positive_seconds, weights_option)
from .picker import (DEFAULT_PICKER_VERSION, PICKER_VERSIONS, Decision, EndpointPicker, HashPlan, Hashed, Picker,
                     PickerConfigError, PodMetrics, Request, RoundRobinPicker, with_default_weights)
from .prefix import EstimateTokenizer, HFTokenizerFile, Tokenizer, TokenizerFileError
from .simulate import (DEFAULT_BLOCK_SIZE, DEFAULT_CAPACITY_BLOCKS, DEFAULT_SCRAPE_INTERVAL, Fleet, LoadResult,
                       Prepared, SimulatedServer, SimulationResult, UnsupportedRequest, prepare,
                       simulate_side_by_side, simulate_under_load)
from .tables import percent
from . import sweep
from .workloads import BUILTIN_WORKLOADS as BUILTIN, WorkloadError, to_requests

PERCENTILES = (0.5, 0.95, 0.99)
# Below this many requests a replay under load takes well under a second, and forking a child
# for round-robin's fleet (tens of ms with its result's pickling) is not worth it.
PARALLEL_MIN_REQUESTS = 2000
# The heat map's axes and panels (routing/plot.py).
MAX_PLOTTED_WEIGHTS = 3


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
                    picker_version: str = DEFAULT_PICKER_VERSION) -> tuple[EndpointPicker, ...]:
    """`count` fresh picker replicas of weights or a whole EndpointPickerConfig (a weight change
    rolls them: fresh indexes); one replica keeps `seed` itself, so a single picker breaks ties
    as `serve --seed` does."""
    if count == 1:
        return (EndpointPicker(configuration, seed=seed, picker_version=picker_version),)
    seeds = random.Random(seed)
    return tuple(EndpointPicker(configuration, seed=seeds.randrange(2 ** 32), picker_version=picker_version)
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

    def to_json(self) -> dict:
        return {**self.picker.to_json(), "ttft": percentile_figures(self.ttfts[0]),
                "queue": percentile_figures(self.queue_times[0]),
                "roundRobin": {**self.round_robin.to_json(), "ttft": percentile_figures(self.ttfts[1]),
                               "queue": percentile_figures(self.queue_times[1])},
                "bestHitRate": self.best.hit_rate}


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
                   baseline: Baseline | None = None, picker_version: str = DEFAULT_PICKER_VERSION) -> Prediction:
    """Replays `requests` onto `replicas` pods named `<pod_prefix>-<i>`, routed by a picker with
    `weights` laid over the default profile (as `serve` and the cluster's picker do):
    serially, or under `load` in simulated time. Under load, `baseline` (an earlier
    prediction's, with everything but the weights the same) spares tokenizing the workload and
    replaying round-robin and the best case again."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise PredictError(f"replicas={replicas!r}: must be a whole number of at least 1 (--replicas N)")
    if not requests:
        raise WorkloadError("the workload has no requests")
    if explain is not None and not 0 <= explain < len(requests):
        raise PredictError(f"--explain {explain}: the workload has requests 0 to {len(requests) - 1}")
    if picker_config is not None:
        # The user's whole configuration: its scorers and weights are what run, nothing laid over.
        pickers = replica_pickers(picker_config, picker_replicas, seed, picker_version)
        weights = dict(pickers[0].weights)
    else:
        weights = with_default_weights(weights)
        pickers = replica_pickers(weights, picker_replicas, seed, picker_version)
    tokenizer = tokenizer or EstimateTokenizer()
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
                    else prepare(requests, load.output_lens, tokenizer, block_size, pickers[0].hash_plan(block_size)))
    except UnsupportedRequest as error:
        raise PredictError(str(error)) from None

    def fleet_result(fleet_pickers: tuple[Picker, ...], reads_metrics: bool, keep: int | None,
                     repick: Any = None) -> LoadResult:
        fleet = Fleet(names, fleet_pickers, capacity_blocks, load.limits, latency, load.scrape_interval,
                      reads_metrics, repick, load.send_spacing)
        return simulate_under_load(prepared, load.plan, fleet, seed=seed, explain=keep)

    def repick(overrides: Mapping[str, int], number: int) -> tuple[EndpointPicker, ...]:
        # New pods draw their own tie-breaks: a seed of their own, repeatable from the run's.
        restarted = None if seed is None else random.Random(f"{seed}/{number}").randrange(2 ** 32)
        return replica_pickers({**weights, **overrides}, picker_replicas, restarted, picker_version)

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


# -- command line ---------------------------------------------------------------------------

def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "predict", help="predict where the endpoint picker sends a workload, and the prefix-cache hit rates",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--stack", help="stack to read (stacks/Pulumi.<stack>.yaml): its model's replicas and weights")
    where.add_argument("--pods", type=positive_int, metavar="N",
                       help="no stack: N pods with the controller's default weights (queue 2, kvCache 2, prefix 3)")
    add_model_options(parser)
    parser.add_argument("--workload", default="seed-shared",
                        help=f"{', '.join(sorted(BUILTIN))}, or a .jsonl file of OpenAI request bodies or of "
                             '{"at": seconds, "session": id, "body": {...}} lines (default: seed-shared)')
    parser.add_argument("--weights", type=weights_option, metavar="NAME=N,...",
                        help="override weights, e.g. prefix=0,queue=3,kvCache=2 (merged over the stack's)")
    parser.add_argument("--replicas", type=positive_int, metavar="N", help="override the stack's replica count")
    parser.add_argument("--block-size", type=positive_int, metavar="TOKENS",
                        help=f"vLLM's KV block size (default: the profile's, else {DEFAULT_BLOCK_SIZE}, the GPU "
                             "default; 128 on CPU)")
    parser.add_argument("--capacity-blocks", type=positive_int, metavar="N",
                        help="KV cache blocks per pod, the '# GPU blocks' vLLM logs (default: the profile's, else "
                             f"{DEFAULT_CAPACITY_BLOCKS})")
    parser.add_argument("--tokenizer", metavar="PATH",
                        help="the model's tokenizer.json (or its directory) to count tokens exactly "
                             "(default: estimate ~4 characters per token)")
    parser.add_argument("--seed", type=int, help="seed for the picker's tie-breaking, arrivals and scrape clocks "
                                                 "(default: random, printed)")
    parser.add_argument("--picker-version", choices=tuple(PICKER_VERSIONS), default=DEFAULT_PICKER_VERSION,
                        help="the llm-d router release whose prefix hashing to model: v0.9 and later hash "
                             f"4-byte pseudo-tokens, v0.5-v0.8 characters (default {DEFAULT_PICKER_VERSION}; "
                             "HyperPod's is unpublished, see the README)")
    parser.add_argument("--runs", type=positive_int, default=1, metavar="N",
                        help="repeat with N seeds (seed, seed+1, ...) and show the spread across runs (default 1)")
    load = parser.add_argument_group("under load (any of these, or a workload with \"at\" times, replays in "
                                     "simulated time)")
    when = load.add_mutually_exclusive_group()
    when.add_argument("--rate", type=positive_rate, metavar="PER_SECOND",
                      help="send requests as a Poisson process at this mean rate")
    when.add_argument("--concurrency", type=positive_int, metavar="N",
                      help="closed loop: N requests in flight, each next one sent when one finishes")
    load.add_argument("--latency-profile", metavar="FILE",
                      help="latency model, block size and KV blocks from `python -m routing calibrate` "
                           "(default: a built-in GPU estimate, flagged in the output)")
    load.add_argument("--max-num-seqs", type=positive_int, metavar="N",
                      help=f"vLLM's running-sequence limit (default: the profile's, else {DEFAULT_LIMITS.max_num_seqs})")
    load.add_argument("--max-num-batched-tokens", type=positive_int, metavar="N",
                      help="vLLM's token budget per step (default: the profile's, else "
                           f"{DEFAULT_LIMITS.max_num_batched_tokens})")
    load.add_argument("--scrape-interval", type=positive_seconds, default=DEFAULT_SCRAPE_INTERVAL, metavar="S",
                      help=f"seconds between the picker's metric scrapes (default {DEFAULT_SCRAPE_INTERVAL:g}, upstream's)")
    load.add_argument("--picker-replicas", type=positive_int, metavar="N",
                      help="picker replicas, each with its own prefix index (default: as the stack deploys them: "
                           "its pickerReplicas, else 2 on HyperPod's controller and 1 with the llm-d router; 1 "
                           "with --pods)")
    load.add_argument("--send-spacing", type=positive_seconds, metavar="S",
                      help="requests sent at one moment reach the picker one at a time, S seconds apart, as "
                           "through a load generator in one process or a gateway on one event loop (default: "
                           "each is picked as it is sent)")
    parser.add_argument("--explain", type=int, metavar="N",
                        help="show request N's pick (0 = the first): every pod's score per scorer, weighted, "
                             "summed, and the margin over the runner-up")
    advisor = parser.add_argument_group("weight advisor")
    advisor.add_argument("--sweep", type=sweep.sweep_option, metavar="NAME=A..B,...",
                         help="try every combination, e.g. prefix=0..5,queue=0..5,kvCache=0..5 (others as the "
                              "stack or --weights set them)")
    advisor.add_argument("--objective", choices=sweep.OBJECTIVES,
                         help="with --sweep: what the best setting maximises (hit-rate, the default) or minimises "
                              "(ttft-p95, balance)")
    advisor.add_argument("--plot", metavar="FILE.png", help="with --sweep: write a heat map of the results")
    parser.add_argument("--json", action="store_true", help="print the prediction as JSON")
    parser.set_defaults(func=run)


@dataclass(frozen=True)
class _Target:
    title: str  # the report's first words: what is being predicted
    pod_prefix: str
    served_model: str | None  # None: keep each body's model
    weights: Mapping[str, int]  # over the default profile
    replicas: int
    caveats: tuple[str, ...] = ()
    picker_replicas: int = 1  # as deployed: the stack's, or its gateway implementation's default
    # The `pulumi config set --path` prefix for this model's weights: models[i] or the gateway's.
    config_path: str = "weights"
    # The model's own EndpointPickerConfig (models[].pickerConfigMap.file), which replaces weights.
    picker_config: EndpointPickerConfig | None = None


def _target(args: argparse.Namespace) -> _Target:
    overrides = args.weights or {}
    found = load_stack_model(args.stack, args.model, args.stacks_dir)
    if found is None:
        if args.replicas is not None:
            raise PredictError(f"--replicas needs --stack; with --pods {args.pods} there is no stack to read. "
                               "Drop one of the two.")
        return _Target("Prediction without a stack", "pod", None, overrides, args.pods)

    model = found.model
    index = found.settings.models.index(model)
    if model.picker_config_map is not None:
        config = found.picker_config(f"To predict with explicit weights, use --pods {model.replicas or 2} --weights ...")
        if overrides:
            raise PredictError(f"--weights: model {model.name!r} runs its own EndpointPickerConfig "
                               f"({model.picker_config_map.file}), which has no weights to override; edit its "
                               "scheduling profile's weights instead.")
        return _Target(f"Prediction for stack {args.stack}, model {model.name} ({model.model}), picker configuration "
                       f"{model.picker_config_map.file}", model.name, model.model, {},
                       args.replicas if args.replicas is not None else model.replicas, (),
                       found.settings.picker_replicas(model), f"models[{index}].weights",
                       load_endpoint_picker_config(config))
    weights = {**found.weights(f"To predict with explicit weights, use --pods {model.replicas or 2} --weights ..."),
               **overrides}
    if lru_conflict(model.scheduler, weights):
        raise PredictError(f"--weights lru={weights['lru']}: the lru weight exists only with scheduler llm-d, and "
                           f"model {model.name!r} uses {model.scheduler!r}. Drop lru or set the model's scheduler.")
    replicas = args.replicas if args.replicas is not None else model.replicas
    if replicas < 1:
        raise PredictError(f"model {model.name!r} has replicas {replicas} in stack {args.stack!r}: no pod to route "
                           "to. Pass --replicas N to predict for N pods.")
    caveats = ()
    if model.scheduler == "epp":
        caveats = ("scheduler epp: modelled with the llm-d router v0.10 scorers; which upstream release HyperPod's "
                   "epp scheduler runs is not documented",)
    return _Target(f"Prediction for stack {args.stack}, model {model.name} ({model.model})", model.name, model.model,
                   weights, replicas, caveats, found.settings.picker_replicas(model), f"models[{index}].weights")


@dataclass(frozen=True)
class _Setup:
    """Everything a run needs besides the weights and the seed."""

    target: _Target
    arrivals: tuple[Arrival, ...]
    requests: tuple[Request, ...]
    tokenizer: Tokenizer
    block_size: int
    capacity_blocks: int
    latency: LatencyModel
    limits: EngineLimits
    picker_replicas: int
    notes: tuple[str, ...] = field(default=())
    weight_changes: tuple[WeightChange, ...] = ()
    # Per seed, the first prediction's Baseline: only the weights differ between this setup's runs.
    baselines: dict[int, Baseline] = field(default_factory=dict, compare=False, repr=False)

    def load(self, args: argparse.Namespace, seed: int) -> Load | None:
        plan = plan_load(self.arrivals, rate=args.rate, concurrency=args.concurrency, seed=seed,
                         weight_changes=self.weight_changes)
        if plan is None:
            return None
        return Load(plan, tuple(arrival.output_tokens for arrival in self.arrivals), self.limits,
                    args.scrape_interval, args.send_spacing or 0.0)

    def predict(self, args: argparse.Namespace, weights: Mapping[str, int], seed: int,
                explain: int | None = None) -> Prediction:
        prediction = run_prediction(self.requests, weights=weights, replicas=self.target.replicas,
                                    pod_prefix=self.target.pod_prefix, block_size=self.block_size,
                                    capacity_blocks=self.capacity_blocks, tokenizer=self.tokenizer, seed=seed,
                                    load=self.load(args, seed), latency=self.latency, limits=self.limits,
                                    picker_replicas=self.picker_replicas, explain=explain,
                                    picker_config=self.target.picker_config, baseline=self.baselines.get(seed),
                                    picker_version=args.picker_version)
        if prediction.baseline is not None:
            self.baselines.setdefault(seed, prediction.baseline)
        return prediction


def _setup(args: argparse.Namespace) -> _Setup:
    target = _target(args)
    arrivals = tuple(load_arrivals(args.workload, target.served_model))
    tokenizer = HFTokenizerFile(args.tokenizer) if args.tokenizer else EstimateTokenizer()
    notes = [f"tokens {tokenizer.description}", *target.caveats]
    if args.picker_version != DEFAULT_PICKER_VERSION:
        notes.append(f"prefix hashing of picker {args.picker_version} ({PICKER_VERSIONS[args.picker_version]})")
    profile = LatencyProfile.load(args.latency_profile) if args.latency_profile else None
    if profile is None:
        latency, limits = DEFAULT_LATENCY, DEFAULT_LIMITS
        notes.append(DEFAULT_LATENCY_NOTE)
    else:
        latency, limits = profile.latency, profile.limits or DEFAULT_LIMITS
        notes.append(f"latency from {args.latency_profile} ({profile.source or 'calibrated'})")
    limits = EngineLimits(args.max_num_seqs or limits.max_num_seqs,
                          args.max_num_batched_tokens or limits.max_num_batched_tokens)
    block_size = args.block_size or (profile and profile.block_size) or DEFAULT_BLOCK_SIZE
    capacity = args.capacity_blocks or (profile and profile.num_gpu_blocks) or DEFAULT_CAPACITY_BLOCKS
    replicas = args.picker_replicas or target.picker_replicas
    in_time = replays_in_time(arrivals, rate=args.rate, concurrency=args.concurrency)
    unknown = sum(1 for arrival in arrivals if arrival.length_unknown)
    if unknown and in_time:
        notes.append(f"{unknown} request(s) (chat, responses, ...) state no max_tokens: vLLM runs those to EOS or the "
                     f"end of the context, which the workload does not say; predicted at {DEFAULT_OUTPUT_TOKENS} "
                     "tokens each. Set max_tokens in the workload for their real length.")
    if args.send_spacing:
        if not in_time:
            raise PredictError(f"--send-spacing {args.send_spacing:g}: a serial replay sends one request at a time, "
                               "so no two are sent at one moment; add --rate or --concurrency, or drop it")
        notes.append(f"requests sent at one moment reach the picker {args.send_spacing * 1000:.1f} ms apart, one at "
                     "a time (--send-spacing); TTFT runs from the send")
    changes = load_weight_changes(args.workload)
    for change in changes:
        notes.append(f"at {change.at:g}s the weights change to "
                     + ",".join(f"{name}={value}" for name, value in change.weights.items())
                     + ": fresh picker indexes, the servers' caches stay warm")
    if replicas > 1:
        notes.append(f"{replicas} picker replicas: each request goes to one at random, each has its own prefix index "
                     "(if only an elected leader takes traffic, use --picker-replicas 1)")
    return _Setup(target, arrivals, tuple(arrival.request for arrival in arrivals), tokenizer, block_size, capacity,
                  latency, limits, replicas, tuple(notes), changes)


def run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2 ** 32)
    try:
        setup = _setup(args)
        if args.plot and not args.sweep:
            raise PredictError(f"--plot {args.plot}: a heat map needs --sweep, e.g. --sweep prefix=0..5,queue=0..5")
        if args.plot and len(args.sweep) > MAX_PLOTTED_WEIGHTS:
            raise PredictError(f"--plot {args.plot}: draws up to {MAX_PLOTTED_WEIGHTS} swept weights, --sweep names "
                               f"{len(args.sweep)}; sweep fewer, or drop --plot")
        if args.objective and not args.sweep:
            raise PredictError(f"--objective {args.objective}: chooses among the settings of a sweep; add --sweep, "
                               "e.g. --sweep prefix=0..5, or drop --objective")
        if args.explain is not None and args.sweep:
            raise PredictError(f"--explain {args.explain}: shows one setting's pick and --sweep predicts many; drop "
                               "--sweep, and give the setting to explain with --weights NAME=N,...")
        if setup.target.picker_config is not None and (args.sweep or setup.weight_changes):
            raise PredictError("--sweep and weight changes in the workload vary weights, and this model runs its own "
                               "EndpointPickerConfig instead: vary the file's weights, or predict with --weights.")
        if args.sweep:
            return sweep.run_sweep(args, setup, seed)
        predictions = [setup.predict(args, setup.target.weights, seed + run, args.explain if run == 0 else None)
                       for run in range(args.runs)]
    except (OptionError, PredictError, WorkloadError, PickerConfigError, TokenizerFileError, ProfileError) as error:
        print(f"predict: {error}", file=sys.stderr)
        return 2
    seeds = f"picker seed {seed}" if args.runs == 1 else f"seeds {seed}..{seed + args.runs - 1}"
    notes = [seeds + ("" if args.seed is not None else f" (repeat with --seed {seed})"), *setup.notes]
    first = predictions[0]
    if args.json:
        result = first.to_json()
        if args.runs > 1:
            result["spread"] = spread_json(predictions)
        if args.explain is not None:
            result["explain"] = explanation_json(first)
        print(json.dumps(result, indent=2))
        for note in notes:
            print(f"predict: {note}", file=sys.stderr)
        return 0
    print(format_prediction(first, target=setup.target, workload=args.workload, requests=len(setup.requests),
                            block_size=setup.block_size, notes=notes,
                            mode=setup.load(args, seed).plan.describe() if first.under_load else "serial",
                            picker_replicas=setup.picker_replicas, scrape_interval=args.scrape_interval))
    if args.runs > 1:
        print("\n" + format_spread(predictions, seed))
    if args.explain is not None:
        print("\n" + format_explanation(first))
    return 0


# -- reports ----------------------------------------------------------------------------------

def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}" if seconds >= 0.1 else f"{seconds * 1000:.1f}"


def format_load_table(result: SimulationResult, ttfts: Sequence[float], queue_times: Sequence[float],
                      indent: str = "") -> str:
    """Per pod and overall: requests, share, hits, queries, hit rate, TTFT p50/p95/p99 and
    queue time p50/p95, times in ms."""
    width = max([len("overall")] + [len(p.pod) for p in result.pods])
    header = (f"{indent}{'pod':<{width}}  {'requests':>8}  {'share':>6}  {'hits':>9}  {'queries':>9}  {'hit rate':>8}  "
              f"{'TTFT p50':>8}  {'p95':>7}  {'p99':>7}  {'queue p50':>9}  {'p95':>7}")
    total = max(1, result.requests)

    def row(name: str, requests: int, hits: int, queries: int, rate: float | None, mine: Sequence[int]) -> str:
        times = [ttfts[i] for i in mine]
        queued = [queue_times[i] for i in mine]
        return (f"{indent}{name:<{width}}  {requests:>8}  {requests / total:>6.1%}  {hits:>9}  {queries:>9}  "
                f"{percent(rate):>8}  {_ms(percentile(times, 0.5)):>8}  {_ms(percentile(times, 0.95)):>7}  "
                f"{_ms(percentile(times, 0.99)):>7}  {_ms(percentile(queued, 0.5)):>9}  "
                f"{_ms(percentile(queued, 0.95)):>7}")

    lines = [header]
    for pod in result.pods:
        mine = [i for i, placed in enumerate(result.placements) if placed == pod.pod]
        lines.append(row(pod.pod, pod.requests, pod.hits or 0, pod.queries or 0, pod.hit_rate, mine))
    lines.append(row("overall", result.requests, result.hits, result.queries, result.hit_rate,
                     range(len(result.placements))))
    return "\n".join(lines)


def format_prediction(prediction: Prediction, *, target: _Target, workload: str, requests: int, block_size: int,
                      notes: Sequence[str], mode: str = "serial", picker_replicas: int = 1,
                      scrape_interval: float = DEFAULT_SCRAPE_INTERVAL) -> str:
    weights = " ".join(f"{name}={value}" for name, value in prediction.weights.items())
    capacity = "unbounded" if prediction.capacity_blocks is None else f"{prediction.capacity_blocks} blocks"
    limits = prediction.limits
    picker = f"  picker: llm-d router v0.10 scorers, weights {weights}"
    if prediction.under_load:
        replicas = f"{picker_replicas} replica{'s' if picker_replicas > 1 else ''}"
        picker += f"; {replicas}, scraping each pod every {scrape_interval * 1000:g} ms"
        servers = (f"  servers: vLLM continuous batching (at most {limits.max_num_seqs} sequences and "
                   f"{limits.max_num_batched_tokens} tokens per step), block size {block_size} tokens, {capacity} "
                   "of KV cache per pod")
    else:
        servers = f"  servers: vLLM prefix caching, block size {block_size} tokens, {capacity} of KV cache per pod"
    lines = [
        f"{target.title}: {target.replicas} pods, workload {workload} ({requests} requests, {mode})",
        picker, servers,
        *(f"  {note}" for note in notes),
        "",
        "Endpoint picker (hits and queries in tokens, times in ms)",
        format_load_table(prediction.picker, prediction.ttfts[0], prediction.queue_times[0], indent="  "),
        "",
        "Round-robin (a plain Kubernetes Service)",
        format_load_table(prediction.round_robin, prediction.ttfts[1], prediction.queue_times[1], indent="  "),
        "",
        f"bestHitRate {percent(prediction.best.hit_rate)}: every request served where the longest earlier "
        "prefix is cached (all on one pod whose cache never evicts).",
    ]
    if not prediction.best_fits_one_pod:
        lines.append(f"  An upper bound only: the workload fills {prediction.best_cache_blocks} blocks, more than "
                     f"one pod's {prediction.capacity_blocks}, so pods evict and no placement may reach it.")
    return "\n".join(lines)


def _figures(result: SimulationResult, ttfts: Sequence[float]) -> dict[str, Any]:
    total = max(1, result.requests)
    return {"hitRate": result.hit_rate, "ttftP50": percentile(ttfts, 0.5), "ttftP95": percentile(ttfts, 0.95),
            "shares": {pod.pod: pod.requests / total for pod in result.pods}}


def spread_json(predictions: Sequence[Prediction]) -> dict:
    """[min, max] across runs of each headline figure, for the picker and round-robin."""
    def ranges(figures: list[dict[str, Any]]) -> dict:
        out = {key: [min(f[key] or 0 for f in figures), max(f[key] or 0 for f in figures)]
               for key in ("hitRate", "ttftP50", "ttftP95")}
        out["shares"] = {pod: [min(f["shares"][pod] for f in figures), max(f["shares"][pod] for f in figures)]
                         for pod in figures[0]["shares"]}
        return out

    return {"runs": len(predictions),
            "picker": ranges([_figures(p.picker, p.ttfts[0]) for p in predictions]),
            "roundRobin": ranges([_figures(p.round_robin, p.ttfts[1]) for p in predictions])}


def format_spread(predictions: Sequence[Prediction], seed: int) -> str:
    spread = spread_json(predictions)
    lines = [f"Across {len(predictions)} runs (seeds {seed}..{seed + len(predictions) - 1}), min – max:"]
    for label, key in (("endpoint picker", "picker"), ("round-robin", "roundRobin")):
        figures = spread[key]
        shares = ", ".join(f"{pod} {low:.0%}–{high:.0%}" for pod, (low, high) in figures["shares"].items())
        lines.append(f"  {label:<15} hit rate {percent(figures['hitRate'][0])}–{percent(figures['hitRate'][1])}, "
                     f"TTFT p50 {_ms(figures['ttftP50'][0])}–{_ms(figures['ttftP50'][1])} ms, "
                     f"p95 {_ms(figures['ttftP95'][0])}–{_ms(figures['ttftP95'][1])} ms; share {shares}")
    return "\n".join(lines)


def explanation_json(prediction: Prediction) -> dict:
    """`format_explanation` as the `explain` key of `--json`: the picker's breakdown (serve's
    x-routing-decision form) with what the last scrape of each pod read."""
    explained = prediction.picker.explained
    decision = explained.decision
    seen = {pod.name: pod for pod in explained.seen}
    breakdown = decision.breakdown().as_dict()
    for score in breakdown["pods"]:
        metrics = seen[score["pod"]]
        score.update(waiting=metrics.waiting, running=metrics.running, kvUsage=metrics.kv_usage,
                     matchedBlocks=decision.match_blocks.get(score["pod"], 0))
    return {"request": explained.index, "at": explained.at if prediction.under_load else None,
            "pickerReplica": explained.replica, "prefixBlocks": decision.total_blocks, **breakdown}


def format_explanation(prediction: Prediction) -> str:
    """Request N's pick (the picker's `Decision.breakdown()`): each pod's raw score per scorer,
    weight × clamped score, the total, and how far the runner-up was behind."""
    explained = prediction.picker.explained
    decision = explained.decision
    breakdown = decision.breakdown()
    seen = {pod.name: pod for pod in explained.seen}
    width = max(len(score.pod) for score in breakdown.pods)
    headers = [f"{part.scorer} ×{part.weight:g}" for part in breakdown.pods[0].contributions]
    widths = [max(16, len(header)) for header in headers]
    when = f" at t={explained.at:.3f}s, picker replica {explained.replica}" if prediction.under_load else ""
    lines = [f"Request {explained.index}{when}: raw score -> weight × score per scorer; the request has "
             f"{decision.total_blocks} prefix blocks, 'matched' is the picker's index",
             f"  {'pod':<{width}}  {'waiting':>7}  {'running':>7}  {'kv use':>6}  {'matched':>7}  "
             + "  ".join(f"{header:>{w}}" for header, w in zip(headers, widths)) + f"  {'total':>7}"]
    for score in breakdown.pods:
        metrics = seen[score.pod]
        cells = "  ".join(f"{f'{part.raw:.3f} -> {part.weighted:.3f}':>{w}}"
                          for part, w in zip(score.contributions, widths))
        marker = "  <- picked" if score.pod == breakdown.chosen else ""
        lines.append(f"  {score.pod:<{width}}  {metrics.waiting:>7}  {metrics.running:>7}  {metrics.kv_usage:>6.1%}  "
                     f"{decision.match_blocks.get(score.pod, 0):>7}  {cells}  {score.total:>7.3f}{marker}")
    if breakdown.runner_up is not None:
        tie = " (a tie, broken at random)" if breakdown.margin == 0 else ""
        lines.append(f"  margin over the runner-up {breakdown.runner_up}: {breakdown.margin:.3f}{tie}")
    lines.append("  (waiting, running and kv use are what the picker's last scrape of each pod read)")
    return "\n".join(lines)
