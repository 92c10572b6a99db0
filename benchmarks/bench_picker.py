"""How long the endpoint-picker model takes per request, at 2, 16 and 64 pods.

    python -m benchmarks.bench_picker        (from the repo root)

Each pick hashes the request, matches it against the prefix index, runs the scorers of the
default profile (queue 2, kvCache 2, prefix 3) and records the request's blocks. Prompts are
~4,018 characters (3,897-4,025): one of 50 shared preambles plus a unique question.
"""

from __future__ import annotations

import random
import time

from routing.picker.endpoint_picker import EndpointPicker, PodMetrics, Request

POD_COUNTS = (2, 16, 64)
WARMUP = 500
MEASURED = 3000
# The fastest of several rounds: the least disturbed by whatever else the machine runs.
ROUNDS = 5
WEIGHTS = {"queue": 2, "kvCache": 2, "prefix": 3}


def prompts(count: int, rng: random.Random) -> list[str]:
    preambles = [f"System prompt {i}: " + " ".join(f"rule {i}.{j} keep answers grounded" for j in range(120))
                 for i in range(50)]
    return [f"{rng.choice(preambles)} Question {n}: {rng.random()}" for n in range(count)]


def pods(count: int, rng: random.Random) -> list[PodMetrics]:
    return [PodMetrics(f"pod-{i}", waiting=rng.randrange(4), running=rng.randrange(8), kv_usage=rng.random(),
                       block_size=16, num_gpu_blocks=31250) for i in range(count)]


def main() -> None:
    rng = random.Random(7)
    texts = prompts(WARMUP + MEASURED, rng)
    requests = [Request(model="Qwen/Qwen2.5-0.5B-Instruct", prompt=text) for text in texts]
    print(f"endpoint picker decision time, default weights, {MEASURED} requests of ~{len(texts[0]):,} characters "
          f"(best of {ROUNDS} rounds)")
    for count in POD_COUNTS:
        fleet = pods(count, rng)
        timings = []
        for _ in range(ROUNDS):
            picker = EndpointPicker(WEIGHTS, seed=1)
            for request in requests[:WARMUP]:
                picker.pick(request, fleet)
            start = time.perf_counter()
            for request in requests[WARMUP:]:
                picker.pick(request, fleet)
            timings.append(time.perf_counter() - start)
        print(f"  {count:>3} pods: {min(timings) / MEASURED * 1e6:8.1f} µs per request")


if __name__ == "__main__":
    main()
