"""Each autoscaling model's KEDA ScaledObject, and KEDA itself on `eks`, as plain data.

The scaler queries the stack's Prometheus for the model's total of one vLLM gauge and KEDA's
HorizontalPodAutoscaler keeps that total per replica at the target (metricType AverageValue:
replicas = ceil(total / target)), between minReplicas and maxReplicas. A replica the nodes cannot
hold stays Pending (the settings warn or refuse) until Karpenter, when configured, brings a node.
"""

from __future__ import annotations

from typing import Any

from components.observability import queries
from components.observability.render import prometheus_url
from settings import ModelSettings, Settings

# KEDA 2.20.2 (chart and app): the newest release in the chart repository's snapshot read here
# (2026-08-13), whose ScaledObject CRD tests/schemas/observability-crds.schema.json holds.
CHART = "keda"
REPO = "https://kedacore.github.io/charts"
VERSION = "2.20.2"
NAMESPACE = "keda"
# The chart asks 100m/100Mi for each of its three pods; this stack's few ScaledObjects need a
# sliver (render.py in components/observability adds them up against the system nodes). Helm
# merges these into the chart's own, so its CPU limit of 1 stays: a cap, which reserves nothing.
RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}


def chart_values() -> dict[str, Any]:
    return {"resources": {"operator": RESOURCES, "metricServer": RESOURCES, "webhooks": RESOURCES}}


def scaled_object(settings: Settings, model: ModelSettings) -> dict[str, Any]:
    scaling = model.autoscaling
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": model.deployment, "namespace": settings.namespace,
                     "labels": {"app.kubernetes.io/part-of": "inference-gateway"}},
        "spec": {
            "scaleTargetRef": {"name": model.deployment},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": scaling.polling_seconds,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleDown": {"stabilizationWindowSeconds": scaling.scale_down_seconds}}}},
            "triggers": [{"type": "prometheus", "metricType": "AverageValue", "metadata": {
                "serverAddress": prometheus_url(settings),
                "query": queries.scaler_query(settings, model),
                "threshold": f"{scaling.target:g}",
            }}],
        },
    }
