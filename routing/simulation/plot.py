"""Heat maps of a weight sweep: one row per figure (hit rate, TTFT p95, load imbalance), one
panel per value of the third swept weight, the first two on the axes; the best setting framed."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any, Sequence

from routing.simulation.prediction import PredictError
from routing.simulation.sweep import SettingResult, setting_label, value_text
from settings import WEIGHT_NAMES

# (title, value of a result, format, colour map): each map runs from worse to better, so
# bright always means good.
FIGURES = (
    ("hit rate", lambda r: r.hit_rate * 100, "{:.1f}%", "viridis"),
    ("TTFT p95 (ms)", lambda r: r.ttft_p95 * 1000, "{:.0f}", "magma_r"),
    ("load imbalance\n(max/mean − 1)", lambda r: r.imbalance, "{:.2f}", "cividis_r"),
)
# A sweep of one or two weights makes a small grid: the figure stays wide enough for the colour
# bars and the title (which wraps at about this many characters an inch), and each row tall
# enough for its label, which runs up the side.
MIN_WIDTH_INCHES = 6.4
TITLE_CHARACTERS_PER_INCH = 11
MIN_ROW_INCHES = 1.6


def check_plot_path(path: str) -> None:
    """Refuses, before the sweep runs, a --plot path matplotlib could not write the heat map to."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise PredictError(f"--plot {path}: heat maps need matplotlib, which is not installed; "
                           "pip install -r requirements-routing.txt, or drop --plot") from None
    target = Path(path)
    formats = FigureCanvasBase.get_supported_filetypes()
    if target.suffix.lower().lstrip(".") not in formats:
        raise PredictError(f"--plot {path}: matplotlib writes only {', '.join('.' + name for name in formats)} "
                           f"files; end the name in one, e.g. --plot {target.with_suffix('.png').name}")
    folder = target.parent
    if not folder.is_dir():
        raise PredictError(f"--plot {path}: the folder {folder} does not exist; create it (mkdir -p {folder}) or "
                           "write the heat map elsewhere")
    if target.is_dir():
        raise PredictError(f"--plot {path}: a folder; name a file in it, e.g. --plot {target / 'sweep.png'}")
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise PredictError(f"--plot {path}: not writable here; write the heat map into a folder you can write to")


def _axis_label(name: str) -> str:
    """A weight's axis says so; a sticky-recipe parameter's carries its own unit in its name."""
    return f"{name} weight" if name in WEIGHT_NAMES else name


def heat_map(results: Sequence[SettingResult], path: str, *, title: str, best: SettingResult, objective: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    names = list(results[0].setting)  # at most three (predict checks): x, y and panels
    values = [sorted({r.setting[name] for r in results}) for name in names]
    x_name, x_values = names[0], values[0]
    y_name, y_values = (names[1], values[1]) if len(names) > 1 else ("", [0])
    panel_name, panel_values = (names[2], values[2]) if len(names) > 2 else ("", [0])
    by_setting = {tuple(r.setting[name] for name in names): r for r in results}

    def key(x: int, y: int, panel: int) -> tuple[int, ...]:
        return (x, y, panel)[:len(names)]

    columns = len(panel_values)
    width = max(MIN_WIDTH_INCHES, 0.55 * len(x_values) * columns + 2.2)
    heading = textwrap.wrap(title, int(width * TITLE_CHARACTERS_PER_INCH)) + [
        f"best for {objective} (red frame): {setting_label(best)}"]
    figure, axes = plt.subplots(len(FIGURES), columns,
                                figsize=(width, max(MIN_ROW_INCHES, 0.5 * len(y_values)) * len(FIGURES) + 1.0
                                         + 0.2 * len(heading)),
                                squeeze=False, constrained_layout=True)
    for row, (label, value_of, fmt, colours) in enumerate(FIGURES):
        cells = [value_of(r) for r in results]
        low, high = min(cells), max(cells)
        image = None
        for column, panel in enumerate(panel_values):
            ax = axes[row][column]
            grid = [[value_of(by_setting[key(x, y, panel)]) for x in x_values] for y in y_values]
            image = ax.imshow(grid, origin="lower", cmap=colours, vmin=low, vmax=high if high > low else low + 1,
                              aspect="auto")
            norm = image.norm
            for yi, line in enumerate(grid):
                for xi, cell in enumerate(line):
                    shade = image.cmap(norm(cell))
                    light = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] > 0.55
                    ax.text(xi, yi, fmt.format(cell), ha="center", va="center", fontsize=7,
                            color="black" if light else "white")
            ax.set_xticks(range(len(x_values)), [value_text(v) for v in x_values])
            ax.set_yticks(range(len(y_values)), [value_text(v) for v in y_values] if y_name else [""])
            if row == len(FIGURES) - 1:
                ax.set_xlabel(_axis_label(x_name))
            if column == 0:
                ax.set_ylabel(f"{label}\n\n{_axis_label(y_name)}" if y_name else label)
            if row == 0 and panel_name:
                ax.set_title(f"{panel_name} = {value_text(panel)}", fontsize=10)
            best_key = tuple(best.setting[name] for name in names)
            if best_key[2:] == key(0, 0, panel)[2:]:
                bx = x_values.index(best_key[0])
                by = y_values.index(best_key[1]) if y_name else 0
                ax.add_patch(Rectangle((bx - 0.5, by - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.2))
        figure.colorbar(image, ax=list(axes[row]), shrink=0.9, pad=0.01)
    figure.suptitle("\n".join(heading), fontsize=11)
    figure.savefig(path, dpi=130)
    plt.close(figure)


def write_scaling_plot(path: str, prediction: Any, width: float) -> None:
    """`predict --autoscale --plot`: replicas (asked for, Ready) at each scaler step, and per window
    the hit rate and TTFT p95 of the requests sent, beside the fixed fleet's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from routing.simulation.scaling import windows

    steps = prediction.run.steps
    scaled = windows(prediction.scaled, steps, width)
    fixed = windows(prediction.fixed, steps, width)
    middles = [(w.start + w.end) / 2 for w in scaled]
    figure, (replicas, hits, ttft) = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True, constrained_layout=True)
    replicas.step([s.at for s in steps], [s.desired for s in steps], where="post", label="asked for (HPA)")
    replicas.step([s.at for s in steps], [s.ready for s in steps], where="post", label="Ready, in the pool")
    replicas.axhline(prediction.policy.max_replicas, color="grey", linestyle=":", label="fixed fleet")
    replicas.set_ylabel("replicas")
    replicas.legend(fontsize=8, loc="upper left")
    hits.plot(middles, [None if w.hit_rate is None else w.hit_rate * 100 for w in scaled], marker=".", label="scaled")
    hits.plot(middles, [None if w.hit_rate is None else w.hit_rate * 100 for w in fixed], marker=".", color="grey",
              label=f"{prediction.policy.max_replicas} fixed")
    hits.set_ylabel("hit rate (%)")
    hits.legend(fontsize=8, loc="lower left")
    ttft.plot(middles, [w.ttft_p95 for w in scaled], marker=".", label="scaled")
    ttft.plot(middles, [w.ttft_p95 for w in fixed], marker=".", color="grey", label="fixed")
    ttft.set_ylabel("TTFT p95 (s)")
    ttft.set_xlabel("seconds into the workload (requests by the time they were sent)")
    ttft.legend(fontsize=8, loc="upper left")
    figure.suptitle(f"{prediction.policy.metric} target {prediction.policy.target:g}, "
                    f"{prediction.policy.min_replicas}-{prediction.policy.max_replicas} replicas, node lead "
                    f"{prediction.policy.node_lead:g} s + model load {prediction.policy.pod_start:g} s", fontsize=10)
    figure.savefig(path, dpi=120)
    plt.close(figure)
