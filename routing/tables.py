"""The one per-pod table every command prints: predicted (`predict`, `demo`) and measured
(`verify`, `demo`) rows look the same, so they can be read side by side."""

from __future__ import annotations

from typing import Protocol, Sequence

NO_PREFIX_METRIC = "no prefix-cache metric"


def percent(rate: float | None) -> str:
    """A hit rate as the tables print it: one decimal, "-" when there was nothing to rate."""
    return "-" if rate is None else f"{rate:.1%}"


class PodRow(Protocol):
    pod: str
    requests: int
    hits: int | None  # None: the pod exposes no prefix-cache metric
    queries: int | None

    @property
    def hit_rate(self) -> float | None: ...


class PodReport(Protocol):
    pods: Sequence[PodRow]

    @property
    def requests(self) -> int: ...

    @property
    def hits(self) -> int: ...

    @property
    def queries(self) -> int: ...

    @property
    def hit_rate(self) -> float | None: ...


def format_pod_table(report: PodReport, indent: str = "") -> str:
    """Per-pod requests, hits, queries (tokens) and hit rate, an `overall` row, then any notes.

    Rows of measured pods may carry `restarted` and `notes` (metrics.PodDelta); a pod without
    a prefix-cache metric shows "-" for its hits and queries.
    """
    width = max([len("overall")] + [len(p.pod) for p in report.pods])

    def row(name: str, requests: int, hits: int | None, queries: int | None, rate: float | None) -> str:
        return (f"{indent}{name:<{width}}  {requests:>8}  {'-' if hits is None else hits:>9}  "
                f"{'-' if queries is None else queries:>9}  {percent(rate):>8}")

    lines = [f"{indent}{'pod':<{width}}  {'requests':>8}  {'hits':>9}  {'queries':>9}  {'hit rate':>8}"]
    notes = []
    for pod in report.pods:
        marker = ("  (restarted)" if getattr(pod, "restarted", False)
                  else f"  ({NO_PREFIX_METRIC})" if pod.hits is None else "")
        lines.append(row(pod.pod, pod.requests, pod.hits, pod.queries, pod.hit_rate) + marker)
        notes += [f"{indent}  {pod.pod}: {note}" for note in getattr(pod, "notes", ())]
    lines.append(row("overall", report.requests, report.hits, report.queries, report.hit_rate))
    return "\n".join(lines + notes)
