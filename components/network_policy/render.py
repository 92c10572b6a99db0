"""The NetworkPolicies that leave the model pods reachable only through the front door, as plain data.

Per model, on both platforms:
- its vLLM pods admit vLLM's port from the gateway's data plane (which sends them requests), from
  the model's own pickers (they scrape /metrics and, with the precise prefix index, ask /render for
  tokens), from the monitoring namespace and from gateway.networkPolicy.apiServerCidrs; with the
  precise prefix index, their KV-cache event port from the model's own pickers alone (each picker
  dials every pod's event socket); nothing else reaches them;
- its picker pods admit their gRPC (ext_proc) port from the gateway's data plane alone, and their
  metrics port from the monitoring namespace.
On llm-d with body-based routing, its pods admit their gRPC (ext_proc) port from the gateway's data
plane alone: nothing scrapes them, and they only call out (to the API server, for ConfigMaps).
Who the gateway and the pickers are is settings/endpoints.py's answer for the implementation. A
pod's own node always gets through (kubelet probes): NetworkPolicy never filters it, and the VPC
CNI's policy agent admits the node's address.
"""

from __future__ import annotations

from typing import Any

from settings import ModelSettings, Settings
from settings.endpoints import (BBR_GRPC_PORT, KV_EVENTS_PORT, PICKER_GRPC_PORT, PICKER_METRICS_PORT, Pods, bbr_name,
                                bbr_pods, gateway_pods, picker_pod_labels)

# Kubernetes sets it on every namespace (1.22+): how a policy names a namespace.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
PART_OF = {"app.kubernetes.io/part-of": "inference-gateway"}


def peer(pods: Pods, policy_namespace: str) -> dict[str, Any]:
    """A NetworkPolicy `from` entry for these pods, seen from a policy in `policy_namespace`."""
    entry: dict[str, Any] = {}
    if pods.labels is not None:
        entry["podSelector"] = {"matchLabels": dict(pods.labels)}
    if pods.labels is None or pods.namespace != policy_namespace:
        entry["namespaceSelector"] = {"matchLabels": {NAMESPACE_NAME_LABEL: pods.namespace}}
    return entry


def _policy(name: str, namespace: str, selector: dict[str, str], ingress: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(PART_OF)},
            "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress"], "ingress": ingress}}


def _tcp(port: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port}]


def model_policy(settings: Settings, model: ModelSettings) -> dict[str, Any]:
    policy = settings.gateway.network_policy
    namespace = settings.namespace
    pickers = peer(Pods(namespace, picker_pod_labels(settings, model)), namespace)
    sources = [peer(gateway_pods(settings), namespace), pickers,
               peer(Pods(policy.monitoring_namespace, None), namespace),
               *({"ipBlock": {"cidr": cidr}} for cidr in policy.api_server_cidrs)]
    ingress = [{"from": sources, "ports": _tcp(model.port)}]
    if model.routing.precise is not None:
        ingress.append({"from": [pickers], "ports": _tcp(KV_EVENTS_PORT)})
    return _policy(f"{model.deployment}-ingress", namespace, dict(model.selector), ingress)


def picker_policy(settings: Settings, model: ModelSettings) -> dict[str, Any]:
    namespace = settings.namespace
    return _policy(f"{model.name}-picker-ingress", namespace, picker_pod_labels(settings, model), [
        {"from": [peer(gateway_pods(settings), namespace)], "ports": _tcp(PICKER_GRPC_PORT)},
        {"from": [peer(Pods(settings.gateway.network_policy.monitoring_namespace, None), namespace)],
         "ports": _tcp(PICKER_METRICS_PORT)},
    ])


def bbr_policy(settings: Settings) -> dict[str, Any]:
    namespace = settings.namespace
    return _policy(f"{bbr_name(settings)}-ingress", namespace, dict(bbr_pods(settings).labels),
                   [{"from": [peer(gateway_pods(settings), namespace)], "ports": _tcp(BBR_GRPC_PORT)}])


def policies(settings: Settings) -> list[dict[str, Any]]:
    """Every policy the stack declares; none when gateway.networkPolicy.enabled is false. HyperPod's
    body-based router is AWS's, in the add-on's namespace: only the llm-d stack's own gets one."""
    if not settings.gateway.network_policy.enabled:
        return []
    per_model = [policy for model in settings.models for policy in (model_policy(settings, model),
                                                                     picker_policy(settings, model))]
    own_bbr = settings.gateway.implementation == "llm-d" and settings.gateway.bbr_enabled
    return per_model + ([bbr_policy(settings)] if own_bbr else [])
