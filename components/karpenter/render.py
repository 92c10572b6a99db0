"""Karpenter's pieces as plain data: on `eks` the controller's IAM, its interruption queue and
EventBridge rules, the chart's values, the GPU EC2NodeClass and NodePool; on HyperPod the
HyperpodNodeClass and NodePool of AWS's managed Karpenter.

Facts: Karpenter v1.14.1's getting-started CloudFormation template (website/content/en/v1.14/
getting-started/getting-started-with-karpenter/cloudformation.yaml) for the IAM, queue and rules;
its chart's values.yaml and CRDs (pkg/apis/crds) at v1.14.1 for everything in the cluster; AWS's
"Autoscaling on SageMaker HyperPod EKS" for HyperPod's.
"""

from __future__ import annotations

import json
from typing import Any

from components.gpu_nodes.render import node_labels
from components.iam import render as iam
from settings import GpuNodeSettings, HyperPodSettings, InstanceGroupSettings
from settings.model import GPU_TAINT_KEY, SYSTEM_NODE_LABELS, KarpenterSettings

# Karpenter v1.14.1: the newest release when this was written (2026-08-20), for Kubernetes
# 1.26-1.36. Published only as an OCI chart on ECR Public; its CRDs ship in the chart's crds/.
CHART = "oci://public.ecr.aws/karpenter/karpenter"
VERSION = "1.14.1"
# Karpenter's docs install it in kube-system, where its priority class is allowed.
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "karpenter"
NODE_POOL = "gpu"
# Small: the controller watches a few GPU nodes. Two replicas (leader election) on the system
# nodes, 0.2 vCPU in all (components/observability/render.py adds up what runs there).
RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
# A node Karpenter starts is replaced after 30 days (its default), so it picks up patched AMIs;
# drift from a moved amiAlias replaces it sooner, within the disruption budget.
EXPIRE_AFTER = "720h"

# The events Karpenter's interruption handling reads (the template's five rules).
INTERRUPTION_EVENTS = {
    "scheduled-change": ("aws.health", "AWS Health Event"),
    "spot-interruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "instance-state-change": ("aws.ec2", "EC2 Instance State-change Notification"),
    "capacity-reservation-interruption": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}
# The template's queue: messages older than five minutes describe interruptions already past.
QUEUE_RETENTION_SECONDS = 300

HYPERPOD_NODE_CLASS_API = "karpenter.sagemaker.amazonaws.com/v1"
EC2_NODE_CLASS_API = "karpenter.k8s.aws/v1"
NODE_POOL_API = "karpenter.sh/v1"


def event_pattern(event: str) -> str:
    source, detail_type = INTERRUPTION_EVENTS[event]
    return json.dumps({"source": [source], "detail-type": [detail_type]})


def queue_policy(queue_arn: str) -> str:
    """EventBridge (and SQS itself) may send; nothing reaches the queue without TLS."""
    return json.dumps({"Version": "2012-10-17", "Id": "EC2InterruptionPolicy", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
         "Action": "sqs:SendMessage", "Resource": queue_arn},
        {"Sid": "DenyHTTP", "Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": queue_arn,
         "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
    ]})


def controller_policy(*, partition: str, region: str, account: str, cluster_name: str, node_role_arn: str,
                      queue_arn: str) -> str:
    """The template's controller policies in one document: launch and end only instances, fleets
    and launch templates tagged for this cluster and a NodePool; manage instance profiles tagged for
    this cluster and an EC2NodeClass; pass the node role to EC2 alone; read the interruption queue."""
    ec2 = f"arn:{partition}:ec2:{region}"
    owned = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    requested = {f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
                 "aws:RequestTag/eks:eks-cluster-name": cluster_name}
    any_pool = {"aws:RequestTag/karpenter.sh/nodepool": "*"}
    in_pool = {"aws:ResourceTag/karpenter.sh/nodepool": "*"}
    launched = [f"{ec2}:*:{kind}/*" for kind in ("fleet", "instance", "volume", "network-interface",
                                                  "launch-template", "spot-instances-request")]
    profiles = f"arn:{partition}:iam::{account}:instance-profile/*"
    profile_region = {"aws:RequestTag/topology.kubernetes.io/region": region}
    eks_cluster = f"arn:{partition}:eks:{region}:{account}:cluster/{cluster_name}"
    return iam.policy(
        iam.allow(["ec2:RunInstances", "ec2:CreateFleet"],
                  [f"{ec2}::image/*", f"{ec2}::snapshot/*", *(f"{ec2}:*:{kind}/*" for kind in (
                      "security-group", "subnet", "capacity-reservation", "placement-group"))]),
        iam.allow(["ec2:RunInstances", "ec2:CreateFleet"], f"{ec2}:*:launch-template/*",
                  StringEquals=owned, StringLike=in_pool),
        iam.allow(["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"], launched,
                  StringEquals=requested, StringLike=any_pool),
        iam.allow(["ec2:CreateTags"], launched, StringLike=any_pool,
                  StringEquals={**requested, "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]}),
        iam.allow(["ec2:CreateTags"], f"{ec2}:*:instance/*", StringEquals=owned, StringLike=in_pool,
                  StringEqualsIfExists={"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                  **{"ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim",
                                                                   "Name"]}}),
        iam.allow(["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
                  [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"], StringEquals=owned, StringLike=in_pool),
        iam.allow(["iam:PassRole"], node_role_arn,
                  StringEquals={"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}),
        iam.allow(["iam:CreateInstanceProfile"], profiles, StringEquals={**requested, **profile_region},
                  StringLike={"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}),
        iam.allow(["iam:TagInstanceProfile"], profiles,
                  StringEquals={**owned, "aws:ResourceTag/topology.kubernetes.io/region": region, **requested,
                                **profile_region},
                  StringLike={"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                              "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}),
        iam.allow(["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
                  profiles, StringEquals={**owned, "aws:ResourceTag/topology.kubernetes.io/region": region},
                  StringLike={"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"}),
        iam.allow(["eks:DescribeCluster"], eks_cluster),
        iam.allow(["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"], queue_arn),
        iam.allow(["arc-zonal-shift:GetManagedResource"],
                  StringEquals={"arc-zonal-shift:ResourceIdentifier": eks_cluster}),
        iam.allow(["ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
                   "ec2:DescribeInstanceStatus", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
                   "ec2:DescribeLaunchTemplates", "ec2:DescribePlacementGroups", "ec2:DescribeSecurityGroups",
                   "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets"],
                  StringEquals={"aws:RequestedRegion": region}),
        iam.allow(["ssm:GetParameter"], f"arn:{partition}:ssm:{region}::parameter/aws/service/*"),
        iam.allow(["pricing:GetProducts"]),
        iam.allow(["iam:ListInstanceProfiles"]),
        iam.allow(["iam:GetInstanceProfile"], profiles),
    )


def chart_values(*, cluster_name: str, queue_name: str, role_arn: str) -> dict[str, Any]:
    return {
        "settings": {"clusterName": cluster_name, "interruptionQueue": queue_name},
        "serviceAccount": {"name": SERVICE_ACCOUNT, "annotations": {"eks.amazonaws.com/role-arn": role_arn}},
        "controller": {"resources": RESOURCES},
        # On the managed system nodes: never on a node Karpenter could take away (the chart's own
        # affinity also keeps it off every NodePool's nodes).
        "nodeSelector": {"kubernetes.io/os": "linux", **SYSTEM_NODE_LABELS},
    }


def ec2_node_class(gpu_nodes: GpuNodeSettings, *, cluster_name: Any, node_role: Any, subnet_ids: list[Any],
                   security_group_id: Any) -> dict[str, Any]:
    """The GPU nodes' EC2 side, as the managed GPU group's launch template has it: IMDSv2 only with
    hop limit 1, an encrypted gp3 root sized for vLLM images and weights. Subnets and the security
    group are selected by id (the stack knows them); the nodes carry the discovery tag."""
    karpenter = gpu_nodes.karpenter
    return {
        "apiVersion": EC2_NODE_CLASS_API, "kind": "EC2NodeClass", "metadata": {"name": NODE_POOL},
        "spec": {
            "role": node_role,
            "amiSelectorTerms": [{"alias": karpenter.ami_alias}],
            "subnetSelectorTerms": [{"id": subnet} for subnet in subnet_ids],
            "securityGroupSelectorTerms": [{"id": security_group_id}],
            "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                                "httpPutResponseHopLimit": 1, "httpTokens": "required"},
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {
                "volumeSize": f"{gpu_nodes.disk_size_gib}Gi", "volumeType": "gp3", "encrypted": True,
                "deleteOnTermination": True}}],
            "tags": {"karpenter.sh/discovery": cluster_name},
        },
    }


def _node_pool(*, node_class_ref: dict[str, str], requirements: list[dict[str, Any]], labels: dict[str, str] | None,
               taints: list[dict[str, str]] | None, gpu_limit: int, consolidate_after: str, budget: str,
               expire_after: str | None) -> dict[str, Any]:
    template_spec: dict[str, Any] = {"nodeClassRef": node_class_ref, "requirements": requirements}
    if taints:
        template_spec["taints"] = taints
    if expire_after:
        template_spec["expireAfter"] = expire_after
    template: dict[str, Any] = {"spec": template_spec}
    if labels:
        template["metadata"] = {"labels": labels}
    return {
        "apiVersion": NODE_POOL_API, "kind": "NodePool", "metadata": {"name": NODE_POOL},
        "spec": {
            "template": template,
            "limits": {"nvidia.com/gpu": gpu_limit},
            # Only empty nodes go, and only after the delay: consolidating a busy node would move
            # its vLLM replica, and the replica's warm prefix cache is lost with the move.
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": consolidate_after,
                           "budgets": [{"nodes": budget}]},
        },
    }


def eks_node_pool(gpu_nodes: GpuNodeSettings) -> dict[str, Any]:
    """GPU nodes of the allowed families and capacity types, labelled and tainted exactly as the
    managed GPU group's nodes are, so model pods land on either alike."""
    karpenter: KarpenterSettings = gpu_nodes.karpenter
    return _node_pool(
        node_class_ref={"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": NODE_POOL},
        requirements=[
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": list(karpenter.instance_families)},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(karpenter.capacity_types)},
            {"key": "kubernetes.io/arch", "operator": "In", "values": [gpu_nodes.arch]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ],
        labels=node_labels(),
        taints=[{"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        gpu_limit=karpenter.gpu_limit, consolidate_after=karpenter.consolidate_after,
        budget=karpenter.disruption_budget, expire_after=EXPIRE_AFTER)


def hyperpod_node_class(hyperpod: HyperPodSettings) -> dict[str, Any]:
    return {"apiVersion": HYPERPOD_NODE_CLASS_API, "kind": "HyperpodNodeClass", "metadata": {"name": NODE_POOL},
            "spec": {"instanceGroups": list(hyperpod.karpenter.instance_groups)}}


def hyperpod_node_pool(hyperpod: HyperPodSettings) -> dict[str, Any]:
    """HyperPod takes only the instance-type, zone and architecture requirement keys, and its nodes'
    labels and taints come from their instance group (CreateCluster's KubernetesConfig), which
    already carries the stack's GPU label and taint: the NodePool names the groups' types alone."""
    karpenter = hyperpod.karpenter
    groups: list[InstanceGroupSettings] = [g for g in hyperpod.instance_groups if g.name in karpenter.instance_groups]
    return _node_pool(
        node_class_ref={"group": "karpenter.sagemaker.amazonaws.com", "kind": "HyperpodNodeClass", "name": NODE_POOL},
        requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In",
                       "values": sorted({g.instance_type for g in groups})}],
        labels=None, taints=None, gpu_limit=karpenter.gpu_limit, consolidate_after=karpenter.consolidate_after,
        budget=karpenter.disruption_budget, expire_after=None)
