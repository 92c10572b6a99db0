"""Precise against approximate prefix-cache routing, predicted against measured, on two real
vLLM CPU servers behind `serve`.

    .venv/bin/python -m benchmarks.bench_precise [--runs 4] [--seeds 20] [--only NAME] [--vllm-python PATH]

The under-load benchmark's servers (benchmarks/underload.py: its medium tiny model, 80 KV
blocks of 128 tokens each, 16 sequences) publish their KV-cache events; `serve` routes with the
default weights on the approximate index (its own record of where it sent each prefix), on the
precise index (`--prefix-index precise`: the servers' events), or round-robin. Two workloads,
driven by the real `openai` client, four in a closed loop:

- cache pressure: the under-load benchmark's (10 tenants' ~1,200-token prompts that fit in the
  two caches together but not in one);
- heavy pressure: 14 tenants, whose prompts the two caches hold only just, so the servers
  evict what the approximate index credits them with, and keep what it has forgotten;
- reset mid-run: four tenants' prompts, and 40% of the way through (by the calibrated
  prediction's duration) the server vllm-a's prefix cache is reset with its running requests
  preempted (POST /reset_prefix_cache?reset_running_requests=true), which the approximate
  index never learns of.

The settings take turns, a run of each per round. Each is predicted with `predict`'s
simulation from a calibration of the servers (the reset as a workload line at the same
moment), and the approximate rows also with the stale picks the simulation counts. Prints the
rows (the README's table), how many meet the targets (hit rate within 3 points, the busiest
pod's share within 10, the ranking), TTFT p50 and p95 beside them, and the KV-event delivery
delay `serve` measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import urllib.request
from typing import Any, Sequence

from benchmarks.underload import (HIDDEN_SIZE, LAYERS, Experiment, Row, ServerCountedTokenizer, Setting,
                                  add_pair_options, add_run_options, benchmark_pair, calibrate_pair, drive,
                                  experiments, format_rows, measure_rounds, parse_run_options, predict_runs,
                                  ranking_lines, reply_spacing_seconds, serve_process, target_tallies,
                                  tenants_workload)
from routing.lab.vllm_server import StepError, VllmPair, VllmUnavailable, resolve_vllm_python
from routing.simulation.latency import DEFAULT_LIMITS, LatencyProfile
from routing.simulation.load_plan import plan_load
from routing.simulation.prediction import Load, run_prediction
from routing.workloads import PodRestart

SETTINGS = (Setting("approximate"), Setting("precise", precise=True), Setting("round-robin", round_robin=True))
RESET_POD = 0  # vllm-a
RESET_SHARE = 0.4  # of the predicted run's duration


def reset_experiment(model: str, profile: LatencyProfile, pair: VllmPair, tokenizer_url: str) -> Experiment:
    """Four tenants' prompts, vllm-a's cache reset RESET_SHARE of the way through a run."""
    arrivals = tuple(tenants_workload(model, 4, 60, 38, seed=3))
    tokenizer = ServerCountedTokenizer(tokenizer_url, arrivals)
    plan = plan_load(arrivals, concurrency=4, seed=1)
    load = Load(plan, tuple(arrival.output_tokens for arrival in arrivals), profile.limits or DEFAULT_LIMITS)
    duration = run_prediction([arrival.request for arrival in arrivals], replicas=2, block_size=pair.block_size,
                              capacity_blocks=pair.capacity_blocks, tokenizer=tokenizer, seed=1, load=load,
                              latency=profile.latency).picker.duration
    at = round(duration * RESET_SHARE, 1)
    return Experiment("reset mid-run", f"4 tenants × ~1,200 tokens, 60 requests, 4 in flight; vllm-a's cache reset "
                                       f"at {at:g}s", arrivals, 4, runs=4,
                      resets=(PodRestart(at, RESET_POD, 0, reset=True),))


def delivery_delays(pair: VllmPair, profile: LatencyProfile, experiment: Experiment) -> dict[str, Any]:
    """A precise serve's measured KV-event delivery delay over one run of `experiment`."""
    pair.reset_prefix_caches()
    with serve_process(pair.backends, ("--prefix-index", "precise"), 7, pair.log_dir / "serve.log") as serve:
        drive(serve.url, experiment.arrivals, experiment.concurrency)
        with urllib.request.urlopen(serve.url + "/health", timeout=10) as response:
            return json.load(response)["kvEvents"]["deliveryDelaySeconds"]


def compare(pair: VllmPair, profile: LatencyProfile, *, runs: int | None, seeds: int,
            only: Sequence[str] | None) -> tuple[list[Row], dict[str, str]]:
    model = pair.tokenizer.model
    pressure = next(experiment for experiment in experiments(model) if experiment.name == "cache pressure")
    workloads = [dataclasses.replace(pressure, runs=4),
                 Experiment("heavy pressure", "14 tenants × ~1,200 tokens (9 blocks each, 126 against the two "
                                              f"caches' {2 * pair.capacity_blocks}, running requests' blocks on top); "
                                              "80 requests, 4 in flight",
                            tuple(tenants_workload(model, 14, 80, 38, seed=2)), 4, runs=4),
                 reset_experiment(model, profile, pair, pair.servers[0].url)]
    rows: list[Row] = []
    stale: dict[str, str] = {}
    for experiment in workloads:
        if only and experiment.name not in only:
            continue
        print(f"{experiment.name}: {experiment.description}", flush=True)
        tokenizer = ServerCountedTokenizer(pair.servers[0].url, experiment.arrivals)
        with serve_process(pair.backends, (), 0, pair.log_dir / "serve.log") as serve:
            send_spacing = reply_spacing_seconds(serve.url, model, experiment.arrivals, experiment.concurrency)
        measured = measure_rounds(pair, experiment, SETTINGS, profile, runs or experiment.runs)
        for setting in SETTINGS:
            predicted = predict_runs(pair, profile, experiment, tokenizer, setting, range(1, seeds + 1), send_spacing)
            rows.append(Row(experiment.name, setting.label, tuple(measured[setting.label]), tuple(predicted)))
        picks = [run.stale for run in predict_runs(pair, profile, experiment, tokenizer, SETTINGS[0],
                                                    range(1, seeds + 1), send_spacing, count_stale=True)]
        stale[experiment.name] = (f"{sum(p.stale for p in picks) / len(picks):.1f} stale and "
                                  f"{sum(p.blind for p in picks) / len(picks):.1f} blind picks of {picks[0].picks} "
                                  f"(mean over {len(picks)} seeds)")
        print(f"  {experiment.name} / approximate, predicted: {stale[experiment.name]}", flush=True)
    return rows, stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(parser)
    add_run_options(parser, "4")
    args = parse_run_options(parser, argv)
    try:
        python = resolve_vllm_python(args.vllm_python)
    except VllmUnavailable as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        with benchmark_pair(args.work_dir, python, timeout=args.start_timeout) as pair:
            print("calibrating", flush=True)
            profile = calibrate_pair(pair, progress=lambda line: print(line, flush=True))
            print(f"calibrated: {profile.latency.describe()}", flush=True)
            rows, stale = compare(pair, profile, runs=args.runs, seeds=args.seeds, only=args.only)
            pressure = next(experiment for experiment in experiments(pair.tokenizer.model)
                            if experiment.name == "cache pressure")
            delays = delivery_delays(pair, profile, pressure)
    except StepError as error:
        print(f"bench: {error}\nbench: fix: {error.fix}", file=sys.stderr)
        return 1
    print(f"\nservers: tiny model {HIDDEN_SIZE} wide, {LAYERS} layers; KV-event delivery (a precise serve, one "
          f"cache-pressure run): p50 {delays['p50'] * 1000:.2f} ms, p95 {delays['p95'] * 1000:.2f} ms, max "
          f"{delays['max'] * 1000:.2f} ms over {delays['batches']} batches\n")
    print(format_rows(rows) + "\n")
    for experiment, line in ranking_lines(rows).items():
        print(line)
        print(f"  stale picks of the approximate index, predicted: {stale[experiment]}")
    for line in target_tallies(rows):
        print(line)
    print(f"\n{(time.monotonic() - started) / 60:.0f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
