"""`demo`: the seed page's three comparisons on this machine, with real vLLM and no cloud or GPU.

Builds the tiny model, starts two real vLLM CPU servers (the two replicas), puts `serve`
in front of them and sends the page's batches, measuring each from vLLM's own counters
with the same code as `verify`, next to what `predict` says for the same run:

1. shared-prefix batch, default weights   -> expected to concentrate on one pod
2. unique-prefix batch, default weights   -> expected to spread
3. shared-prefix batch, prefix=0          -> expected to spread

Each run gets a fresh `serve` (a fresh picker, as after the page's re-apply of the gateway
config) and starts with both servers' prefix caches emptied, so no run inherits blocks or
picker state from the one before. Each request goes out once `serve` has scraped both
servers idle since the previous response, so its picker sees what `predict` assumes between
serial requests and, with the same seed, the two can be compared pod by pod.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TextIO

from routing.lab import tinymodel
from routing.lab.vllm_server import (REPO_ROOT, SERVED_MODEL, StepError, VllmPair, VllmUnavailable, add_vllm_options,
                                     resolve_vllm_python, step, vllm_pair)
from routing.live.serve import RoutedRequest, start_gateway
from routing.live.verify import Measurement, UrlGateway, UrlPods, judge, measure
from routing.metrics import DeltaReport
from routing.simulation.prediction import Prediction, run_prediction
from routing.tables import format_pod_table, percent
from routing.workloads import seed_shared, seed_unique, to_requests

DEFAULT_WORK_DIR = REPO_ROOT / "build" / "demo"
DEFAULT_SEED = 7
# The page's step 5 config: prefix off, queue and kvCache kept.
NO_PREFIX_WEIGHTS = {"prefix": 0, "queue": 3, "kvCache": 2}


@dataclass(frozen=True)
class Run:
    title: str
    workload: Callable[[str], list[dict[str, Any]]]
    weights: Mapping[str, int] | None
    expect: str


RUNS = (
    Run("shared prefix, default weights (page step 3)", seed_shared, None, "concentrate"),
    Run("unique prefixes, default weights (page step 4)", seed_unique, None, "spread"),
    Run("shared prefix, prefix=0 queue=3 kvCache=2 (page step 5)", seed_shared, NO_PREFIX_WEIGHTS, "spread"),
)


@dataclass(frozen=True)
class RunResult:
    run: Run
    measurement: Measurement
    prediction: Prediction
    passed: bool
    reason: str

    def to_json(self) -> dict:
        return {"title": self.run.title, "expect": self.run.expect, "passed": self.passed, "reason": self.reason,
                "measured": self.measurement.to_json(), "predicted": self.prediction.picker.to_json()}


def counts(report: DeltaReport) -> list[tuple[int, int | None, int | None]]:
    """(requests, hits, queries) per pod, in the report's pod order: measured pods by name,
    predicted pod-i standing for the i-th server."""
    return [(p.requests, p.hits, p.queries) for p in report.pods]


def side_by_side(left_title: str, left: str, right_title: str, right: str, gap: int = 6) -> str:
    left_lines, right_lines = [left_title, *left.splitlines()], [right_title, *right.splitlines()]
    width = max(len(line) for line in left_lines)
    rows = max(len(left_lines), len(right_lines))
    left_lines += [""] * (rows - len(left_lines))
    right_lines += [""] * (rows - len(right_lines))
    return "\n".join(f"{a:<{width + gap}}{b}".rstrip() for a, b in zip(left_lines, right_lines))


def measure_through_serve(pair: VllmPair, bodies: Sequence[Mapping[str, Any]], weights: Mapping[str, int] | None,
                          *, seed: int, out: TextIO) -> tuple[Measurement, list[RoutedRequest]]:
    """Sends `bodies` through a fresh `serve` (a fresh picker: `weights` over the defaults, `seed`)
    in front of the pair, serially: the servers' counter deltas, and serve's picks.

    Before each request it waits until serve has scraped every server idle after the previous
    response: its picker then sees what predict's simulated pods report between serial
    requests, so measured and predicted picks can be compared one to one (`predict_like`).
    """
    still_up = f"{pair.still_up}, then run the demo again"
    with step(f"starting serve in front of {', '.join(pair.backends)}",
              f"every server must answer GET /metrics; {still_up}"):
        gateway = start_gateway(pair.backends, weights, seed=seed)
    with gateway:
        print(f"   serve: {gateway.gateway.label}, seed {seed}", file=out, flush=True)
        with step(f"sending the batch through serve ({gateway.url}) and reading the servers' counters", still_up):
            measurement = measure(UrlPods(pair.backends), UrlGateway(gateway.url, {}), bodies, out,
                                  settle=gateway.wait_idle)
        return measurement, list(gateway.gateway.history)


def predict_like(pair: VllmPair, bodies: Sequence[Mapping[str, Any]], weights: Mapping[str, int] | None, *,
                 seed: int) -> Prediction:
    """What `predict` says `measure_through_serve` with the same arguments measures: the same
    weights and seed, the servers' block size, capacity and tokenizer. Its pod-i stands for the
    pair's i-th server."""
    with step("predicting the same batch (tokens counted by the server's /tokenize)",
              f"{pair.still_up}, then run the demo again"):
        return run_prediction(to_requests(bodies), weights=weights, replicas=len(pair.servers),
                              block_size=pair.block_size, capacity_blocks=pair.capacity_blocks,
                              tokenizer=pair.tokenizer, seed=seed)


def run_one(run: Run, pair: VllmPair, *, seed: int, out: TextIO, started: float) -> RunResult:
    bodies = run.workload(SERVED_MODEL)
    pair.reset_prefix_caches()
    print(f"\n== {run.title} (at {time.monotonic() - started:.0f}s)\n   prefix caches emptied", file=out, flush=True)
    measurement, _ = measure_through_serve(pair, bodies, run.weights, seed=seed, out=out)
    prediction = predict_like(pair, bodies, run.weights, seed=seed)
    verdict = judge(measurement, run.expect)
    print(side_by_side("measured (vLLM counters)", format_pod_table(measurement.report),
                       "predicted (routing.simulation.predict)", format_pod_table(prediction.picker)), file=out)
    measured, predicted = counts(measurement.report), counts(prediction.picker)
    print(f"   per-pod (requests, hits, queries) in pod order: measured {measured}, predicted {predicted} -> "
          f"{'same' if measured == predicted else 'different'}", file=out)
    print(f"   {'PASS' if verdict.passed else 'FAIL'}: {verdict.reason}", file=out, flush=True)
    return RunResult(run, measurement, prediction, verdict.passed, verdict.reason)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "demo", help="the seed page's three comparisons on two local vLLM CPU servers (no cloud, no GPU)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_vllm_options(parser, DEFAULT_WORK_DIR)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"seed for the picker's tie-breaks, in serve and predict alike (default {DEFAULT_SEED})")
    parser.add_argument("--json", action="store_true", help="also print the three runs as JSON at the end")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    try:
        python = resolve_vllm_python(args.vllm_python)
    except VllmUnavailable as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    started = time.monotonic()
    print(f"demo: two vLLM CPU servers of a tiny model built here; {tinymodel.GIBBERISH}", file=out, flush=True)
    try:
        with vllm_pair(args.work_dir / "tiny-model", args.work_dir / "logs", python, out=out,
                       timeout=args.start_timeout) as pair:
            servers_up = time.monotonic()
            results = [run_one(r, pair, seed=args.seed, out=out, started=started) for r in RUNS]
            runs_done = time.monotonic()
    except StepError as error:
        print(f"demo: {error}\ndemo: fix: {error.fix}", file=sys.stderr)
        return 1
    finished = time.monotonic()
    print(f"\nSummary ({finished - started:.0f}s: {servers_up - started:.0f}s the model and the servers' start, "
          f"{runs_done - servers_up:.0f}s the three runs, {finished - runs_done:.0f}s stopping the servers):", file=out)
    for result in results:
        rate = result.measurement.report.hit_rate
        print(f"  {'PASS' if result.passed else 'FAIL'}  {result.run.title}: expected {result.run.expect}; "
              f"hit rate {percent(rate)}", file=out)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    return 0 if all(r.passed for r in results) else 1
