"""Where a deployed stack's gateway and pickers are found in the cluster, for each implementation.
`routing verify` reaches them through the API server; `gatewayUrlCommand` prints the address; the
NetworkPolicies (components/network_policy) admit exactly these pods to the model pods."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .model import GATEWAY_OWNER_LABEL, GATEWAY_SYSTEM_NAMESPACE, ModelSettings, Settings

# Istio labels the Service and the pods it provisions for a Gateway with the Gateway's name
# (manifests/charts/istio-control/istio-discovery/files/kube-gateway.yaml@1.30.1).
GATEWAY_API_NAME_LABEL = "gateway.networking.k8s.io/gateway-name"
# The llm-d router chart's selector label on its picker pods: `<release truncated to 40>-epp`
# (config/charts/routerlib/templates/_helpers.tpl@v0.10.0, llm-d-router.selectorLabels).
ROUTER_PICKER_LABEL = "llm-d-router-gateway"
ROUTER_RELEASE_CHARACTERS = 40
# The endpoint picker's gRPC (ext_proc) and metrics ports: the llm-d router's defaults (--grpc-port,
# --metrics-port; its chart's container ports at v0.10.0), which HyperPod's picker arguments, as
# AWS's workshop shows them, leave unchanged.
PICKER_GRPC_PORT = 9002
PICKER_METRICS_PORT = 9090
# Where each vLLM pod publishes its KV-cache events under the precise prefix index: vLLM's default
# endpoint (tcp://*:5557, config/kv_events.py@0.32.0) and the port the picker dials on every pod it
# learns of (kvEventsConfig.podDiscoveryConfig.socketPort, pkg/kvevents/pool.go@v0.10.0).
KV_EVENTS_PORT = 5557
# The body-based router's gRPC (ext_proc) port, where the gateway's Envoy sends it each request
# (BBR's --grpc-port default and its chart's bbr.port, body-based-routing chart values.yaml@v1.5.0).
BBR_GRPC_PORT = 9004


@dataclass(frozen=True)
class Location:
    namespace: str
    selector: str


@dataclass(frozen=True)
class Pods:
    """Pods in a namespace: those carrying `labels`, or every pod there when labels is None."""

    namespace: str
    labels: Mapping[str, str] | None


def gateway_service(settings: Settings) -> Location:
    """The Service in front of the gateway's proxies."""
    if settings.gateway.implementation == "llm-d":
        return Location(settings.namespace, f"{GATEWAY_API_NAME_LABEL}={settings.gateway.name}")
    return Location(GATEWAY_SYSTEM_NAMESPACE, f"{GATEWAY_OWNER_LABEL}={settings.gateway.name}")


def gateway_pods(settings: Settings) -> Pods:
    """The gateway's data plane: the proxies that send requests on to the model pods. AWS documents
    the namespace HyperPod's Envoy and BBR run in, not their pods' labels: the whole namespace."""
    if settings.gateway.implementation == "llm-d":
        return Pods(settings.namespace, {GATEWAY_API_NAME_LABEL: settings.gateway.name})
    return Pods(GATEWAY_SYSTEM_NAMESPACE, None)


def bbr_name(settings: Settings) -> str:
    """The body-based router's name on llm-d: its chart's release and `bbr.name`, which the chart
    gives its Deployment, Service and pods' `app` label (templates/bbr.yaml@v1.5.0)."""
    return f"{settings.gateway.name}-bbr"


def bbr_pods(settings: Settings) -> Pods:
    return Pods(settings.namespace, {"app": bbr_name(settings)})


def gateway_scheme(settings: Settings) -> str:
    """What clients of the gateway's address speak: TLS, unless gateway.tls is off (llm-d only)."""
    return "https" if settings.gateway.tls_acm_arn is not None else "http"


def service_scheme(settings: Settings) -> str:
    """What the gateway's Service speaks inside the cluster (to the API server's service proxy). With
    an ACM certificate on llm-d, TLS ends at the NLB and the Gateway's pods speak HTTP."""
    if settings.gateway.implementation == "llm-d" and settings.gateway.tls_acm_arn:
        return "http"
    return gateway_scheme(settings)


def picker_pod_labels(settings: Settings, model: ModelSettings) -> dict[str, str]:
    """Labels of a model's endpoint-picker pods. AWS documents selecting HyperPod's by
    `app=<scheduler>-epp`, never by the Deployment's name, which changes with every edit of the
    scheduler; the llm-d router's chart labels its own with the release name."""
    if settings.gateway.implementation == "llm-d":
        return {ROUTER_PICKER_LABEL: f"{model.name[:ROUTER_RELEASE_CHARACTERS]}-epp"}
    return {"app": f"{model.name}-epp"}


def picker_pods(settings: Settings, model: ModelSettings) -> Location:
    """A model's endpoint-picker pods, as a label selector in the model's namespace."""
    labels = picker_pod_labels(settings, model)
    return Location(settings.namespace, ",".join(f"{key}={value}" for key, value in labels.items()))
