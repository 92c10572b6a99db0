"""Predicted against measured under load, on two real vLLM CPU servers behind `serve`.

    .venv/bin/python -m benchmarks.bench_under_load [--runs N] [--seeds 20] [--vllm-python PATH]

Starts two servers of a tiny model built here (wider than the demo's, so that prefill costs
more than the two servers' contention for two cores), with a small KV cache (80 blocks of
128 tokens each, `--num-gpu-blocks-override`); calibrates them with `calibrate` before each
workload (`--calibrate-once`: once at the start), `serve` as the gateway whose hop it times;
measures how far apart replies that one step ends reach the client when each sends its next
request at once (`reply_spacing_seconds`: the client and `serve` take requests one at a
time), which the prediction spaces such requests by; then sends three workloads with the real
`openai` client (four clients in a closed loop, their first requests released together, as
the prediction's closed loop sends them) through a fresh `serve` per run (caches emptied
first; 9 runs of multi-turn chat, 6 of cache pressure, 3 of multi-tenant, unless --runs),
with the default weights, prefix=0,queue=3,kvCache=2 and round-robin taking turns (a run of
each per round), and predicts each with `predict`'s time-aware simulation from the
calibrated profile. Prints measured (mean and range over the runs) against predicted (mean
over --seeds), the errors, each run's own traffic replayed on the simulated servers (its
sends in their order, by the workload's closed loop), the
engine's part of TTFT (vLLM's per-request timings against the simulated engine's), the
ranking of the settings by hit rate on each side, and how many rows meet each of
issue 7's targets (each miss with its error and the standard errors of its measured and
predicted means);
and, for each run and each calibration, the cores the client, `serve` and the vLLM API
servers used meanwhile, and those the hypervisor took (steal).
"""

from __future__ import annotations

import argparse
import sys
import time

from benchmarks.underload import (Experiment, add_pair_options, add_run_options, benchmark_pair, calibrate_pair,
                                  compare, format_rows, parse_run_options, ranking_lines, target_tallies)
from routing.lab.vllm_server import StepError, VllmUnavailable, resolve_vllm_python
from routing.simulation.latency import LatencyProfile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(parser)
    add_run_options(parser, "9 for multi-turn chat, 6 for cache pressure, 3 for multi-tenant")
    parser.add_argument("--calibrate-once", action="store_true",
                        help="calibrate once at the start instead of before each workload")
    args = parse_run_options(parser, argv)
    try:
        python = resolve_vllm_python(args.vllm_python)
    except VllmUnavailable as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        with benchmark_pair(args.work_dir, python, timeout=args.start_timeout) as pair:
            profiles: list[LatencyProfile] = []

            def profile_for(experiment: Experiment) -> LatencyProfile:
                # This VM's speed drifts over minutes: calibrate each workload's servers just before
                # its runs (unless --calibrate-once), so its prediction sees the machine it is measured on.
                if profiles and args.calibrate_once:
                    return profiles[0]
                print(f"calibrating for {experiment.name}", flush=True)
                profile = calibrate_pair(pair, progress=lambda line: print(line, flush=True))
                print(f"calibrated: {profile.latency.describe()}", flush=True)
                profiles.append(profile)
                return profile

            rows = compare(pair, profile_for, runs=args.runs, seeds=args.seeds, out=sys.stdout, only=args.only)
    except StepError as error:
        print(f"bench: {error}\nbench: fix: {error.fix}", file=sys.stderr)
        return 1
    print(f"\n{format_rows(rows)}\n")
    for line in ranking_lines(rows).values():
        print(line)
    print("\ntargets:")
    for line in target_tallies(rows):
        print(f"  {line}")
    print(f"({time.monotonic() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
