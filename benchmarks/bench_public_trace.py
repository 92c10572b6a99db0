"""Mooncake's public production trace, predicted: hit rate, TTFT and balance per routing setting
on fleets of 4, 8 and 16 pods of Llama-3.1-8B on H100s, with the trace's bound beside them.

    .venv/bin/python -m routing trace get conversation          (once: downloads and checks it)
    .venv/bin/python -m benchmarks.bench_public_trace           (the whole table, about 20 minutes)
    .venv/bin/python -m benchmarks.bench_public_trace --pods 4 --settings default,round-robin

Each setting is one `predict --json` run as a user runs it (seed 1, the trace's own arrival
times, `examples/llama-3.1-8b-h100.json` for latency, KV capacity and vLLM's H100 limits),
timed from the command's start to its JSON. Round-robin is the baseline every run predicts
beside the picker. The bounds: the trace's share of blocks seen before (any placement, one
cache that never evicts), and the fleet's cache pooled (every request on one pod holding all
N pods' blocks, least recently used first out): what a router could reach if the pods' caches
were one, a reference rather than a strict bound.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from routing.picker.traced import TracedPrompt
from routing.simulation.fleet import SimulatedServer
from routing.simulation.latency import LatencyProfile
from routing.traces import read_trace

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "examples" / "llama-3.1-8b-h100.json"
DEFAULT_TRACE = REPO / "traces" / "conversation_trace.jsonl"
# The stack's precise index keys vLLM blocks of routing.blockSize (64 by default).
PRECISE_BLOCK_SIZE = 64
SETTINGS = {
    "default": [],
    "prefix=0": ["--weights", "prefix=0,queue=3,kvCache=2"],
    "sticky": ["--routing", "sticky"],
    "precise": ["--prefix-index", "precise", "--block-size", str(PRECISE_BLOCK_SIZE)],
}


def pooled_hit_rate(prompts: list[TracedPrompt], block_size: int, capacity_blocks: int) -> float:
    pod = SimulatedServer("pooled", block_size, capacity_blocks)
    for prompt in prompts:
        pod.serve(prompt.length, prompt.keys(block_size))
    counters = pod.counters()
    return counters.hits / counters.queries


def predict(trace: Path, pods: int, extra: list[str], capacity: int) -> tuple[dict, float]:
    command = [sys.executable, "-m", "routing", "predict", "--pods", str(pods), "--workload", str(trace),
               "--latency-profile", str(PROFILE), "--capacity-blocks", str(capacity), "--seed", "1", "--json", *extra]
    started = time.monotonic()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"bench_public_trace: {' '.join(command)} exited {result.returncode}:\n{result.stderr}")
    return json.loads(result.stdout), elapsed


def busiest_share(report: dict) -> float:
    requests = [pod["requests"] for pod in report["pods"]]
    return max(requests) / sum(requests)


def row(pods: int, setting: str, report: dict, seconds: float | None) -> str:
    ttft = report["ttft"]
    took = "(beside each run)" if seconds is None else f"{seconds:.0f} s"
    return (f"| {pods} | {setting} | {report['hitRate']:.1%} | {ttft['p50'] * 1000:,.0f} ms | {ttft['p95'] * 1000:,.0f} ms "
            f"| {busiest_share(report):.0%} | {took} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                        help="the trace (default: traces/conversation_trace.jsonl, from `trace get conversation`)")
    parser.add_argument("--pods", default="4,8,16", help="fleet sizes, comma-separated (default 4,8,16)")
    parser.add_argument("--settings", default=",".join(["round-robin", *SETTINGS]),
                        help=f"comma-separated, of round-robin,{','.join(SETTINGS)} (default: all)")
    args = parser.parse_args(argv)
    if not args.trace.exists():
        print(f"bench_public_trace: no {args.trace}; get it with `.venv/bin/python -m routing trace get conversation` "
              "(or --from a copy)", file=sys.stderr)
        return 2
    fleets = [int(part) for part in args.pods.split(",")]
    wanted = args.settings.split(",")
    profile = LatencyProfile.load(PROFILE)
    capacity = profile.num_gpu_blocks
    started = time.monotonic()
    trace = read_trace(args.trace)
    prompts = [request.prompt for request in trace.requests]
    print(f"{args.trace}: {len(prompts):,} requests, {sum(p.length for p in prompts):,} prompt tokens, "
          f"{trace.repeated_share():.1%} of {sum(len(p.ids) for p in prompts):,} blocks seen before (read in "
          f"{time.monotonic() - started:.1f} s)", flush=True)
    print(f"servers: {profile.source}; {capacity:,} blocks of {profile.block_size} per pod", flush=True)
    lines = ["| pods | setting | hit rate | TTFT p50 | TTFT p95 | busiest pod's share | prediction took |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    bounds = []
    for pods in fleets:
        pooled = pooled_hit_rate(prompts, profile.block_size, capacity * pods)
        bounds.append(f"{pods} pods: the fleet's cache pooled {pooled:.1%}")
        baseline = None
        for setting, extra in SETTINGS.items():
            if setting not in wanted and not (setting == "default" and "round-robin" in wanted):
                continue
            size = PRECISE_BLOCK_SIZE if setting == "precise" else profile.block_size
            report, seconds = predict(args.trace, pods, extra, capacity * profile.block_size // size)
            print(f"  {pods} pods, {setting}: {report['hitRate']:.1%} in {seconds:.0f} s", file=sys.stderr, flush=True)
            if setting == "default":
                baseline = report["roundRobin"]
            if setting in wanted:
                lines.append(row(pods, setting, report, seconds))
        if baseline is not None and "round-robin" in wanted:
            lines.append(row(pods, "round-robin", baseline, None))
    print("\n".join(lines))
    print(f"bounds: the trace's blocks seen before {trace.repeated_share():.1%} (any fleet, a cache that never evicts); "
          + "; ".join(bounds))
    print(f"whole benchmark: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
