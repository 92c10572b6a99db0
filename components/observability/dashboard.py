"""A routing dashboard per model, built with Grafana's own SDK (grafana-foundation-sdk) from the
queries in queries.py: where traffic goes, what the prefix cache gives, how loaded each pod is,
what the picker does, and a marker where the picker (re)started, which is where a weight change
takes effect. Nothing here names a weight: a weight change leaves the dashboards as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from grafana_foundation_sdk.builders import dashboard as builder
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, Threshold, ThresholdsMode

from settings import ModelSettings, Settings

from . import queries

# The datasource kube-prometheus-stack's Grafana provisions for its Prometheus (grafana.sidecar
# .datasources.uid in the chart's values at 88.5.3).
DATASOURCE = common.DataSourceRef(type_val="prometheus", uid="prometheus")
WIDTH = 24


@dataclass(frozen=True)
class Panel:
    """One panel: its title, its queries with their legends, and how its values read."""

    title: str
    targets: tuple[tuple[str, str], ...]  # (expr, legend)
    unit: str
    description: str
    kind: str = "timeseries"
    width: int = 12
    # A line drawn at this value (the scaler's target).
    threshold: float | None = None
    max_value: float | None = None


def panels(settings: Settings, model: ModelSettings) -> list[Panel]:
    q = queries
    picker = "the llm-d router v0.10.0" if settings.gateway.implementation == "llm-d" else "HyperPod's picker"
    shown = [
        Panel("Requests per pod", ((q.request_rate(settings, model), "{{pod}}"),), "reqps",
              "Finished requests per second on each pod (vllm:request_success_total)."),
        Panel("Share of the model's traffic", ((q.traffic_share(settings, model), "{{pod}}"),), "percentunit",
              "Each pod's part of the model's requests. Shared-prefix traffic on one pod is the picker doing "
              "its job; an idle pod next to a queue is not (alert RoutingAffinityCostsLatency).", max_value=1),
        Panel("Prefix-cache hit rate per pod", ((q.prefix_hit_rate(settings, model), "{{pod}}"),), "percentunit",
              "Rate of prefix-cache hits over rate of queries, in tokens (vllm:prefix_cache_*_total).", max_value=1),
        Panel("Model hit rate", ((q.model_prefix_hit_rate(settings, model), "hit rate"),), "percentunit",
              "The whole model's prefix-cache hit rate; alert RoutingHitRateHalved compares it across a picker "
              "change.", kind="stat", width=6, max_value=1),
        Panel("Pods serving", ((q.pods_serving(settings, model), "pods"),), "none",
              "Pods whose metrics Prometheus reads.", kind="stat", width=6),
        Panel("KV-cache usage per pod", ((q.kv_cache_usage(settings, model), "{{pod}}"),), "percentunit",
              "vllm:kv_cache_usage_perc: the picker's kv-cache scorer reads the same gauge.", max_value=1),
        Panel("Waiting and running requests per pod",
              ((q.waiting(settings, model), "waiting {{pod}}"), (q.running(settings, model), "running {{pod}}")),
              "none", "vllm:num_requests_waiting and _running: the picker's queue scorer reads the first."),
        Panel("Time to first token", ((q.ttft(settings, model, 0.5), "p50"), (q.ttft(settings, model, 0.95), "p95")),
              "s", "From vLLM's histogram vllm:time_to_first_token_seconds, over the model's pods."),
        Panel("Generation throughput per pod", ((q.generation_throughput(settings, model), "{{pod}}"),),
              "short", "Generated tokens per second (vllm:generation_tokens_total)."),
        Panel("Picker: picks per second", ((q.picker_picks(settings, model), "{{status}}"),), "reqps",
              f"Scheduling attempts by {picker}, by outcome."),
        Panel("Picker: decision time p95 and ready endpoints",
              ((q.picker_decision_p95(settings, model), "p95 decision"),
               (q.picker_ready_endpoints(settings, model), "ready endpoints")),
              "s", f"How long {picker} takes to pick, and how many of the pool's pods it sees ready."),
    ]
    if model.routing.precise is not None:
        shown += precise_index_panels(settings, model)
    if model.autoscaling is not None:
        scaling = model.autoscaling
        shown.append(Panel(f"Scaler: {scaling.metric} per pod (target {scaling.target:g})",
                           ((f"({q.scaler_query(settings, model)}) / ({q.pods_serving(settings, model)})",
                             f"{scaling.metric} per pod"),),
                           "none", "What KEDA compares with the target: above it the model gains a pod, up to "
                                   f"{scaling.max_replicas}; a new pod starts with a cold prefix cache.",
                           threshold=scaling.target))
    return shown


def precise_index_panels(settings: Settings, model: ModelSettings) -> list[Panel]:
    """What the picker's precise prefix index sees of the pods' KV-cache events. The index counters
    are there when the producer's enableMetrics is on (the stack's rendered config sets it; a
    picker file must set it itself)."""
    q = queries
    return [
        Panel("Precise index: blocks held per lookup", ((q.index_blocks_per_lookup(settings, model), "blocks"),),
              "none", "Per lookup of a request's block keys, the most of them any one pod holds "
                      "(kv_cache_index_lookup_hits_total over _lookup_requests_total). Near 0 while the pods' own "
                      "hit rate is high: the picker's keys and the pods' events do not line up (block size, model "
                      "name, tokens)."),
        Panel("Precise index: block keys admitted and evicted",
              ((q.index_admissions(settings, model), "admitted"), (q.index_evictions(settings, model), "evicted")),
              "short", "Per second: keys the pods' BlockStored events (and speculative entries) add to the index, "
                       "and entries their BlockRemoved events take out."),
        Panel("Precise index: events received per vLLM pod", ((q.events_received(settings, model),
                                                              "{{pod_identifier}}"),),
              "short", "Event batches per second the picker receives from each pod's socket (port 5557). A pod "
                       "serving requests with none here is not reached: its NetworkPolicy, its port, its topic."),
        Panel("Precise index: subscribed pods and ZMQ errors",
              ((q.active_subscribers(settings, model), "subscribers"), (q.pods_serving(settings, model), "pods"),
               (q.zmq_errors(settings, model), "errors/s {{operation}}")),
              "none", "The picker subscribes to every pod of the pool it sees, so subscribers should equal pods; a "
                      "subscriber that cannot connect retries every 5 s and counts an error each time."),
    ]


def _panel(panel: Panel):
    kind = stat.Panel() if panel.kind == "stat" else timeseries.Panel()
    built = kind.title(panel.title).description(panel.description).unit(panel.unit).datasource(DATASOURCE)
    built = built.height(8).span(panel.width)
    if panel.max_value is not None:
        built = built.min(0).max(panel.max_value)
    if panel.threshold is not None:
        built = built.thresholds(builder.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([
            Threshold(value=None, color="green"), Threshold(value=panel.threshold, color="red")]))
    for ref, (expr, legend) in zip("ABCDEFGH", panel.targets):
        built = built.with_target(prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref)
                                  .datasource(DATASOURCE))
    return built


def uid(model: ModelSettings, settings: Settings) -> str:
    """Stable across runs and unique per stack namespace and model (Grafana's uid: at most 40 chars)."""
    return f"routing-{settings.namespace}-{model.name}"[:40]


def dashboard(settings: Settings, model: ModelSettings) -> dict:
    """The model's dashboard as Grafana's JSON model."""
    built = (builder.Dashboard(f"Routing: {model.name} ({model.model})")
             .uid(uid(model, settings))
             .tags(["inference-gateway", "routing", settings.namespace])
             .description(f"Where the endpoint picker sends {model.model}'s requests in namespace "
                          f"{settings.namespace}, and what that does to the prefix cache and latency.")
             .time("now-1h", "now").refresh("30s").tooltip(DashboardCursorSync.CROSSHAIR).readonly()
             .annotation(builder.AnnotationQuery().name("Picker (re)started").datasource(DATASOURCE).enable(True)
                         .icon_color("orange").expr(queries.picker_started(settings, model))))
    for panel in panels(settings, model):
        built = built.with_panel(_panel(panel))
    return json.loads(JSONEncoder(sort_keys=True).encode(built.build()))


def every_expression(settings: Settings, model: ModelSettings) -> list[str]:
    """Each query the model's dashboard runs: its panels' and its marker's."""
    return [expr for panel in panels(settings, model) for expr, _ in panel.targets] + [
        queries.picker_started(settings, model)]
