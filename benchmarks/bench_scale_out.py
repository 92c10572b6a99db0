"""A scale-out on real vLLM CPU servers, predicted against measured.

    .venv/bin/python -m benchmarks.bench_scale_out [--vllm-python PATH] [--seed N]

The under-load benchmark's two servers (benchmarks/underload.py), calibrated first, behind `serve`;
Debian's Prometheus scrapes them with the stack's PodMonitor job; the HPA's decisions
(routing/simulation/scaling.py) run every 15 s on the stack's scaler query as Prometheus answers
it (the eks-karpenter stack's qwen-small on `running`, a target of one per replica, two to three
replicas). A ramp of six tenants' requests is sent at its own times. When the scaler asks, a third
server starts (the lead time here: its start, asked to healthy) and joins Prometheus's targets and
`serve --backends-file`. Twice: the stack's default weights, then prefix=0.

`predict --autoscale` replays the same file with the calibrated profile, the servers' tokenizer
and cache, and the measured start as --pod-start (no node to wait for). Prints, per 30 s, the
replicas in the pool, the hit rate and TTFT p95, predicted beside measured, and when the scaler
asked and the third server joined.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.scale_out import lab_stack, measured_windows, run_scale_out
from benchmarks.underload import add_pair_options, benchmark_pair, calibrate_pair
from routing.lab.vllm_server import StepError, VllmUnavailable, resolve_vllm_python
from routing.tables import percent
from routing.workloads import Ramp

REPO = Path(__file__).resolve().parent.parent
MIN, MAX, TARGET, METRIC = 2, 3, 1, "running"
WINDOW = 30.0
# Sized for these servers (the medium tiny model, 16 sequences each): two hold the quiet rate, the
# peak keeps more requests running than two replicas' target, and a third starts while it lasts.
RAMP = Ramp(low_rate=0.5, peak_rate=4, quiet_s=10, climb_s=10, hold_s=240, fall_s=5, tenants=6, segments=10,
            max_tokens=32, seed=2)
SETTINGS = (("default weights", ()), ("prefix=0", ("--weights", "prefix=0")))


def predicted(workload: Path, profile: Path, pair, start_seconds: float, weights: tuple[str, ...], seed: int) -> dict:
    command = [sys.executable, "-m", "routing", "predict", "--pods", "2", "--workload", str(workload), "--autoscale",
               "--min-replicas", str(MIN), "--max-replicas", str(MAX), "--metric", METRIC, "--target", str(TARGET),
               "--node-lead-time", "0", "--pod-start", f"{start_seconds:.1f}", "--latency-profile", str(profile),
               "--tokenizer", str(pair.servers[0].model_dir / "tokenizer.json"),
               "--block-size", str(pair.block_size), "--capacity-blocks", str(pair.capacity_blocks),
               "--window", str(WINDOW), "--seed", str(seed), "--json", *weights]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(parser)
    parser.add_argument("--seed", type=int, default=1, help="serve's and predict's picker seed")
    parser.add_argument("--start-timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("bench: needs Debian's Prometheus: `source .ci/prometheus.sh && ensure_prometheus`", file=sys.stderr)
        return 2
    try:
        python = resolve_vllm_python(args.vllm_python)
    except VllmUnavailable as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    stack = lab_stack(MIN, MAX, METRIC, TARGET)
    started = time.monotonic()
    lines = []
    try:
        with benchmark_pair(args.work_dir, python, timeout=args.start_timeout) as pair, \
                tempfile.TemporaryDirectory() as scratch:
            arrivals = RAMP.arrivals(pair.tokenizer.model)
            workload = Path(scratch) / "ramp.jsonl"
            workload.write_text("".join(json.dumps({"at": a.at, "body": a.body}) + "\n" for a in arrivals))
            print(f"{len(arrivals)} requests over {RAMP.duration:.0f} s; calibrating", flush=True)
            profile = calibrate_pair(pair, progress=lambda line: print(line, flush=True))
            profile_path = Path(scratch) / "profile.json"
            profile.save(profile_path)
            for label, weights in SETTINGS:
                print(f"\n{label}: measuring", flush=True)
                pair.reset_prefix_caches()
                work = Path(scratch) / label.replace(" ", "-").replace("=", "")
                work.mkdir()
                run = run_scale_out(pair, arrivals, stack, prometheus, work, sys.stdout, serve_options=weights,
                                    seed=args.seed, start_timeout=args.start_timeout)
                start = run.start_seconds[0] if run.start_seconds else 0.0
                forecast = predicted(workload, profile_path, pair, start, weights, args.seed)
                lines += report(label, run, forecast, start)
    except StepError as error:
        print(f"bench: {error}\nbench: fix: {error.fix}", file=sys.stderr)
        return 1
    print("\n" + "\n".join(lines))
    print(f"\n{(time.monotonic() - started) / 60:.0f} min")
    return 0


def report(label: str, run, forecast: dict, start: float) -> list[str]:
    measured = measured_windows(run.sent, run.steps, run.origin, WINDOW, MIN)
    asked = next((step.at for step in run.steps if step.desired > MIN), None)
    joined = next((step.at for step in run.steps if step.ready > MIN), None)
    steps = forecast["scalerSteps"]
    p_asked = next((step["at"] for step in steps if step["desired"] > MIN), None)
    p_joined = next((step["at"] for step in steps if step["ready"] > MIN), None)
    failed = sum(1 for reply in run.sent if reply.ttft is None)
    lines = [f"{label}: {len(run.sent)} requests ({failed} failed), routed {dict(sorted(run.routed.items()))}; the "
             f"scaler asked at {seconds(asked)} (predicted {seconds(p_asked)}), the third server joined at "
             f"{seconds(joined)} (predicted {seconds(p_joined)}) after a {start:.0f} s start",
             f"  {'seconds':>9}  {'in the pool':>13}  {'requests':>8}  {'hit rate':>17}  {'TTFT p95':>19}",
             f"  {'':>9}  {'pred / meas':>13}  {'':>8}  {'pred / meas':>17}  {'pred / meas':>19}"]
    for window, mine in zip(forecast["windows"], measured):
        pool = lambda low, high: str(low) if low == high else f"{low}-{high}"  # noqa: E731
        lines.append(f"  {mine.start:>4.0f}-{mine.end:<4.0f}  "
                     f"{pool(window['readyMin'], window['readyMax']):>5} / {pool(*mine.ready):<5}  {mine.requests:>8}  "
                     f"{percent(window['hitRate']):>7} / {percent(mine.hit_rate):<7}  "
                     f"{seconds(window['ttftP95']):>8} / {seconds(mine.ttft_p95):<8}")
    scaled = forecast["scaled"]
    hits = sum(reply.cached_tokens or 0 for reply in run.sent)
    queries_ = sum(reply.prompt_tokens or 0 for reply in run.sent)
    lines.append(f"  whole run: hit rate predicted {percent(scaled['hitRate'])}, measured "
                 f"{percent(hits / queries_ if queries_ else None)}; cold requests (a new replica's first minute) "
                 f"predicted {scaled['coldRequests']}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
