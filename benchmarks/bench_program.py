"""How long one evaluation of the Pulumi program takes under mocks, on each platform, with 1, 10 and 100 models.

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


def config_with(models: int, platform: str) -> dict:
    entries = [{"name": f"model-{i}", "model": f"org/model-{i}", "replicas": 2, "pickerReplicas": 1}
               for i in range(models)]
    config = {"platform": platform, "models": json.dumps(entries)}
    # One GPU per replica and a spare GPU, so the program has nothing to warn about.
    gpus = 2 * models + 1
    if platform == "hyperpod":
        config.update({"gateway.jwt.issuer": "https://idp.example.com",
                       "gateway.jwt.jwksUri": "https://idp.example.com/jwks", "gateway.jwt.audiences": '["api"]',
                       "hyperpod.instanceGroups": json.dumps([
                           {"name": "gpu", "instanceType": "ml.g5.48xlarge", "count": -(-gpus // 8)},
                           {"name": "system", "instanceType": "ml.c5.4xlarge", "count": 1}])})
    else:
        config.update({"gpuNodes.desired": str(gpus), "gpuNodes.max": str(gpus)})
    return config


def main() -> None:
    print(f"{'platform':>8}  {'models':>6}  {'resources':>9}  {'median s':>8}  {'min s':>6}  (of {ROUNDS} runs)")
    for platform in ("hyperpod", "eks"):
        run_program(config_with(1, platform))  # warm-up: imports and first gRPC set-up
        for models in (1, 10, 100):
            timings, resources = [], 0
            for _ in range(ROUNDS):
                started = time.perf_counter()
                run = run_program(config_with(models, platform))
                timings.append(time.perf_counter() - started)
                resources = len(run.resources)
            print(f"{platform:>8}  {models:>6}  {resources:>9}  {statistics.median(timings):>8.2f}  {min(timings):>6.2f}")


if __name__ == "__main__":
    main()
