"""The open-source data plane as plain data: which releases, and what each is given.

Why Istio: it is the one Gateway API implementation with a full pass of the Inference
Extension's conformance suite at GIE v1.5.0 (13 of 13, standard channel, Gateway API v1.5.1),
the CRD releases pinned here; the llm-d router's chart speaks to it natively (provider istio).
Facts and citations: shared/reference/open-source-picker.md §1, §4, §5.
"""

from __future__ import annotations

from typing import Any

from components.cert_manager import render as cert_manager
from components.iam.render import ServiceAccountRole
from settings import Settings
from settings.endpoints import bbr_name, gateway_scheme

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
# gateway.tls set to an ACM certificate: the controller's NLB terminates TLS on this port with it
# and passes plain HTTP on to the Gateway's pods, inside the VPC.
NLB_TLS_CERTIFICATE = "service.beta.kubernetes.io/aws-load-balancer-ssl-cert"
NLB_TLS_PORTS = "service.beta.kubernetes.io/aws-load-balancer-ssl-ports"
HTTP_PORT = 80
HTTPS_PORT = 443
# The Gateway's certificate: 90 days, renewed 30 days ahead by cert-manager, and reloaded by
# Istio from the Secret as it changes.
CERTIFICATE_DURATION = "2160h"
CERTIFICATE_RENEW_BEFORE = "720h"
# Istio's security API (Istio 1.30), attached to the Gateway by targetRefs.
ISTIO_SECURITY_API = "security.istio.io/v1"


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


def service_name(settings: Settings) -> str:
    """The Service (and Deployment) Istio provisions for the Gateway: `<gateway>-<class>`."""
    return f"{settings.gateway.name}-{GATEWAY_CLASS}"


def tls_secret_name(settings: Settings) -> str:
    return f"{settings.gateway.name}-tls"


def listener(settings: Settings) -> dict[str, Any]:
    """The Gateway's one listener, by gateway.tls: TLS at the Gateway with the stack's certificate
    (auto), TLS at the NLB (an ACM certificate: the Gateway gets HTTP on the same port), or none."""
    arn = settings.gateway.tls_acm_arn
    same_namespace = {"namespaces": {"from": "Same"}}
    if arn is None:
        return {"name": "http", "port": HTTP_PORT, "protocol": "HTTP", "allowedRoutes": same_namespace}
    if arn:
        return {"name": "https", "port": HTTPS_PORT, "protocol": "HTTP", "allowedRoutes": same_namespace}
    return {"name": "https", "port": HTTPS_PORT, "protocol": "HTTPS", "allowedRoutes": same_namespace,
            "tls": {"mode": "Terminate", "certificateRefs": [{"group": "", "kind": "Secret",
                                                              "name": tls_secret_name(settings)}]}}


def service_annotations(settings: Settings, *, internal_load_balancer: bool) -> dict[str, str]:
    # Without the controller the Service stays in-cluster: EKS's built-in one would make it public.
    if not internal_load_balancer:
        return dict(IN_CLUSTER_ONLY)
    annotations = dict(INTERNAL_NLB)
    if settings.gateway.tls_acm_arn:
        annotations.update({NLB_TLS_CERTIFICATE: settings.gateway.tls_acm_arn, NLB_TLS_PORTS: str(HTTPS_PORT)})
    return annotations


def gateway_manifest(settings: Settings, *, internal_load_balancer: bool) -> dict[str, Any]:
    """One Gateway for every model: one listener, routes only from the models' namespace."""
    spec: dict[str, Any] = {"gatewayClassName": GATEWAY_CLASS, "listeners": [listener(settings)]}
    # Istio copies these onto the Service it makes for the Gateway; the controller reads them
    # only when the Service is created, so they are there from the start.
    spec["infrastructure"] = {"annotations": service_annotations(settings, internal_load_balancer=internal_load_balancer)}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": settings.gateway.name, "namespace": settings.namespace},
        "spec": spec,
    }


def bbr_values(settings: Settings) -> dict[str, Any]:
    bbr: dict[str, Any] = {"name": bbr_name(settings)}
    if settings.gateway.bbr_replicas is not None:
        bbr["replicas"] = settings.gateway.bbr_replicas
    return {"provider": {"name": GATEWAY_CLASS}, "inferenceGateway": {"name": settings.gateway.name}, "bbr": bbr}


def elb_wildcard(region: str) -> str:
    """Every NLB name the controller can give the Gateway (`<name>-<id>.elb.<region>.<suffix>`, one
    label before `.elb.`); its name is known only once AWS made it, after the certificate."""
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"*.elb.{region}.{suffix}"


def gateway_certificate(settings: Settings, *, region: str, issuer: str) -> dict[str, Any]:
    """The Gateway's certificate from the stack's CA (gateway.tls auto): valid for the names
    clients reach the Gateway by, the NLB's and the in-cluster Service's."""
    service = service_name(settings)
    names = [f"{service}.{settings.namespace}.svc.cluster.local", f"{service}.{settings.namespace}.svc"]
    if settings.gateway.load_balancer_controller:
        names.append(elb_wildcard(region))
    return {
        "apiVersion": cert_manager.API_VERSION,
        "kind": "Certificate",
        "metadata": {"name": tls_secret_name(settings), "namespace": settings.namespace,
                     "annotations": cert_manager.READY},
        "spec": {
            "secretName": tls_secret_name(settings),
            "dnsNames": names,
            "duration": CERTIFICATE_DURATION,
            "renewBefore": CERTIFICATE_RENEW_BEFORE,
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "issuerRef": {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": issuer},
        },
    }


def _gateway_target(settings: Settings) -> list[dict[str, str]]:
    return [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": settings.gateway.name}]


def request_authentication(settings: Settings) -> dict[str, Any]:
    """gateway.jwt's provider as Istio validates it on the Gateway: a token from the issuer, signed
    by a key of its JWKS, for one of the audiences; a request carrying a bad one gets 401. The
    same JwtSettings give HyperPod's auth.jwt.provider (components/gateway)."""
    jwt = settings.gateway.jwt
    rule: dict[str, Any] = {"issuer": jwt.issuer, "jwksUri": jwt.jwks_uri}
    if jwt.audiences:
        rule["audiences"] = list(jwt.audiences)
    return {"apiVersion": ISTIO_SECURITY_API, "kind": "RequestAuthentication",
            "metadata": {"name": f"{settings.gateway.name}-{jwt.name}", "namespace": settings.namespace},
            "spec": {"targetRefs": _gateway_target(settings), "jwtRules": [rule]}}


def authorization_policy(settings: Settings) -> dict[str, Any]:
    """Admits only requests with a valid token from the issuer that carries every required claim:
    Istio's request.auth.claims[<name>] matches a string claim by equality and a list claim by
    membership, HyperPod's String and StringArray alike; a request without a token gets 403."""
    jwt = settings.gateway.jwt
    rule: dict[str, Any] = {"from": [{"source": {"requestPrincipals": [f"{jwt.issuer}/*"]}}]}
    if jwt.required_claims:
        rule["when"] = [{"key": f"request.auth.claims[{name}]", "values": list(values)}
                        for name, _value_type, values in jwt.required_claims]
    return {"apiVersion": ISTIO_SECURITY_API, "kind": "AuthorizationPolicy",
            "metadata": {"name": f"{settings.gateway.name}-{jwt.name}-required", "namespace": settings.namespace},
            "spec": {"targetRefs": _gateway_target(settings), "action": "ALLOW", "rules": [rule]}}


def url_command(settings: Settings) -> str:
    """A shell command that prints the Gateway's address as a URL (the NLB's name, or the
    in-cluster Service's without the controller)."""
    return (f"kubectl get gateway {settings.gateway.name} -n {settings.namespace} "
            f"-o jsonpath='{gateway_scheme(settings)}://{{.status.addresses[0].value}}{{\"\\n\"}}'")


def ca_command(settings: Settings) -> str | None:
    """A shell command that prints the CA certificate (PEM) clients trust on gateway.tls auto."""
    if settings.gateway.tls_acm_arn != "":
        return None
    return (f"kubectl get secret {tls_secret_name(settings)} -n {settings.namespace} "
            "-o jsonpath='{.data.ca\\.crt}' | base64 -d")
