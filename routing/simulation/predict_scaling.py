"""`predict --autoscale`: the model's replicas following a timed workload as the stack's scaler
moves them (routing/simulation/scaling.py), beside a fixed fleet at maxReplicas; with `--sweep
minReplicas=..,target=..,leadTime=..`, every combination; with `--plot`, the run over time."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from typing import Any, Mapping

from routing.options import nonnegative_seconds, positive_int, positive_rate, positive_seconds
from routing.picker.endpoint_picker import with_default_weights
from routing.simulation.fleet import prepare
from routing.simulation.latency import percentile
from routing.simulation.prediction import PredictError, replica_pickers
from routing.simulation.scaling import (DEFAULTS_SOURCE, INSTANCE_PRICES, METRICS, ScalingPolicy, ScalingPrediction,
                                        format_scaling, price_per_replica_hour, run_scaling, window_width)
from routing.tables import percent

# What `--sweep` may vary with --autoscale, and the policy field each sets.
SWEPT = {"minReplicas": "min_replicas", "target": "target", "leadTime": "node_lead"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("replicas that follow the load (--autoscale)")
    group.add_argument("--autoscale", action="store_true",
                       help="replay a timed workload (e.g. --workload ramp) with the replicas the stack's "
                            "models[].autoscaling gives, beside maxReplicas fixed ones")
    group.add_argument("--min-replicas", type=positive_int, metavar="N", help="override autoscaling.minReplicas")
    group.add_argument("--max-replicas", type=positive_int, metavar="N", help="override autoscaling.maxReplicas")
    group.add_argument("--target", type=positive_rate, metavar="X", help="override autoscaling.target (per replica)")
    group.add_argument("--metric", choices=METRICS, help="override autoscaling.metric")
    group.add_argument("--node-lead-time", type=nonnegative_seconds, metavar="S",
                       help="seconds from a scale-up to a new node's Ready with the vLLM image pulled (default 180)")
    group.add_argument("--pod-start", type=nonnegative_seconds, metavar="S",
                       help="seconds from a pod's start on a node to Ready: the model load (default 90)")
    group.add_argument("--consolidate-after", type=nonnegative_seconds, metavar="S",
                       help="seconds an empty node stays (default: the stack's Karpenter consolidateAfter, else 600)")
    group.add_argument("--window", type=positive_seconds, metavar="S", help="the timeline's rows, in seconds")
    group.add_argument("--node-price", type=positive_rate, metavar="USD",
                       help="a replica's node, per hour (default: the README's price for the stack's instance type)")


def check(args: argparse.Namespace) -> None:
    """What --autoscale and a sweep of its parameters refuse, before anything runs."""
    scaling_options = [name for name in ("min_replicas", "max_replicas", "target", "metric", "node_lead_time",
                                         "pod_start", "consolidate_after", "window", "node_price")
                       if getattr(args, name) is not None]
    swept = [name for name in args.sweep or () if name in SWEPT]
    if not args.autoscale and (scaling_options or swept):
        first = (f"--{scaling_options[0].replace('_', '-')}" if scaling_options else f"--sweep {swept[0]}")
        raise PredictError(f"{first}: sets how replicas follow the load; add --autoscale")
    if args.autoscale and args.sweep and len(swept) != len(args.sweep):
        others = ",".join(name for name in args.sweep if name not in SWEPT)
        raise PredictError(f"--sweep {others} with --autoscale: a scaling sweep varies {', '.join(SWEPT)}; predict "
                           "the weights' sweep without --autoscale")
    for option in ("compare", "explain", "replicas"):
        if args.autoscale and getattr(args, option) not in (None, False):
            raise PredictError(f"--{option} with --autoscale: the scaler sets the replicas, beside a fixed fleet of "
                               "maxReplicas; drop it")


def policy_of(args: argparse.Namespace) -> tuple[ScalingPolicy, str | None, int]:
    """The stack model's scaler with the options laid over, its instance type and GPUs (for the price)."""
    from routing.options import load_stack_model

    found = load_stack_model(args.stack, args.model, args.stacks_dir) if args.stack else None
    scaling = found.model.autoscaling if found is not None else None
    if scaling is None and (args.min_replicas is None or args.max_replicas is None):
        where = f"stack {args.stack}'s model {found.model.name} has no autoscaling" if found else "no --stack"
        raise PredictError(f"--autoscale: {where}; give --min-replicas and --max-replicas (and --target, --metric)")
    low = args.min_replicas or scaling.min_replicas
    high = args.max_replicas or scaling.max_replicas
    if low > high:
        raise PredictError(f"--min-replicas {low}: above maxReplicas {high}")
    consolidate = args.consolidate_after
    if consolidate is None:
        consolidate = _stack_consolidate_after(found.settings) if found is not None else None
    policy = ScalingPolicy(
        min_replicas=low, max_replicas=high,
        metric=args.metric or (scaling.metric if scaling else "waiting"),
        target=args.target or (scaling.target if scaling else 2.0),
        scale_down_window=float(scaling.scale_down_seconds) if scaling else 300.0,
        scrape_interval=float(found.settings.observability.scrape_interval_seconds) if found is not None else 15.0,
        **{name: value for name, value in (("node_lead", args.node_lead_time), ("pod_start", args.pod_start),
                                           ("consolidate_after", consolidate)) if value is not None})
    return policy, _instance_type(found) if found is not None else None, found.model.gpus if found is not None else 1


def _stack_consolidate_after(settings: Any) -> float | None:
    karpenter = (settings.gpu_nodes.karpenter if settings.gpu_nodes is not None
                 else settings.hyperpod.karpenter if settings.hyperpod is not None else None)
    if karpenter is None or karpenter.consolidate_after == "Never":
        return None
    seconds, number = 0.0, ""
    for char in karpenter.consolidate_after:
        if char.isdigit():
            number += char
        else:
            seconds += int(number) * {"s": 1, "m": 60, "h": 3600}[char]
            number = ""
    return seconds


def _instance_type(found: Any) -> str | None:
    settings, gpus = found.settings, found.model.gpus
    if settings.gpu_nodes is not None and settings.gpu_nodes.karpenter is not None:
        fitting = [t for t, (_, per) in INSTANCE_PRICES.items()
                   if t.partition(".")[0] in settings.gpu_nodes.karpenter.instance_families and per >= gpus]
        return min(fitting, key=lambda t: price_per_replica_hour(t, gpus)) if fitting else None
    if settings.gpu_nodes is not None:
        return settings.gpu_nodes.instance_types[0]
    if settings.hyperpod is not None:
        return next((g.instance_type for g in settings.hyperpod.instance_groups if g.gpus_per_instance), None)
    return None


def run(args: argparse.Namespace, setup: Any, seed: int) -> int:
    policy, instance_type, gpus = policy_of(args)
    load = setup.load(args, seed)
    if load is None:
        raise PredictError(f"--autoscale on {args.workload}: a scaler follows load over time, and the workload has no "
                           "clock; use a timed one (--workload ramp, lines with \"at\") or add --rate")
    if setup.weight_changes or setup.pod_restarts:
        raise PredictError("--autoscale: the workload changes weights or restarts pods at set times; predict those "
                           "without --autoscale")
    load = dataclasses.replace(load, count_stale=False)
    target = setup.target
    price = args.node_price or price_per_replica_hour(instance_type, gpus)
    configuration = target.picker_config if target.picker_config is not None else with_default_weights(target.weights)

    def new_pickers() -> tuple:
        return replica_pickers(configuration, setup.picker_replicas, seed, args.picker_version, setup.tokenizer,
                               target.precise)

    block_size = target.block_size or setup.block_size
    prepared = prepare(setup.requests, load.output_lens, setup.tokenizer, block_size,
                       new_pickers()[0].hash_plan(block_size))
    capacity = target.capacity_blocks or setup.capacity_blocks

    def predict(policy: ScalingPolicy) -> ScalingPrediction:
        return run_scaling(prepared, load, policy, new_pickers=new_pickers, pod_prefix=target.pod_prefix,
                           capacity_blocks=capacity, latency=setup.latency, seed=seed, price=price)

    notes = [f"picker seed {seed}" + ("" if args.seed is not None else f" (repeat with --seed {seed})"),
             DEFAULTS_SOURCE if args.node_lead_time is None or args.pod_start is None else "",
             "KEDA's pollingInterval only wakes a model from zero replicas; minReplicas is at least 1, so the HPA's "
             "15 s sync decides", *setup.notes]
    notes = [note for note in notes if note]
    if args.sweep:
        return _sweep(args, policy, predict, notes)
    prediction = predict(policy)
    width = args.window or window_width(prediction.end)
    if args.json:
        print(json.dumps(prediction.to_json(width), indent=2))
        for note in notes:
            print(f"predict: {note}", file=sys.stderr)
    else:
        title = (f"Scaling {target.title} on {args.workload} ({len(setup.requests)} requests over "
                 f"{prediction.end:.0f} s)")
        print(format_scaling(prediction, title=title, width=width, notes=notes))
    if args.plot:
        from routing.simulation.plot import write_scaling_plot

        write_scaling_plot(args.plot, prediction, width)
        print(f"predict: wrote {args.plot}", file=sys.stderr)
    return 0


def _sweep(args: argparse.Namespace, base: ScalingPolicy, predict: Any, notes: list[str]) -> int:
    grid: Mapping[str, tuple] = args.sweep
    names = list(grid)
    settings = list(itertools.product(*(grid[name] for name in names)))
    rows = []
    for number, values in enumerate(settings, start=1):
        changes = {SWEPT[name]: (int(value) if name == "minReplicas" else float(value))
                   for name, value in zip(names, values)}
        policy = dataclasses.replace(base, **changes)
        if policy.min_replicas > policy.max_replicas:
            continue
        print(f"predict: setting {number}/{len(settings)}", file=sys.stderr, flush=True)
        prediction = predict(policy)
        rows.append((dict(zip(names, values)), prediction))
    if args.json:
        print(json.dumps([{"setting": setting, **prediction.to_json(args.window or window_width(prediction.end))}
                          for setting, prediction in rows], indent=2))
        return 0
    print(f"Scaling sweep on {args.workload}: {base.describe()}\n")
    header = f"  {'setting':<36} {'replica-h':>9} {'cost':>8} {'hit rate':>8} {'TTFT p95':>9} {'cold reqs':>9}"
    print(header)
    for setting, prediction in rows:
        text = ",".join(f"{name}={value:g}" for name, value in setting.items())
        cost = "-" if prediction.price is None else f"${prediction.node_hours * prediction.price:.2f}"
        p95 = percentile(prediction.scaled.ttfts, 0.95)
        print(f"  {text:<36} {prediction.node_hours:>9.2f} {cost:>8} {percent(prediction.scaled.hit_rate):>8} "
              f"{'-' if p95 is None else f'{p95:.2f} s':>9} {prediction.cold()[0]:>9}")
    fixed = rows[0][1] if rows else None
    if fixed is not None:
        p95 = percentile(fixed.fixed.ttfts, 0.95)
        print(f"  {f'{base.max_replicas} fixed replicas':<36} {fixed.fixed_node_hours:>9.2f} "
              f"{'-' if fixed.price is None else f'${fixed.fixed_node_hours * fixed.price:.2f}':>8} "
              f"{percent(fixed.fixed.hit_rate):>8} {'-' if p95 is None else f'{p95:.2f} s':>9} {'-':>9}")
    print("\n" + "\n".join(f"Note: {note}" for note in notes))
    return 0
