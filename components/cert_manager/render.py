"""cert-manager and the stack's private certificate authority, as plain data: what issues the llm-d
Gateway's TLS certificate when gateway.tls is auto.

The CA is cert-manager's own two-step bootstrap: a self-signed ClusterIssuer signs one CA
certificate, whose key stays in cert-manager's namespace (a ClusterIssuer reads its secret there),
out of reach of whoever may read Secrets in the models' namespace; a CA ClusterIssuer then signs
the Gateway's certificate. Clients trust the CA (the `ca.crt` cert-manager puts next to the
Gateway's certificate), so no public DNS name or ACM certificate is needed.
"""

from __future__ import annotations

from typing import Any

from settings import Settings
from settings.security import CERT_MANAGER_VERSION

CHART = "oci://quay.io/jetstack/charts/cert-manager"
VERSION = CERT_MANAGER_VERSION
NAMESPACE = "cert-manager"
API_VERSION = "cert-manager.io/v1"
# `pulumi up` waits for cert-manager to report a certificate issued (pulumi-kubernetes >= 4.18).
READY = {"pulumi.com/waitFor": "condition=Ready", "pulumi.com/timeoutSeconds": "600"}
# The CA lives five years and cert-manager renews it a third before it expires (its default);
# a renewed CA has a new key, which clients must then trust anew.
CA_DURATION = "43800h"
# The system nodes are m6i.large (2 vCPU, 8 GiB): the three controllers need a sliver of one.
RESOURCES = {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}


def chart_values() -> dict[str, Any]:
    return {
        # The CRDs come and go with the release, so the stack owns them like the rest.
        "crds": {"enabled": True},
        "resources": RESOURCES,
        "webhook": {"resources": RESOURCES},
        "cainjector": {"resources": RESOURCES},
        # A Helm post-install hook, and Pulumi's Chart omits hooks: without this its RBAC would
        # be created for a Job that never runs. `pulumi up` waits on the Deployments instead.
        "startupapicheck": {"enabled": False},
    }


def _prefix(settings: Settings) -> str:
    # ClusterIssuers are cluster-wide: the namespace keeps two stacks on one cluster apart.
    return f"{settings.namespace}-{settings.gateway.name}"


def self_signed_issuer_name(settings: Settings) -> str:
    return f"{_prefix(settings)}-selfsigned"


def ca_issuer_name(settings: Settings) -> str:
    return f"{_prefix(settings)}-ca"


def self_signed_issuer(settings: Settings) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ClusterIssuer",
            "metadata": {"name": self_signed_issuer_name(settings)}, "spec": {"selfSigned": {}}}


def ca_certificate(settings: Settings) -> dict[str, Any]:
    name = ca_issuer_name(settings)
    return {
        "apiVersion": API_VERSION,
        "kind": "Certificate",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": READY},
        "spec": {
            "isCA": True,
            "commonName": f"{settings.gateway.name} private CA ({settings.namespace})",
            "secretName": name,
            "duration": CA_DURATION,
            "privateKey": {"algorithm": "ECDSA", "size": 256},
            "issuerRef": {"group": "cert-manager.io", "kind": "ClusterIssuer",
                          "name": self_signed_issuer_name(settings)},
        },
    }


def ca_issuer(settings: Settings) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ClusterIssuer", "metadata": {"name": ca_issuer_name(settings)},
            "spec": {"ca": {"secretName": ca_issuer_name(settings)}}}
