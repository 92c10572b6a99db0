"""The HyperPod inference add-on: its configuration, its roles' trust and permissions, and the
four EKS add-ons it needs first.

Facts: shared/reference/hyperpod-platform.md §3 (configuration keys §3.2, roles §3.3,
dependencies §3.4) and the corrections in inference-gateway-config.md.
"""

from __future__ import annotations

import json

from components.iam import render as iam
from components.iam.render import ServiceAccountRole
from settings import GATEWAY_SYSTEM_NAMESPACE, GatewaySettings

ADDON_NAME = "amazon-sagemaker-hyperpod-inference"
# The add-on goes ACTIVE only once its controller pod runs, which waits for a node and large
# image pulls; AWS raised its own Terraform timeout to 40 minutes for cold clusters.
ADDON_TIMEOUT = "40m"
# The add-on refuses an execution role whose name does not start with this.
EXECUTION_ROLE_PREFIX = "SageMakerHyperPodInference-"

KUBE_SYSTEM = "kube-system"


EXECUTION = ServiceAccountRole(GATEWAY_SYSTEM_NAMESPACE, "hyperpod-inference-controller-manager",
                               "AmazonSageMakerHyperPodInferenceAccess", also_sagemaker=True)
GATEWAY_CONTROLLER = ServiceAccountRole(GATEWAY_SYSTEM_NAMESPACE, "inference-gateway-controller",
                                        "AmazonSageMakerHyperPodInferenceGatewayAccess")
LOAD_BALANCER_CONTROLLER = ServiceAccountRole(GATEWAY_SYSTEM_NAMESPACE, "aws-load-balancer-controller")
KEDA = ServiceAccountRole(GATEWAY_SYSTEM_NAMESPACE, "keda-operator")
GATED_MODELS = ServiceAccountRole("*", "hyperpod-inference-service-account*", "AmazonSageMakerHyperPodGatedModelAccess",
                                  wildcard=True, also_sagemaker=True)
S3_CSI = ServiceAccountRole(KUBE_SYSTEM, "s3-csi-driver-sa")
FSX_CSI = ServiceAccountRole(KUBE_SYSTEM, "fsx-csi-controller-sa", "AmazonFSxFullAccess")


# Which role each dependency add-on's service account gets (metrics-server and cert-manager need none).
DEPENDENCY_ROLES = {"aws-mountpoint-s3-csi-driver": S3_CSI, "aws-fsx-csi-driver": FSX_CSI}


def role_name(role_arn: str) -> str:
    """The role's name: the last part of its ARN's path."""
    return role_arn.rsplit("/", 1)[-1]


def tls_bucket_policy(bucket_arn: str) -> str:
    """The controller writes, tags and removes the certificates it issues in the TLS bucket."""
    return iam.policy(
        iam.allow(["s3:ListBucket"], [bucket_arn]),
        iam.allow(["s3:GetObject", "s3:PutObject", "s3:PutObjectTagging", "s3:DeleteObject"], [f"{bucket_arn}/*"]))


def s3_csi_policy(partition: str) -> str:
    """Mountpoint for S3 mounts whatever bucket a volume names, as AWS's role allows."""
    return iam.policy(
        iam.allow(["s3:ListBucket"], [f"arn:{partition}:s3:::*"]),
        iam.allow(["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"],
                  [f"arn:{partition}:s3:::*/*"]))


def keda_policy() -> str:
    return iam.policy(iam.allow(["cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics", "cloudwatch:ListMetrics",
                                 "aps:QueryMetrics", "aps:GetLabels", "aps:GetSeries", "aps:GetMetricMetadata"]))


def configuration_values(settings: GatewaySettings, *, execution_role_arn: str, tls_bucket: str,
                         hyperpod_cluster_arn: str, controller_role_arn: str,
                         load_balancer_role_arn: str | None, keda_role_arn: str | None,
                         gated_model_role_arn: str | None) -> str:
    """The add-on's whole configuration: it replaces, never merges, on every update."""
    config: dict = {
        "executionRoleArn": execution_role_arn,
        "tlsCertificateS3Bucket": tls_bucket,
        "hyperpodClusterArn": hyperpod_cluster_arn,
        # As AWS's Inference Gateway guide installs it: the gateway is not on by default in
        # every add-on version, and the operator it routes to is named too (the whole
        # configuration replaces the last one, so nothing rests on a default that may change).
        "inferenceOperator": {"enabled": True},
        "inferenceGateway": {"enabled": True, "serviceAccount": {"roleArn": controller_role_arn}},
        "alb": ({"enabled": True, "serviceAccount": {"create": True, "roleArn": load_balancer_role_arn}}
                if settings.load_balancer_controller else {"enabled": False}),
        "keda": ({"enabled": True, "auth": {"aws": {"irsa": {"enabled": True, "roleArn": keda_role_arn}}}}
                 if settings.keda else {"enabled": False}),
    }
    if settings.gated_model_access:
        config["jumpstartGatedModelDownloadRoleArn"] = gated_model_role_arn
    return json.dumps(config, sort_keys=True)
