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
import dataclasses
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from routing.options import (OptionError, add_model_options, load_stack_model, nonnegative_seconds, positive_int,
                             positive_rate, positive_seconds, routing_option, weights_option)
from routing.picker.endpoint_picker import (DEFAULT_PICKER_VERSION, PICKER_VERSIONS, FilterOutcome, PickerConfigError,
                                            Request, with_default_weights)
from routing.picker.prefix import EstimateTokenizer, HFTokenizerFile, Tokenizer, TokenizerFileError
from routing.picker.traced import TracedPrompt
from routing.simulation import predict_scaling, sweep
from routing.simulation.fleet import (DEFAULT_BLOCK_SIZE, DEFAULT_CAPACITY_BLOCKS, DEFAULT_EVENT_DELAY,
                                      DEFAULT_SCRAPE_INTERVAL, SimulationResult)
from routing.simulation.latency import (DEFAULT_LATENCY, DEFAULT_LATENCY_NOTE, DEFAULT_LIMITS, EngineLimits,
                                        LatencyModel, LatencyProfile, ProfileError, percentile)
from routing.simulation.load_plan import plan_load, replays_in_time
from routing.simulation.prediction import Baseline, Load, PredictError, Prediction, run_prediction
from routing.tables import percent
from routing.traces import MOONCAKE_BLOCK_TOKENS, repeated_share
from routing.workloads import (BUILTIN_WORKLOADS as BUILTIN, DEFAULT_OUTPUT_TOKENS, Arrival, PodRestart,
                               WeightChange, WorkloadError, load_arrivals, load_pod_restarts, load_weight_changes)
from settings import MODELLED_VLLM_VERSION, lru_conflict, other_vllm_release
from settings.model import DEFAULT_PRECISE_BLOCK_SIZE, DEFAULT_PREFIX_INDEX, PREFIX_INDEXES
from settings.picker_config import (STICKY_PARAMETERS, EndpointPickerConfig, PreciseIndex,
                                    load_endpoint_picker_config, render_sticky_picker_config)

# The release whose scheduler and KV cache the simulated servers follow, as the report names it.
MODELLED_VLLM_RELEASE = MODELLED_VLLM_VERSION.rpartition(".")[0]
# The heat map's axes and panels (routing/simulation/plot.py).
MAX_PLOTTED_WEIGHTS = 3


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
                        help=f"{', '.join(sorted(BUILTIN))}, or a .jsonl file of OpenAI request bodies, of "
                             '{"at": seconds, "session": id, "body": {...}} lines, or a block-hash trace '
                             "(Mooncake's timestamp, input_length, output_length, hash_ids) (default: seed-shared)")
    parser.add_argument("--trace-block-tokens", type=positive_int, default=MOONCAKE_BLOCK_TOKENS, metavar="TOKENS",
                        help="a block-hash trace's tokens per hash id (default "
                             f"{MOONCAKE_BLOCK_TOKENS}, Mooncake's)")
    parser.add_argument("--weights", type=weights_option, metavar="NAME=N,...",
                        help="override weights, e.g. prefix=0,queue=3,kvCache=2 (merged over the stack's)")
    parser.add_argument("--routing", type=routing_option, metavar="RECIPE[,NAME=VALUE,...]",
                        help="the routing recipe to predict, over the stack's: weights, or sticky with its filter's "
                             "parameters, e.g. sticky,maxTTFTPenaltyMs=5000 (peakPrefillThroughput defaults to the "
                             "--latency-profile's calibrated figure, else upstream's 15928)")
    parser.add_argument("--prefix-index", choices=PREFIX_INDEXES,
                        help="where the picker learns which pods hold a prompt's prefix: approximate (its record of "
                             "where it sent each one) or precise (the KV-cache events each vLLM pod publishes) "
                             "(default: the stack's routing.prefixIndex, else approximate)")
    parser.add_argument("--speculative-indexing", action="store_true",
                        help="with --prefix-index precise and no stack that sets it: each pick also enters the "
                             "request's blocks for the chosen pod for upstream's 2 s (speculativeIndexing)")
    parser.add_argument("--event-delay", type=nonnegative_seconds, default=DEFAULT_EVENT_DELAY, metavar="S",
                        help="seconds from the engine step that stores or evicts a block to the precise index "
                             f"seeing it (default {DEFAULT_EVENT_DELAY:g}, measured on vLLM CPU and `serve`)")
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
    advisor.add_argument("--plot", metavar="FILE.png", help="with --sweep: write a heat map of the results; with "
                         "--autoscale: replicas, hit rate and TTFT p95 over time")
    parser.add_argument("--compare", action="store_true",
                        help="set what --weights, --routing or --replicas propose beside what the stack deploys "
                             "(with --pods: the default weights), figure by figure, in one table")
    predict_scaling.add_arguments(parser)
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
    # The sticky recipe's parameters as set (None: the weights recipe), and whether the stack
    # holds them (False: --routing gave them, so deploying them needs the recipe line too).
    sticky: Mapping[str, int | float] | None = None
    sticky_from_stack: bool = False
    # Why the stack cannot deploy what is predicted (None: it can), said instead of config lines.
    undeployable: str | None = None
    # The prefix index predicted, and the stack's precise index when it runs one (its block size
    # and speculative entries); _setup builds the one predicted (`precise`) once the block size is known.
    prefix_index: str = DEFAULT_PREFIX_INDEX
    stack_precise: PreciseIndex | None = None
    precise: PreciseIndex | None = None
    # vLLM's block size and KV blocks per pod for this target (the precise index sets vLLM's
    # block size, so what runs and what is proposed may differ); 0: the setup's.
    block_size: int = 0
    capacity_blocks: int = 0


def _target(args: argparse.Namespace) -> _Target:
    target = _recipe_or_weights_target(args)
    stack_precise = None
    if args.stack is not None:
        model = load_stack_model(args.stack, args.model, args.stacks_dir).model
        stack_precise = model.routing.precise
    chosen = args.prefix_index or ("precise" if stack_precise is not None else DEFAULT_PREFIX_INDEX)
    if args.speculative_indexing and (chosen != "precise" or stack_precise is not None):
        raise PredictError("--speculative-indexing: speculative entries belong to the precise index, and " + (
            f"stack {args.stack} sets them itself (routing.speculativeIndexing); drop the option"
            if stack_precise is not None else "this prediction runs the approximate one; add --prefix-index precise"))
    if args.prefix_index is not None and target.picker_config is not None and target.sticky is None:
        raise PredictError(f"--prefix-index {args.prefix_index}: the model runs its own EndpointPickerConfig, whose "
                           "prefix producer decides the index; predict it as it is, or with --pods N --prefix-index")
    caveats = target.caveats
    undeployable = target.undeployable
    if chosen == "precise" and stack_precise is None and args.stack is not None:
        implementation = load_stack_model(args.stack, args.model, args.stacks_dir).settings.gateway.implementation
        if implementation == "hyperpod":
            undeployable = (f"stack {args.stack} runs HyperPod's gateway, whose picker AWS builds from an unpublished "
                            "llm-d release: `pulumi up` refuses routing.prefixIndex precise there "
                            "(docs/configuration.md says why). This predicts the open-source llm-d router's precise "
                            "index (gateway.implementation llm-d, the eks platform)")
            caveats += (undeployable,)
    return dataclasses.replace(target, prefix_index=chosen, stack_precise=stack_precise, caveats=caveats,
                               undeployable=undeployable)


def _recipe_or_weights_target(args: argparse.Namespace) -> _Target:
    overrides = args.weights or {}
    if args.routing is not None and args.routing[0] == "sticky" and overrides:
        raise PredictError(f"--weights with --routing {args.routing[0]}: the sticky recipe reads no scorer weights; "
                           "drop --weights, or predict the weights recipe")
    found = load_stack_model(args.stack, args.model, args.stacks_dir)
    if found is None:
        if args.replicas is not None:
            raise PredictError(f"--replicas needs --stack; with --pods {args.pods} there is no stack to read. "
                               "Drop one of the two.")
        sticky = args.routing[1] if args.routing is not None and args.routing[0] == "sticky" else None
        return _Target("Prediction without a stack", "pod", None, overrides, args.pods, config_path="routing"
                       if sticky is not None else "weights", sticky=sticky)

    model = found.model
    index = found.settings.models.index(model)
    release_note = other_vllm_release(model.image)
    release_caveats = (f"the model's image {model.image} {release_note}",) if release_note else ()
    if args.routing is not None or model.routing.recipe == "sticky":
        return _recipe_target(args, found, index, release_caveats, overrides)
    if model.picker_config_map is not None:
        config = found.picker_config(f"To predict with explicit weights, use --pods {model.replicas or 2} --weights ...")
        if overrides:
            raise PredictError(f"--weights: model {model.name!r} runs its own EndpointPickerConfig "
                               f"({model.picker_config_map.file}), which has no weights to override; edit its "
                               "scheduling profile's weights instead.")
        return _Target(f"Prediction for stack {args.stack}, model {model.name} ({model.model}), picker configuration "
                       f"{model.picker_config_map.file}", model.name, model.model, {},
                       args.replicas if args.replicas is not None else model.replicas, release_caveats,
                       found.settings.picker_replicas(model), f"models[{index}].weights",
                       load_endpoint_picker_config(config))
    weights = {**found.weights(f"To predict with explicit weights, use --pods {model.replicas or 2} --weights ..."),
               **overrides}
    if lru_conflict(model.scheduler, weights):
        raise PredictError(f"--weights lru={weights['lru']}: the lru weight exists only with scheduler llm-d, and "
                           f"model {model.name!r} uses {model.scheduler!r}. Drop lru or set the model's scheduler.")
    replicas = _stack_replicas(args, model)
    caveats = release_caveats
    if model.scheduler == "epp":
        caveats += ("scheduler epp: modelled with the llm-d router v0.10 scorers; which upstream release HyperPod's "
                    "epp scheduler runs is not documented",)
    return _Target(f"Prediction for stack {args.stack}, model {model.name} ({model.model})", model.name, model.model,
                   weights, replicas, caveats, found.settings.picker_replicas(model), f"models[{index}].weights")


def _stack_replicas(args: argparse.Namespace, model: Any) -> int:
    replicas = args.replicas if args.replicas is not None else model.replicas
    if replicas < 1:
        raise PredictError(f"model {model.name!r} has replicas {replicas} in stack {args.stack!r}: no pod to route "
                           "to. Pass --replicas N to predict for N pods.")
    return replicas


def _recipe_target(args: argparse.Namespace, found: Any, index: int, caveats: tuple[str, ...],
                   overrides: Mapping[str, int]) -> _Target:
    """A stack's model predicted with the recipe --routing names, or the sticky one it runs."""
    model = found.model
    recipe, parameters = args.routing if args.routing is not None else (model.routing.recipe, {})
    if model.picker_config_map is not None:
        raise PredictError(f"--routing {recipe}: model {model.name!r} runs its own EndpointPickerConfig "
                           f"({model.picker_config_map.file}); predict it as it is, or with --pods N --routing ...")
    replicas = _stack_replicas(args, model)
    title = f"Prediction for stack {args.stack}, model {model.name} ({model.model})"
    if recipe == "weights":
        weights = {**(model.effective_weights or {}), **overrides}
        return _Target(title + ", weights recipe", model.name, model.model, weights, replicas, caveats,
                       found.settings.picker_replicas(model), f"models[{index}].weights")
    if overrides:
        raise PredictError(f"--weights: model {model.name!r} runs the sticky recipe, which reads no scorer weights; "
                           "drop --weights, or add --routing weights to predict the weights recipe")
    from_stack = model.routing.recipe == "sticky"
    sticky = {**(model.routing.parameters if from_stack else {}), **parameters}
    undeployable = None
    if found.settings.gateway.implementation == "hyperpod":
        undeployable = (f"stack {args.stack} runs HyperPod's gateway, which takes scorer weights only: `pulumi up` "
                        "refuses routing.recipe sticky there. This predicts the recipe as the open-source llm-d router "
                        "runs it (gateway.implementation llm-d, the eks platform); on HyperPod, put its plugins in a "
                        "models[].pickerConfigMap.file")
        caveats += (undeployable,)
    return _Target(title + ", sticky recipe", model.name, model.model, {}, replicas, caveats,
                   found.settings.picker_replicas(model), f"models[{index}].routing", sticky=sticky,
                   sticky_from_stack=from_stack and not parameters, undeployable=undeployable)


def _sticky_picker(target: _Target, profile: LatencyProfile | None, notes: list[str]) -> _Target:
    """The target with its sticky picker built: peakPrefillThroughput the calibrated figure when
    --routing leaves it out, and a note when a stack leaves it at upstream's default."""
    sticky = dict(target.sticky)
    peak = profile.peak_prefill if profile is not None else None
    default = STICKY_PARAMETERS["peakPrefillThroughput"]
    if peak is not None and "peakPrefillThroughput" not in sticky:
        measured = round(peak.tokens_per_s)
        if target.sticky_from_stack:
            notes.append(f"the stack leaves peakPrefillThroughput at upstream's {default:,} tokens/s and the profile "
                         f"measured {measured:,}: predict with --routing sticky,peakPrefillThroughput={measured} to "
                         f"compare, `pulumi config set --path '{target.config_path}.peakPrefillThroughput' "
                         f"{measured}` to deploy it")
        else:
            sticky["peakPrefillThroughput"] = measured
            notes.append(f"peakPrefillThroughput {measured:,} tokens/s, calibrated ({peak.describe()})")
    config = load_endpoint_picker_config(render_sticky_picker_config(sticky, target.precise))
    return dataclasses.replace(target, picker_config=config, sticky=sticky)


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
    pod_restarts: tuple[PodRestart, ...] = ()
    # What runs today, to set beside what is predicted (--compare, the sweep's advice): the
    # stack's model as its file configures it, or with --pods the picker's default weights.
    deployed: _Target | None = None
    # Per seed and pod count, the first prediction's Baseline: the picker alone differs between
    # predictions that share them.
    baselines: dict[tuple[int, int], Baseline] = field(default_factory=dict, compare=False, repr=False)

    def load(self, args: argparse.Namespace, seed: int) -> Load | None:
        plan = plan_load(self.arrivals, rate=args.rate, concurrency=args.concurrency, seed=seed,
                         weight_changes=self.weight_changes, pod_restarts=self.pod_restarts)
        if plan is None:
            return None
        # Stale picks are counted for one prediction's report, not a sweep's every setting.
        count_stale = self.target.prefix_index == "approximate" and not args.sweep
        return Load(plan, tuple(arrival.output_tokens for arrival in self.arrivals), self.limits,
                    args.scrape_interval, args.send_spacing or 0.0, args.event_delay, count_stale)

    def predict(self, args: argparse.Namespace, weights: Mapping[str, int], seed: int,
                explain: int | None = None, picker_config: EndpointPickerConfig | None = None,
                target: _Target | None = None) -> Prediction:
        """A prediction of `target` (default: the setup's) with `weights` or `picker_config`."""
        target = target or self.target
        block_size = target.block_size or self.block_size
        baseline_key = (seed, target.replicas, block_size)
        prediction = run_prediction(self.requests, weights=weights, replicas=target.replicas,
                                    pod_prefix=target.pod_prefix, block_size=block_size,
                                    capacity_blocks=target.capacity_blocks or self.capacity_blocks,
                                    tokenizer=self.tokenizer, seed=seed,
                                    load=self.load(args, seed), latency=self.latency, limits=self.limits,
                                    picker_replicas=self.picker_replicas, explain=explain,
                                    picker_config=picker_config or target.picker_config,
                                    baseline=self.baselines.get(baseline_key),
                                    picker_version=args.picker_version, precise=target.precise)
        if prediction.baseline is not None:
            self.baselines.setdefault(baseline_key, prediction.baseline)
        return prediction

    def predict_deployed(self, args: argparse.Namespace, seed: int) -> Prediction:
        return self.predict(args, self.deployed.weights, seed, target=self.deployed)


def _deployed_target(args: argparse.Namespace, profile: LatencyProfile | None) -> _Target:
    """What runs today: the stack's model as its file configures it (no --weights, --routing,
    --replicas or --prefix-index), or with --pods the picker's default weights on as many pods;
    with the block size and KV blocks it runs vLLM with."""
    unchanged = argparse.Namespace(**{**vars(args), "weights": None, "routing": None, "replicas": None,
                                      "prefix_index": None, "speculative_indexing": False})
    deployed = _target(unchanged)
    block_size = _block_size(args, deployed, profile)
    deployed = dataclasses.replace(_with_precise(deployed, block_size), block_size=block_size,
                                   capacity_blocks=args.capacity_blocks or _capacity_blocks(profile, block_size))
    if deployed.sticky is not None:
        deployed = _sticky_picker(deployed, profile, [])
    return deployed


def _with_precise(target: _Target, block_size: int) -> _Target:
    """The target with the precise index it predicts built: the stack's, or one of `block_size`."""
    if target.prefix_index != "precise":
        return target
    precise = target.stack_precise or PreciseIndex(block_size, target.served_model or "model",
                                                   "http://simulated-vllm", speculative=False)
    return dataclasses.replace(target, precise=precise)


def _capacity_blocks(profile: LatencyProfile | None, block_size: int) -> int:
    """KV blocks per pod when --capacity-blocks is not given: the profile's, else the default, each
    as the same KV memory cut into blocks of `block_size` (a larger block means fewer blocks)."""
    blocks, size = ((profile.num_gpu_blocks, profile.block_size) if profile and profile.num_gpu_blocks
                    else (DEFAULT_CAPACITY_BLOCKS, DEFAULT_BLOCK_SIZE))
    return max(1, blocks * (size or block_size) // block_size)


def _block_size(args: argparse.Namespace, target: _Target, profile: LatencyProfile | None) -> int:
    """vLLM's block size: --block-size; under the precise index the block size the stack gives
    vLLM (its routing.blockSize, or the default one switching to precise would set); else the
    profile's, else vLLM's GPU default."""
    if args.block_size:
        return args.block_size
    if target.prefix_index == "precise":
        if target.stack_precise is not None:
            return target.stack_precise.block_size_tokens
        if args.stack is not None:
            return DEFAULT_PRECISE_BLOCK_SIZE
        return (profile and profile.block_size) or DEFAULT_PRECISE_BLOCK_SIZE
    return (profile and profile.block_size) or DEFAULT_BLOCK_SIZE


def _setup(args: argparse.Namespace) -> _Setup:
    target = _target(args)
    arrivals = tuple(load_arrivals(args.workload, target.served_model, args.trace_block_tokens))
    traced = [arrival.request.traced for arrival in arrivals if arrival.request.traced is not None]
    if traced and args.tokenizer:
        raise PredictError(f"--tokenizer {args.tokenizer}: the workload is a block-hash trace, whose lengths are "
                           "already tokens; drop --tokenizer")
    tokenizer = HFTokenizerFile(args.tokenizer) if args.tokenizer else EstimateTokenizer()
    notes = [trace_note(traced) if traced else f"tokens {tokenizer.description}", *target.caveats]
    if args.picker_version != DEFAULT_PICKER_VERSION:
        notes.append(f"prefix hashing of picker {args.picker_version} ({PICKER_VERSIONS[args.picker_version]})")
    profile = LatencyProfile.load(args.latency_profile) if args.latency_profile else None
    block_size = _block_size(args, target, profile)
    target = _with_precise(target, block_size)
    if target.precise is not None and args.speculative_indexing:
        target = dataclasses.replace(target, precise=dataclasses.replace(target.precise, speculative=True))
    if target.sticky is not None:
        target = _sticky_picker(target, profile, notes)
    if profile is None:
        latency, limits = DEFAULT_LATENCY, DEFAULT_LIMITS
        notes.append(DEFAULT_LATENCY_NOTE)
    else:
        latency, limits = profile.latency, profile.limits or DEFAULT_LIMITS
        notes.append(f"latency from {args.latency_profile} ({profile.source or 'calibrated'})")
    limits = EngineLimits(args.max_num_seqs or limits.max_num_seqs,
                          args.max_num_batched_tokens or limits.max_num_batched_tokens)
    capacity = args.capacity_blocks or _capacity_blocks(profile, block_size)
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
    restarts = load_pod_restarts(args.workload, target.replicas)
    for change in changes:
        notes.append(f"{change.describe}: fresh picker indexes (the precise one reads only later events: no "
                     "replay), the servers' caches stay warm")
    for restart in restarts:
        notes.append(restart.describe(f"pod {target.pod_prefix}-{restart.pod}") + ": its cache is emptied" + (
            ", which it reports with its next step's events" if restart.reset else ""))
    if replicas > 1:
        notes.append(f"{replicas} picker replicas: each request goes to one at random, each has its own prefix index "
                     "(if only an elected leader takes traffic, use --picker-replicas 1)")
    deployed = _deployed_target(args, profile) if args.sweep or args.compare else None
    return _Setup(target, arrivals, tuple(arrival.request for arrival in arrivals), tokenizer, block_size, capacity,
                  latency, limits, replicas, tuple(notes), changes, restarts, deployed)


def trace_note(prompts: Sequence[TracedPrompt]) -> str:
    """What a block-hash trace is, and the bound its repeats set on any placement's hit rate."""
    blocks = sum(len(prompt.ids) for prompt in prompts)
    return (f"a block-hash trace: {len(prompts):,} requests, {sum(prompt.length for prompt in prompts):,} prompt tokens "
            f"in {blocks:,} blocks of {prompts[0].id_tokens} tokens, {repeated_share(prompts):.1%} of them seen "
            "before in the trace (the hit rate's bound with an unlimited cache, in blocks)")


def run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2 ** 32)
    try:
        predict_scaling.check(args)
        setup = _setup(args)
        if args.autoscale:
            if args.plot:
                from routing.simulation.plot import check_plot_path

                check_plot_path(args.plot)
            return predict_scaling.run(args, setup, seed)
        if args.plot and not args.sweep:
            raise PredictError(f"--plot {args.plot}: a heat map needs --sweep, e.g. --sweep prefix=0..5,queue=0..5")
        if args.plot and len(args.sweep) > MAX_PLOTTED_WEIGHTS:
            raise PredictError(f"--plot {args.plot}: draws up to {MAX_PLOTTED_WEIGHTS} swept weights, --sweep names "
                               f"{len(args.sweep)}; sweep fewer, or drop --plot")
        if args.plot:
            from routing.simulation.plot import check_plot_path  # matplotlib only when a plot is asked for

            check_plot_path(args.plot)
        if args.objective and not args.sweep:
            raise PredictError(f"--objective {args.objective}: chooses among the settings of a sweep; add --sweep, "
                               "e.g. --sweep prefix=0..5, or drop --objective")
        if args.explain is not None and args.sweep:
            raise PredictError(f"--explain {args.explain}: shows one setting's pick and --sweep predicts many; drop "
                               "--sweep, and give the setting to explain with --weights NAME=N,...")
        _check_sweep(args, setup)
        if args.compare:
            _check_compare(args)
        if args.sweep:
            return _run_sweep(args, setup, seed)
        predictions = [setup.predict(args, setup.target.weights, seed + run, args.explain if run == 0 else None)
                       for run in range(args.runs)]
        deployed = [setup.predict_deployed(args, seed + run) for run in range(args.runs)] if args.compare else []
    except (OptionError, PredictError, WorkloadError, PickerConfigError, TokenizerFileError, ProfileError) as error:
        print(f"predict: {error}", file=sys.stderr)
        return 2
    seeds = f"picker seed {seed}" if args.runs == 1 else f"seeds {seed}..{seed + args.runs - 1}"
    notes = [seeds + ("" if args.seed is not None else f" (repeat with --seed {seed})"), *setup.notes]
    first = predictions[0]
    timeline = restart_timeline(first.picker, restart_moments(setup)) if first.under_load else []
    if args.json:
        result = {**first.to_json(), "prefixIndex": setup.target.prefix_index}
        if timeline:
            result["restarts"] = timeline
        if args.runs > 1:
            result["spread"] = spread_json(predictions)
        if args.explain is not None:
            result["explain"] = explanation_json(first)
        if deployed:
            result["deployed"] = {**deployed[0].to_json(), **({"spread": spread_json(deployed)} if args.runs > 1 else {})}
        print(json.dumps(result, indent=2))
        for note in notes:
            print(f"predict: {note}", file=sys.stderr)
        return 0
    if deployed:
        deployed_label, proposed_label = _deployed_text(args, setup.deployed), _proposed_text(args, setup.target)
        if setup.deployed.block_size != setup.block_size:
            # The precise index sets vLLM's block size: say so, as it moves the hit rate on its own.
            deployed_label += f"; vLLM blocks of {setup.deployed.block_size} tokens"
            proposed_label += f"; vLLM blocks of {setup.block_size} tokens"
        print(format_comparison(deployed, predictions, deployed_label=deployed_label, proposed_label=proposed_label,
                                notes=notes, workload=f"{args.workload} ({len(setup.requests)} requests)"))
        return 0
    print(format_prediction(first, target=setup.target, workload=args.workload, requests=len(setup.requests),
                            block_size=setup.block_size, notes=notes,
                            mode=setup.load(args, seed).plan.describe() if first.under_load else "serial",
                            picker_replicas=setup.picker_replicas, scrape_interval=args.scrape_interval,
                            event_delay=args.event_delay, timeline=timeline))
    if args.runs > 1:
        print("\n" + format_spread(predictions, seed))
    if args.explain is not None:
        print("\n" + format_explanation(first))
    return 0


def _check_compare(args: argparse.Namespace) -> None:
    if args.sweep:
        raise PredictError("--compare with --sweep: a sweep sets the deployed setting beside its own already; drop "
                           "--compare")
    if args.explain is not None:
        raise PredictError(f"--compare with --explain {args.explain}: explain one setting's pick without --compare")
    if args.weights is None and args.routing is None and args.replicas is None and args.prefix_index is None:
        raise PredictError("--compare: nothing is proposed beside what runs; give --weights, --routing, --replicas or "
                           "--prefix-index, e.g. --compare --replicas 3")


def _proposed_text(args: argparse.Namespace, target: _Target) -> str:
    changes = []
    if args.weights:
        changes.append("--weights " + ",".join(f"{name}={value}" for name, value in args.weights.items()))
    if args.routing:
        recipe, parameters = args.routing
        changes.append("--routing " + ",".join([recipe, *(f"{name}={sweep.value_text(value)}"
                                                         for name, value in parameters.items())]))
    if args.replicas is not None:
        changes.append(f"--replicas {args.replicas}")
    if args.prefix_index is not None:
        changes.append(f"--prefix-index {args.prefix_index}")
    what = ("the sticky recipe" if target.sticky is not None else
            "weights " + " ".join(f"{name}={value}" for name, value in with_default_weights(target.weights).items()))
    return f"{what}, {target.prefix_index} prefix index, {target.replicas} pods ({', '.join(changes)})"


def _check_sweep(args: argparse.Namespace, setup: _Setup) -> None:
    """What a sweep or a workload's weight changes may vary: the weights of a weights-recipe model,
    the filter parameters of a sticky one; never a picker file's."""
    target = setup.target
    swept = list(args.sweep or ())
    if target.sticky is not None:
        weights = [name for name in swept if name not in STICKY_PARAMETERS]
        if weights or setup.weight_changes:
            what = f"--sweep {','.join(weights)} varies weights" if weights else "the workload's weight changes vary weights"
            raise PredictError(f"{what}, and the sticky recipe reads none: sweep its parameters instead, e.g. --sweep "
                               "maxTTFTPenaltyMs=0..20000")
        return
    if target.picker_config is not None and (swept or setup.weight_changes):
        raise PredictError("--sweep and weight changes in the workload vary weights, and this model runs its own "
                           "EndpointPickerConfig instead: vary the file's weights, or predict with --weights.")
    parameters = [name for name in swept if name in STICKY_PARAMETERS]
    if parameters:
        raise PredictError(f"--sweep {','.join(parameters)}: a parameter of the sticky recipe, and this prediction runs "
                           "the weights recipe; add --routing sticky")


def _run_sweep(args: argparse.Namespace, setup: _Setup, seed: int) -> int:
    base = dict(setup.target.weights)
    grid: Mapping[str, Sequence[int | float]] = args.sweep
    sticky = setup.target.sticky

    def evaluate(setting: Mapping[str, int | float]) -> sweep.SettingResult:
        if sticky is not None:
            config = load_endpoint_picker_config(render_sticky_picker_config({**sticky, **setting}))
            predictions = [setup.predict(args, {}, seed + run, picker_config=config) for run in range(args.runs)]
        else:
            predictions = [setup.predict(args, {**base, **setting}, seed + run) for run in range(args.runs)]
        return sweep.summarise(setting, predictions)

    # What runs today, on the same seeds: first, so the settings after it share its baselines.
    deployed_predictions = [setup.predict_deployed(args, seed + run) for run in range(args.runs)]
    deployed = sweep.summarise(_deployed_values(setup.deployed, grid), deployed_predictions)
    objective = args.objective or sweep.DEFAULT_OBJECTIVE
    results = sweep.sweep(grid, evaluate, sys.stderr)
    advice = sweep.advise(results, objective, deployed)
    verdict = sweep.verdict(advice, deployed, requests=len(setup.requests),
                            idle_pods=not deployed_predictions[0].under_load)
    default_latency = args.latency_profile is None
    cautions = sweep.cautions(advice, default_latency=default_latency)
    if sticky is not None:
        unsaved = {} if setup.target.sticky_from_stack else {"recipe": "sticky", **sticky}
        commands = sweep.config_lines(advice.best, setup.target.config_path, args.stack, unsaved)
    else:
        commands = sweep.config_lines(advice.best, setup.target.config_path, args.stack, args.weights)
    if not verdict.change or setup.target.undeployable:
        commands = []
    if args.json:
        print(json.dumps({**advice.to_json(), **verdict.to_json(), "undeployable": setup.target.undeployable,
                          "defaultLatency": default_latency, "cautions": cautions, "pulumi": commands,
                          "settings": [r.to_json() for r in results]}, indent=2))
        return _write_heat_map(args, setup, results, advice)
    held = {name: value for name, value in (sticky if sticky is not None else base).items()
            if name not in grid and value}
    print(f"{setup.target.title}: {setup.target.replicas} pods, workload {args.workload} ({len(setup.requests)} "
          f"requests), {len(results)} settings × {args.runs} run{'s' if args.runs > 1 else ''} (seeds from {seed})")
    if held:
        print("  held: " + " ".join(f"{name}={value}" for name, value in held.items()))
    for note in setup.notes:
        print(f"  {note}")
    print("  imbalance: the busiest pod's requests over the mean, less 1 (0 = an even split)")
    print("  front (*): no other setting is as good on every figure and better on one; the best is one of these")
    print(f"  deployed: {_deployed_text(args, setup.deployed)}\n")
    print(sweep.format_table(results, advice, args.runs, deployed))
    # The cautions come before the lines a reader would paste.
    print(f"\nBest for {objective}: {sweep.describe(advice.best)}.")
    print(f"Deployed: {sweep.describe(deployed)}.")
    for caution in cautions:
        print(caution)
    if setup.target.undeployable:
        print(f"Not deployable on this stack: {setup.target.undeployable}.")
    elif verdict.change:
        print(f"Recommended: {verdict.reason}. To deploy it:")
    else:
        print(f"No change recommended: {verdict.reason}.")
    for command in commands:
        print(f"  {command}")
    status = _write_heat_map(args, setup, results, advice)
    if args.plot and status == 0:
        print(f"Heat map written to {args.plot}")
    return status


def _deployed_values(deployed: _Target, grid: Mapping[str, Sequence[int | float]]) -> dict[str, int | float]:
    """The deployed setting's value of each swept name it has: a weight (the default profile's
    when the stack sets none) or a sticky-recipe parameter (upstream's default when unset)."""
    if deployed.sticky is not None:
        return {name: deployed.sticky.get(name, STICKY_PARAMETERS[name]) for name in grid if name in STICKY_PARAMETERS}
    if deployed.picker_config is not None:
        return {}
    weights = with_default_weights(deployed.weights)
    return {name: weights.get(name, 0) for name in grid if name not in STICKY_PARAMETERS}


def _deployed_text(args: argparse.Namespace, deployed: _Target) -> str:
    what = ("the sticky recipe" if deployed.sticky is not None else
            "weights " + " ".join(f"{name}={value}" for name, value in with_default_weights(deployed.weights).items()))
    where = f"stack {args.stack} as its file sets it" if args.stack else "no stack: the picker's default weights"
    return f"{what}, {deployed.prefix_index} prefix index, {deployed.replicas} pods ({where})"


def _write_heat_map(args: argparse.Namespace, setup: _Setup, results: Sequence[sweep.SettingResult],
                    advice: sweep.Advice) -> int:
    """Draws --plot after the results are printed, so a failure to write it loses none of them."""
    if not args.plot:
        return 0
    from routing.simulation.plot import heat_map  # matplotlib only when a plot is asked for

    try:
        heat_map(results, args.plot, title=f"{setup.target.title}: workload {Path(args.workload).name}, "
                                           f"{args.runs} run{'s' if args.runs > 1 else ''} per setting",
                 best=advice.best, objective=advice.objective)
    except (OSError, ValueError, RuntimeError) as error:  # checked before the sweep, yet the disk may change
        print(f"predict: --plot {args.plot}: the heat map could not be written ({error}); the results above stand: "
              "write it to a path you can, e.g. --plot sweep.png", file=sys.stderr)
        return 1
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


# The windows around a restart whose hit rates show its dip: the one before it, then after it.
RESTART_WINDOW_SECONDS = 5.0
RESTART_WINDOWS = ((-1, 0), (0, 1), (1, 2), (2, 4))


def restart_timeline(result: SimulationResult, moments: Sequence[tuple[float, str]],
                     window: float = RESTART_WINDOW_SECONDS) -> list[dict[str, Any]]:
    """Per restart (time, what), the hit rate of the requests sent in each of RESTART_WINDOWS
    (in `window` seconds from the restart); None where none were sent."""
    sent_at = getattr(result, "sent_at", ())
    timeline = []
    for at, what in moments:
        windows = []
        for start, end in RESTART_WINDOWS:
            low, high = at + start * window, at + end * window
            mine = [index for index, sent in enumerate(sent_at) if low <= sent < high]
            queries = sum(result.prompt_lens[index] for index in mine)
            hits = sum(result.hit_tokens[index] for index in mine)
            windows.append({"from": start * window, "to": end * window, "requests": len(mine),
                            "hitRate": hits / queries if queries else None})
        timeline.append({"at": at, "event": what, "windows": windows})
    return timeline


def format_timeline(timeline: Sequence[Mapping[str, Any]]) -> list[str]:
    if not timeline:
        return []
    lines = ["Around each restart, the hit rate of the requests sent (seconds from the restart):"]
    for moment in timeline:
        cells = ", ".join(f"{window['from']:+g} to {window['to']:+g}s {percent(window['hitRate'])}"
                          for window in moment["windows"])
        lines.append(f"  {moment['event']}: {cells}")
    return lines


def format_stale(prediction: Prediction) -> list[str]:
    """Where the approximate index was wrong about the pods' caches, and what the precise one would see."""
    stale = prediction.stale
    if stale is None:
        return []
    share = lambda count: f"{count:,} of {stale.picks:,} picks ({count / stale.picks:.1%})"  # noqa: E731
    if not stale.stale and not stale.blind:
        return [f"Stale picks: none of {stale.picks:,}: the approximate index kept up with the pods' caches on this "
                "traffic, and the precise one would route alike."]
    lines = [f"Stale picks: {share(stale.stale)} went to a pod credited with prefix blocks it had evicted or lost "
             f"({stale.tokens:,} prompt tokens credited and not held; in {stale.elsewhere:,} another pod held more)."]
    lines.append(f"Blind picks: {share(stale.blind)} went elsewhere than a pod holding more of the prompt, which the "
                 "index credited with less than it held.")
    lines.append("  The precise index (the pods' own KV-cache events) sees both: predict with --prefix-index precise "
                 "to compare.")
    return lines


def _index_text(target: _Target, event_delay: float) -> str:
    if target.precise is None:
        return "prefix index approximate (its own record of where it sent each prefix)"
    speculative = ", speculative entries" if target.precise.speculative else ""
    return (f"prefix index precise (each pod's KV-cache events, blocks of {target.precise.block_size_tokens} tokens, "
            f"seen {event_delay * 1000:g} ms after the step that made them{speculative})")


def restart_moments(setup: _Setup) -> list[tuple[float, str]]:
    moments = [(change.at, change.describe) for change in setup.weight_changes]
    moments += [(restart.at, restart.describe(f"pod {setup.target.pod_prefix}-{restart.pod}"))
                for restart in setup.pod_restarts]
    return sorted(moments)


def format_prediction(prediction: Prediction, *, target: _Target, workload: str, requests: int, block_size: int,
                      notes: Sequence[str], mode: str = "serial", picker_replicas: int = 1,
                      scrape_interval: float = DEFAULT_SCRAPE_INTERVAL, event_delay: float = DEFAULT_EVENT_DELAY,
                      timeline: Sequence[Mapping[str, Any]] = ()) -> str:
    weights = " ".join(f"{name}={value}" for name, value in prediction.weights.items())
    capacity = "unbounded" if prediction.capacity_blocks is None else f"{prediction.capacity_blocks} blocks"
    limits = prediction.limits
    picker = f"  picker: llm-d router v0.10 scorers, weights {weights}"
    if target.picker_config is not None and target.sticky is None:
        profile = target.picker_config.scheduling_profiles[0]
        picker = "  picker: llm-d router v0.10, profile " + ", ".join(
            entry.plugin_ref if entry.weight is None else f"{entry.plugin_ref}={entry.weight:g}"
            for entry in profile.plugins)
    if target.sticky is not None:
        parameters = ", ".join(f"{name} {sweep.value_text(target.sticky.get(name, default))}"
                               for name, default in STICKY_PARAMETERS.items())
        unset = "upstream's defaults" if not target.sticky else f"upstream's defaults but {', '.join(target.sticky)}"
        picker = (f"  picker: llm-d router v0.10, sticky recipe: prefix-cache-affinity filter ({parameters}; "
                  f"{unset}), token-load scorer, max-score picker")
    if target.picker_config is not None or prediction.weights.get("prefix") or prediction.weights.get("lru"):
        picker += f"; {_index_text(target, event_delay)}"
    if prediction.under_load:
        replicas = f"{picker_replicas} replica{'s' if picker_replicas > 1 else ''}"
        picker += f"; {replicas}, scraping each pod every {scrape_interval * 1000:g} ms"
        servers = (f"  servers: vLLM {MODELLED_VLLM_RELEASE} continuous batching (at most {limits.max_num_seqs} "
                   f"sequences and {limits.max_num_batched_tokens} tokens per step), block size {block_size} tokens, "
                   f"{capacity} of KV cache per pod")
    else:
        servers = (f"  servers: vLLM {MODELLED_VLLM_RELEASE} prefix caching, block size {block_size} tokens, "
                   f"{capacity} of KV cache per pod")
    lines = [
        f"{target.title}: {target.replicas} pods, workload {workload} ({requests} requests, {mode})",
        picker, servers,
        *(f"  {note}" for note in notes),
        "",
        "Endpoint picker (hits and queries in tokens, times in ms)",
        format_load_table(prediction.picker, prediction.ttfts[0], prediction.queue_times[0], indent="  "),
        *format_stale(prediction),
        *format_timeline(timeline),
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


def format_comparison(deployed: Sequence[Prediction], proposed: Sequence[Prediction], *, deployed_label: str,
                      proposed_label: str, notes: Sequence[str], workload: str) -> str:
    """What runs and what is proposed, figure by figure, each the mean over the runs (with the
    runs' range when there are several): the picker's hit rate, balance and latency, and
    round-robin's hit rate on the same pods for reference."""

    def figures(prediction: Prediction) -> dict[str, float | None]:
        pods = prediction.picker.pods
        total = max(1, prediction.picker.requests)
        return {"hit rate": prediction.picker.hit_rate, "busiest pod's share": max(p.requests for p in pods) / total,
                "TTFT p50": percentile(prediction.ttfts[0], 0.5), "TTFT p95": percentile(prediction.ttfts[0], 0.95),
                "queue p95": percentile(prediction.queue_times[0], 0.95),
                "round-robin hit rate": prediction.round_robin.hit_rate}

    shown = {"hit rate": percent, "busiest pod's share": lambda value: f"{value:.0%}",
             "TTFT p50": lambda value: f"{_ms(value)} ms", "TTFT p95": lambda value: f"{_ms(value)} ms",
             "queue p95": lambda value: f"{_ms(value)} ms", "round-robin hit rate": percent}

    def cell(predictions: Sequence[Prediction], name: str) -> tuple[str, float | None]:
        values = [figures(prediction)[name] for prediction in predictions]
        if any(value is None for value in values):
            return "-", None
        mean = sum(values) / len(values)
        text = shown[name](mean)
        if len(values) > 1 and min(values) != max(values):
            text += f" ({shown[name](min(values))}–{shown[name](max(values))})"
        return text, mean

    under_load = proposed[0].under_load
    names = [name for name in shown if under_load or name not in ("queue p95",)]
    rows = []
    for name in names:
        (before, old), (after, new) = cell(deployed, name), cell(proposed, name)
        if old is None or new is None:
            change = ""
        elif name in ("hit rate", "round-robin hit rate", "busiest pod's share"):
            change = f"{(new - old) * 100:+.1f} pt"
        else:
            change = f"{(new - old) * 1000:+.1f} ms"
        rows.append((name, before, after, change))
    width = [max(len(row[column]) for row in [("", "deployed", "proposed", "change"), *rows]) for column in range(4)]
    runs = f", mean of {len(proposed)} runs" if len(proposed) > 1 else ""
    lines = [f"Deployed against proposed: workload {workload}{runs}",
             f"  deployed: {deployed_label}", f"  proposed: {proposed_label}", *(f"  {note}" for note in notes), "",
             "  " + "  ".join(f"{header:<{width[0]}}" if column == 0 else f"{header:>{width[column]}}"
                              for column, header in enumerate(("", "deployed", "proposed", "change")))]
    for row in rows:
        lines.append("  " + "  ".join(f"{value:<{width[0]}}" if column == 0 else f"{value:>{width[column]}}"
                                      for column, value in enumerate(row)))
    return "\n".join(lines)


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
             f"{decision.total_blocks} prefix blocks, 'matched' is the picker's index"]
    for outcome in breakdown.filters:
        lines += _filter_lines(outcome)
    lines += [f"  {'pod':<{width}}  {'waiting':>7}  {'running':>7}  {'kv use':>6}  {'matched':>7}  "
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


def _filter_lines(outcome: FilterOutcome) -> list[str]:
    """What one filter did, then (when it compared the pods) each candidate's prefix score
    against affinityThreshold and, when its load gate ran, in-flight tokens and estimated TTFT."""
    lines = [f"  {outcome.describe()}"]
    if not outcome.prefix_scores:
        return lines
    width = max(3, *(len(pod) for pod in outcome.candidates))
    gate = bool(outcome.ttft_ms)
    gate_headers = f"  {'in flight':>14}  {'est. TTFT':>10}" if gate else ""
    lines.append(f"    {'pod':<{width}}  {'prefix score':>19}{gate_headers}  kept")
    for pod in outcome.candidates:
        score = outcome.prefix_scores[pod]
        sticky = "sticky" if score >= outcome.affinity_threshold else "other"
        row = f"    {pod:<{width}}  {f'{score:.3f} {sticky}':>19}"
        if gate:
            row += f"  {f'{outcome.in_flight_tokens[pod]:,} tokens':>14}  {f'{outcome.ttft_ms[pod]:.0f} ms':>10}"
        lines.append(row + f"  {'yes' if pod in outcome.kept else 'no'}")
    return lines
