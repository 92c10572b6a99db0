"""The stack's monitoring on real parts: Debian's Prometheus scraping the two real vLLM CPU servers
with a scrape job made from the stack's own PodMonitor, the seed's batches sent through `serve`
(the shared one by the `openai` client, the unique one by `verify --prometheus`), and every
dashboard query, alert expression and scaler query evaluated against that Prometheus and compared
with what vLLM's own counters say.

Each test starts its own Prometheus on an empty database, so its two-minute rate windows hold
only its own batch. The servers are labelled as the operator labels a model's pods (namespace,
pod, and the pod's `app`, the PodMonitor's podTargetLabels); a third target on a closed port
stands for a pod Prometheus cannot reach. The lab has no endpoint picker process (`serve` picks in
process), so the picker's panels and the restart marker are evaluated and come back empty here.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from components.observability import dashboard, queries
from components.observability import render as observability
from routing import __main__ as cli
from routing.lab.vllm_server import SERVED_MODEL, free_port
from routing.live.serve import start_gateway
from routing.live.verify import UrlPods
from routing.metrics import VllmMetrics
from routing.workloads import seed_shared
from settings import load_stack, parse_settings
from settings.stackfile import read_stack_config, stack_file
from tests.full_run import required_by
from tests.test_observability_rules import INSTALL

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROUTER_METRICS = set(json.loads((FIXTURES / "llm-d-router-v0.10.0-metrics.json").read_text())["families"])
# The eks stack's qwen-small, scraped every second (the lab's batches last seconds, not minutes),
# scaling on running requests with a target of one per pod: a burst of eight requests on two pods
# is well above it, an idle model well below.
SCRAPE = "1s"
SCRAPE_SECONDS = 1.0
UNREACHABLE_POD = "vllm-qwen-small-c"
BURST, BURST_TOKENS = 8, 600
SEED = 11


def lab_settings(metric: str = "running", target: float = 1):
    raw, secrets = read_stack_config(stack_file("eks"))
    models = [dict(m) for m in raw["models"]]
    models[1] = {**{k: v for k, v in models[1].items() if k != "replicas"},
                 "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "metric": metric, "target": target}}
    return parse_settings({**raw, "models": models, "observability": {"scrapeInterval": SCRAPE}}, stack="eks",
                          secret_keys=frozenset(secrets))


SETTINGS = lab_settings()
MODEL = SETTINGS.model_named("qwen-small")


def scrape_job(monitor: dict, targets: dict[str, str]) -> dict:
    """The scrape job the Prometheus operator makes of a PodMonitor, for pods at `targets`
    (pod name: host:port): the endpoint's path and interval, job `<namespace>/<name>`, and the
    labels it puts on a pod's series (namespace, pod, container, endpoint, each podTargetLabel).
    The pods carry the labels the monitor selects on, as the model's Deployment gives them."""
    namespace, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    pod_labels = monitor["spec"]["selector"]["matchLabels"]
    kept = {label: pod_labels[label] for label in monitor["spec"]["podTargetLabels"]}
    return {"job_name": f"podMonitor/{namespace}/{name}/0", "scrape_interval": endpoint["interval"],
            "scrape_timeout": endpoint["interval"], "metrics_path": endpoint["path"],
            "static_configs": [{"targets": [address], "labels": {
                "job": f"{namespace}/{name}", "namespace": namespace, "pod": pod, "container": "vllm",
                "endpoint": endpoint["port"], **kept}} for pod, address in targets.items()]}


class Prometheus:
    def __init__(self, url: str):
        self.url = url
        self.scraping_since = time.time()  # the fixture sets when every target was first scraped

    def rate_ratio_slack(self, at: float) -> float:
        """How far a ratio of two rate()s may sit from the counters' own ratio at `at`, relative:
        on a window older than Prometheus's first sample, rate() extrapolates each series by up to
        half a scrape interval before its first sample, but no further than where that counter
        would reach zero, so a counter that was near zero before the traffic (hits on a pod that
        had few) is extrapolated less than its partner (queries)."""
        return SCRAPE_SECONDS / 2 / (at - self.scraping_since)

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as reply:
            answer = json.loads(reply.read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def by_pod(self, expr: str, at: float | None = None) -> dict[str, float]:
        return {r["metric"].get("pod", ""): float(r["value"][1]) for r in self.query(expr, at)}

    def scalar(self, expr: str, at: float | None = None) -> float:
        (result,) = self.query(expr, at)
        return float(result["value"][1])

    def wait_for_scrape_after(self, moment: float, timeout: float = 20) -> None:
        """Until every live pod of the model has a sample taken after `moment` (time.time())."""
        deadline = time.time() + timeout
        expr = f"min(timestamp(vllm:num_requests_running{{{queries.selector(SETTINGS, MODEL)}}}))"
        while not (self.query(expr) and self.scalar(expr) > moment):
            assert time.time() < deadline, f"Prometheus scraped nothing after {moment}"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        why = required_by()
        if why:
            pytest.fail(f"{why} but Prometheus is not installed: {INSTALL}", pytrace=False)
        pytest.skip(f"the observability tests need Prometheus: {INSTALL}")
    return found


@pytest.fixture
def prometheus(prometheus_binary, pair, tmp_path, progress):
    """A fresh Prometheus scraping both servers (and one unreachable pod) with the stack's rules."""
    targets = {name: url.removeprefix("http://") for name, url in pair.backends.items()}
    targets[UNREACHABLE_POD] = f"127.0.0.1:{free_port()}"
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": observability.prometheus_rule(SETTINGS, MODEL)["spec"]["groups"]}))
    config = tmp_path / "prometheus.yaml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE}, "rule_files": [str(rules)],
        "scrape_configs": [scrape_job(observability.pod_monitor(SETTINGS, MODEL), targets)]}))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen([prometheus_binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    server = Prometheus(f"http://127.0.0.1:{port}")
    try:
        deadline = time.time() + 30
        while True:
            with contextlib.suppress(OSError):
                if server.query("count(up)") and server.scalar(f"count(up{{{queries.selector(SETTINGS, MODEL)}}})") == 3:
                    break
            assert process.poll() is None and time.time() < deadline, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.2)
        server.wait_for_scrape_after(time.time())
        server.scraping_since = time.time()
        progress.write(f"Prometheus {server.url} scrapes {', '.join(targets)} every {SCRAPE}\n")
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def deltas(before: dict[str, VllmMetrics], after: dict[str, VllmMetrics]) -> dict[str, tuple[float, float, float]]:
    return {pod: (after[pod].requests - before[pod].requests, after[pod].prefix_hits - before[pod].prefix_hits,
                  after[pod].prefix_queries - before[pod].prefix_queries) for pod in before}


def read_family(url: str, family: str) -> dict[tuple, float]:
    """One family's samples from a server's /metrics, by (sample name, labels)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            if f.name == family for s in f.samples}


def ttft_buckets(pair) -> dict[float, float]:
    """Both servers' TTFT histogram, cumulative count per upper bound, summed."""
    buckets: dict[float, float] = {}
    for url in pair.backends.values():
        for (name, labels), value in read_family(url, "vllm:time_to_first_token_seconds").items():
            if name.endswith("_bucket"):
                le = float(dict(labels)["le"])
                buckets[le] = buckets.get(le, 0.0) + value
    return buckets


def generated_tokens(pair, pod: str) -> float:
    return sum(value for (name, _), value in read_family(pair.backends[pod], "vllm:generation_tokens").items()
               if name.endswith("_total"))


def gauge_sums(pair, field: str) -> float:
    return sum(getattr(read, field) for read in UrlPods(pair.backends).read().values())


def assert_alerts_and_picker_panels(prom: Prometheus) -> None:
    """What every batch leaves: only the unreachable pod unscraped, no affinity or hit-rate alert,
    and no picker series in the lab."""
    assert set(prom.by_pod(queries.not_scraped(SETTINGS, MODEL))) == {UNREACHABLE_POD}
    assert prom.query(queries.affinity_costs_latency(SETTINGS, MODEL)) == []
    assert prom.query(queries.hit_rate_halved(SETTINGS, MODEL)) == []
    # Prometheus itself, evaluating the stack's rules: the unreachable pod pending (for: 5m), nothing else.
    alerts = {(r["metric"]["alertname"], r["metric"].get("pod")) for r in prom.query("ALERTS")}
    assert alerts <= {("RoutingModelNotScraped", UNREACHABLE_POD)}
    for expr in (queries.picker_picks(SETTINGS, MODEL), queries.picker_decision_p95(SETTINGS, MODEL),
                 queries.picker_ready_endpoints(SETTINGS, MODEL), queries.picker_started(SETTINGS, MODEL)):
        assert prom.query(expr) == [], expr


def test_the_shared_batch_through_serve_reads_on_the_dashboard_as_vllm_counted_it(pair, prometheus, progress):
    counters, before_ttft = UrlPods(pair.backends), ttft_buckets(pair)
    before = counters.read()
    tokens_by_pod = {pod: generated_tokens(pair, pod) for pod in pair.backends}
    with start_gateway(pair.backends, seed=SEED) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="not-checked", max_retries=0, timeout=120)
        previous = time.monotonic()
        for body in seed_shared(SERVED_MODEL):
            assert gateway.wait_idle(previous)
            client.completions.create(**body)
            previous = time.monotonic()
    finished = time.time()
    after = counters.read()
    measured = deltas(before, after)
    prometheus.wait_for_scrape_after(finished)
    at = time.time()
    progress.write(f"shared batch: {measured}\n")

    busy = max(measured, key=lambda pod: measured[pod][0])
    idle = next(pod for pod in measured if pod != busy)
    tokens_before = tokens_by_pod[busy]
    assert measured[busy][0] == 12 and measured[idle][0] == 0  # the seed's concentration
    shares = prometheus.by_pod(queries.traffic_share(SETTINGS, MODEL), at)
    assert shares[busy] == 1.0 and shares[idle] == 0.0
    rates = prometheus.by_pod(queries.request_rate(SETTINGS, MODEL), at)
    assert rates[busy] > 0 and rates[idle] == 0
    hit_rates = prometheus.by_pod(queries.prefix_hit_rate(SETTINGS, MODEL), at)
    requests, hits, queried = measured[busy]
    slack = 0.01 + hits / queried * prometheus.rate_ratio_slack(at)
    assert abs(hit_rates[busy] - hits / queried) <= slack and hits / queried > 0.5
    assert math.isnan(hit_rates[idle])  # no queries: no rate to divide by
    assert abs(prometheus.scalar(queries.model_prefix_hit_rate(SETTINGS, MODEL), at) - hits / queried) <= slack
    assert prometheus.scalar(queries.pods_serving(SETTINGS, MODEL), at) == 2

    # Tokens per request from Prometheus's two rates is what the counters say, on the pod that served.
    generated = prometheus.by_pod(queries.generation_throughput(SETTINGS, MODEL), at)
    tokens = generated_tokens(pair, busy) - tokens_before
    assert generated[idle] == 0 and generated[busy] > 0
    assert math.isclose(generated[busy] / rates[busy], tokens / requests, rel_tol=1e-9)

    # TTFT: Prometheus's p50 and p95 lie in the buckets where vLLM's own histogram crosses them.
    after_ttft = ttft_buckets(pair)
    counts = {le: after_ttft[le] - before_ttft.get(le, 0.0) for le in sorted(after_ttft)}
    total = counts[math.inf]
    for quantile in (0.5, 0.95):
        value = prometheus.scalar(queries.ttft(SETTINGS, MODEL, quantile), at)
        upper = next(le for le, count in counts.items() if count >= quantile * total)
        lower = max((le for le in counts if le < upper), default=0.0)
        assert lower <= value <= upper, (quantile, value, lower, upper)

    # Idle now: the gauges read 0 on both sides.
    for expr, field in ((queries.waiting(SETTINGS, MODEL), "waiting"), (queries.running(SETTINGS, MODEL), "running"),
                        (queries.kv_cache_usage(SETTINGS, MODEL), "kv_usage")):
        assert set(prometheus.by_pod(expr, at).values()) == {0.0} and gauge_sums(pair, field) == 0, expr
    assert_alerts_and_picker_panels(prometheus)



def test_verify_reads_the_unique_batchs_deltas_from_prometheus_as_the_counters_show_them(pair, prometheus, capsys,
                                                                                      progress):
    counters = UrlPods(pair.backends)
    before = counters.read()
    with start_gateway(pair.backends, seed=SEED) as gateway:
        status = cli.main(["verify", "--prometheus", prometheus.url, "--namespace", SETTINGS.namespace,
                           "--label", MODEL.deployment, "--gateway-url", gateway.url, "--workload", "seed-unique",
                           "--model-id", SERVED_MODEL, "--expect", "spread", "--json"])
    finished = time.time()
    out = capsys.readouterr().out
    measured = deltas(before, counters.read())
    progress.write(f"unique batch: verify --prometheus {out.strip()} | counters {measured}\n")
    assert status == 0
    verified = {p["pod"]: (p["requests"], p["hits"], p["queries"]) for p in json.loads(out)["pods"]}
    assert verified == {pod: tuple(map(int, counts)) for pod, counts in measured.items()}
    assert sum(requests for requests, _, _ in verified.values()) == 12

    prometheus.wait_for_scrape_after(finished)
    at = time.time()
    shares = prometheus.by_pod(queries.traffic_share(SETTINGS, MODEL), at)
    # Each pod's share of the window's requests, in requests, is what it served, within one request:
    # rate() extrapolates each series from its own samples, so on a database seconds old a counter
    # that starts above zero (the pod that served the shared batch) is stretched where one at zero
    # is not. verify's deltas above, from the same samples without extrapolation, are exact.
    progress.write(f"unique batch on the dashboard: shares {shares}\n")
    assert shares.keys() == verified.keys()
    assert all(abs(shares[pod] * 12 - counts[0]) <= 1 for pod, counts in verified.items()), (shares, verified)
    hit_rates = prometheus.by_pod(queries.prefix_hit_rate(SETTINGS, MODEL), at)
    for pod, (requests, hits, queried) in verified.items():
        if requests:
            assert abs(hit_rates[pod] - hits / queried) <= 0.01
    assert_alerts_and_picker_panels(prometheus)


def burst(gateway_url: str, done: threading.Event) -> threading.Thread:
    """BURST concurrent completions of BURST_TOKENS tokens each, through serve by the openai client."""
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key="not-checked", max_retries=0, timeout=300)

    def one(index: int) -> None:
        client.completions.create(model=SERVED_MODEL, prompt=f"Burst request {index}: tell a long story.",
                                  max_tokens=BURST_TOKENS, extra_body={"ignore_eos": True})

    def run() -> None:
        threads = [threading.Thread(target=one, args=(index,)) for index in range(BURST)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_burst_drives_the_scalers_query_above_its_target_and_back_below(pair, prometheus, progress):
    target = MODEL.autoscaling.target
    per_pod = f"({queries.scaler_query(SETTINGS, MODEL)}) / ({queries.pods_serving(SETTINGS, MODEL)})"
    other_metrics = {metric: queries.scaler_query(lab_settings(metric, 0.5), lab_settings(metric, 0.5).model_named(
        "qwen-small")) for metric in ("waiting", "kvCache")}
    peak = {"prometheus": 0.0, "vllm": 0.0, "kvCache prometheus": 0.0, "kvCache vllm": 0.0}
    done = threading.Event()
    started = time.monotonic()
    with start_gateway(pair.backends, seed=SEED) as gateway:
        thread = burst(gateway.url, done)
        while not done.is_set():
            peak["prometheus"] = max(peak["prometheus"], prometheus.scalar(per_pod))
            peak["vllm"] = max(peak["vllm"], gauge_sums(pair, "running") / len(pair.backends))
            peak["kvCache prometheus"] = max(peak["kvCache prometheus"], prometheus.scalar(other_metrics["kvCache"]))
            peak["kvCache vllm"] = max(peak["kvCache vllm"], gauge_sums(pair, "kv_usage"))
            # These servers admit every request of the burst: nothing waits, on either side.
            assert prometheus.scalar(other_metrics["waiting"]) == 0 == gauge_sums(pair, "waiting")
            time.sleep(0.25)
        thread.join()
    lasted = time.monotonic() - started
    prometheus.wait_for_scrape_after(time.time())
    after = prometheus.scalar(per_pod)
    progress.write(f"burst of {BURST} x {BURST_TOKENS} tokens for {lasted:.1f}s: running per pod at its peak "
                   f"{peak['prometheus']:g} (Prometheus) / {peak['vllm']:g} (vLLM), target {target:g}, "
                   f"{after:g} after; KV-cache sum at its peak {peak['kvCache prometheus']:.3f} / "
                   f"{peak['kvCache vllm']:.3f}\n")
    assert peak["prometheus"] > target and peak["vllm"] > target
    assert peak["prometheus"] <= BURST / 2 and peak["vllm"] <= BURST / 2
    assert after < target and gauge_sums(pair, "running") == 0
    assert peak["kvCache prometheus"] > 0 and peak["kvCache vllm"] > 0


def test_every_dashboard_query_names_only_what_real_vllm_or_the_pinned_router_exports(pair):
    with urllib.request.urlopen(next(iter(pair.backends.values())) + "/metrics", timeout=10) as reply:
        served = {s.name for f in text_string_to_metric_families(reply.read().decode()) for s in f.samples}
    for settings in (SETTINGS, load_stack("dev")):
        for model in settings.models:
            for expr in dashboard.every_expression(settings, model):
                for name in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr):
                    exported = served if name.startswith("vllm:") else {
                        f"{family}{suffix}" for family in ROUTER_METRICS for suffix in ("", "_bucket")}
                    assert name in exported, f"{name} in {expr}"
