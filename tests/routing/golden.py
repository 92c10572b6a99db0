"""Predictions frozen before the simulator was made faster: every case here must give, bit for
bit, what `tests/routing/data/golden/` holds (tests/routing/test_golden.py).

A case is `predict` as a user runs it (its --json, or a sweep's settings) or `run_prediction`
on the under-load benchmark's workloads, with each request's pod, hit, TTFT and queue time.
Together they cover every path the fast code replaces: serial and timed replays, closed and
open loops, sessions, picker replicas, send spacing, weight changes that restart the pickers,
the sticky recipe's filter and load producers, the no-hit LRU, character hashing, preemption
under cache pressure and step jitter.

    .venv/bin/python -m tests.routing.golden --write     rewrite the files (only when a change
                                                         is meant to move a number: say which)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(__file__).resolve().parent / "data" / "golden"
TRACE = REPO / "examples" / "trace.jsonl"

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.underload import NO_PREFIX, experiments  # noqa: E402
from routing.__main__ import main as routing_main  # noqa: E402
from routing.picker.endpoint_picker import Request  # noqa: E402
from routing.simulation.latency import EngineLimits, LatencyModel  # noqa: E402
from routing.simulation.load_plan import plan_load  # noqa: E402
from routing.simulation.prediction import Load, Prediction, run_prediction  # noqa: E402
from routing.workloads import Arrival  # noqa: E402
from settings.picker_config import (PreciseIndex, load_endpoint_picker_config,  # noqa: E402
                                    render_sticky_picker_config)

# A calibrated profile's shape (the under-load benchmark's servers, 2026-12-05), jitter included
# so the step draws are part of what must not move.
LATENCY = LatencyModel(step_s=0.0121, prefill_token_s=0.00092, decode_seq_s=0.0009, overhead_s=0.0071,
                       overhead_token_s=2.1e-06, context_token_s=1.1e-06, jitter=0.12, prefill_attention_s=2.3e-10,
                       gateway_s=0.0032)
LIMITS = EngineLimits(max_num_seqs=16, max_num_batched_tokens=2048)


def _cli(*args: str) -> Any:
    """`python -m routing ARGS --json`'s output, parsed; its notes on stderr are not compared."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = routing_main([*args, "--json"])
    if status != 0:
        raise RuntimeError(f"python -m routing {' '.join(args)} exited {status}")
    return json.loads(out.getvalue())


def _sweep(*args: str) -> Any:
    """A sweep's settings, each with every run's figures (the table is printed from these)."""
    return _cli(*args)["settings"]


def _per_request(prediction: Prediction) -> dict[str, Any]:
    return {**prediction.to_json(),
            "placements": list(prediction.picker.placements), "hitTokens": list(prediction.picker.hit_tokens),
            "ttfts": list(prediction.ttfts[0]), "queueTimes": list(prediction.queue_times[0]),
            "roundRobinPlacements": list(prediction.round_robin.placements),
            "roundRobinTtfts": list(prediction.ttfts[1])}


def _digest(prediction: Prediction) -> dict[str, Any]:
    """A large replay's summary and a digest of every per-request figure (the file stays small)."""
    figures = _per_request(prediction)
    per_request = {key: figures.pop(key) for key in ("placements", "hitTokens", "ttfts", "queueTimes",
                                                     "roundRobinPlacements", "roundRobinTtfts")}
    figures["perRequestSha256"] = hashlib.sha256(json.dumps(per_request).encode()).hexdigest()
    return figures


def _under_load(experiment_index: int, setting: str, seed: int, send_spacing: float = 0.0) -> dict[str, Any]:
    experiment = experiments("tiny")[experiment_index]
    arrivals = experiment.arrivals
    plan = plan_load(arrivals, concurrency=experiment.concurrency, seed=seed)
    load = Load(plan, tuple(arrival.output_tokens for arrival in arrivals), LIMITS, send_spacing=send_spacing)
    options: dict[str, Any] = {}
    if setting == "no-prefix":
        options["weights"] = NO_PREFIX
    elif setting.startswith("sticky"):
        peak = {"sticky": {"peakPrefillThroughput": 800}, "sticky-upstream": {}}[setting]
        options["picker_config"] = load_endpoint_picker_config(render_sticky_picker_config(peak))
    return _per_request(run_prediction([arrival.request for arrival in arrivals], replicas=2, block_size=128,
                                       capacity_blocks=80, seed=seed, load=load, latency=LATENCY, limits=LIMITS,
                                       **options))


def _tenant_trace(requests: int, tenants: int, seed: int) -> list[Arrival]:
    """bench_predict_under_load's kind of trace, smaller: skewed tenants' preambles, unique questions."""
    rng = random.Random(seed)
    preambles = [f"Tenant {i}: " + " ".join(f"context line {i}-{j} about the tenant's data" for j in range(50))
                 for i in range(tenants)]
    popularity = [1 / (rank + 1) for rank in range(tenants)]
    arrivals = []
    for n in range(requests):
        body = {"model": "m", "max_tokens": 16, "prompt": f"{rng.choices(preambles, popularity)[0]} Question {n}: "
                                                          f"{rng.random()}"}
        arrivals.append(Arrival(body, Request("m", body["prompt"])))
    return arrivals


def _pressure(weights: Mapping[str, int] | None, pods: int, capacity_blocks: int,
              precise: bool = False) -> dict[str, Any]:
    """A Poisson trace onto pods whose KV cache is too small for it: evictions and preemptions;
    `precise`: routed on the pods' KV-cache events (blocks of 16, speculative entries)."""
    arrivals = _tenant_trace(3000, 60, 5)
    plan = plan_load(arrivals, rate=500.0, seed=7)
    load = Load(plan, (16,) * len(arrivals), EngineLimits(max_num_seqs=48, max_num_batched_tokens=2048))
    index = PreciseIndex(16, "m", "http://vllm", speculative=True) if precise else None
    return _digest(run_prediction([arrival.request for arrival in arrivals], weights=weights, replicas=pods,
                                  capacity_blocks=capacity_blocks, seed=3, load=load, picker_replicas=2,
                                  precise=index))


def _restarts(directory: Path, prefix_index: str) -> Any:
    """A timed workload with a picker restart and a pod restart, on one prefix index."""
    lines = TRACE.read_text(encoding="utf-8").splitlines()
    workload = directory / "restarts.jsonl"
    workload.write_text("\n".join([*lines, json.dumps({"at": 1.0, "restart": "picker"}),
                                   json.dumps({"at": 2.0, "restart": "pod", "pod": 1})]) + "\n", encoding="utf-8")
    return _cli("predict", "--pods", "3", "--workload", str(workload), "--seed", "12", "--capacity-blocks", "300",
                "--prefix-index", prefix_index)


def _weight_change(directory: Path) -> Any:
    """A timed workload whose weights change halfway: the pickers restart with empty indexes."""
    lines = TRACE.read_text(encoding="utf-8").splitlines()
    workload = directory / "weight-change.jsonl"
    workload.write_text("\n".join([*lines, json.dumps({"at": 2.0, "weights": {"prefix": 0, "queue": 3}})]) + "\n",
                        encoding="utf-8")
    return _cli("predict", "--pods", "3", "--workload", str(workload), "--seed", "11", "--runs", "2")


def cases(directory: Path) -> dict[str, Callable[[], Any]]:
    """Every golden case by file name; `directory` is scratch space for workloads they write."""
    trace = str(TRACE)
    found: dict[str, Callable[[], Any]] = {
        "seed-shared-dev": lambda: _cli("predict", "--stack", "dev", "--model", "qwen-small", "--seed", "1"),
        "seed-unique-dev": lambda: _cli("predict", "--stack", "dev", "--model", "qwen-small", "--workload",
                                        "seed-unique", "--seed", "1"),
        "seed-shared-dev-no-prefix": lambda: _cli("predict", "--stack", "dev", "--model", "qwen-small", "--weights",
                                                  "prefix=0,queue=3,kvCache=2", "--seed", "1"),
        "seed-shared-eks-explain": lambda: _cli("predict", "--stack", "eks", "--model", "qwen-small", "--seed", "2",
                                                "--explain", "3"),
        "seed-shared-characters": lambda: _cli("predict", "--pods", "2", "--picker-version", "v0.8", "--seed", "1"),
        "seed-shared-lru": lambda: _cli("predict", "--pods", "3", "--weights", "lru=2,prefix=1", "--seed", "4",
                                        "--runs", "3"),
        "trace-concurrency-runs": lambda: _cli("predict", "--pods", "2", "--workload", trace, "--concurrency", "8",
                                               "--seed", "3", "--runs", "3"),
        "trace-own-times-replicas": lambda: _cli("predict", "--pods", "3", "--workload", trace, "--picker-replicas",
                                                 "2", "--seed", "4", "--explain", "20"),
        "trace-rate-spacing": lambda: _cli("predict", "--pods", "4", "--workload", trace, "--rate", "30",
                                           "--send-spacing", "0.003", "--seed", "5", "--runs", "2"),
        "trace-sticky-eks": lambda: _cli("predict", "--stack", "eks", "--model", "qwen-small", "--workload", trace,
                                         "--concurrency", "8", "--routing", "sticky,maxTTFTPenaltyMs=200,"
                                         "peakPrefillThroughput=800", "--seed", "6", "--runs", "2"),
        "trace-weight-change": lambda: _weight_change(directory),
        "sweep-weights": lambda: _sweep("predict", "--pods", "2", "--workload", trace, "--concurrency", "8",
                                        "--sweep", "prefix=0..2,queue=0..1", "--runs", "2", "--seed", "1"),
        "sweep-sticky": lambda: _sweep("predict", "--pods", "2", "--workload", trace, "--concurrency", "8",
                                       "--routing", "sticky,peakPrefillThroughput=800", "--sweep",
                                       "maxTTFTPenaltyMs=0..400:200", "--seed", "2"),
        "pressure-default": lambda: _pressure(None, 4, 700),
        "pressure-no-prefix": lambda: _pressure(NO_PREFIX, 4, 700),
        "pressure-precise": lambda: _pressure(None, 4, 700, precise=True),
        "trace-precise-restarts": lambda: _restarts(directory, "precise"),
        "trace-approximate-restarts": lambda: _restarts(directory, "approximate"),
    }
    for index, name in enumerate(("multi-tenant", "multi-turn-chat", "cache-pressure")):
        for setting in ("default", "no-prefix", "sticky", "sticky-upstream"):
            for seed in (1, 2):
                found[f"underload-{name}-{setting}-{seed}"] = (
                    lambda index=index, setting=setting, seed=seed: _under_load(index, setting, seed))
        found[f"underload-{name}-default-spaced"] = lambda index=index: _under_load(index, "default", 3, 0.004)
    return found


def golden_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="compute every case and rewrite its golden file")
    args = parser.parse_args(argv)
    if not args.write:
        parser.error("nothing to do: pass --write to rewrite the golden files (the tests compare against them)")
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name, compute in cases(Path(scratch)).items():
            golden_path(name).write_text(json.dumps(compute(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
            print(f"wrote {golden_path(name).relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
