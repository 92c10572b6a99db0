"""A slice of Mooncake's production trace on two real vLLM CPU servers: predicted against
measured, as the under-load benchmark holds its synthetic workloads.

    .venv/bin/python -m routing trace get conversation            (once)
    .venv/bin/python -m benchmarks.bench_trace_slice [--runs 3] [--seeds 20] [--vllm-python PATH]

The slice is `trace slice`'s: the conversations whose first request comes in the trace's first
20 seconds, every turn of them, each hash id scaled from 512 tokens to 64 (an eighth: the tiny
model's context is 4,096 tokens and a CPU prefills about a thousand tokens a second), replies
capped at 16 tokens, requests that would not fit the context left out. Each request is sent as
the token-ID prompt `verify` synthesizes from its ids, so the servers' prefix caches and the
picker's hashes see exactly the trace's sharing. The servers are the under-load benchmark's
(benchmarks/underload.py: the medium tiny model, 80 KV blocks of 128 tokens, 16 sequences),
calibrated first; the requests go in trace order through `serve`, four in a closed loop, the
settings taking turns: default weights, prefix=0, round-robin and the precise index. `predict`
keys the same file from its ids (`--trace-block-tokens 64`) with the calibrated profile. Prints
the rows and how many meet the targets (hit rate within 3 points, the busiest pod's share
within 10, TTFT p50 within 25%, the ranking).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.underload import (NO_PREFIX, Experiment, Row, Setting, add_pair_options, add_run_options,
                                  benchmark_pair, calibrate_pair, format_rows, measure_rounds, parse_run_options,
                                  predict_runs, ranking_lines, reply_spacing_seconds, serve_process, target_tallies)
from routing.lab.trace import slice_conversations
from routing.lab.vllm_server import StepError, VllmUnavailable, resolve_vllm_python
from routing.picker.prefix import EstimateTokenizer
from routing.traces import read_trace, repeated_share, write_trace
from routing.workloads import load_arrivals

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO / "traces" / "conversation_trace.jsonl"
STARTED_BEFORE = 20.0  # seconds: the conversations of the slice start before it
ID_TOKENS = 64
OUTPUT_TOKENS = 16
MAX_MODEL_LEN = 4096
SETTINGS = (Setting("default weights"), Setting("prefix=0,queue=3,kvCache=2", NO_PREFIX),
            Setting("round-robin", round_robin=True), Setting("precise", precise=True))


def slice_experiment(trace_path: Path, model: str, scratch: Path, runs: int) -> Experiment:
    kept, too_long = slice_conversations(read_trace(trace_path), STARTED_BEFORE, ID_TOKENS, OUTPUT_TOKENS,
                                         MAX_MODEL_LEN)
    path = scratch / "slice.jsonl"
    write_trace(path, kept)
    arrivals = tuple(load_arrivals(str(path), model, ID_TOKENS, trace_prompts=True))
    share = repeated_share(arrival.request.traced for arrival in arrivals)
    return Experiment("conversation slice",
                      f"{len(arrivals)} requests of the conversations starting in the trace's first "
                      f"{STARTED_BEFORE:g} s, ids of {ID_TOKENS} tokens, {share:.1%} of blocks seen before "
                      f"({too_long} longer than {MAX_MODEL_LEN} left out); 4 in flight", arrivals, 4, runs=runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(parser)
    add_run_options(parser, "3", workloads=False)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                        help="Mooncake's conversation trace (default: traces/conversation_trace.jsonl)")
    args = parse_run_options(parser, argv)
    if not args.trace.exists():
        print(f"bench: no {args.trace}; get it with `.venv/bin/python -m routing trace get conversation`",
              file=sys.stderr)
        return 2
    try:
        python = resolve_vllm_python(args.vllm_python)
    except VllmUnavailable as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        with benchmark_pair(args.work_dir, python, timeout=args.start_timeout) as pair, \
                tempfile.TemporaryDirectory() as scratch:
            experiment = slice_experiment(args.trace, pair.tokenizer.model, Path(scratch), args.runs or 3)
            print(f"{experiment.name}: {experiment.description}", flush=True)
            print("calibrating", flush=True)
            profile = calibrate_pair(pair, progress=lambda line: print(line, flush=True))
            print(f"calibrated: {profile.latency.describe()}", flush=True)
            with serve_process(pair.backends, (), 0, pair.log_dir / "serve.log") as serve:
                spacing = reply_spacing_seconds(serve.url, pair.tokenizer.model, experiment.arrivals,
                                                experiment.concurrency)
            measured = measure_rounds(pair, experiment, SETTINGS, profile, experiment.runs)
            rows = [Row(experiment.name, setting.label, tuple(measured[setting.label]),
                        tuple(predict_runs(pair, profile, experiment, EstimateTokenizer(), setting,
                                           range(1, args.seeds + 1), spacing)))
                    for setting in SETTINGS]
    except StepError as error:
        print(f"bench: {error}\nbench: fix: {error.fix}", file=sys.stderr)
        return 1
    print("\n" + format_rows(rows) + "\n")
    for line in ranking_lines(rows).values():
        print(line)
    for line in target_tallies(rows):
        print(line)
    print(f"\n{(time.monotonic() - started) / 60:.0f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
