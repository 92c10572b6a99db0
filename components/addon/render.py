"""The HyperPod inference add-on's configuration and its controller's IRSA trust policy."""

from __future__ import annotations

import json

from components.cluster.render import managed_policy_arn
from settings import GATEWAY_SYSTEM_NAMESPACE as CONTROLLER_NAMESPACE

ADDON_NAME = "amazon-sagemaker-hyperpod-inference"
CONTROLLER_SERVICE_ACCOUNT = "inference-gateway-controller"
GATEWAY_POLICY = "AmazonSageMakerHyperPodInferenceGatewayAccess"


def gateway_policy_arn(partition: str) -> str:
    return managed_policy_arn(partition, GATEWAY_POLICY)


def controller_trust_policy(oidc_provider_arn: str, oidc_issuer_url: str) -> str:
    """Only the gateway controller's service account may assume the role (IRSA)."""
    issuer = oidc_issuer_url.removeprefix("https://")
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": oidc_provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                f"{issuer}:sub": f"system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_SERVICE_ACCOUNT}",
                f"{issuer}:aud": "sts.amazonaws.com",
            }},
        }],
    })


def configuration_values(controller_role_arn: str) -> str:
    return json.dumps({
        "inferenceGateway": {"enabled": True, "serviceAccount": {"roleArn": controller_role_arn}},
        # The operator can write scheduler entries into the gateway resource, which this stack
        # owns outright; off, so the two never fight over it.
        "inferenceOperator": {"enabled": False},
    })
