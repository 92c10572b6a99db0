"""Where a deployed stack's gateway and pickers are found in the cluster, for each implementation.
`routing verify` reaches them through the API server; `gatewayUrlCommand` prints the address."""

from __future__ import annotations

from dataclasses import dataclass

from .model import GATEWAY_OWNER_LABEL, GATEWAY_SYSTEM_NAMESPACE, ModelSettings, Settings

# Istio labels the Service it provisions for a Gateway with the Gateway's name.
GATEWAY_API_NAME_LABEL = "gateway.networking.k8s.io/gateway-name"
# The llm-d router chart's selector label on its picker pods: `<release>-epp`.
ROUTER_PICKER_LABEL = "llm-d-router-gateway"


@dataclass(frozen=True)
class Location:
    namespace: str
    selector: str


def gateway_service(settings: Settings) -> Location:
    """The Service in front of the gateway's proxies."""
    if settings.gateway.implementation == "llm-d":
        return Location(settings.namespace, f"{GATEWAY_API_NAME_LABEL}={settings.gateway.name}")
    return Location(GATEWAY_SYSTEM_NAMESPACE, f"{GATEWAY_OWNER_LABEL}={settings.gateway.name}")


def gateway_scheme(settings: Settings) -> str:
    """HyperPod gateways always terminate TLS; the open-source Gateway here listens on HTTP."""
    return "https" if settings.gateway.tls_acm_arn is not None else "http"


def picker_pods(settings: Settings, model: ModelSettings) -> Location:
    """A model's endpoint-picker pods. AWS documents selecting HyperPod's by `app=<scheduler>-epp`,
    never by the Deployment's name, which changes with every edit of the scheduler."""
    if settings.gateway.implementation == "llm-d":
        return Location(settings.namespace, f"{ROUTER_PICKER_LABEL}={model.name}-epp")
    return Location(settings.namespace, f"app={model.name}-epp")
