"""The HyperPod cluster's pieces as plain data: instance groups, the lifecycle script, the
instance execution role's permissions and the dependencies chart's values.

Facts: shared/reference/hyperpod-platform.md §1.2 (instance groups), §2.5 (lifecycle
script), §2.6 (execution role), §2.3 (dependencies chart).
"""

from __future__ import annotations

from typing import Any

from components.iam import render as iam
from settings import InstanceGroupSettings
from settings.hyperpod import instance_group_labels, instance_group_taints

INSTANCE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
HYPERPOD_SERVICE = "hyperpod.sagemaker.amazonaws.com"
# The health-monitoring agent the pinned dependencies chart installs (its subchart's _helpers.tpl
# default at settings.hyperpod.DEPENDENCIES_COMMIT), and the oldest HyperPod's Karpenter works with.
HEALTH_AGENT_VERSION = "1.0.1892.0_1.0.424.0"
KARPENTER_MIN_HEALTH_AGENT = "1.0.742.0_1.0.241.0"
LIFECYCLE_PREFIX = "lifecycle"
ON_CREATE = "on_create.sh"
# AWS's dependencies chart installs into kube-system (its own namespaces it creates itself).
DEPENDENCIES_NAMESPACE = "kube-system"
# 20 minutes is usual for a HyperPod cluster to go InService; deep health checks add 60-90 more,
# and CloudFormation's own handler allows 12 hours.
CLUSTER_TIMEOUT = "3h"

# Runs once on each instance as it joins. HyperPod requires an entry script; this one only
# records that the instance came up, so node start-up stays as AWS's AMI makes it.
ON_CREATE_SCRIPT = """#!/bin/bash
# inference-gateway: HyperPod on-create script. Nothing to configure: vLLM pods bring their own runtime.
set -euo pipefail
mkdir -p /var/log/provision
echo "$(date --iso-8601=seconds) inference-gateway on_create: instance ready" >> /var/log/provision/provisioning.log
"""


def lifecycle_source(bucket: str) -> str:
    return f"s3://{bucket}/{LIFECYCLE_PREFIX}"


def lifecycle_key() -> str:
    return f"{LIFECYCLE_PREFIX}/{ON_CREATE}"


def kubernetes_taints(group: InstanceGroupSettings) -> list[dict[str, str | None]]:
    # A taint's value is optional, and CreateCluster refuses an empty one: None leaves it out.
    return [{"key": t.key, "value": t.value or None, "effect": t.effect} for t in instance_group_taints(group)]


def instance_group(group: InstanceGroupSettings, *, execution_role_arn: Any, lifecycle_uri: Any,
                   zonal_vpc: dict[str, Any] | None = None) -> dict[str, Any]:
    """One instance group, keyed by pulumi-aws-native's argument names. `zonal_vpc`: the subnet of one
    zone and the security group, for a group Karpenter scales (AWS: its subnets share one zone)."""
    spec: dict[str, Any] = {
        "instance_group_name": group.name,
        "instance_type": group.instance_type,
        "instance_count": group.count,
        "execution_role": execution_role_arn,
        "threads_per_core": group.threads_per_core,
        "life_cycle_config": {"source_s3_uri": lifecycle_uri, "on_create": ON_CREATE},
        "kubernetes_config": {"labels": instance_group_labels(group), "taints": kubernetes_taints(group)},
    }
    if group.extra_storage_gib is not None:
        spec["instance_storage_configs"] = [{"ebs_volume_config": {"volume_size_in_gb": group.extra_storage_gib}}]
    if group.deep_health_checks:
        spec["on_start_deep_health_checks"] = list(group.deep_health_checks)
    if zonal_vpc is not None:
        spec["override_vpc_config"] = zonal_vpc
    return spec


def cluster_role_trust() -> str:
    """The role HyperPod's managed Karpenter acts as, assumed by HyperPod alone."""
    return iam.policy(iam.service_trust_statement(HYPERPOD_SERVICE))


def cluster_role_policy(partition: str, account: str) -> str:
    """AWS's policy for the autoscaling cluster role (Autoscaling on HyperPod EKS, "IAM permissions"):
    add and remove nodes of this account's clusters, and grant HyperPod use of the volumes' KMS keys."""
    return iam.policy(
        iam.allow(["sagemaker:BatchAddClusterNodes", "sagemaker:BatchDeleteClusterNodes"],
                  f"arn:{partition}:sagemaker:*:{account}:cluster/*"),
        iam.allow(["kms:CreateGrant", "kms:DescribeKey"], f"arn:{partition}:kms:*:{account}:key/*",
                  StringLike={"kms:ViaService": "sagemaker.*.amazonaws.com"},
                  Bool={"kms:GrantIsForAWSResource": "true"},
                  **{"ForAllValues:StringEquals": {"kms:GrantOperations": [
                      "CreateGrant", "Decrypt", "DescribeKey", "GenerateDataKeyWithoutPlaintext", "ReEncryptTo",
                      "ReEncryptFrom", "RetireGrant"]}}))


def execution_role_trust() -> str:
    """HyperPod's instances assume the role through the SageMaker service, nothing else."""
    return iam.policy(iam.service_trust_statement(iam.SAGEMAKER_SERVICE))


def execution_role_policy(*, partition: str, region: str, account: str, eks_cluster_name: str,
                          lifecycle_bucket_arn: str, subnet_ids: list[str], security_group_id: str) -> str:
    """What an instance needs beyond the managed policy: the VPC CNI's ENI calls in the cluster's
    subnets and security group, ECR pulls, pod identity on this cluster, reading the lifecycle script."""
    ec2 = f"arn:{partition}:ec2:{region}:{account}"
    return iam.policy(
        iam.allow(["ec2:AssignPrivateIpAddresses", "ec2:AttachNetworkInterface", "ec2:CreateNetworkInterface",
                   "ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface",
                   "ec2:DeleteNetworkInterfacePermission", "ec2:DetachNetworkInterface",
                   "ec2:ModifyNetworkInterfaceAttribute", "ec2:UnassignPrivateIpAddresses"],
                  [f"{ec2}:network-interface/*", f"{ec2}:instance/*", *(f"{ec2}:subnet/{s}" for s in subnet_ids),
                   f"{ec2}:security-group/{security_group_id}"]),
        iam.allow(["ec2:CreateTags"], [f"{ec2}:network-interface/*"]),
        iam.allow(["ec2:DescribeDhcpOptions", "ec2:DescribeInstanceTypes", "ec2:DescribeInstances",
                   "ec2:DescribeNetworkInterfaces", "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets",
                   "ec2:DescribeTags", "ec2:DescribeVpcs", "cloudwatch:DescribeAlarms"]),
        iam.allow(["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetAuthorizationToken",
                   "ecr:GetDownloadUrlForLayer"]),
        iam.allow(["eks-auth:AssumeRoleForPodIdentity"], [eks_cluster_arn(partition, region, account, eks_cluster_name)]),
        iam.allow(["s3:ListBucket", "s3:GetObject"], iam.bucket_arns(lifecycle_bucket_arn)),
    )


def eks_cluster_arn(partition: str, region: str, account: str, name: str) -> str:
    return f"arn:{partition}:eks:{region}:{account}:cluster/{name}"


def dependencies_values(region: str, *, autoscaling: bool = False) -> dict[str, Any]:
    """Exactly one NVIDIA device plugin runs on HyperPod: the chart's (the stack installs its own
    only on plain EKS). It is the chart's default; stated so a changed default cannot drop it.

    The health-monitoring agent's image is regional. The chart looks for the region on the
    nodes' labels when none is given, but it is installed before any node exists, so it would
    fall back to us-east-1's image and switch (rolling its DaemonSets) once nodes joined; its
    values document `region` for exactly this."""
    agent: dict[str, Any] = {"region": region}
    if autoscaling:
        # Karpenter needs agent 1.0.742.0_1.0.241.0 or later. The pinned chart's directory defaults to
        # HEALTH_AGENT_VERSION, but the same commit also carries a stale packaged copy of the subchart
        # (charts/health-monitoring-agent-0.1.0.tgz, 1.0.674.0_1.0.199.0): named here, either is new enough.
        agent["imageTag"] = HEALTH_AGENT_VERSION
    return {"nvidia-device-plugin": {"devicePlugin": {"enabled": True}}, "health-monitoring-agent": agent}
