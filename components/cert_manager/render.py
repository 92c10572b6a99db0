"""cert-manager and the stack's private certificate authority, as plain data: what issues the llm-d
Gateway's TLS certificate when gateway.tls is auto.

The CA is cert-manager's own two-step bootstrap: a self-signed ClusterIssuer signs one CA
certificate, whose key stays in cert-manager's namespace (a ClusterIssuer reads its secret there),
out of reach of whoever may read Secrets in the models' namespace; a CA ClusterIssuer then signs
the Gateway's certificate. Clients trust the CA (the `ca.crt` cert-manager puts next to the
Gateway's certificate), so no public DNS name or ACM certificate is needed.

No issuer is created before cert-manager's webhook answers: a ClusterIssuer sent earlier is refused
(`failed calling webhook "webhook.cert-manager.io"`). The chart checks this with its startupapicheck
Job, a Helm hook; the stack runs the same Job as its own object, which `pulumi up` waits on until it
completes (pulumi-kubernetes awaits a Job's Complete condition), and the issuers wait for it.
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

# The chart's startupapicheck as it renders it (templates/startupapicheck-*.yaml and values.yaml at
# the chart's version; tests/fixtures/cert-manager-startupapicheck.yaml is its `helm template`): its
# image at the chart's version, `cmctl check api` waiting a minute for the webhook, four retries.
STARTUP_CHECK = "cert-manager-startupapicheck"
STARTUP_CHECK_IMAGE = f"quay.io/jetstack/cert-manager-startupapicheck:{VERSION}"
STARTUP_CHECK_ARGS = ["check", "api", "--wait=1m", "-v"]
STARTUP_CHECK_RETRIES = 4
STARTUP_CHECK_LABELS = {"app": "startupapicheck", "app.kubernetes.io/name": "startupapicheck",
                        "app.kubernetes.io/instance": "cert-manager", "app.kubernetes.io/component": "startupapicheck",
                        "app.kubernetes.io/version": VERSION}
# What the check does: a dry-run CertificateRequest in its own namespace, which the webhook must admit.
STARTUP_CHECK_RULES = [{"apiGroups": ["cert-manager.io"], "resources": ["certificaterequests"], "verbs": ["create"]}]


def chart_values() -> dict[str, Any]:
    return {
        # The CRDs come and go with the release, so the stack owns them like the rest.
        "crds": {"enabled": True},
        "resources": RESOURCES,
        "webhook": {"resources": RESOURCES},
        "cainjector": {"resources": RESOURCES},
        # A Helm post-install hook, which Pulumi's Chart does not run as one: the stack runs the
        # same check as its own Job (startup_check_job), ordered before the issuers.
        "startupapicheck": {"enabled": False},
    }


def _startup_check_metadata(name: str) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "labels": dict(STARTUP_CHECK_LABELS)}


def startup_check_service_account() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _startup_check_metadata(STARTUP_CHECK),
            "automountServiceAccountToken": True}


def startup_check_role() -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": _startup_check_metadata(f"{STARTUP_CHECK}:create-cert"), "rules": STARTUP_CHECK_RULES}


def startup_check_role_binding() -> dict[str, Any]:
    name = f"{STARTUP_CHECK}:create-cert"
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _startup_check_metadata(name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": STARTUP_CHECK, "namespace": NAMESPACE}]}


def startup_check_job() -> dict[str, Any]:
    container = {
        "name": STARTUP_CHECK, "image": STARTUP_CHECK_IMAGE, "imagePullPolicy": "IfNotPresent",
        "args": STARTUP_CHECK_ARGS,
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": True},
        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "resources": RESOURCES,
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _startup_check_metadata(STARTUP_CHECK),
            "spec": {"backoffLimit": STARTUP_CHECK_RETRIES, "template": {
                "metadata": {"labels": dict(STARTUP_CHECK_LABELS)},
                "spec": {"restartPolicy": "OnFailure", "serviceAccountName": STARTUP_CHECK, "enableServiceLinks": False,
                         "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [container], "nodeSelector": {"kubernetes.io/os": "linux"}}}}}


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
