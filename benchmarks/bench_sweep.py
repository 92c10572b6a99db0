"""The weight advisor on a day's worth of traffic: `predict --sweep` over 216 settings of a
100,000-request trace, as a user runs it, timed from the command's start to its table.

    python -m benchmarks.bench_sweep                          (from the repo root; 216 settings)
    python -m benchmarks.bench_sweep --grid prefix=0..1       (fewer settings, for a quick look)
    python -m benchmarks.bench_sweep --checkout DIR           (the same sweep by another checkout's
                                                               predict, e.g. the landed code, for a ratio)

The trace is bench_predict_under_load's (200 tenants' ~2,000-character preambles, popularity
skewed, unique questions, 16 output tokens), written as a workload file of request bodies and
sent at 800 requests/s (Poisson, --rate) onto 16 pods with the default weights, one run per
setting. The command's progress goes to this benchmark's stderr as it comes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_predict_under_load import PODS, RATE, trace

REPO = Path(__file__).resolve().parent.parent
GRID = "prefix=0..5,queue=0..5,kvCache=0..5"


def write_trace(path: Path) -> int:
    arrivals = trace(random.Random(3))
    with path.open("w", encoding="utf-8") as workload:
        for arrival in arrivals:
            workload.write(json.dumps(arrival.body) + "\n")
    return len(arrivals)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", default=GRID, help=f"the --sweep to run (default {GRID}, 216 settings)")
    parser.add_argument("--checkout", type=Path, default=REPO,
                        help="the checkout whose `python -m routing predict` runs (default: this one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        workload = Path(scratch) / "trace.jsonl"
        requests = write_trace(workload)
        command = [sys.executable, "-m", "routing", "predict", "--pods", str(PODS), "--workload", str(workload),
                   "--rate", f"{RATE:g}", "--seed", "1", "--sweep", args.grid, "--json"]
        print(f"sweep {args.grid} of {requests:,} requests at {RATE:g}/s onto {PODS} pods, by {args.checkout}",
              flush=True)
        started = time.monotonic()
        result = subprocess.run(command, cwd=args.checkout, stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(args.checkout)})
        elapsed = time.monotonic() - started
    if result.returncode != 0:
        print(f"bench_sweep: predict exited {result.returncode}", file=sys.stderr)
        return result.returncode
    report = json.loads(result.stdout)
    settings = len(report["settings"])
    best = report["best"]
    print(f"  {settings} settings in {elapsed:.0f} s ({elapsed / 60:.1f} min, {elapsed / settings:.2f} s a setting, "
          f"{requests * settings / elapsed:,.0f} simulated requests/s); best for hit rate {best['weights']} at "
          f"{best['hitRate']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
