"""The weight advisor: `predict --sweep prefix=0..5,queue=0..5,kvCache=0..5`, or for the sticky
recipe its filter's parameters, `predict --sweep maxTTFTPenaltyMs=0..20000`.

Every combination of the swept values (the others as the stack or --weights set them) is
predicted on the same workload and seeds; the table shows hit rate, TTFT p95 and load
imbalance per setting and marks the front (the settings no other beats), `--plot` draws them
as heat maps, and the best setting on the front under `--objective` comes with the
`pulumi config set` lines that deploy it, after a caution when its edge is within the noise.
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, TextIO

from routing.simulation.latency import percentile
from routing.simulation.parallel import map_in_order
from routing.simulation.prediction import Prediction
from routing.tables import percent
from settings import WEIGHT_NAMES
from settings.picker_config import STICKY_PARAMETERS

DEFAULT_OBJECTIVE = "hit-rate"
# More combinations than this is a typing mistake more often than a plan (6^3 = 216 is the example).
MAX_SETTINGS = 2000
# What `predict --autoscale --sweep` varies (routing/simulation/predict_scaling.py).
SCALING_PARAMETERS = ("minReplicas", "target", "leadTime")
# A sticky parameter's range A..B without a step: this many evenly spaced values, ends included.
PARAMETER_POINTS = 9

Value = int | float


def sweep_option(text: str) -> dict[str, tuple[Value, ...]]:
    """An argparse type for --sweep NAME=A..B,NAME=N,...: the values each named weight (whole
    numbers, step 1) or sticky-recipe parameter (numbers; A..B:STEP, or PARAMETER_POINTS values
    from A to B) takes."""
    grid: dict[str, tuple[Value, ...]] = {}
    example = "e.g. --sweep prefix=0..5,queue=0..5,kvCache=0..5 or --sweep maxTTFTPenaltyMs=0..20000"
    for part in text.split(","):
        name, sep, values = part.strip().partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"--sweep {part!r}: write NAME=A..B or NAME=N, {example}")
        if name not in WEIGHT_NAMES and name not in STICKY_PARAMETERS and name not in SCALING_PARAMETERS:
            raise argparse.ArgumentTypeError(f"--sweep {name!r}: not a weight, a sticky-recipe parameter or a scaling "
                                             f"one; valid weights: {', '.join(WEIGHT_NAMES)}; parameters: "
                                             f"{', '.join(STICKY_PARAMETERS)}; with --autoscale: "
                                             f"{', '.join(SCALING_PARAMETERS)}")
        if name in grid:
            raise argparse.ArgumentTypeError(f"--sweep {name}: named twice; give each one range")
        whole = name in WEIGHT_NAMES or name == "minReplicas"
        grid[name] = _weight_range(part, values, example) if whole else _parameter_range(part, values)
    total = 1
    for values in grid.values():
        total *= len(values)
    if total > MAX_SETTINGS:
        raise argparse.ArgumentTypeError(f"--sweep {text!r}: {total} settings, more than {MAX_SETTINGS}; narrow a range")
    return grid


def _weight_range(part: str, values: str, example: str) -> tuple[int, ...]:
    low, dots, high = values.partition("..")
    try:
        first, last = int(low), int(high if dots else low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sweep {part!r}: weights are whole numbers, {example}") from None
    if first < 0 or last < first:
        raise argparse.ArgumentTypeError(f"--sweep {part!r}: a range A..B needs 0 <= A <= B, {example}")
    return tuple(range(first, last + 1))


def _parameter_range(part: str, values: str) -> tuple[Value, ...]:
    example = "e.g. maxTTFTPenaltyMs=0..20000 (9 values) or maxTTFTPenaltyMs=0..20000:2500"
    span, colon, step_text = values.partition(":")
    low, dots, high = span.partition("..")
    try:
        first, last = float(low), float(high if dots else low)
        step = float(step_text) if colon else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sweep {part!r}: write A..B or A..B:STEP with numbers, {example}") from None
    if last < first or (step is not None and not step > 0):
        raise argparse.ArgumentTypeError(f"--sweep {part!r}: a range A..B:STEP needs A <= B and STEP > 0, {example}")
    if first == last:
        return (_number(first),)
    if step is None:
        step = (last - first) / (PARAMETER_POINTS - 1)
    count = int((last - first) / step + 1e-9) + 1
    if count > MAX_SETTINGS:
        raise argparse.ArgumentTypeError(f"--sweep {part!r}: {count} values; take a larger STEP, {example}")
    return tuple(_number(first + index * step) for index in range(count))


def _number(value: float) -> Value:
    rounded = round(value, 6)
    return int(rounded) if rounded.is_integer() else rounded


def value_text(value: Value) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


@dataclass(frozen=True)
class RunFigures:
    """One setting's figures in one run (seed)."""

    hit_rate: float
    ttft_p95: float
    imbalance: float

    def to_json(self) -> dict:
        return {"hitRate": self.hit_rate, "ttftP95": self.ttft_p95, "imbalance": self.imbalance}


@dataclass(frozen=True)
class SettingResult:
    """One setting's figures, each the mean over the runs (seeds), with every run's."""

    setting: Mapping[str, int]
    hit_rate: float
    hit_rate_range: tuple[float, float]
    ttft_p95: float
    imbalance: float  # busiest pod's requests over the mean, less 1: 0 is an even split
    runs: tuple[RunFigures, ...] = ()  # in seed order; none for a result given by its means alone

    def spread(self, figure: Figure) -> tuple[float, float]:
        """The figure's lowest and highest over the runs, as the table would show them (the mean
        alone when there are no runs)."""
        values = [figure.shown(run) for run in self.runs] or [figure.shown(self)]
        return min(values), max(values)

    def to_json(self) -> dict:
        return {"weights": dict(self.setting), "hitRate": self.hit_rate, "hitRateRange": list(self.hit_rate_range),
                "ttftP95": self.ttft_p95, "imbalance": self.imbalance, "runs": [run.to_json() for run in self.runs]}


@dataclass(frozen=True)
class Figure:
    """A column of the table. The advisor compares figures as the table prints them, so two
    settings it shows alike are equal: float noise below the last digit decides nothing, and
    that digit (0.1% of hit rate, 0.1 ms, 0.01 of imbalance) is finer than the run-to-run spread."""

    name: str
    attribute: str  # of a SettingResult and of a RunFigures
    scale: float  # to the unit printed
    decimals: int
    unit: str
    higher_is_better: bool

    def shown(self, figures: SettingResult | RunFigures) -> float:
        return round(getattr(figures, self.attribute) * self.scale, self.decimals)

    def cost(self, figures: SettingResult | RunFigures) -> float:
        """The shown value, signed so that lower is better."""
        return -self.shown(figures) if self.higher_is_better else self.shown(figures)

    def text(self, shown: float) -> str:
        return f"{shown:.{self.decimals}f}{self.unit}"


HIT_RATE = Figure("hit rate", "hit_rate", 100, 1, "%", higher_is_better=True)
TTFT_P95 = Figure("TTFT p95", "ttft_p95", 1000, 1, " ms", higher_is_better=False)
IMBALANCE = Figure("imbalance", "imbalance", 1, 2, "", higher_is_better=False)
FIGURES = (HIT_RATE, TTFT_P95, IMBALANCE)  # the table's order
OBJECTIVES = {"hit-rate": HIT_RATE, "ttft-p95": TTFT_P95, "balance": IMBALANCE}


def imbalance(prediction: Prediction) -> float:
    counts = [pod.requests for pod in prediction.picker.pods]
    mean = sum(counts) / len(counts)
    return max(counts) / mean - 1 if mean else 0.0


def summarise(setting: Mapping[str, int], predictions: Sequence[Prediction]) -> SettingResult:
    runs = tuple(RunFigures(p.picker.hit_rate or 0.0, percentile(p.ttfts[0], 0.95) or 0.0, imbalance(p))
                 for p in predictions)
    rates = [run.hit_rate for run in runs]
    return SettingResult(setting, sum(rates) / len(rates), (min(rates), max(rates)),
                         sum(run.ttft_p95 for run in runs) / len(runs), sum(run.imbalance for run in runs) / len(runs),
                         runs)


def _costs(result: SettingResult) -> tuple[float, ...]:
    return tuple(figure.cost(result) for figure in FIGURES)


def _dominates(costs: tuple[float, ...], other: tuple[float, ...]) -> bool:
    return costs != other and all(mine <= theirs for mine, theirs in zip(costs, other))


def front(results: Sequence[SettingResult]) -> list[SettingResult]:
    """The settings no other dominates (is as good as on every figure and better on one), in the
    sweep's order. Settings with the same figures dominate nothing of each other: all stay."""
    costs = [_costs(result) for result in results]
    kept: list[int] = []
    # A setting's dominators sort before it, so checking it against the front so far suffices.
    for index in sorted(range(len(results)), key=costs.__getitem__):
        if not any(_dominates(costs[kept_index], costs[index]) for kept_index in kept):
            kept.append(index)
    return [results[index] for index in sorted(kept)]


def _order(objective: str) -> tuple[Figure, ...]:
    """The objective's figure first, then the others in the table's order: hit rate, TTFT p95,
    imbalance (the cache hits the picker is deployed for, then the latency users see)."""
    first = OBJECTIVES[objective]
    return (first, *(figure for figure in FIGURES if figure is not first))


def _ranking(objective: str, deployed: Mapping[str, Value] | None = None) -> Callable[[SettingResult], tuple]:
    """Better first: the figures in `_order`, then the `deployed` setting (a change that gains
    nothing is no change worth making), then the smallest weights (their sum, then the earliest in
    the sweep), as a setting that adds weight for nothing has no claim to be chosen."""
    order = _order(objective)
    return lambda result: (*(figure.cost(result) for figure in order), result.setting != deployed,
                           sum(result.setting.values()), tuple(result.setting.values()))


def best_of(results: Sequence[SettingResult], objective: str) -> SettingResult:
    """The best setting on the front for `objective`: never one another setting ties or beats on
    every figure; equals on the objective are told apart by the other figures, then the weights."""
    return advise(results, objective).best


@dataclass(frozen=True)
class Advice:
    """The best setting for an objective, the front it was chosen from, and the runner-up."""

    objective: str
    best: SettingResult
    front: tuple[SettingResult, ...]
    # The next on the front in the ranking whose figures differ from the best's: settings with the
    # same figures route alike (the best's equals, not its rival), and one off the front is no
    # alternative (the best ties or beats it on every figure).
    runner_up: SettingResult | None

    @property
    def decided_by(self) -> Figure | None:
        """The figure that put the best before the runner-up: the objective, unless they tie on it."""
        if self.runner_up is None:
            return None
        return next(figure for figure in _order(self.objective)
                    if figure.cost(self.best) != figure.cost(self.runner_up))

    @property
    def within_noise(self) -> bool | None:
        """Whether the best's edge is inside the run-to-run spread: on the deciding figure, the
        ranges of the best's and the runner-up's runs overlap. None: one run, or no runner-up."""
        figure = self.decided_by
        if figure is None or len(self.best.runs) < 2:
            return None
        (low, high), (other_low, other_high) = self.best.spread(figure), self.runner_up.spread(figure)
        return max(low, other_low) <= min(high, other_high)

    def to_json(self) -> dict:
        return {"objective": self.objective, "best": self.best.to_json(),
                "runnerUp": self.runner_up.to_json() if self.runner_up else None, "withinNoise": self.within_noise,
                "front": [dict(result.setting) for result in self.front]}


def advise(results: Sequence[SettingResult], objective: str, deployed: SettingResult | None = None) -> Advice:
    """The best of `results` for `objective`; among equals the `deployed` setting's values, if one
    of the results has them."""
    on_front = front(results)
    ranking = _ranking(objective, None if deployed is None else deployed.setting)
    best = min(on_front, key=ranking)
    rivals = [result for result in on_front if _costs(result) != _costs(best)]
    return Advice(objective, best, tuple(on_front), min(rivals, key=ranking, default=None))


def setting_label(result: SettingResult) -> str:
    return ", ".join(f"{name}={value_text(value)}" for name, value in result.setting.items())


def describe(result: SettingResult) -> str:
    return (f"{setting_label(result)} (hit rate {percent(result.hit_rate)}, TTFT p95 {result.ttft_p95 * 1000:.1f} ms, "
            f"imbalance {result.imbalance:.2f})")


DEFAULT_LATENCY_CAUTION = (
    "Caution: TTFT here comes from the built-in default latency model, not measured on your pods: "
    "`python -m routing calibrate` measures them and writes a profile; sweep again with --latency-profile FILE "
    "before choosing weights for TTFT.")


def cautions(advice: Advice, *, default_latency: bool) -> list[str]:
    """What to know before deploying the best setting: its edge within the noise, TTFT unmeasured."""
    found = []
    figure, runner_up = advice.decided_by, advice.runner_up
    if advice.within_noise and figure is not None and runner_up is not None:
        order = _order(advice.objective)
        tied = [other.name for other in order[:order.index(figure)]]
        gap = abs(figure.shown(advice.best) - figure.shown(runner_up))
        ranges = ["–".join(figure.text(value) for value in result.spread(figure))
                  for result in (advice.best, runner_up)]
        found.append(f"Caution: the edge is within the noise. The runner-up, {describe(runner_up)}, "
                     + (f"ties it on {' and '.join(tied)} and " if tied else "")
                     + f"is {figure.text(gap)} behind on {figure.name}, and over the {len(advice.best.runs)} runs "
                     f"their {figure.name} ranges overlap ({ranges[0]} and {ranges[1]}): either may be the better "
                     "setting.")
    if default_latency and OBJECTIVES[advice.objective] is TTFT_P95:
        found.append(DEFAULT_LATENCY_CAUTION)
    return found


# Below this many requests a workload says too little about traffic to change a deployed setting
# for: one request placed elsewhere moves a pod's share by a point or more, and the hit rate a
# setting reaches differs from one small sample of the traffic to the next by several points.
MIN_REQUESTS_TO_RECOMMEND = 100
# The scorers that read load: on a workload whose pods are idle at every pick they score every
# pod alike, and their weights change nothing there.
LOAD_WEIGHTS = ("queue", "kvCache", "runningRequests")


@dataclass(frozen=True)
class Verdict:
    """Whether the sweep's best is worth deploying in place of what runs today, and why (or why not)."""

    deployed: SettingResult
    change: bool
    reason: str

    def to_json(self) -> dict:
        return {"deployed": self.deployed.to_json(), "recommend": self.change, "reason": self.reason}


def verdict(advice: Advice, deployed: SettingResult, *, requests: int, idle_pods: bool) -> Verdict:
    """The best is recommended over the deployed setting only when the workload can tell them
    apart: enough requests, pods under load where load weights differ, a different result, and an
    edge on the objective beyond the run-to-run spread. Ties go to the deployed setting.
    `idle_pods`: the workload's pods are idle at every pick (a serial replay)."""
    figure, best = OBJECTIVES[advice.objective], advice.best

    def keep(reason: str) -> Verdict:
        return Verdict(deployed, False, reason)

    if requests < MIN_REQUESTS_TO_RECOMMEND:
        return keep(f"the workload has {requests} requests, too few to tell settings apart (a recommendation needs "
                    f"at least {MIN_REQUESTS_TO_RECOMMEND}; a sample of your traffic of thousands says more)")
    changed = {name for name, value in best.setting.items() if deployed.setting.get(name) != value}
    if idle_pods and changed and changed <= set(LOAD_WEIGHTS):
        return keep(f"the replay is serial, so every pick sees idle pods and the load scorers ({', '.join(sorted(changed))}) "
                    "score them alike; sweep their weights under load (--concurrency or --rate)")
    if _costs(best) == _costs(deployed):
        return keep("the deployed setting does as well as the best on every figure; ties go to it")
    shown, deployed_shown = figure.shown(best), figure.shown(deployed)
    if figure.cost(best) >= figure.cost(deployed):
        return keep(f"the best does no better than the deployed setting on {figure.name} ({figure.text(shown)} against "
                    f"{figure.text(deployed_shown)}); ties go to the deployed setting")
    gap = figure.text(abs(shown - deployed_shown))
    if len(best.runs) < 2 or len(deployed.runs) < 2:
        return keep(f"the best is {gap} better on {figure.name} in one run, and one run says nothing of how far runs "
                    "spread: sweep again with --runs 3 before changing what is deployed")
    (low, high), (deployed_low, deployed_high) = best.spread(figure), deployed.spread(figure)
    ranges = f"{figure.text(low)}–{figure.text(high)} against {figure.text(deployed_low)}–{figure.text(deployed_high)}"
    if max(low, deployed_low) <= min(high, deployed_high):
        return keep(f"the best's edge over the deployed setting ({gap} on {figure.name}) is within the run-to-run "
                    f"spread: over {len(best.runs)} runs their ranges overlap ({ranges})")
    return Verdict(deployed, True, f"{gap} better on {figure.name} than the deployed setting, beyond the run-to-run "
                                   f"spread ({ranges} over {len(best.runs)} runs)")


def sweep(grid: Mapping[str, Sequence[int]], evaluate: Callable[[Mapping[str, int]], SettingResult],
          out: TextIO) -> list[SettingResult]:
    """Evaluates every setting of `grid`, printing progress (count, elapsed, time left) to `out`.

    The first setting runs here: it computes what every setting shares (the workload tokenized,
    round-robin's fleet and the best case, per seed; see prediction.Baseline). The others then
    run on every core, each in a child forked with that shared work done."""
    names = list(grid)
    settings = [dict(zip(names, values)) for values in itertools.product(*(grid[name] for name in names))]
    results = []
    started = time.monotonic()
    # On a terminal one line is rewritten in place, and wiped at the end so the table stands alone;
    # elsewhere (a file, a CI log) a line for every tenth of the settings.
    terminal = out.isatty()
    every = max(1, len(settings) // 10)
    evaluated = itertools.chain([evaluate(settings[0])], map_in_order(evaluate, settings[1:], parallel=True))
    for number, (setting, result) in enumerate(zip(settings, evaluated), start=1):
        results.append(result)
        elapsed = time.monotonic() - started
        left = elapsed / number * (len(settings) - number)
        label = ",".join(f"{name}={value_text(value)}" for name, value in setting.items())
        progress = f"sweep {number}/{len(settings)} ({label}) {elapsed:.0f}s elapsed, ~{left:.0f}s left"
        if terminal:
            print(f"\r{progress}\033[K", end="", file=out, flush=True)
        elif number % every == 0 or number == len(settings):
            print(progress, file=out, flush=True)
    if terminal:
        print("\r\033[K", end="", file=out, flush=True)
    return results


def format_table(results: Sequence[SettingResult], advice: Advice, runs: int,
                 deployed: SettingResult | None = None) -> str:
    """The sweep's settings, the deployed one marked among them when it is one of them (the same
    values, the same predictions), else after them (its values of the swept names; - where it has none)."""
    names = list(results[0].setting)
    if deployed is not None:
        deployed = next((result for result in results
                         if result.setting == deployed.setting and result.runs == deployed.runs), deployed)
    on_front = {id(result) for result in advice.front}
    spread = "  hit rate range" if runs > 1 else ""
    widths = [max(7, len(name)) for name in names]
    lines = ["  ".join(f"{name:>{width}}" for name, width in zip(names, widths))
             + f"  {'hit rate':>8}  {'TTFT p95':>9}  {'imbalance':>9}  {'front':>5}{spread}"]
    for result in [*results, *([deployed] if deployed is not None and deployed not in results else [])]:
        cells = "  ".join(f"{value_text(result.setting[name]) if name in result.setting else '-':>{width}}"
                          for name, width in zip(names, widths))
        low, high = result.hit_rate_range
        extra = f"  {percent(low)}–{percent(high)}" if runs > 1 else ""
        marks = [label for label, chosen in (("best", advice.best), ("deployed", deployed)) if result is chosen]
        marker = f"  <- {', '.join(marks)}" if marks else ""
        lines.append(f"{cells}  {percent(result.hit_rate):>8}  {result.ttft_p95 * 1000:>7.1f}ms  "
                     f"{result.imbalance:>9.2f}  {'*' if id(result) in on_front else '':>5}{extra}{marker}")
    return "\n".join(lines)


def config_lines(best: SettingResult, config_path: str, stack: str | None,
                 overrides: Mapping[str, Value | str] | None = None) -> list[str]:
    """The `pulumi config set` commands that deploy the best setting: the `overrides` it was
    predicted with (--weights, or --routing's recipe and parameters: the stack does not hold them
    yet), then its swept values."""
    where = f" --stack {stack}" if stack else ""
    values = {**{name: value for name, value in (overrides or {}).items() if name not in best.setting},
              **best.setting}
    return [f"pulumi config set --path '{config_path}.{name}' "
            f"{value if isinstance(value, str) else value_text(value)}{where}" for name, value in values.items()]
