"""How long one evaluation of the Pulumi program takes under mocks, with 1, 10 and 100 models.

Run: .venv/bin/python benchmarks/bench_program.py
"""

import json
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
warnings.simplefilter("ignore", DeprecationWarning)

from tests.stack.program import run_program  # noqa: E402

ROUNDS = 5


def config_with(models: int) -> dict:
    entries = [{"name": f"model-{i}", "model": f"org/model-{i}", "replicas": 2} for i in range(models)]
    return {"models": json.dumps(entries), "gateway.jwt.issuer": "https://idp.example.com",
            "gateway.jwt.jwksUri": "https://idp.example.com/jwks", "gateway.jwt.audiences": '["api"]',
            # One GPU node per replica and a spare, so the program has nothing to warn about.
            "gpuNodes.desired": str(2 * models + 1), "gpuNodes.max": str(2 * models + 1)}


def main() -> None:
    run_program(config_with(1))  # warm-up: imports and first gRPC set-up
    print(f"{'models':>6}  {'resources':>9}  {'median s':>8}  {'min s':>6}  (of {ROUNDS} runs)")
    for models in (1, 10, 100):
        timings, resources = [], 0
        for _ in range(ROUNDS):
            started = time.perf_counter()
            run = run_program(config_with(models))
            timings.append(time.perf_counter() - started)
            resources = len(run.resources)
        print(f"{models:>6}  {resources:>9}  {statistics.median(timings):>8.2f}  {min(timings):>6.2f}")


if __name__ == "__main__":
    main()
