"""`predict`'s throughput on a 10,000-request workload.

    python -m benchmarks.bench_predict       (from the repo root)

The workload mixes 100 shared preambles (~2,000 characters, popularity skewed) with unique
questions. Each request is replayed through all three fleets predict compares (the picker's
two pods, round-robin's two pods, the never-evicting best-case pod), with the estimate
tokenizer and vLLM's GPU block size of 16.
"""

from __future__ import annotations

import random
import time

from routing.simulation.prediction import predict

REQUESTS = 10_000
# The fastest of several rounds: the least disturbed by whatever else the machine runs.
ROUNDS = 3
WEIGHTS = {"queue": 2, "kvCache": 2, "prefix": 3}


def workload(rng: random.Random) -> list[dict]:
    preambles = [f"Preamble {i}: " + " ".join(f"context line {i}-{j} about the tenant's data" for j in range(50))
                 for i in range(100)]
    weights = [1 / (rank + 1) for rank in range(len(preambles))]
    return [{"model": "Qwen/Qwen2.5-0.5B-Instruct",
             "prompt": f"{rng.choices(preambles, weights)[0]} Question {n}: {rng.random()}", "max_tokens": 4}
            for n in range(REQUESTS)]


def main() -> None:
    bodies = workload(random.Random(3))
    timings = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        result = predict(bodies, weights=WEIGHTS, replicas=2, seed=1)
        timings.append(time.perf_counter() - start)
    elapsed = min(timings)
    print(f"predict: {REQUESTS:,} requests in {elapsed:.2f} s = {REQUESTS / elapsed:,.0f} requests/s, best of "
          f"{ROUNDS} (picker hit rate {result['hitRate']:.1%}, round-robin {result['roundRobin']['hitRate']:.1%}, "
          f"best {result['bestHitRate']:.1%})")


if __name__ == "__main__":
    main()
