"""How a workload is sent in simulated time: at the workload's own times, as a Poisson process
at a rate, or by a closed loop of N clients; a session's turn waits for its previous one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from routing.workloads import Arrival, PodRestart, WeightChange, WorkloadError


@dataclass(frozen=True)
class LoadPlan:
    """How a workload is sent: at planned times (`send_at`), or by `concurrency` clients, each
    sending its next request when its previous one finished. Either way a session's turn waits
    for the session's previous turn."""

    sessions: tuple[str | None, ...]
    send_at: tuple[float, ...] | None = None
    concurrency: int | None = None
    weight_changes: tuple[WeightChange, ...] = ()
    pod_restarts: tuple[PodRestart, ...] = ()

    def describe(self) -> str:
        if self.concurrency is not None:
            return f"closed loop, {self.concurrency} in flight"
        span = max(self.send_at) - min(self.send_at) if self.send_at else 0.0
        return f"{len(self.send_at)} arrivals over {span:.1f}s"


def replays_in_time(arrivals: Sequence[Arrival], *, rate: float | None, concurrency: int | None) -> bool:
    """Whether `plan_load` gives a plan (`--rate`, `--concurrency` or "at" times), not serial."""
    return rate is not None or concurrency is not None or any(arrival.at is not None for arrival in arrivals)


def plan_load(arrivals: Sequence[Arrival], *, rate: float | None = None, concurrency: int | None = None,
              seed: int | None = None, weight_changes: Sequence[WeightChange] = (),
              pod_restarts: Sequence[PodRestart] = ()) -> LoadPlan | None:
    """The plan `--rate` (Poisson arrivals), `--concurrency` or the workload's own times give;
    None for a workload of bare bodies with neither option: serial, one request at a time."""
    sessions = tuple(arrival.session for arrival in arrivals)
    changes, restarts = tuple(weight_changes), tuple(pod_restarts)
    if concurrency is not None:
        return LoadPlan(sessions, concurrency=concurrency, weight_changes=changes, pod_restarts=restarts)
    if rate is not None:
        rng = random.Random(seed)
        times, now = [], 0.0
        for _ in arrivals:
            times.append(now)
            now += rng.expovariate(rate)
        return LoadPlan(sessions, send_at=tuple(times), weight_changes=changes, pod_restarts=restarts)
    if not replays_in_time(arrivals, rate=rate, concurrency=concurrency):
        if changes or restarts:
            raise WorkloadError("the workload changes weights or restarts pickers or pods at set times, so it needs a "
                                'clock: give its requests "at" times, or pass --rate or --concurrency')
        return None
    missing = next((index for index, arrival in enumerate(arrivals) if arrival.at is None), None)
    if missing is not None:
        raise WorkloadError(f"workload request {missing} has no \"at\" while others do: give every line an \"at\", "
                            "or pass --rate or --concurrency to decide when requests go out")
    return LoadPlan(sessions, send_at=tuple(arrival.at for arrival in arrivals), weight_changes=changes,
                    pod_restarts=restarts)
