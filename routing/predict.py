"""`python -m routing predict`: where the endpoint picker will send a workload, before deploying.

Replays the workload, serially, through three fleets of simulated vLLM servers: one routed by
the endpoint picker with the stack's weights, one by round-robin (a plain Kubernetes
Service), and a single pod with a cache that never evicts, which gives the best hit rate any
placement could reach.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from settings import lru_conflict

from .options import OptionError, add_model_options, load_stack_model, positive_int, weights_option
from .picker import EndpointPicker, PickerConfigError, Request, RoundRobinPicker, with_default_weights
from .prefix import EstimateTokenizer, HFTokenizerFile, Tokenizer, TokenizerFileError
from .simulate import (DEFAULT_BLOCK_SIZE, DEFAULT_CAPACITY_BLOCKS, SimulatedServer, SimulationResult,
                       simulate_side_by_side)
from .tables import format_pod_table, percent
from .workloads import BUILTIN_WORKLOADS, WorkloadError, load_workload, to_requests


class PredictError(ValueError):
    """Options predict cannot work with, with the fix."""


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

    @property
    def best_fits_one_pod(self) -> bool:
        """Whether one pod's cache holds the whole workload, so sending everything there reaches
        bestHitRate; otherwise bestHitRate is an upper bound that may be out of reach."""
        return self.capacity_blocks is None or self.best_cache_blocks <= self.capacity_blocks

    def to_json(self) -> dict:
        return {**self.picker.to_json(), "roundRobin": self.round_robin.to_json(), "bestHitRate": self.best.hit_rate}


def run_prediction(requests: Sequence[Request], *, weights: Mapping[str, int] | None = None, replicas: int,
                   pod_prefix: str = "pod", block_size: int = DEFAULT_BLOCK_SIZE,
                   capacity_blocks: int | None = DEFAULT_CAPACITY_BLOCKS, tokenizer: Tokenizer | None = None,
                   seed: int | None = None) -> Prediction:
    """Replays `requests` onto `replicas` pods named `<pod_prefix>-<i>`, routed by a picker with
    `weights` laid over the default profile (as `serve` and the cluster's picker do)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise PredictError(f"replicas={replicas!r}: must be a whole number of at least 1 (--replicas N)")
    if not requests:
        raise WorkloadError("the workload has no requests")
    weights = with_default_weights(weights)
    picker = EndpointPicker(weights, seed=seed)

    def fleet(count: int) -> list[SimulatedServer]:
        return [SimulatedServer(f"{pod_prefix}-{i}", block_size, capacity_blocks) for i in range(count)]

    # The best any placement could do: a request can only hit blocks some earlier request left
    # in a cache, and at most its longest full-block prefix shared with any earlier request.
    # One pod whose cache never evicts holds every earlier block, so serving everything there
    # reaches that maximum for every request at once: an upper bound for any number of pods.
    # When capacity binds (the workload's blocks outgrow one pod) real pods evict, so the
    # bound may not be reachable by any placement; `best_fits_one_pod` says which case it is.
    best_pod = SimulatedServer(f"{pod_prefix}-unbounded", block_size, capacity_blocks=None)
    picked, round_robin, best = simulate_side_by_side(
        requests, [(fleet(replicas), picker), (fleet(replicas), RoundRobinPicker()), ([best_pod], RoundRobinPicker())],
        tokenizer or EstimateTokenizer())
    return Prediction(weights=weights, picker=picked, round_robin=round_robin, best=best,
                      best_cache_blocks=best_pod.cached_blocks, capacity_blocks=capacity_blocks)


def predict(workload: Sequence[Mapping[str, Any]], **options: Any) -> dict:
    """`run_prediction` of `workload` (OpenAI request bodies) as the JSON `predict --json` prints:
    {"pods": [{"pod", "requests", "hits", "queries", "hitRate"}], "hitRate",
     "roundRobin": {"pods": [...], "hitRate"}, "bestHitRate"} — hits and queries in tokens,
    hit rates None where there were no queries."""
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
                        help=f"{', '.join(BUILTIN_WORKLOADS)}, or a .jsonl file of OpenAI request bodies "
                             "(default: seed-shared)")
    parser.add_argument("--weights", type=weights_option, metavar="NAME=N,...",
                        help="override weights, e.g. prefix=0,queue=3,kvCache=2 (merged over the stack's)")
    parser.add_argument("--replicas", type=positive_int, metavar="N", help="override the stack's replica count")
    parser.add_argument("--block-size", type=positive_int, default=DEFAULT_BLOCK_SIZE, metavar="TOKENS",
                        help=f"vLLM's KV block size (default {DEFAULT_BLOCK_SIZE}, the GPU default; 128 on CPU)")
    parser.add_argument("--capacity-blocks", type=positive_int, default=DEFAULT_CAPACITY_BLOCKS, metavar="N",
                        help="KV cache blocks per pod, the '# GPU blocks' vLLM logs "
                             f"(default {DEFAULT_CAPACITY_BLOCKS})")
    parser.add_argument("--tokenizer", metavar="PATH",
                        help="the model's tokenizer.json (or its directory) to count tokens exactly "
                             "(default: estimate ~4 characters per token)")
    parser.add_argument("--seed", type=int, help="seed for the picker's tie-breaking (default: random, printed)")
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


def _target(args: argparse.Namespace) -> _Target:
    overrides = args.weights or {}
    found = load_stack_model(args.stack, args.model, args.stacks_dir)
    if found is None:
        if args.replicas is not None:
            raise PredictError(f"--replicas needs --stack; with --pods {args.pods} there is no stack to read. "
                               "Drop one of the two.")
        return _Target("Prediction without a stack", "pod", None, overrides, args.pods)

    model = found.model
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
                   weights, replicas, caveats)


def run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2 ** 32)
    try:
        target = _target(args)
        _, requests = load_workload(args.workload, target.served_model)
        tokenizer = HFTokenizerFile(args.tokenizer) if args.tokenizer else EstimateTokenizer()
        prediction = run_prediction(requests, weights=target.weights, replicas=target.replicas,
                                    pod_prefix=target.pod_prefix, block_size=args.block_size,
                                    capacity_blocks=args.capacity_blocks, tokenizer=tokenizer, seed=seed)
    except (OptionError, PredictError, WorkloadError, PickerConfigError, TokenizerFileError) as error:
        print(f"predict: {error}", file=sys.stderr)
        return 2
    notes = [f"picker seed {seed}" + ("" if args.seed is not None else f" (repeat with --seed {seed})"),
             f"tokens {tokenizer.description}", *target.caveats]
    if args.json:
        print(json.dumps(prediction.to_json(), indent=2))
        for note in notes:
            print(f"predict: {note}", file=sys.stderr)
        return 0
    print(format_prediction(prediction, target=target, workload=args.workload, requests=len(requests),
                            block_size=args.block_size, notes=notes))
    return 0


def format_prediction(prediction: Prediction, *, target: _Target, workload: str, requests: int, block_size: int,
                      notes: Sequence[str]) -> str:
    weights = " ".join(f"{name}={value}" for name, value in prediction.weights.items())
    capacity = "unbounded" if prediction.capacity_blocks is None else f"{prediction.capacity_blocks} blocks"
    lines = [
        f"{target.title}: {target.replicas} pods, workload {workload} ({requests} requests, serial)",
        f"  picker: llm-d router v0.10 scorers, weights {weights}",
        f"  servers: vLLM prefix caching, block size {block_size} tokens, {capacity} of KV cache per pod",
        *(f"  {note}" for note in notes),
        "",
        "Endpoint picker (hits and queries in tokens)",
        format_pod_table(prediction.picker, indent="  "),
        "",
        "Round-robin (a plain Kubernetes Service)",
        format_pod_table(prediction.round_robin, indent="  "),
        "",
        f"bestHitRate {percent(prediction.best.hit_rate)}: every request served where the longest earlier "
        "prefix is cached (all on one pod whose cache never evicts).",
    ]
    if not prediction.best_fits_one_pod:
        lines.append(f"  An upper bound only: the workload fills {prediction.best_cache_blocks} blocks, more than "
                     f"one pod's {prediction.capacity_blocks}, so pods evict and no placement may reach it.")
    return "\n".join(lines)
