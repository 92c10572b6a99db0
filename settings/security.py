"""What a stack's front door leaves open, said at every `pulumi up`: gateway.tls, gateway.jwt and
gateway.networkPolicy mean the same on both gateway implementations, and so do these warnings."""

from __future__ import annotations

import re

from .model import VLLM_PORT, ClusterSettings, GatewaySettings

# cert-manager for gateway.tls auto on llm-d (components/cert_manager): v1.21.1 (2026-07-29), the
# newest release, whose line 1.21 is the one cert-manager supports on Kubernetes 1.33 to 1.36 (its
# supported-releases page), which holds this stack's default 1.34; 1.20 stops at 1.35.
CERT_MANAGER_VERSION = "v1.21.1"
CERT_MANAGER_KUBERNETES = ("1.33", "1.36")


def security_warnings(gateway: GatewaySettings, cluster: ClusterSettings) -> list[str]:
    warnings = []
    if gateway.jwt is None:
        warnings.append("gateway.jwt is not set: the gateway authenticates nobody, and anyone who can reach it "
                        "can use the models. Set gateway.jwt.issuer, gateway.jwt.jwksUri and gateway.jwt.audiences.")
    if gateway.tls_acm_arn is None:
        tokens = ", answers and the tokens gateway.jwt asks for" if gateway.jwt is not None else " and answers"
        warnings.append(f"gateway.tls is off: requests{tokens} cross the VPC in clear text. Fine for a lab; remove "
                        "the key for auto (a certificate from the stack's private CA) or set an ACM certificate ARN.")
    low, high = (_release(version) for version in CERT_MANAGER_KUBERNETES)
    version = _release(cluster.version) if not cluster.existing else None
    if gateway.implementation == "llm-d" and gateway.tls_acm_arn == "" and version and not low <= version <= high:
        warnings.append(f"gateway.tls is auto: the stack installs cert-manager {CERT_MANAGER_VERSION}, which "
                        f"cert-manager supports on Kubernetes {CERT_MANAGER_KUBERNETES[0]} to "
                        f"{CERT_MANAGER_KUBERNETES[1]}, and cluster.version is {cluster.version}. Use a version in "
                        "that range, or an ACM certificate ARN.")
    if not gateway.network_policy.enabled:
        warnings.append(f"gateway.networkPolicy.enabled is false: any pod in the cluster, and anything routed into "
                        f"the VPC, can call the model pods on vLLM's port ({VLLM_PORT} by default) directly, "
                        "bypassing the gateway's TLS and authentication and the picker. Fine for a lab; remove the "
                        "key to admit only the gateway and the pickers.")
    elif cluster.existing:
        warnings.append("cluster.existing: the stack declares NetworkPolicies for the model pods and the pickers but "
                        "changes no add-on of a cluster it does not own, so they hold only if the cluster's network "
                        "plugin enforces them (the vpc-cni add-on with enableNetworkPolicy \"true\"; see "
                        "`aws eks describe-addon --cluster-name <name> --addon-name vpc-cni`).")
    return warnings


def _release(version: object) -> tuple[int, int] | None:
    """1.34 -> (1, 34); None for what is not a Kubernetes release (already refused by the parser)."""
    match = re.fullmatch(r"([0-9]+)\.([0-9]+)", version) if isinstance(version, str) else None
    return (int(match[1]), int(match[2])) if match else None
