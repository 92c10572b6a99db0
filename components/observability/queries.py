"""Every PromQL expression the stack deploys, as plain functions of the settings: the routing
dashboard's panels and marker, the three alerts and the scalers' queries. One place, so the tests
can check each against promtool and a real Prometheus scraping real vLLM.

A model's vLLM series are `{namespace, app=<deployment>}` (settings/observability.py); its picker's
are those of its chart's ServiceMonitor on llm-d (`service=<release>-epp`) or of the stack's
PodMonitor on HyperPod (`app=<model>-epp`).

Metric names: vLLM 0.32's (vllm/v1/metrics/loggers.py; the dashboard test reads a real server's
/metrics), the llm-d router v0.10.0's (pkg/epp/metrics/llm_d_router_metrics.go@v0.10.0; its precise
prefix index's, pkg/kvcache/metrics/collector.go@v0.10.0). AWS does
not publish which router release HyperPod's picker runs (v0.5 to v0.10 by the evidence, reference
endpoint-picker-upstream.md §9), so there the picker panels read the names every release of that
range emits, which v0.10.0 still writes beside its own (docs/metrics.md@v0.10.0, "Deprecated series").
"""

from __future__ import annotations

from dataclasses import dataclass

from settings import ModelSettings, Settings
from settings.endpoints import ROUTER_RELEASE_CHARACTERS
from settings.observability import AUTOSCALING_METRICS, model_selector

REQUESTS = "vllm:request_success_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
KV_USAGE = "vllm:kv_cache_usage_perc"
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
TTFT_BUCKETS = "vllm:time_to_first_token_seconds_bucket"
GENERATED_TOKENS = "vllm:generation_tokens_total"

# The picker's precise prefix index (collector.go@v0.10.0), on the picker's own /metrics once the
# precise-prefix-cache-producer runs. The index counters move only with the producer's
# indexerConfig.kvBlockIndexConfig.enableMetrics on, which the stack's rendered config sets.
INDEX_LOOKUPS = "llm_d_router_epp_kv_cache_index_lookup_requests_total"
# Per lookup, the most looked-up block keys any one pod holds (instrumented_index.go@v0.10.0).
INDEX_LOOKUP_HITS = "llm_d_router_epp_kv_cache_index_lookup_hits_total"
INDEX_ADMISSIONS = "llm_d_router_epp_kv_cache_index_admissions_total"
INDEX_EVICTIONS = "llm_d_router_epp_kv_cache_index_evictions_total"
# Labelled pod_identifier: the vLLM pod (namespace/name) whose socket the picker subscribes to.
EVENTS_RECEIVED = "llm_d_router_epp_kv_cache_events_messages_received_total"
ZMQ_ERRORS = "llm_d_router_epp_kv_cache_events_zmq_errors_total"
ACTIVE_SUBSCRIBERS = "llm_d_router_epp_kv_cache_events_active_subscribers"

# Rates over two minutes: eight scrapes at the default 15 s, enough for rate() to survive a missed
# one, short enough that a seed batch (a minute) shows as it happens.
RATE_WINDOW = "2m"


@dataclass(frozen=True)
class PickerMetrics:
    """The picker's own series the dashboard reads, by the release that exports them."""

    scheduled: str  # counter of scheduling attempts, labelled by status
    decision_seconds: str  # histogram of one pick's duration (its _bucket series)
    ready_endpoints: str  # gauge: the pool's endpoints the picker sees ready
    info: str  # one series per picker pod: its start marks a (re)started picker


LLMD_ROUTER = PickerMetrics(scheduled="llm_d_epp_scheduler_attempts_total",
                            decision_seconds="llm_d_epp_scheduler_e2e_duration_seconds_bucket",
                            ready_endpoints="llm_d_epp_ready_endpoints", info="llm_d_epp_info")
# The names the GIE-based pickers (GIE v1.3-v1.5, llm-d router v0.5-v0.10) all write.
LEGACY_PICKER = PickerMetrics(scheduled="inference_extension_scheduler_attempts_total",
                              decision_seconds="inference_extension_scheduler_e2e_duration_seconds_bucket",
                              ready_endpoints="inference_pool_ready_pods", info="inference_extension_info")


def picker_metrics(settings: Settings) -> PickerMetrics:
    return LLMD_ROUTER if settings.gateway.implementation == "llm-d" else LEGACY_PICKER


def selector(settings: Settings, model: ModelSettings) -> str:
    return model_selector(settings.namespace, model)


def picker_selector(settings: Settings, model: ModelSettings) -> str:
    if settings.gateway.implementation == "llm-d":
        return f'namespace="{settings.namespace}", service="{model.name[:ROUTER_RELEASE_CHARACTERS]}-epp"'
    return f'namespace="{settings.namespace}", app="{model.name}-epp"'


def _by_pod(metric: str, sel: str, rate: bool = True) -> str:
    inner = f"rate({metric}{{{sel}}}[{RATE_WINDOW}])" if rate else f"{metric}{{{sel}}}"
    return f"sum by (pod) ({inner})"


# -- the dashboard's panels -------------------------------------------------------------------

def request_rate(settings: Settings, model: ModelSettings) -> str:
    """Requests finished per second, per pod."""
    return _by_pod(REQUESTS, selector(settings, model))


def traffic_share(settings: Settings, model: ModelSettings) -> str:
    """Each pod's part of the model's finished requests (0-1)."""
    sel = selector(settings, model)
    return (f"{_by_pod(REQUESTS, sel)} / ignoring(pod) group_left "
            f"sum(rate({REQUESTS}{{{sel}}}[{RATE_WINDOW}]))")


def prefix_hit_rate(settings: Settings, model: ModelSettings) -> str:
    """Prefix-cache hits over queries (tokens), per pod: the rate of hits over the rate of queries."""
    sel = selector(settings, model)
    return f"{_by_pod(PREFIX_HITS, sel)} / {_by_pod(PREFIX_QUERIES, sel)}"


def model_prefix_hit_rate(settings: Settings, model: ModelSettings, window: str = RATE_WINDOW,
                          offset: str | None = None) -> str:
    sel = selector(settings, model)
    shift = f" offset {offset}" if offset else ""
    return (f"sum(rate({PREFIX_HITS}{{{sel}}}[{window}]{shift})) / "
            f"sum(rate({PREFIX_QUERIES}{{{sel}}}[{window}]{shift}))")


def kv_cache_usage(settings: Settings, model: ModelSettings) -> str:
    return f"max by (pod) ({KV_USAGE}{{{selector(settings, model)}}})"


def waiting(settings: Settings, model: ModelSettings) -> str:
    return _by_pod(WAITING, selector(settings, model), rate=False)


def running(settings: Settings, model: ModelSettings) -> str:
    return _by_pod(RUNNING, selector(settings, model), rate=False)


def ttft(settings: Settings, model: ModelSettings, quantile: float) -> str:
    """The model's time to first token at `quantile`, from vLLM's histogram."""
    return (f"histogram_quantile({quantile:g}, sum by (le) "
            f"(rate({TTFT_BUCKETS}{{{selector(settings, model)}}}[{RATE_WINDOW}])))")


def generation_throughput(settings: Settings, model: ModelSettings) -> str:
    """Generated tokens per second, per pod."""
    return _by_pod(GENERATED_TOKENS, selector(settings, model))


def pods_serving(settings: Settings, model: ModelSettings) -> str:
    """How many of the model's pods report metrics: what the scaler has made of it."""
    return f"count(count by (pod) ({RUNNING}{{{selector(settings, model)}}}))"


def picker_picks(settings: Settings, model: ModelSettings) -> str:
    """The picker's scheduling attempts per second, by outcome."""
    metrics = picker_metrics(settings)
    return f"sum by (status) (rate({metrics.scheduled}{{{picker_selector(settings, model)}}}[{RATE_WINDOW}]))"


def picker_decision_p95(settings: Settings, model: ModelSettings) -> str:
    metrics = picker_metrics(settings)
    return (f"histogram_quantile(0.95, sum by (le) "
            f"(rate({metrics.decision_seconds}{{{picker_selector(settings, model)}}}[{RATE_WINDOW}])))")


def picker_ready_endpoints(settings: Settings, model: ModelSettings) -> str:
    metrics = picker_metrics(settings)
    return f"max({metrics.ready_endpoints}{{{picker_selector(settings, model)}}})"


def picker_started(settings: Settings, model: ModelSettings, within: str = RATE_WINDOW) -> str:
    """Non-empty while a picker pod is younger than `within`: its series is there now and was not
    then. A weight change (a new picker on both platforms) and a restart both show."""
    metrics = picker_metrics(settings)
    sel = picker_selector(settings, model)
    return f"count by (pod) ({metrics.info}{{{sel}}} unless {metrics.info}{{{sel}}} offset {within})"


def _picker_rate(metric: str, settings: Settings, model: ModelSettings, by: str = "") -> str:
    grouping = f" by ({by}) " if by else ""
    return f"sum{grouping}(rate({metric}{{{picker_selector(settings, model)}}}[{RATE_WINDOW}]))"


def index_blocks_per_lookup(settings: Settings, model: ModelSettings) -> str:
    """Block keys the best-holding pod has, per lookup of the picker's precise index."""
    return f"{_picker_rate(INDEX_LOOKUP_HITS, settings, model)} / {_picker_rate(INDEX_LOOKUPS, settings, model)}"


def index_admissions(settings: Settings, model: ModelSettings) -> str:
    return _picker_rate(INDEX_ADMISSIONS, settings, model)


def index_evictions(settings: Settings, model: ModelSettings) -> str:
    return _picker_rate(INDEX_EVICTIONS, settings, model)


def events_received(settings: Settings, model: ModelSettings) -> str:
    """Event batches per second the picker receives, per vLLM pod."""
    return _picker_rate(EVENTS_RECEIVED, settings, model, by="pod_identifier")


def zmq_errors(settings: Settings, model: ModelSettings) -> str:
    """The picker's failed ZMQ operations per second (connect, recv, ...)."""
    return _picker_rate(ZMQ_ERRORS, settings, model, by="operation")


def active_subscribers(settings: Settings, model: ModelSettings) -> str:
    return f"max({ACTIVE_SUBSCRIBERS}{{{picker_selector(settings, model)}}})"


# -- alerts -----------------------------------------------------------------------------------

# A pod queues for this long while another is idle: affinity, not load, is the cause.
QUEUE_WINDOW = "5m"
# The hit rate compared: the last quarter hour against the hour before the picker changed.
HIT_RATE_NOW = "15m"
HIT_RATE_BEFORE = "1h"


def not_scraped(settings: Settings, model: ModelSettings) -> str:
    """A pod of the model whose scrape fails, or no pod of it scraped at all."""
    sel = selector(settings, model)
    return f"up{{{sel}}} == 0 or absent(up{{{sel}}})"


def affinity_costs_latency(settings: Settings, model: ModelSettings) -> str:
    """A pod with requests waiting through the whole window while another pod of the model had
    none running or waiting through it. Requests piling on one pod of a shared prefix while the
    others serve their own is correct (the seed's shared batch): only a queue next to an idle
    pod is affinity costing latency."""
    sel = selector(settings, model)
    queued = f"sum by (namespace, app, pod) (min_over_time({WAITING}{{{sel}}}[{QUEUE_WINDOW}])) > 0"
    busy = (f"sum by (namespace, app, pod) (max_over_time({RUNNING}{{{sel}}}[{QUEUE_WINDOW}]) "
            f"+ max_over_time({WAITING}{{{sel}}}[{QUEUE_WINDOW}]))")
    return f"({queued}) and on (namespace, app) (count by (namespace, app) ({busy} == 0) > 0)"


def hit_rate_halved(settings: Settings, model: ModelSettings) -> str:
    """The model's prefix-cache hit rate over the last quarter hour is under half of what it was
    in the hour before, and a picker pod started within that hour (a configuration change on both
    platforms starts new pickers)."""
    metrics = picker_metrics(settings)
    psel = picker_selector(settings, model)
    now = model_prefix_hit_rate(settings, model, HIT_RATE_NOW)
    before = model_prefix_hit_rate(settings, model, HIT_RATE_BEFORE, offset=HIT_RATE_BEFORE)
    new_picker = f"count({metrics.info}{{{psel}}} unless {metrics.info}{{{psel}}} offset {HIT_RATE_BEFORE}) > 0"
    return f"({now}) < 0.5 * ({before}) and on () ({new_picker})"


# -- the scaler -------------------------------------------------------------------------------

def scaler_query(settings: Settings, model: ModelSettings) -> str:
    """The model's total of its autoscaling gauge: KEDA divides it by the replicas and compares
    that with the target (AverageValue)."""
    assert model.autoscaling is not None
    return f"sum({AUTOSCALING_METRICS[model.autoscaling.metric]}{{{selector(settings, model)}}})"
