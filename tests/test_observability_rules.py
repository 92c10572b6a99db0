"""Every PromQL expression the stack deploys passes `promtool check rules`, and the three alerts
pass `promtool test rules` unit tests: each fires when it should, and the seed's concentration
(every shared-prefix request on one pod, the other idle, nothing queued) does not fire.

promtool is Debian's (`apt-get install prometheus`, 2.42); `./test.sh` installs it when it may, and
the PR workflow does too. Without it these tests skip with the reason, unless the run requires them
(CI=true, or ROUTING_E2E_REQUIRED=1 in ./test.sh's full run): then they fail.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from components.observability import dashboard, queries
from components.observability import render as observability
from settings import load_stack, parse_settings
from settings.stackfile import read_stack_config, stack_file
from tests.full_run import required_by

INSTALL = "install Debian's prometheus package, which brings promtool: `apt-get install prometheus`"


def required_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if why := required_by():
            pytest.fail(f"{why} but {name} is not installed: {INSTALL}", pytrace=False)
        pytest.skip(f"{name} is not installed: {INSTALL}")
    return found


@pytest.fixture(scope="module")
def promtool() -> str:
    return required_tool("promtool")


def stack_with_scalers(stack: str, metric: str):
    """A stack file's settings with every model autoscaling on `metric`."""
    raw, secrets = read_stack_config(stack_file(stack))
    models = raw["models"] if isinstance(raw["models"], list) else yaml.safe_load(raw["models"])
    scaled = [{**{k: v for k, v in m.items() if k != "replicas"},
               "autoscaling": {"minReplicas": 1, "maxReplicas": 1, "metric": metric, "target": 1}} for m in models]
    return parse_settings({**raw, "models": scaled}, stack=stack, secret_keys=frozenset(secrets))


def rule_groups(settings) -> list[dict]:
    return [group for model in settings.models
            for group in observability.prometheus_rule(settings, model)["spec"]["groups"]]


def every_expression() -> list[str]:
    expressions = []
    for stack in ("dev", "eks", "existing"):
        for metric in ("waiting", "running", "kvCache"):
            settings = stack_with_scalers(stack, metric)
            for model in settings.models:
                expressions += [*dashboard.every_expression(settings, model), queries.scaler_query(settings, model)]
            expressions += [rule["expr"] for group in rule_groups(settings) for rule in group["rules"]]
    return sorted(set(expressions))


def check(promtool: str, tmp_path, groups: list[dict]) -> subprocess.CompletedProcess:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


def as_recording_rules(expressions: list[str]) -> dict:
    return {"name": "every-query", "rules": [{"record": f"check:expression_{index}", "expr": expr}
                                             for index, expr in enumerate(expressions)]}


def test_every_dashboard_query_alert_and_scaler_query_passes_promtool_check(promtool, tmp_path):
    expressions = every_expression()
    # 11 panel queries and a marker per dashboard, a scaler query and three alerts per model.
    assert len(expressions) > 40
    for groups in ([as_recording_rules(expressions)], *(rule_groups(load_stack(s)) for s in ("dev", "eks", "existing"))):
        result = check(promtool, tmp_path, groups)
        assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_promtool_check_refuses_a_broken_expression(promtool, tmp_path):
    broken = queries.traffic_share(load_stack("eks"), load_stack("eks").models[0]).replace("group_left", "group_lef")
    result = check(promtool, tmp_path, [as_recording_rules([broken])])
    assert result.returncode != 0 and "parse error" in result.stdout + result.stderr


# -- the alerts' unit tests -------------------------------------------------------------------

SETTINGS = load_stack("eks")
MODEL = SETTINGS.model_named("qwen-small")
POD = {"namespace": "inference", "app": MODEL.deployment}
PICKER = {"namespace": "inference", "service": "qwen-small-epp"}
RULE = observability.prometheus_rule(SETTINGS, MODEL)
# What the person paged reads, written here rather than read from the rule: promtool compares the
# firing alert's annotations with these exactly.
ANNOTATIONS = {
    "RoutingModelNotScraped": {
        "summary": "Prometheus cannot read the metrics of qwen-small's pods",
        "description": "Dashboards, alerts and the scaler are blind for this model. Check the pods run and that the "
                       "model pods' NetworkPolicy admits the monitoring namespace on vLLM's port."},
    "RoutingAffinityCostsLatency": {
        "summary": "A pod of qwen-small queues requests while another pod of it idles",
        "description": "Prefix affinity keeps sending one prefix's requests to a saturated pod. Lower the prefix "
                       "weight, use the sticky recipe's load cap, or add replicas; predict --concurrency shows the "
                       "trade-off."},
    "RoutingHitRateHalved": {
        "summary": "qwen-small's prefix-cache hit rate halved after its picker restarted",
        "description": "The new picker configuration (or a restarted picker's empty index) lost prefix affinity. "
                       "Compare predict's hit rates for the old and new weights; roll back the weights if the drop "
                       "was not intended."},
}
RULE_LABELS = {"namespace": "inference", "model": MODEL.name, "severity": "warning"}


def series(name: str, labels: dict, values: str) -> dict:
    inner = ", ".join(f'{key}="{value}"' for key, value in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def gauges(pod: str, running: str, waiting: str) -> list[dict]:
    labels = {**POD, "pod": pod, "engine": "0"}
    return [series("vllm:num_requests_running", labels, running), series("vllm:num_requests_waiting", labels, waiting)]


def expected(alert: str, **labels: str) -> dict:
    return {"exp_labels": {**labels, **RULE_LABELS}, "exp_annotations": ANNOTATIONS[alert]}


def scenario(name: str, input_series: list[dict], alert: str, checks: list[tuple[str, list[dict]]]) -> dict:
    up = [series("up", {**POD, "pod": pod}, "1x240") for pod in ("vllm-qwen-small-a", "vllm-qwen-small-b")]
    return {"name": name, "interval": "1m", "input_series": up + input_series,
            "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": alerts} for at, alerts in checks]}


A, B = "vllm-qwen-small-a", "vllm-qwen-small-b"
AFFINITY, NOT_SCRAPED, HALVED = "RoutingAffinityCostsLatency", "RoutingModelNotScraped", "RoutingHitRateHalved"

SCENARIOS = [
    # The seed's shared batch, serially, again and again: every request on pod a, one running at a
    # time, nothing waiting, pod b idle. Concentration is the picker doing its job: no alert.
    scenario("the seed's concentration does not fire", gauges(A, "1 0 1 1 0 1" * 6, "0x35") + gauges(B, "0x35", "0x35"),
             AFFINITY, [("10m", []), ("30m", [])]),
    # Pod a keeps three requests waiting for minutes while pod b idles: affinity is costing latency.
    # From minute 10 (the queue fills the five-minute window at 15, and holds two more minutes).
    scenario("a queue next to an idle pod fires", gauges(A, "2x10 8x30", "0x10 3x30") + gauges(B, "0x40", "0x40"),
             AFFINITY, [("10m", []), ("14m", []),
                        ("20m", [expected(AFFINITY, namespace="inference", app=MODEL.deployment, pod=A)])]),
    # Both pods queue: the model is short of replicas, not of balance.
    scenario("both pods queued does not fire", gauges(A, "8x30", "3x30") + gauges(B, "8x30", "2x30"),
             AFFINITY, [("10m", []), ("20m", [])]),
    # A pod that stays idle for a moment within the window is not idle: no alert on a brief dip.
    scenario("an idle pod that served within the window does not fire",
             gauges(A, "8x30", "3x30") + gauges(B, "0 0 0 1 0 0" * 5, "0x30"), AFFINITY, [("10m", [])]),
    # One pod's scrape fails for five minutes.
    scenario("a pod whose scrape fails fires",
             [series("up", {**POD, "pod": "vllm-qwen-small-c"}, "0x30")], NOT_SCRAPED,
             [("4m", []), ("10m", [expected(NOT_SCRAPED, namespace="inference", app=MODEL.deployment,
                                            pod="vllm-qwen-small-c")])]),
]


def hit_rate_series(after_change: str, pickers: tuple[str, str]) -> list[dict]:
    """Three hours of the model's prefix-cache counters on pod a, 1,000 tokens queried a minute,
    840 hit before minute 120 and `after_change` per minute after it; picker pods as given."""
    labels = {**POD, "pod": A, "engine": "0"}
    first, second = pickers
    info = [series("llm_d_epp_info", {**PICKER, "pod": first}, "1x120" if second != first else "1x180")]
    if second != first:
        info.append(series("llm_d_epp_info", {**PICKER, "pod": second}, "_x120 1x60"))
    return [series("vllm:prefix_cache_queries_total", labels, "0+1000x180"),
            series("vllm:prefix_cache_hits_total", labels, f"0+840x120 {840 * 121}+{after_change}x59"), *info]


SCENARIOS += [
    scenario("the hit rate halving after the picker changed fires",
             gauges(A, "1x180", "0x180") + gauges(B, "1x180", "0x180") + hit_rate_series("300", ("epp-1", "epp-2")),
             HALVED, [("110m", []), ("150m", [expected(HALVED)])]),
    scenario("a hit rate kept after the picker changed does not fire",
             hit_rate_series("800", ("epp-1", "epp-2")), HALVED, [("150m", []), ("170m", [])]),
    scenario("a hit rate halving with the same picker does not fire",
             hit_rate_series("300", ("epp-1", "epp-1")), HALVED, [("150m", []), ("170m", [])]),
]


def test_the_alerts_fire_when_they_should_and_the_seeds_concentration_does_not(promtool, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": RULE["spec"]["groups"]}, sort_keys=False))
    tests = tmp_path / "alerts.test.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                     "tests": SCENARIOS}, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_promtool_test_fails_when_an_alert_does_not_do_what_a_scenario_expects(promtool, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": RULE["spec"]["groups"]}, sort_keys=False))
    wrong = {**SCENARIOS[0], "alert_rule_test": [{"eval_time": "10m", "alertname": AFFINITY,
                                                  "exp_alerts": [expected(AFFINITY, pod=A)]}]}
    tests = tmp_path / "alerts.test.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "tests": [wrong]}, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr
