"""The open-source data plane as plain data: which releases, and what each is given.

Why Istio: it is the one Gateway API implementation with a full pass of the Inference
Extension's conformance suite at GIE v1.5.0 (13 of 13, standard channel, Gateway API v1.5.1),
the CRD releases pinned here; the llm-d router's chart speaks to it natively (provider istio).
Facts and citations: shared/reference/open-source-picker.md §1, §4, §5.
"""

from __future__ import annotations

from typing import Any

from components.iam.render import ServiceAccountRole
from settings import Settings

# Gateway API v1.5.1, standard channel: the version Istio's conformance run used.
GATEWAY_API_CRDS = "https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.5.1/standard-install.yaml"
# The InferencePool CRD (inference.networking.k8s.io/v1) alone, from GIE v1.5.0, the release
# Istio's conformance report and the llm-d router v0.10 were tested against.
INFERENCE_POOL_CRD = ("https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/"
                      "v1.5.0/v1-manifests.yaml")

ISTIO_REPO = "https://istio-release.storage.googleapis.com/charts"
ISTIO_VERSION = "1.30.1"
ISTIO_NAMESPACE = "istio-system"
GATEWAY_CLASS = "istio"

# AWS Load Balancer Controller 3.5.0 (app v3.5.0), the newest chart: it turns the Gateway's
# LoadBalancer Service into an internal NLB on the subnets tagged kubernetes.io/role/internal-elb.
LOAD_BALANCER_CONTROLLER_REPO = "https://aws.github.io/eks-charts"
LOAD_BALANCER_CONTROLLER_CHART = "aws-load-balancer-controller"
LOAD_BALANCER_CONTROLLER_VERSION = "3.5.0"
LOAD_BALANCER_CONTROLLER_NAMESPACE = "kube-system"
LOAD_BALANCER_CONTROLLER_SERVICE_ACCOUNT = "aws-load-balancer-controller"
LOAD_BALANCER_CONTROLLER_ROLE = ServiceAccountRole(LOAD_BALANCER_CONTROLLER_NAMESPACE,
                                                   LOAD_BALANCER_CONTROLLER_SERVICE_ACCOUNT)

# Body-based routing (the request's `model` into X-Gateway-Model-Name) from GIE v1.5.0, its last
# release: BBR moved to llm-d's payload processor, which has published no release to pin.
BBR_CHART = "oci://registry.k8s.io/gateway-api-inference-extension/charts/body-based-routing"
BBR_VERSION = "v1.5.0"
MODEL_HEADER = "X-Gateway-Model-Name"

# The system nodes are m6i.large (2 vCPU, 8 GiB): istiod's default ask (500m, 2 GiB, autoscaled
# to 5) would take a node of its own.
ISTIOD_RESOURCES = {"requests": {"cpu": "200m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
LOAD_BALANCER_CONTROLLER_RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}

# The internal NLB the controller makes for the Gateway's Service, with pods as targets.
INTERNAL_NLB = {
    "service.beta.kubernetes.io/aws-load-balancer-type": "external",
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
}


# Istio's per-Gateway override of the Service type it provisions (LoadBalancer by default).
IN_CLUSTER_ONLY = {"networking.istio.io/service-type": "ClusterIP"}


def istiod_values() -> dict[str, Any]:
    return {
        # Off by default in Istio 1.30: without it istiod ignores InferencePool backends.
        "env": {"ENABLE_GATEWAY_API_INFERENCE_EXTENSION": "true"},
        "meshConfig": {"defaultConfig": {"proxyMetadata": {"ENABLE_GATEWAY_API_INFERENCE_EXTENSION": "true"}}},
        "resources": ISTIOD_RESOURCES,
        "autoscaleEnabled": False,
        # One istiod replica with a PodDisruptionBudget would block every node drain.
        "global": {"defaultPodDisruptionBudget": {"enabled": False}},
    }


def load_balancer_controller_values(*, cluster_name: str, region: str, vpc_id: str, role_arn: str) -> dict[str, Any]:
    return {
        "clusterName": cluster_name,
        # Given, so the controller needs no instance metadata (IMDS hop limit 1 on the nodes).
        "region": region,
        "vpcId": vpc_id,
        "serviceAccount": {"create": True, "name": LOAD_BALANCER_CONTROLLER_SERVICE_ACCOUNT,
                           "annotations": {"eks.amazonaws.com/role-arn": role_arn}},
        "resources": LOAD_BALANCER_CONTROLLER_RESOURCES,
        # The chart makes its webhook's CA and certificate at render time, and Pulumi renders at
        # every preview: without this every preview (a weight toggle's included) would replace the
        # Secret and both webhook configurations, and the controller would serve the old
        # certificate until it reloads, so its failurePolicy: Fail webhooks could refuse Services.
        "keepTLSSecret": True,
    }


def gateway_manifest(settings: Settings, *, internal_load_balancer: bool) -> dict[str, Any]:
    """One Gateway for every model: an HTTP listener, routes only from the models' namespace."""
    spec: dict[str, Any] = {
        "gatewayClassName": GATEWAY_CLASS,
        "listeners": [{"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "Same"}}}],
    }
    # Istio copies these onto the Service it makes for the Gateway; the controller reads them
    # only when the Service is created, so they are there from the start. Without the
    # controller the Service stays in-cluster: EKS's built-in one would make it public.
    spec["infrastructure"] = {"annotations": INTERNAL_NLB if internal_load_balancer else IN_CLUSTER_ONLY}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": settings.gateway.name, "namespace": settings.namespace},
        "spec": spec,
    }


def bbr_values(settings: Settings) -> dict[str, Any]:
    bbr: dict[str, Any] = {"name": f"{settings.gateway.name}-bbr"}
    if settings.gateway.bbr_replicas is not None:
        bbr["replicas"] = settings.gateway.bbr_replicas
    return {"provider": {"name": GATEWAY_CLASS}, "inferenceGateway": {"name": settings.gateway.name}, "bbr": bbr}
