"""The weight advisor: `predict --sweep prefix=0..5,queue=0..5,kvCache=0..5`.

Every combination of the swept weights (the others as the stack or --weights set them) is
predicted on the same workload and seeds; the table shows hit rate, TTFT p95 and load
imbalance per setting, `--plot` draws them as heat maps, and the best setting under
`--objective` comes with the `pulumi config set` lines that deploy it.
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, TextIO

from routing.simulation.latency import percentile
from routing.simulation.prediction import Prediction
from routing.tables import percent
from settings import WEIGHT_NAMES

OBJECTIVES = ("hit-rate", "ttft-p95", "balance")
DEFAULT_OBJECTIVE = "hit-rate"
# More combinations than this is a typing mistake more often than a plan (6^3 = 216 is the example).
MAX_SETTINGS = 2000


def sweep_option(text: str) -> dict[str, tuple[int, ...]]:
    """An argparse type for --sweep NAME=A..B,NAME=N,...: the values each named weight takes."""
    grid: dict[str, tuple[int, ...]] = {}
    example = "e.g. --sweep prefix=0..5,queue=0..5,kvCache=0..5"
    for part in text.split(","):
        name, sep, values = part.strip().partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"--sweep {part!r}: write NAME=A..B or NAME=N, {example}")
        if name not in WEIGHT_NAMES:
            raise argparse.ArgumentTypeError(f"--sweep {name!r}: not a weight; valid weights: {', '.join(WEIGHT_NAMES)}")
        if name in grid:
            raise argparse.ArgumentTypeError(f"--sweep {name}: named twice; give each weight one range")
        low, dots, high = values.partition("..")
        try:
            first, last = int(low), int(high if dots else low)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--sweep {part!r}: the values must be whole numbers, {example}") from None
        if first < 0 or last < first:
            raise argparse.ArgumentTypeError(f"--sweep {part!r}: a range A..B needs 0 <= A <= B, {example}")
        grid[name] = tuple(range(first, last + 1))
    total = 1
    for values in grid.values():
        total *= len(values)
    if total > MAX_SETTINGS:
        raise argparse.ArgumentTypeError(f"--sweep {text!r}: {total} settings, more than {MAX_SETTINGS}; narrow a range")
    return grid


@dataclass(frozen=True)
class SettingResult:
    """One setting's figures, each the mean over the runs (seeds), with its range."""

    setting: Mapping[str, int]
    hit_rate: float
    hit_rate_range: tuple[float, float]
    ttft_p95: float
    imbalance: float  # busiest pod's requests over the mean, less 1: 0 is an even split

    def to_json(self) -> dict:
        return {"weights": dict(self.setting), "hitRate": self.hit_rate, "hitRateRange": list(self.hit_rate_range),
                "ttftP95": self.ttft_p95, "imbalance": self.imbalance}


def imbalance(prediction: Prediction) -> float:
    counts = [pod.requests for pod in prediction.picker.pods]
    mean = sum(counts) / len(counts)
    return max(counts) / mean - 1 if mean else 0.0


def summarise(setting: Mapping[str, int], predictions: Sequence[Prediction]) -> SettingResult:
    rates = [p.picker.hit_rate or 0.0 for p in predictions]
    p95s = [percentile(p.ttfts[0], 0.95) or 0.0 for p in predictions]
    return SettingResult(setting, sum(rates) / len(rates), (min(rates), max(rates)), sum(p95s) / len(p95s),
                         sum(imbalance(p) for p in predictions) / len(predictions))


def best_of(results: Sequence[SettingResult], objective: str) -> SettingResult:
    """The best setting; among equals the earliest, so the smallest weights win ties."""
    key: dict[str, Callable[[SettingResult], float]] = {
        "hit-rate": lambda r: -r.hit_rate, "ttft-p95": lambda r: r.ttft_p95, "balance": lambda r: r.imbalance}
    return min(results, key=key[objective])


def sweep(grid: Mapping[str, Sequence[int]], evaluate: Callable[[Mapping[str, int]], SettingResult],
          out: TextIO) -> list[SettingResult]:
    """Evaluates every setting of `grid`, printing progress (count, elapsed, time left) to `out`."""
    names = list(grid)
    settings = [dict(zip(names, values)) for values in itertools.product(*(grid[name] for name in names))]
    results = []
    started = time.monotonic()
    for number, setting in enumerate(settings, start=1):
        results.append(evaluate(setting))
        elapsed = time.monotonic() - started
        left = elapsed / number * (len(settings) - number)
        label = ",".join(f"{name}={value}" for name, value in setting.items())
        print(f"\rsweep {number}/{len(settings)} ({label}) {elapsed:.0f}s elapsed, ~{left:.0f}s left   ",
              end="" if number < len(settings) else "\n", file=out, flush=True)
    return results


def format_table(results: Sequence[SettingResult], best: SettingResult, runs: int) -> str:
    names = list(results[0].setting)
    spread = "  hit rate range" if runs > 1 else ""
    lines = ["  ".join(f"{name:>7}" for name in names) + f"  {'hit rate':>8}  {'TTFT p95':>9}  {'imbalance':>9}{spread}"]
    for result in results:
        cells = "  ".join(f"{result.setting[name]:>7}" for name in names)
        low, high = result.hit_rate_range
        extra = f"  {percent(low)}–{percent(high)}" if runs > 1 else ""
        marker = "  <- best" if result is best else ""
        lines.append(f"{cells}  {percent(result.hit_rate):>8}  {result.ttft_p95 * 1000:>7.1f}ms  "
                     f"{result.imbalance:>9.2f}{extra}{marker}")
    return "\n".join(lines)


def config_lines(best: SettingResult, config_path: str, stack: str | None,
                 overrides: Mapping[str, int] | None = None) -> list[str]:
    """The `pulumi config set` commands that deploy the best setting: the --weights `overrides`
    it was predicted with (the stack does not hold them yet), then its swept weights."""
    where = f" --stack {stack}" if stack else ""
    weights = {**{name: value for name, value in (overrides or {}).items() if name not in best.setting},
               **best.setting}
    return [f"pulumi config set --path '{config_path}.{name}' {value}{where}" for name, value in weights.items()]
