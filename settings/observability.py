"""The `observability` block and each model's `autoscaling`: what the monitoring stack and the
scalers are, decided and checked before anything is declared. Where a model's series are found
in Prometheus (its selector) lives here too: the program's monitors, dashboards, alerts and
scalers and `routing verify --prometheus` all read it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from .errors import HIDDEN, NOT_SET
from .model import (AMP_WORKSPACE_ARN, DEFAULT_POLLING_SECONDS, DEFAULT_SCALE_DOWN_SECONDS, AutoscalingSettings,
                    ClusterSettings, ModelSettings, ObservabilitySettings, RemoteWriteSettings, default_of)
from .kubernetes_names import subdomain_message
from .reader import MISSING, Coerce, ConfigNode, Problems

OBSERVABILITY_KEYS = ("enabled", "scrapeInterval", "retention", "prometheusStorageGiB", "storageClass",
                      "grafanaAdminPassword", "remoteWrite")
AUTOSCALING_KEYS = ("minReplicas", "maxReplicas", "metric", "target", "pollingInterval", "scaleDownDelay")

# The vLLM gauge each autoscaling metric reads (vllm/v1/metrics/loggers.py at 0.32, the release the
# stack deploys), summed over the model's pods: a scaler compares that sum per replica with its
# target (KEDA's AverageValue). A default target where one holds for any model: a queue of two per
# pod already means every request waits, and 80% of the KV cache leaves room for one more long
# prompt. How many requests a pod runs well at depends on the model and GPU: `running` has none.
AUTOSCALING_METRICS: Mapping[str, str] = {"waiting": "vllm:num_requests_waiting",
                                          "running": "vllm:num_requests_running",
                                          "kvCache": "vllm:kv_cache_usage_perc"}
DEFAULT_TARGETS: Mapping[str, float] = {"waiting": default_of(AutoscalingSettings, "target"), "kvCache": 0.8}
MAX_REPLICAS = 100

# The Prometheus label each vLLM pod's `app` label becomes (the PodMonitor's podTargetLabels): a
# model's pods are `{namespace=<namespace>, app=<deployment>}`, as `kubectl -l app=` finds them.
POD_LABEL = "app"

PROMETHEUS_DURATION = re.compile(r"^(?P<number>[0-9]+)(?P<unit>s|m|h|d)$")
SECONDS_PER = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# A Grafana admin password shorter than this is refused: it guards every dashboard and datasource.
MIN_PASSWORD = 12


def model_selector(namespace: str, model: ModelSettings) -> str:
    """The PromQL label matchers of a model's vLLM series."""
    return f'namespace="{namespace}", {POD_LABEL}="{model.deployment}"'


def grafana_password(raw: Mapping[str, Any]) -> str | None:
    """The Grafana admin password in the stack config (flat or `--path` form), if there is one."""
    flat = raw.get("observability.grafanaAdminPassword")
    if isinstance(flat, str) and flat:
        return flat
    node = raw.get("observability")
    if isinstance(node, str):
        try:
            node = json.loads(node)
        except ValueError:
            return None
    value = node.get("grafanaAdminPassword") if isinstance(node, dict) else None
    return value if isinstance(value, str) and value else None


def _duration_seconds(value: str) -> int | None:
    match = PROMETHEUS_DURATION.match(value.strip()) if isinstance(value, str) else None
    return int(match["number"]) * SECONDS_PER[match["unit"]] if match else None


class ObservabilityParser:
    def __init__(self, problems: Problems, coerce: Coerce):
        self.problems = problems
        self.coerce = coerce

    def settings(self, node: ConfigNode, *, namespace: str, models_namespace: str,
                 secret_keys: frozenset[str]) -> ObservabilitySettings:
        node.reject_unknown(OBSERVABILITY_KEYS)
        c = self.coerce
        enabled = node.leaf("enabled", c.boolean, default_of(ObservabilitySettings, "enabled"))
        if enabled is False:
            for only_when_on in sorted(node.names() - {"enabled"}):
                self.problems.add(node.child_key(only_when_on), HIDDEN if only_when_on == "grafanaAdminPassword"
                                  else node.raw(only_when_on),
                                  "configures the monitoring stack, and observability.enabled is false. Remove it, "
                                  "or remove observability.enabled.")
            return ObservabilitySettings(enabled=False, namespace=namespace)
        if namespace == models_namespace:
            self.problems.add("gateway.networkPolicy.monitoringNamespace", namespace,
                              f"is where observability runs Prometheus and Grafana, and the models run in namespace "
                              f"{models_namespace} too: the model pods' NetworkPolicies would admit every pod there. "
                              "Use a namespace of its own, e.g. monitoring.")
        def leaf(key: str, field: str, coerce) -> Any:
            # A refused value leaves the default in place: the refusal stops the run anyway.
            value = node.leaf(key, coerce, default_of(ObservabilitySettings, field))
            return default_of(ObservabilitySettings, field) if value is MISSING else value

        storage_gib = c.integer(minimum=5, maximum=16384, hint=" GiB of EBS for Prometheus; a few models' pods "
                                                               "write well under 1 GiB a day.")
        remote_write = node.leaf("remoteWrite", c.string(_remote_write_message), None)
        return ObservabilitySettings(
            enabled=True, namespace=namespace,
            scrape_interval_seconds=leaf("scrapeInterval", "scrape_interval_seconds", self._interval),
            retention_days=leaf("retention", "retention_days", self._retention),
            prometheus_storage_gib=leaf("prometheusStorageGiB", "prometheus_storage_gib", storage_gib),
            storage_class=leaf("storageClass", "storage_class", c.string(lambda name: subdomain_message(name, "a StorageClass name"))),
            grafana_password_given=self._password(node, secret_keys),
            remote_write=(None if not isinstance(remote_write, str)
                          else RemoteWriteSettings(None if remote_write == "create" else remote_write)))

    def _interval(self, key: str, value: Any) -> Any:
        seconds = _duration_seconds(value) if isinstance(value, str) else None
        if seconds is None or not 1 <= seconds <= 300:
            self.problems.add(key, value, "must be a Prometheus duration from 1s to 5m, e.g. 15s (the default): how "
                                          "often every model's pods and pickers are scraped.")
            return MISSING
        return seconds

    def _retention(self, key: str, value: Any) -> Any:
        seconds = _duration_seconds(value) if isinstance(value, str) else None
        if seconds is None or seconds % 86400 or not 1 <= seconds // 86400 <= 365:
            self.problems.add(key, value, "must be whole days from 1d to 365d, e.g. 15d (the default): how long "
                                          "Prometheus keeps samples on its volume.")
            return MISSING
        return seconds // 86400

    def _password(self, node: ConfigNode, secret_keys: frozenset[str]) -> bool:
        """Whether a password is given; read by hand, never through a message that could echo it."""
        key = node.child_key("grafanaAdminPassword")
        node.reject_below("grafanaAdminPassword")
        forms = [form.get("grafanaAdminPassword") for form in (node.flat, node.structured)]
        given = [value for value in forms if value not in (None, "")]
        if not given:
            return False
        value = given[0]
        if len(given) == 2 and given[0] != given[1]:
            self.problems.add(key, HIDDEN, "is set twice with different values, flat and inside observability "
                                           f"(`--path`). Remove one, e.g. `pulumi config rm {key}`.")
        elif not ({"observability", key} & secret_keys):
            self.problems.add(key, HIDDEN, "is stored in plain text in the stack file. Store it encrypted with "
                                           f"`pulumi config set --secret {key} <password>`, or remove it and the "
                                           "stack generates one (`pulumi stack output grafanaAdminPassword "
                                           "--show-secrets`).")
        elif not isinstance(value, str) or len(value) < MIN_PASSWORD:
            self.problems.add(key, HIDDEN, f"must be at least {MIN_PASSWORD} characters: it guards every dashboard "
                                           "and the Prometheus datasource. Remove it to have the stack generate one.")
        return True

    def autoscaling(self, key: str, entry: dict, replicas_set: bool) -> AutoscalingSettings | None:
        """One model's `autoscaling` block; None (with the problems added) when it is refused."""
        node = ConfigNode(key, entry.get("autoscaling"), {}, self.problems)
        node.reject_unknown(AUTOSCALING_KEYS)
        c = self.coerce
        before = len(self.problems.items)
        count = c.integer(minimum=1, maximum=MAX_REPLICAS, hint=" Scaling to zero is not offered: a cold pod "
                                                                 "loads its weights for minutes.")
        low = node.leaf("minReplicas", count, MISSING)
        high = node.leaf("maxReplicas", count, MISSING)
        for required, value, example in (("minReplicas", low, 1), ("maxReplicas", high, 4)):
            if value is MISSING and required not in node.names():
                self.problems.add(node.child_key(required), NOT_SET,
                                  f"is required with autoscaling, e.g. `pulumi config set --path '{node.child_key(required)}' "
                                  f"{example}`.")
        if isinstance(low, int) and isinstance(high, int) and high < low:
            self.problems.add(node.child_key("maxReplicas"), high,
                              f"is below {node.child_key('minReplicas')} ({low}): 0 < minReplicas <= maxReplicas.")
        metric = node.leaf("metric", c.choice(AUTOSCALING_METRICS), "waiting")
        target = node.leaf("target", self._target(metric), DEFAULT_TARGETS.get(metric, MISSING))
        if target is MISSING and "target" not in node.names() and isinstance(metric, str):
            self.problems.add(node.child_key("target"), NOT_SET,
                              f"is required with metric {metric}: the requests one pod should run at, which depends "
                              f"on the model and GPU (read vllm:num_requests_running under load), e.g. "
                              f"`pulumi config set --path '{node.child_key('target')}' 16`.")
        polling = node.leaf("pollingInterval", c.integer(minimum=1, maximum=3600, hint=" Seconds between KEDA's "
                                                                                       "queries."),
                            DEFAULT_POLLING_SECONDS)
        scale_down = node.leaf("scaleDownDelay", c.integer(minimum=0, maximum=86400, hint=" Seconds the load must stay "
                                                                                         "low before a pod goes."),
                             DEFAULT_SCALE_DOWN_SECONDS)
        if replicas_set:
            self.problems.add(key.rsplit(".", 1)[0] + ".replicas", entry.get("replicas"),
                              "is set by the scaler between autoscaling.minReplicas and maxReplicas; a fixed count "
                              "would be reset at every `pulumi up`. Remove it (`pulumi config rm --path "
                              f"'{key.rsplit('.', 1)[0]}.replicas'`).")
        if len(self.problems.items) > before:
            return None
        return AutoscalingSettings(min_replicas=low, max_replicas=high, metric=metric, target=target,
                                   polling_seconds=polling, scale_down_seconds=scale_down)

    def _target(self, metric: Any):
        def coerce(key: str, value: Any) -> Any:
            if metric == "kvCache":
                return self.coerce.number(0.0, 1.0, " The KV cache's used fraction per pod, e.g. 0.8.")(key, value)
            return self.coerce.number(0.0, 1e6, f" {metric.capitalize() if isinstance(metric, str) else 'Requests'} "
                                                "requests per pod, e.g. 2.")(key, value)

        return coerce


def _remote_write_message(value: str) -> str | None:
    if value == "create" or AMP_WORKSPACE_ARN.match(value):
        return None
    return ("must be create (the stack makes an Amazon Managed Service for Prometheus workspace) or a workspace ARN "
            "such as arn:aws:aps:us-west-2:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef.")


def observability_warnings(observability: ObservabilitySettings, cluster: ClusterSettings) -> list[str]:
    if not observability.enabled or not cluster.existing:
        return []
    where = (f"StorageClass {observability.storage_class}" if observability.storage_class
             else "the cluster's default StorageClass (observability.storageClass names another)")
    return [f"observability on an existing cluster: Prometheus's and Grafana's volumes use {where}, which needs a CSI "
            "driver such as aws-ebs-csi-driver; the stack installs none on a cluster it does not own. The stack also "
            "installs the Prometheus operator's CRDs: if the cluster already runs one, set observability.enabled "
            "false."]
