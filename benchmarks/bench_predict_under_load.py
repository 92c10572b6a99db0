"""The time-aware `predict` on a 100,000-request trace at 16 pods, in simulated requests per second.

    python -m benchmarks.bench_predict_under_load       (from the repo root)

The trace: 200 tenants' preambles (~2,000 characters, popularity skewed) with unique
questions, Poisson arrivals at 800 requests/s (about half of what 16 pods of the default
GPU latency model serve), 16 output tokens each, vLLM's GPU block size of 16 and its
default scheduler limits. Prints the whole of `run_prediction` (tokenizing, with the picker's
block hashes; then the picker's fleet, with round-robin's fleet and the best-case pod in a
forked child beside it), then its parts: the tokenizing and the picker's fleet alone.
"""

from __future__ import annotations

import random
import time

from routing.picker.endpoint_picker import EndpointPicker, Request
from routing.picker.prefix import EstimateTokenizer
from routing.simulation.fleet import Fleet, prepare, simulate_under_load
from routing.simulation.latency import DEFAULT_LATENCY, DEFAULT_LIMITS
from routing.simulation.load_plan import plan_load
from routing.simulation.prediction import Load, run_prediction
from routing.workloads import Arrival

REQUESTS = 100_000
PODS = 16
RATE = 800.0
OUTPUT_TOKENS = 16
WEIGHTS = {"queue": 2, "kvCache": 2, "prefix": 3}


def trace(rng: random.Random) -> list[Arrival]:
    preambles = [f"Tenant {i}: " + " ".join(f"context line {i}-{j} about the tenant's data" for j in range(50))
                 for i in range(200)]
    popularity = [1 / (rank + 1) for rank in range(len(preambles))]
    arrivals = []
    for n in range(REQUESTS):
        body = {"model": "Qwen/Qwen2.5-0.5B-Instruct", "max_tokens": OUTPUT_TOKENS,
                "prompt": f"{rng.choices(preambles, popularity)[0]} Question {n}: {rng.random()}"}
        arrivals.append(Arrival(body, Request(body["model"], body["prompt"])))
    return arrivals


def main() -> None:
    arrivals = trace(random.Random(3))
    plan = plan_load(arrivals, rate=RATE, seed=1)
    load = Load(plan, (OUTPUT_TOKENS,) * REQUESTS)
    requests = [a.request for a in arrivals]
    print(f"time-aware predict: {REQUESTS:,} requests at {RATE:g}/s (Poisson) onto {PODS} pods, default weights")

    started = time.perf_counter()
    prediction = run_prediction(requests, weights=WEIGHTS, replicas=PODS, seed=1, load=load)
    whole = time.perf_counter() - started
    p95 = sorted(prediction.ttfts[0])[int(REQUESTS * 0.95)]
    print(f"  run_prediction (tokenize, picker fleet, round-robin fleet, best case): {whole:.1f} s = "
          f"{REQUESTS / whole:,.0f} simulated requests/s (picker hit rate {prediction.picker.hit_rate:.1%}, "
          f"round-robin {prediction.round_robin.hit_rate:.1%}, TTFT p95 {p95 * 1000:.0f} ms, "
          f"{prediction.picker.duration:.0f} s simulated)")

    picker = EndpointPicker(WEIGHTS, seed=1)
    started = time.perf_counter()
    prepared = prepare(requests, load.output_lens, EstimateTokenizer(), 16, picker.hash_plan(16))
    tokenized = time.perf_counter() - started
    fleet = Fleet(tuple(f"pod-{i}" for i in range(PODS)), (picker,), 31250, DEFAULT_LIMITS, DEFAULT_LATENCY)
    started = time.perf_counter()
    simulate_under_load(prepared, plan, fleet, seed=1)
    alone = time.perf_counter() - started
    print(f"  tokenizing and hashing: {tokenized:.1f} s; the picker's fleet alone after it: {alone:.1f} s = "
          f"{REQUESTS / alone:,.0f} simulated requests/s")


if __name__ == "__main__":
    main()
