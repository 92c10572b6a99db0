"""Read vLLM's Prometheus `/metrics` and diff counters between two reads.

Two families of names matter:
- what the endpoint picker scrapes to route (queue, running, KV usage, LoRA, cache config;
  reference endpoint-picker-upstream.md section 4), and
- what the workshop reads to see where requests went (request and prefix-cache counters).

vLLM renamed the prefix-cache counters and the KV-usage gauge in 0.9.2 and later removed
the old `gpu_` names; the workshop's vLLM 0.8.5 only has the old ones. Both spellings are
accepted, the new one preferred when a server exposes both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from routing.tables import NO_PREFIX_METRIC

REQUESTS = "vllm:request_success_total"
# (hits, queries) per spelling, newest first.
PREFIX_SPELLINGS = (
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
)
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE_SPELLINGS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
LORA_INFO = "vllm:lora_requests_info"
CACHE_CONFIG = "vllm:cache_config_info"

READ = frozenset({REQUESTS, WAITING, RUNNING, LORA_INFO, CACHE_CONFIG, *KV_USAGE_SPELLINGS,
                  *(name for pair in PREFIX_SPELLINGS for name in pair)})


class MetricsError(ValueError):
    """A /metrics page that is not a vLLM server's."""


@dataclass(frozen=True)
class VllmMetrics:
    """One read of one server's /metrics, summed over engines and finish reasons."""

    requests: float
    prefix_hits: float | None
    prefix_queries: float | None
    waiting: float
    running: float
    kv_usage: float
    running_loras: tuple[str, ...] = ()
    waiting_loras: tuple[str, ...] = ()
    max_lora: int = 0
    block_size: int | None = None
    num_gpu_blocks: int | None = None


# A server that has counted nothing: the base of a counter that is new, or that restarted.
ZERO = VllmMetrics(requests=0.0, prefix_hits=0.0, prefix_queries=0.0, waiting=0.0, running=0.0, kv_usage=0.0)


def _split_adapters(value: str) -> tuple[str, ...]:
    return tuple(name for name in (part.strip() for part in value.split(",")) if name)


def _int_label(labels: dict[str, str], name: str) -> int | None:
    try:
        return int(float(labels[name]))
    except (KeyError, ValueError):
        return None


def parse_metrics(text: str) -> VllmMetrics:
    """Parse one /metrics page; raises MetricsError if it holds no `vllm:` metric at all."""
    # A vLLM page has hundreds of histogram lines; the picker reads this 20 times a second per
    # pod, so only the samples used are handed to the (slow) parser. HELP/TYPE lines are
    # dropped too: samples are matched by their full name, which needs no type.
    lines = text.splitlines()
    if not any(line.startswith("vllm:") for line in lines):
        raise MetricsError("the page has no vllm: metric; is this a vLLM server's /metrics?")
    relevant = "\n".join(line for line in lines if line.split("{", 1)[0].split(" ", 1)[0] in READ) + "\n"
    sums: dict[str, float] = {}
    seen: set[str] = set()
    kv_usage: dict[str, float] = {}
    lora_sample: tuple[float, dict[str, str]] | None = None
    cache_labels: dict[str, str] | None = None
    for family in text_string_to_metric_families(relevant):
        for sample in family.samples:
            name = sample.name
            seen.add(name)
            if name in KV_USAGE_SPELLINGS:
                # A fraction per engine: the fullest engine is what limits admission.
                kv_usage[name] = max(kv_usage.get(name, 0.0), sample.value)
            elif name == LORA_INFO:
                # vLLM sets this gauge's value to the time of the update; the newest sample is current.
                if lora_sample is None or sample.value >= lora_sample[0]:
                    lora_sample = (sample.value, dict(sample.labels))
            elif name == CACHE_CONFIG:
                cache_labels = dict(sample.labels)
            else:
                sums[name] = sums.get(name, 0.0) + sample.value

    prefix_hits = prefix_queries = None
    for hits_name, queries_name in PREFIX_SPELLINGS:
        if hits_name in seen and queries_name in seen:
            prefix_hits, prefix_queries = sums[hits_name], sums[queries_name]
            break

    lora_labels = lora_sample[1] if lora_sample else {}
    cache = cache_labels or {}
    return VllmMetrics(
        requests=sums.get(REQUESTS, 0.0),
        prefix_hits=prefix_hits,
        prefix_queries=prefix_queries,
        waiting=sums.get(WAITING, 0.0),
        running=sums.get(RUNNING, 0.0),
        kv_usage=next((kv_usage[name] for name in KV_USAGE_SPELLINGS if name in kv_usage), 0.0),
        running_loras=_split_adapters(lora_labels.get("running_lora_adapters", "")),
        waiting_loras=_split_adapters(lora_labels.get("waiting_lora_adapters", "")),
        max_lora=_int_label(lora_labels, "max_lora") or 0,
        block_size=_int_label(cache, "block_size"),
        num_gpu_blocks=_int_label(cache, "num_gpu_blocks"),
    )


@dataclass(frozen=True)
class PodDelta:
    """What one pod did between two reads of its counters."""

    pod: str
    requests: int
    hits: int | None
    queries: int | None
    restarted: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def hit_rate(self) -> float | None:
        if self.hits is None or not self.queries:
            return None
        return self.hits / self.queries

    def to_json(self) -> dict:
        return {"pod": self.pod, "requests": self.requests, "hits": self.hits, "queries": self.queries,
                "hitRate": self.hit_rate}


def counter_delta(pod: str, before: VllmMetrics | None, after: VllmMetrics | None) -> PodDelta:
    """after − before, per counter.

    A counter that went down means the server restarted between the reads (counters start
    from zero again), so everything it counted since is the after-value itself.
    """
    if after is None:
        return PodDelta(pod, 0, None, None, notes=("gone before the second read: its requests are not counted",))
    notes: list[str] = []
    if before is None:
        notes.append("new since the first read: counted from zero")
        before = ZERO
    pairs = [("requests", before.requests, after.requests)]
    has_prefix = after.prefix_hits is not None and after.prefix_queries is not None
    if has_prefix and before.prefix_hits is not None and before.prefix_queries is not None:
        pairs += [("prefix hits", before.prefix_hits, after.prefix_hits),
                  ("prefix queries", before.prefix_queries, after.prefix_queries)]
    went_down = [f"{name} {old:g} → {new:g}" for name, old, new in pairs if new < old]
    restarted = bool(went_down)
    if restarted:
        notes.append(f"restarted: {', '.join(went_down)}, so the delta is the after-value")
    base = ZERO if restarted else before

    def diff(old: float | None, new: float | None) -> int | None:
        if new is None:
            return None
        return int(round(new - (old or 0.0)))

    hits = queries = None
    if has_prefix:
        hits, queries = diff(base.prefix_hits, after.prefix_hits), diff(base.prefix_queries, after.prefix_queries)
    else:
        notes.append(f"{NO_PREFIX_METRIC}: exposes neither vllm:prefix_cache_*_total nor vllm:gpu_prefix_cache_*_total")
    return PodDelta(pod, diff(base.requests, after.requests) or 0, hits, queries, restarted, tuple(notes))


@dataclass(frozen=True)
class DeltaReport:
    """Per-pod deltas and their total; the JSON shape is shared with `predict`."""

    pods: tuple[PodDelta, ...]

    @property
    def requests(self) -> int:
        return sum(p.requests for p in self.pods)

    @property
    def hits(self) -> int:
        return sum(p.hits or 0 for p in self.pods)

    @property
    def queries(self) -> int:
        return sum(p.queries or 0 for p in self.pods if p.hits is not None)

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None

    @property
    def pods_used(self) -> tuple[PodDelta, ...]:
        return tuple(p for p in self.pods if p.requests > 0)

    def to_json(self) -> dict:
        return {"pods": [p.to_json() for p in self.pods], "hitRate": self.hit_rate}


def diff_reads(before: dict[str, VllmMetrics], after: dict[str, VllmMetrics]) -> DeltaReport:
    """Deltas for every pod seen in either read, in name order."""
    names = sorted(set(before) | set(after))
    return DeltaReport(tuple(counter_delta(name, before.get(name), after.get(name)) for name in names))
