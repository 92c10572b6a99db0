"""The monitoring stack as plain data: kube-prometheus-stack's values, the monitors that select
each model's pods and pickers, the alerts, the dashboards' ConfigMaps, the volumes' StorageClass
and the AWS side (the EBS CSI driver's role, remote write to Amazon Managed Service for Prometheus).

Sizing. On `eks` the system nodes are 2 x m6i.large (2 vCPU, 8 GiB; about 1.93 vCPU and 7.1 GiB
allocatable each, 3.86 vCPU and 14.2 GiB in all). What runs there before this stack's monitoring
asks for about 1.7 vCPU and 3.4 GiB: per node aws-node 25m, kube-proxy 100m, the EBS CSI node
plugin about 30m/120Mi and node-exporter 50m/64Mi; once CoreDNS 2 x 100m/70Mi, istiod 200m/512Mi,
the load-balancer controller 2 x 50m/128Mi, cert-manager 3 x 20m/64Mi, two pickers 2 x 250m/512Mi,
BBR and the EBS CSI controller about 100m/256Mi and 120m/480Mi. Monitoring adds Prometheus
300m/1.5Gi, its config reloader, the operator 50m/128Mi, kube-state-metrics 20m/64Mi, Grafana
100m/256Mi with its two sidecars, Alertmanager 20m/64Mi (0.7 vCPU and 2.3 GiB) and, with
autoscaling, KEDA's three pods at 50m/128Mi: 2.5 vCPU and 6.1 GiB of 3.86 and 14.2 (2.7 and 6.6 with
Karpenter's two controllers at 100m/256Mi). On `dev` the
system group is one ml.c5.4xlarge (16 vCPU, 32 GiB), where the add-on's 13 pods leave room.
Prometheus's memory: a few models' pods, the nodes and the cluster's objects are some 50,000
series, about 1.5 GiB resident with the chart's 2 h head block; the limit leaves twice that.
"""

from __future__ import annotations

import json
from typing import Any

from components.iam import render as iam
from components.iam.render import ServiceAccountRole
from settings import ModelSettings, Settings
from settings.endpoints import PICKER_METRICS_PORT
from settings.observability import POD_LABEL

from . import dashboard, queries

# kube-prometheus-stack 88.5.3 (prometheus-operator v0.93.1, Prometheus v3.14.0, Grafana 13.2.0 from
# the grafana chart 12.11.1): the newest release in the chart repository's snapshot read here
# (2026-08-22), and the CRDs tests/schemas/observability-crds.schema.json holds.
CHART = "kube-prometheus-stack"
REPO = "https://prometheus-community.github.io/helm-charts"
VERSION = "88.5.3"
RELEASE = "kube-prometheus-stack"
# The chart's objects are named `<fullname>-prometheus`, `<fullname>-operator`...
FULLNAME = "monitoring"
PROMETHEUS_SERVICE = f"{FULLNAME}-prometheus"
# The chart's default for the Prometheus service account: the IRSA role for remote write trusts it alone.
PROMETHEUS_SERVICE_ACCOUNT = f"{FULLNAME}-prometheus"
PROMETHEUS_PORT = 9090
GRAFANA = "grafana"
GRAFANA_PORT = 80
GRAFANA_SECRET = "grafana-admin"
GRAFANA_USER = "admin"
# Prometheus selects every PodMonitor, ServiceMonitor and PrometheusRule with this label (the
# chart's default selectors, *SelectorNilUsesHelmValues), its own and the stack's alike.
MONITOR_LABELS = {"release": RELEASE}
PART_OF = {"app.kubernetes.io/part-of": "inference-gateway"}
# Grafana's dashboard sidecar loads every ConfigMap with this label (the chart's default).
DASHBOARD_LABEL = {"grafana_dashboard": "1"}

# The stack's own class for the volumes, on clusters it creates: encrypted gp3 through the EBS CSI
# driver, bound where the pod lands (an EBS volume lives in one zone).
STORAGE_CLASS = "monitoring-gp3"
EBS_CSI_PROVISIONER = "ebs.csi.aws.com"
EBS_CSI_ADDON = "aws-ebs-csi-driver"
# The EKS add-on's controller service account and AWS's managed policy for it (EKS user guide,
# "Create an Amazon EBS CSI driver IAM role").
EBS_CSI_ROLE = ServiceAccountRole("kube-system", "ebs-csi-controller-sa", "service-role/AmazonEBSCSIDriverPolicy")
GRAFANA_STORAGE_GIB = 5
# Prometheus keeps below this share of its volume, dropping the oldest blocks first, so a busy
# cluster never fills the disk before retention would have.
RETENTION_SHARE = 0.85

PROMETHEUS_RESOURCES = {"requests": {"cpu": "300m", "memory": "1536Mi"}, "limits": {"memory": "3Gi"}}
SMALL = {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
OPERATOR_RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
GRAFANA_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
NODE_EXPORTER_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}

# How long a condition must hold before each alert fires.
ALERT_FOR = {"RoutingModelNotScraped": "5m", "RoutingAffinityCostsLatency": "2m", "RoutingHitRateHalved": "10m"}


def namespace_manifest(settings: Settings) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": settings.observability.namespace,
                                                                  "labels": dict(PART_OF)}}


def storage_class() -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS, "labels": dict(PART_OF)},
            "provisioner": EBS_CSI_PROVISIONER, "parameters": {"type": "gp3", "encrypted": "true"},
            "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": True, "reclaimPolicy": "Delete"}


def storage_class_name(settings: Settings) -> str | None:
    """The class the volumes ask for: the one named, the stack's own on a cluster it creates, else
    (None) the cluster's default."""
    if settings.observability.storage_class:
        return settings.observability.storage_class
    return None if settings.cluster.existing else STORAGE_CLASS


def grafana_secret(settings: Settings) -> dict[str, Any]:
    """The admin Secret's shape; the password goes in as a Pulumi secret in the component."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": GRAFANA_SECRET, "namespace": settings.observability.namespace, "labels": dict(PART_OF)}}


def _volume(size_gib: int, storage_class: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{size_gib}Gi"}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return spec


def chart_values(settings: Settings, *, remote_write: dict[str, Any] | None = None,
                 prometheus_role_arn: str | None = None) -> dict[str, Any]:
    observability = settings.observability
    storage_class = storage_class_name(settings)
    interval = f"{observability.scrape_interval_seconds}s"
    prometheus_spec: dict[str, Any] = {
        "scrapeInterval": interval,
        "evaluationInterval": interval,
        "retention": f"{observability.retention_days}d",
        "retentionSize": f"{int(observability.prometheus_storage_gib * RETENTION_SHARE)}GB",
        "resources": PROMETHEUS_RESOURCES,
        "storageSpec": {"volumeClaimTemplate": {"spec": _volume(observability.prometheus_storage_gib, storage_class)}},
    }
    if remote_write is not None:
        prometheus_spec["remoteWrite"] = [remote_write]
    prometheus: dict[str, Any] = {"prometheusSpec": prometheus_spec}
    if prometheus_role_arn is not None:
        prometheus["serviceAccount"] = {"annotations": {"eks.amazonaws.com/role-arn": prometheus_role_arn}}
    grafana_persistence: dict[str, Any] = {"enabled": True, "type": "pvc", "size": f"{GRAFANA_STORAGE_GIB}Gi"}
    if storage_class:
        grafana_persistence["storageClassName"] = storage_class
    return {
        "fullnameOverride": FULLNAME,
        # EKS runs the control plane: its scheduler, controller manager and etcd cannot be scraped,
        # and kube-proxy serves its metrics on the node's loopback only. Their monitors and rules
        # would only report them down.
        "kubeControllerManager": {"enabled": False},
        "kubeScheduler": {"enabled": False},
        "kubeEtcd": {"enabled": False},
        "kubeProxy": {"enabled": False},
        "defaultRules": {"rules": {"etcd": False, "kubeControllerManager": False, "kubeSchedulerAlerting": False,
                                   "kubeSchedulerRecording": False, "kubeProxy": False, "windows": False}},
        "prometheusOperator": {
            # The webhook's certificate comes from Helm hook Jobs, which Pulumi's Chart applies as
            # ordinary objects in no particular order; the operator's TLS needs that certificate.
            # The stack's rules are checked by promtool before they are deployed.
            "admissionWebhooks": {"enabled": False},
            "tls": {"enabled": False},
            "resources": OPERATOR_RESOURCES,
        },
        "prometheus": prometheus,
        "alertmanager": {"alertmanagerSpec": {"resources": SMALL}},
        "kube-state-metrics": {"resources": SMALL},
        "prometheus-node-exporter": {"resources": NODE_EXPORTER_RESOURCES},
        "grafana": {
            "fullnameOverride": GRAFANA,
            "admin": {"existingSecret": GRAFANA_SECRET, "userKey": "admin-user", "passwordKey": "admin-password"},
            "persistence": grafana_persistence,
            # One ReadWriteOnce volume: the old pod must let go of it before the new one starts.
            "deploymentStrategy": {"type": "Recreate"},
            "resources": GRAFANA_RESOURCES,
            # A Helm test hook: Pulumi's Chart would run its pod as an ordinary object.
            "testFramework": {"enabled": False},
        },
    }


def pod_monitor(settings: Settings, model: ModelSettings) -> dict[str, Any]:
    """Selects exactly the model's vLLM pods, on their named port `http` (vLLM's), path /metrics;
    their `app` label becomes the series' label (settings.observability.POD_LABEL)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": {"name": model.deployment, "namespace": settings.namespace,
                     "labels": {**MONITOR_LABELS, **PART_OF}},
        "spec": {
            "selector": {"matchLabels": dict(model.selector)},
            "podTargetLabels": [POD_LABEL],
            "podMetricsEndpoints": [{"port": "http", "path": "/metrics",
                                     "interval": f"{settings.observability.scrape_interval_seconds}s"}],
        },
    }


def picker_pod_monitor(settings: Settings, model: ModelSettings) -> dict[str, Any]:
    """HyperPod's controller-made pickers (`app=<model>-epp`, in the model's namespace): on the
    router's metrics port, whose name AWS does not document, so by number. AWS's workshop shows
    them run with --metrics-endpoint-auth=false; it documents no Service and no monitor for them."""
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": {"name": f"{model.name}-picker", "namespace": settings.namespace,
                     "labels": {**MONITOR_LABELS, **PART_OF}},
        "spec": {
            "selector": {"matchLabels": {"app": f"{model.name}-epp"}},
            "podTargetLabels": ["app"],
            "podMetricsEndpoints": [{"portNumber": PICKER_METRICS_PORT, "path": "/metrics",
                                     "interval": f"{settings.observability.scrape_interval_seconds}s"}],
        },
    }


def router_monitoring(settings: Settings, model: ModelSettings) -> dict[str, Any] | None:
    """The llm-d router chart's own ServiceMonitor (router.monitoring, chart v0.10.0), with the
    picker's /metrics authentication kept on: the monitor presents the picker's service-account
    token, which the chart grants GET /metrics. Each release's token Secret gets its own name: the
    chart's default name is one per namespace, and two models share one."""
    if not settings.observability.enabled:
        return None
    return {"interval": f"{settings.observability.scrape_interval_seconds}s",
            "prometheus": {"enabled": True, "extraLabels": dict(MONITOR_LABELS),
                           "auth": {"enabled": True, "secretName": f"{model.name}-epp-metrics-reader"}}}


def prometheus_rule(settings: Settings, model: ModelSettings) -> dict[str, Any]:
    """The model's three routing alerts; each runbook line is in the README's troubleshooting table."""
    labels = {"namespace": settings.namespace, "model": model.name, "severity": "warning"}
    alerts = [
        ("RoutingModelNotScraped", queries.not_scraped(settings, model),
         f"Prometheus cannot read the metrics of {model.name}'s pods",
         "Dashboards, alerts and the scaler are blind for this model. Check the pods run and that the model "
         "pods' NetworkPolicy admits the monitoring namespace on vLLM's port."),
        ("RoutingAffinityCostsLatency", queries.affinity_costs_latency(settings, model),
         f"A pod of {model.name} queues requests while another pod of it idles",
         "Prefix affinity keeps sending one prefix's requests to a saturated pod. Lower the prefix weight, use "
         "the sticky recipe's load cap, or add replicas; predict --concurrency shows the trade-off."),
        ("RoutingHitRateHalved", queries.hit_rate_halved(settings, model),
         f"{model.name}'s prefix-cache hit rate halved after its picker restarted",
         "The new picker configuration (or a restarted picker's empty index) lost prefix affinity. Compare "
         "predict's hit rates for the old and new weights; roll back the weights if the drop was not intended."),
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": f"{model.name}-routing", "namespace": settings.namespace,
                     "labels": {**MONITOR_LABELS, **PART_OF}},
        "spec": {"groups": [{"name": f"{settings.namespace}-{model.name}-routing", "rules": [
            {"alert": name, "expr": expr, "for": ALERT_FOR[name], "labels": labels,
             "annotations": {"summary": summary, "description": description}}
            for name, expr, summary, description in alerts]}]},
    }


def dashboard_config_map(settings: Settings, model: ModelSettings) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"routing-{model.name}", "namespace": settings.observability.namespace,
                         "labels": {**DASHBOARD_LABEL, **PART_OF}},
            "data": {f"routing-{model.name}.json": json.dumps(dashboard.dashboard(settings, model), sort_keys=True)}}


def grafana_command(settings: Settings) -> str:
    return f"kubectl port-forward -n {settings.observability.namespace} svc/{GRAFANA} 3000:{GRAFANA_PORT}"


def prometheus_command(settings: Settings) -> str:
    return f"kubectl port-forward -n {settings.observability.namespace} svc/{PROMETHEUS_SERVICE} 9090:{PROMETHEUS_PORT}"


def prometheus_url(settings: Settings) -> str:
    """Prometheus inside the cluster: what the scalers query."""
    return f"http://{PROMETHEUS_SERVICE}.{settings.observability.namespace}.svc:{PROMETHEUS_PORT}"


def remote_write_role(settings: Settings) -> ServiceAccountRole:
    return ServiceAccountRole(settings.observability.namespace, PROMETHEUS_SERVICE_ACCOUNT)


def remote_write_policy(workspace_arn: str) -> str:
    """Prometheus may write to the one workspace, nothing else."""
    return iam.policy(iam.allow(["aps:RemoteWrite"], [workspace_arn]))


def remote_write(endpoint: str, region: str) -> dict[str, Any]:
    """One remote write queue, signed with the service account's IRSA credentials (SigV4)."""
    return {"url": endpoint.rstrip("/") + "/api/v1/remote_write", "sigv4": {"region": region}}


def workspace_endpoint(workspace_arn: str, region: str) -> str:
    """A given workspace's endpoint, as Amazon Managed Service for Prometheus names it."""
    return f"https://aps-workspaces.{region}.amazonaws.com/workspaces/{workspace_arn.rsplit('/', 1)[-1]}/"


def hyperpod_volume_policy(hyperpod_cluster_arn: str) -> str:
    """On HyperPod the EBS CSI driver attaches volumes through SageMaker (AttachClusterNodeVolume,
    SageMaker API reference; "Using the Amazon EBS CSI driver on SageMaker HyperPod EKS clusters")."""
    return iam.policy(iam.allow(["sagemaker:AttachClusterNodeVolume", "sagemaker:DetachClusterNodeVolume"],
                                [hyperpod_cluster_arn]))

