"""Replicas that follow the load, in simulated time: the scaler the stack deploys, the wait for a
node and a model load, and the cold cache each new replica starts with.

The stack's scaler (components/autoscaling) is a KEDA ScaledObject whose HorizontalPodAutoscaler
reads the sum of one vLLM gauge over the model's pods from Prometheus, as an External metric of
type AverageValue. Kubernetes' HPA controller (pkg/controller/podautoscaler, v1.34):
- every `--horizontal-pod-autoscaler-sync-period` (15 s) it reads the metric; with current
  replicas R (the Deployment's spec, starting pods included), total M and target T per replica,
  it keeps R while |M / (T·R) - 1| <= 0.1, else recommends ceil(M / T);
- it stabilizes: up at once (window 0), down to the highest recommendation of the last
  `scaleDownDelay` seconds (the stack's 300);
- it limits the rate: up to max(2R, R + 4) per 15 s, down by up to 100%; then minReplicas..maxReplicas.
KEDA's own `pollingInterval` only wakes a model from zero replicas, and the stack's minReplicas is
at least 1: it never acts here. Prometheus samples the gauge every scrape interval; the HPA reads
the last sample.

A scale-up's replica serves once a node is there (a spare one left by a scale-in and not yet
consolidated, else `node_lead` seconds for Karpenter to launch one, which then pulls the vLLM
image) and its model has loaded (`pod_start`). It joins the pool cold. A scale-in takes the newest
pod out of the pool at once (a starting one first, as a ReplicaSet does); it finishes what it holds,
and its node goes `consolidate_after` seconds later unless a new replica takes it first.
One replica per node: a model's GPUs are one node's (g5.xlarge for a one-GPU model on `eks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from routing.simulation.latency import percentile

HPA_SYNC_SECONDS = 15.0
HPA_TOLERANCE = 0.1
SCALE_UP_PODS = 4  # the HPA's default scale-up policies: 4 pods or 100% per 15 s, the larger
SCALE_UP_FACTOR = 2
# Defaults for what no AWS or Karpenter document states for a GPU node: say so where they are printed.
# Karpenter's docs show a CPU node Ready about 37 s after its NodeClaim; a GPU AMI boots its driver
# and the new node pulls the ~10 GB vLLM image (ai-on-eks: "up to 8 minutes" for large images).
DEFAULT_NODE_LEAD_SECONDS = 180.0
# Container start to Ready: vLLM loads the model and allocates its cache (vendor reports: 82-294 s;
# the low end for the small models of the seed). `servers` prints the local servers' own start.
DEFAULT_POD_START_SECONDS = 90.0
DEFAULT_CONSOLIDATE_AFTER_SECONDS = 600.0
DEFAULTS_SOURCE = ("node lead 180 s and pod start 90 s are assumptions, not published figures: measure "
                   "yours (`kubectl get nodeclaims -w`, the pod's Ready time) and pass --node-lead-time, --pod-start")
METRICS = ("waiting", "running", "kvCache")
# What each replica-hour costs on the README's price list (us-west-2 on demand): per instance, and
# the GPUs it has; one replica takes `gpus` of them.
INSTANCE_PRICES = {"g5.xlarge": (1.006, 1), "ml.g5.12xlarge": (7.09, 4)}

# A new replica's first minute in the pool: the requests it takes then show its cold cache.
COLD_WINDOW_SECONDS = 60.0
# Payloads of the replay's scaling events (fleet._SCALE): the scaler's clock (Prometheus samples
# and HPA syncs, one event at a time so that it stops with the workload), a replica turns Ready
# (payload READY + its number).
CLOCK, READY = 0, 1


@dataclass(frozen=True)
class ScalingPolicy:
    min_replicas: int
    max_replicas: int
    metric: str
    target: float
    scale_down_window: float = 300.0
    scrape_interval: float = 15.0
    node_lead: float = DEFAULT_NODE_LEAD_SECONDS
    pod_start: float = DEFAULT_POD_START_SECONDS
    consolidate_after: float = DEFAULT_CONSOLIDATE_AFTER_SECONDS
    sync_interval: float = HPA_SYNC_SECONDS

    def describe(self) -> str:
        return (f"{self.min_replicas} to {self.max_replicas} replicas on {self.metric} (target {self.target:g} per "
                f"replica); HPA sync every {self.sync_interval:g} s on Prometheus' {self.scrape_interval:g} s samples, "
                f"up at once, down after a {self.scale_down_window:g} s window; a new replica serves "
                f"{self.node_lead:g} s (node) + {self.pod_start:g} s (model load) after it is asked for, "
                f"{self.pod_start:g} s on a spare node; empty nodes go after {self.consolidate_after:g} s")


class HorizontalScaler:
    """Kubernetes' HPA on one External AverageValue metric, with the stack's behavior (see above)."""

    def __init__(self, policy: ScalingPolicy, replicas: int):
        self.policy = policy
        self.replicas = replicas
        self.recommendations: list[tuple[float, int]] = []

    def decide(self, now: float, metric: float) -> int:
        """The Deployment's replicas after the sync at `now` that read `metric` (the sum over pods)."""
        policy, current = self.policy, self.replicas
        ratio = metric / (policy.target * current)
        wanted = current if abs(ratio - 1) <= HPA_TOLERANCE else math.ceil(metric / policy.target)
        # Stabilization: the recommendations of the window, this one with them (the up window is 0).
        self.recommendations = [(at, r) for at, r in self.recommendations if at > now - policy.scale_down_window]
        self.recommendations.append((now, wanted))
        down = max(r for _, r in self.recommendations)
        stabilized = wanted if wanted > current else min(current, down)
        limited = min(stabilized, max(SCALE_UP_FACTOR * current, current + SCALE_UP_PODS))
        self.replicas = max(policy.min_replicas, min(policy.max_replicas, limited))
        return self.replicas


@dataclass
class _Node:
    launched: float
    empty_since: float | None = None
    ended: float | None = None

    def spare(self, now: float, consolidate_after: float) -> bool:
        return self.ended is None and self.empty_since is not None and now < self.empty_since + consolidate_after


@dataclass
class _Pod:
    node: _Node
    asked: float
    ready_at: float
    engine: int | None = None  # once Ready
    removed: float | None = None


@dataclass(frozen=True)
class ScalingStep:
    at: float
    metric: float
    desired: int
    ready: int


@dataclass
class ScalingRun:
    """One replay's scaler and nodes, driven by the replay's events (fleet._LoadReplay)."""

    policy: ScalingPolicy
    pod_prefix: str
    steps: list[ScalingStep] = field(default_factory=list)
    nodes: list[_Node] = field(default_factory=list)
    pods: list[_Pod] = field(default_factory=list)
    sample: float = 0.0

    def begin(self, replay: Any, kind: int) -> None:
        self.kind = kind
        self.scaler = HorizontalScaler(self.policy, len(replay.engines))
        for engine in range(len(replay.engines)):
            node = _Node(launched=0.0)
            self.nodes.append(node)
            self.pods.append(_Pod(node, 0.0, 0.0, engine))
        self.next_sample = 0.0
        # Half a period after the samples: the HPA reads the last one, never one of its own instant.
        self.next_sync = self.policy.sync_interval / 2
        replay.events.push(0.0, kind, CLOCK)
        self.steps.append(ScalingStep(0.0, 0.0, len(self.pods), len(self.pods)))

    def on_event(self, replay: Any, payload: int, now: float) -> None:
        if payload >= READY:
            self.ready(replay, self.pods[payload - READY], now)
            return
        if now >= self.next_sample:
            self.sample = sum(self.gauge(replay.engines[pod.engine].published) for pod in self.live_pods())
            self.next_sample += self.policy.scrape_interval
        if now >= self.next_sync:
            self.sync(replay, now)
            self.next_sync += self.policy.sync_interval
        # After the last reply the clock runs on until the scaler is back at minReplicas (a window
        # after the queue emptied): what the scale-in costs shows too.
        if replay.has_work() or self.scaler.replicas > self.policy.min_replicas:
            replay.events.push(min(self.next_sample, self.next_sync), self.kind, CLOCK)

    def gauge(self, published: Any) -> float:
        metric = self.policy.metric
        return published.waiting if metric == "waiting" else published.running if metric == "running" \
            else published.kv_usage

    def live_pods(self) -> list[_Pod]:
        return [pod for pod in self.pods if pod.engine is not None and pod.removed is None]

    def sync(self, replay: Any, now: float) -> None:
        before = self.scaler.replicas
        desired = self.scaler.decide(now, self.sample)
        asked = [pod for pod in self.pods if pod.removed is None]
        for _ in range(desired - before):
            self.add(replay, now)
        if desired < before:
            # A ReplicaSet deletes pods that are not Ready first, then the newest.
            starting = sorted((pod for pod in asked if pod.engine is None), key=lambda pod: pod.asked, reverse=True)
            ready = sorted((pod for pod in asked if pod.engine is not None), key=lambda pod: pod.ready_at,
                           reverse=True)
            for pod in (starting + ready)[:before - desired]:
                self.remove(replay, pod, now)
        self.steps.append(ScalingStep(now, self.sample, desired, len(self.live_pods())))

    def add(self, replay: Any, now: float) -> None:
        policy = self.policy
        spare = next((node for node in self.nodes if node.spare(now, policy.consolidate_after)), None)
        if spare is not None:
            spare.empty_since = None
            node, lead = spare, policy.pod_start
        else:
            node = _Node(launched=now)
            self.nodes.append(node)
            lead = policy.node_lead + policy.pod_start
        pod = _Pod(node, now, now + lead)
        self.pods.append(pod)
        replay.events.push(pod.ready_at, self.kind, READY + len(self.pods) - 1)

    def ready(self, replay: Any, pod: _Pod, now: float) -> None:
        if pod.removed is not None:
            return  # scaled in while it started
        pod.engine = replay.add_engine(f"{self.pod_prefix}-{len(replay.engines)}")
        self.steps.append(ScalingStep(now, self.sample, self.scaler.replicas, len(self.live_pods())))

    def remove(self, replay: Any, pod: _Pod, now: float) -> None:
        pod.removed = now
        if pod.engine is not None:
            replay.live[pod.engine] = False
        pod.node.empty_since = now

    def node_seconds(self, end: float) -> float:
        """Seconds of nodes billed from launch until Karpenter removes them, or `end` (a node still
        empty then is billed to `end` only: the fixed fleet is compared over the same span)."""
        total = 0.0
        for node in self.nodes:
            stop = end
            if node.empty_since is not None:
                stop = min(end, node.empty_since + self.policy.consolidate_after)
            total += max(0.0, stop - node.launched)
        return total


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    desired: int  # at the window's end
    ready: tuple[int, int]  # the fewest and most replicas in the pool during the window
    requests: int
    hit_rate: float | None
    ttft_p95: float | None

    def to_json(self) -> dict:
        return {"from": self.start, "to": self.end, "desired": self.desired, "readyMin": self.ready[0],
                "readyMax": self.ready[1], "requests": self.requests, "hitRate": self.hit_rate,
                "ttftP95": self.ttft_p95}

    @property
    def ready_text(self) -> str:
        low, high = self.ready
        return str(low) if low == high else f"{low}-{high}"


def windows(result: Any, steps: Sequence[ScalingStep], width: float) -> list[Window]:
    """Per `width` seconds until the last request is sent: the replicas asked for and Ready at the
    window's end, and the hit rate and TTFT p95 of the requests sent in it."""
    end = max(result.sent_at) if result.sent_at else 0.0
    out = []
    count = max(1, math.ceil(end / width))
    for number in range(count):
        low, high = number * width, (number + 1) * width
        mine = [i for i, sent in enumerate(result.sent_at) if low <= sent < high]
        queries = sum(result.prompt_lens[i] for i in mine)
        hits = sum(result.hit_tokens[i] for i in mine)
        state = next((step for step in reversed(steps) if step.at <= high), steps[0])
        before = next((step for step in reversed(steps) if step.at <= low), steps[0])
        ready = [before.ready, *(step.ready for step in steps if low < step.at <= high)]
        out.append(Window(low, high, state.desired, (min(ready), max(ready)), len(mine),
                          hits / queries if queries else None,
                          percentile([result.ttfts[i] for i in mine], 0.95) if mine else None))
    return out


def price_per_replica_hour(instance_type: str | None, gpus: int) -> float | None:
    if instance_type not in INSTANCE_PRICES:
        return None
    price, per_instance = INSTANCE_PRICES[instance_type]
    return price * gpus / per_instance


# -- a prediction: the scaled fleet beside a fixed one at maxReplicas ----------------------------

@dataclass(frozen=True)
class ScalingPrediction:
    policy: ScalingPolicy
    scaled: Any  # LoadResult
    fixed: Any  # LoadResult, maxReplicas pods throughout
    run: ScalingRun
    price: float | None  # per replica-hour

    @property
    def end(self) -> float:
        """The last reply, or the scaler's return to minReplicas after it: both fleets are billed until then."""
        return max([*self.scaled.finished_at, *self.fixed.finished_at, self.run.steps[-1].at])

    @property
    def node_hours(self) -> float:
        return self.run.node_seconds(self.end) / 3600

    @property
    def fixed_node_hours(self) -> float:
        return self.policy.max_replicas * self.end / 3600

    def cold(self) -> tuple[int, float | None, float | None]:
        """The cold-cache dip: requests picked onto a replica in its first COLD_WINDOW_SECONDS in the
        pool, their hit rate, and the hit rate of all the others."""
        joined = {f"{self.run.pod_prefix}-{pod.engine}": pod.ready_at for pod in self.run.pods
                  if pod.engine is not None and pod.ready_at > 0}
        result = self.scaled
        new = [i for i, pod in enumerate(result.placements)
               if pod in joined and result.sent_at[i] < joined[pod] + COLD_WINDOW_SECONDS]
        fresh = set(new)
        old = [i for i in range(len(result.placements)) if i not in fresh]
        return len(new), _hit_rate(result, new), _hit_rate(result, old)

    def to_json(self, width: float) -> dict:
        count, new_rate, old_rate = self.cold()
        cost = lambda hours: None if self.price is None else round(hours * self.price, 4)  # noqa: E731
        return {
            "policy": {"minReplicas": self.policy.min_replicas, "maxReplicas": self.policy.max_replicas,
                       "metric": self.policy.metric, "target": self.policy.target,
                       "nodeLeadSeconds": self.policy.node_lead, "podStartSeconds": self.policy.pod_start,
                       "consolidateAfterSeconds": self.policy.consolidate_after,
                       "scaleDownWindowSeconds": self.policy.scale_down_window},
            "scaled": {"hitRate": self.scaled.hit_rate, "ttftP95": percentile(self.scaled.ttfts, 0.95),
                       "nodeHours": self.node_hours, "cost": cost(self.node_hours),
                       "coldRequests": count, "coldHitRate": new_rate, "warmHitRate": old_rate},
            "fixed": {"replicas": self.policy.max_replicas, "hitRate": self.fixed.hit_rate,
                      "ttftP95": percentile(self.fixed.ttfts, 0.95), "nodeHours": self.fixed_node_hours,
                      "cost": cost(self.fixed_node_hours)},
            "scalerSteps": [{"at": step.at, "metric": step.metric, "desired": step.desired, "ready": step.ready}
                            for step in self.run.steps],
            "windows": [window.to_json() for window in windows(self.scaled, self.run.steps, width)],
        }


def _hit_rate(result: Any, indexes: Sequence[int]) -> float | None:
    queries = sum(result.prompt_lens[i] for i in indexes)
    return sum(result.hit_tokens[i] for i in indexes) / queries if queries else None


def run_scaling(prepared: Any, load: Any, policy: ScalingPolicy, *, new_pickers: Any, pod_prefix: str,
                capacity_blocks: int, latency: Any, seed: int | None, price: float | None) -> ScalingPrediction:
    """The workload on a fleet that starts at minReplicas and follows `policy`, and on maxReplicas
    fixed pods; `new_pickers()` gives fresh picker replicas for each."""
    from routing.simulation.fleet import Fleet, simulate_under_load

    def replay(replicas: int, scaling: ScalingRun | None) -> Any:
        names = tuple(f"{pod_prefix}-{i}" for i in range(replicas))
        fleet = Fleet(names, new_pickers(), capacity_blocks, load.limits, latency, load.scrape_interval, True, None,
                      load.send_spacing, load.event_delay, False, None if scaling is None else lambda: scaling)
        return simulate_under_load(prepared, load.plan, fleet, seed=seed)

    run = ScalingRun(policy, pod_prefix)
    scaled = replay(policy.min_replicas, run)
    return ScalingPrediction(policy, scaled, replay(policy.max_replicas, None), run, price)


def window_width(end: float) -> float:
    """About a dozen rows: the smallest of 15 s, 30 s, 1, 2, 5, 10 and 30 min that gives at most 16."""
    for width in (15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0):
        if end / width <= 16:
            return width
    return 3600.0


def format_scaling(prediction: ScalingPrediction, *, title: str, width: float, notes: Sequence[str]) -> str:
    from routing.tables import percent

    policy = prediction.policy
    lines = [title, f"  scaler: {policy.describe()}", ""]
    lines.append(f"  {'seconds':>13}  {'in the pool':>11}  {'asked at end':>12}  {'requests':>8}  {'hit rate':>8}  "
                 f"{'TTFT p95':>9}")
    for window in windows(prediction.scaled, prediction.run.steps, width):
        ttft = "-" if window.ttft_p95 is None else f"{window.ttft_p95:.2f} s"
        lines.append(f"  {window.start:>6.0f}-{window.end:<6.0f}  {window.ready_text:>11}  {window.desired:>12}  "
                     f"{window.requests:>8}  {percent(window.hit_rate):>8}  {ttft:>9}")
    count, new_rate, old_rate = prediction.cold()
    lines.append("")
    if count:
        lines.append(f"Cold caches: {count} requests went to replicas in their first {COLD_WINDOW_SECONDS:g} s in the "
                     f"pool, hit rate {percent(new_rate)}, against {percent(old_rate)} for all the others.")
    elif len(prediction.run.pods) > policy.min_replicas:
        lines.append("Cold caches: the replicas the scaler added took no request in their first minute: the picker "
                     "kept the traffic where its prefixes were cached (raise weights.queue, or see "
                     "RoutingAffinityCostsLatency in the README).")
    else:
        lines.append("Cold caches: the scaler added no replica.")
    scaled_p95, fixed_p95 = percentile(prediction.scaled.ttfts, 0.95), percentile(prediction.fixed.ttfts, 0.95)
    lines.append(f"Whole run: hit rate {percent(prediction.scaled.hit_rate)}, TTFT p95 {_seconds(scaled_p95)}; "
                 f"{policy.max_replicas} fixed replicas: {percent(prediction.fixed.hit_rate)}, {_seconds(fixed_p95)}.")
    hours, fixed_hours = prediction.node_hours, prediction.fixed_node_hours
    saved = f", {1 - hours / fixed_hours:.0%} less" if fixed_hours else ""
    if prediction.price is None:
        lines.append(f"Replica-hours: {hours:.2f} against {fixed_hours:.2f} for {policy.max_replicas} fixed{saved} "
                     "(no price known for the instance type: --node-price $/h prices them).")
    else:
        lines.append(f"Replica-hours: {hours:.2f} (${hours * prediction.price:.2f}) against {fixed_hours:.2f} "
                     f"(${fixed_hours * prediction.price:.2f}) for {policy.max_replicas} fixed{saved}, at "
                     f"${prediction.price:.3f} a replica-hour; a node is billed from launch until consolidated.")
    lines += ["", *(f"Note: {note}" for note in notes)]
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"
