"""One model's open-source endpoint picker as plain data: the llm-d router chart's values (its
InferencePool, its picker and the picker's configuration) and the HTTPRoute to the pool."""

from __future__ import annotations

import hashlib
from typing import Any

from components.gateway_api.render import GATEWAY_CLASS, MODEL_HEADER
from components.observability.render import router_monitoring
from settings import ModelSettings, Settings
from settings.picker import endpoint_picker_config_text

# llm-d router v0.10.0: the release the llm-d distribution pins, and the one routing/ models
# (EndpointPickerConfig llm-d.ai/v1alpha1, token-based prefix hashing).
ROUTER_CHART = "oci://ghcr.io/llm-d/charts/llm-d-router-gateway"
ROUTER_VERSION = "v0.10.0"
ROUTER_IMAGE = {"registry": "ghcr.io/llm-d", "repository": "llm-d-router-endpoint-picker", "tag": ROUTER_VERSION,
                "pullPolicy": "IfNotPresent"}
# A key of its own in the chart's ConfigMap: the chart writes `default-plugins.yaml` itself.
CONFIG_KEY = "inference-gateway-plugins.yaml"
CHECKSUM_ANNOTATION = "inference-gateway/picker-config-sha256"
# The chart asks 8 CPUs; a picker for a few pods needs a fraction of an m6i.large.
PICKER_RESOURCES = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}


def config_checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def router_values(model: ModelSettings, settings: Settings) -> dict[str, Any]:
    """The chart's values: the pool selects the model's pods; the picker runs our configuration."""
    text = endpoint_picker_config_text(model)
    epp: dict[str, Any] = {
        "image": ROUTER_IMAGE,
        "replicas": settings.picker_replicas(model),
        "pluginsCustomConfig": {CONFIG_KEY: text},
        "pluginsConfigFile": CONFIG_KEY,
        # The picker reads its configuration only at start: a new hash rolls its pods.
        "podAnnotations": {CHECKSUM_ANNOTATION: config_checksum(text)},
        "resources": PICKER_RESOURCES,
    }
    if model.log_level is not None:
        epp["flags"] = {"v": model.log_level}
    router: dict[str, Any] = {
        "modelServers": {"matchLabels": dict(model.selector), "targetPorts": [{"number": model.port}]},
        "epp": epp,
    }
    if (monitoring := router_monitoring(settings, model)) is not None:
        router["monitoring"] = monitoring
    return {"provider": {"name": GATEWAY_CLASS}, "router": router}


def http_route(model: ModelSettings, settings: Settings) -> dict[str, Any]:
    """Requests for this model go to its pool. With several models the match is on the header
    body-based routing sets from the request's `model`; with one, every request is its."""
    match: dict[str, Any] = {"path": {"type": "PathPrefix", "value": "/"}}
    if settings.gateway.bbr_enabled:
        match["headers"] = [{"type": "Exact", "name": MODEL_HEADER, "value": model.model}]
    rule: dict[str, Any] = {
        "matches": [match],
        "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": model.name}],
    }
    if model.route_timeout is not None:
        rule["timeouts"] = {"request": model.route_timeout}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": model.name, "namespace": settings.namespace},
        "spec": {"parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                 "name": settings.gateway.name}], "rules": [rule]},
    }
