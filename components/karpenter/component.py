"""Karpenter: on `eks` the controller (chart, IAM, interruption queue) and the GPU NodePool; on
HyperPod the node class and NodePool of AWS's managed Karpenter, which the cluster itself enables."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.iam.render import ServiceAccountRole
from components.iam.role import service_account_role
from settings import GpuNodeSettings, HyperPodSettings

from . import render


def _custom_resource(name: str, manifest: dict, opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    return k8s.apiextensions.CustomResource(name, api_version=manifest["apiVersion"], kind=manifest["kind"],
                                            metadata=manifest["metadata"], spec=manifest["spec"], opts=opts)


class Karpenter(pulumi.ComponentResource):
    """The controller on the system nodes, trusted through IRSA as the stack's other controllers are;
    EC2's interruption notices reach it through an SQS queue; GPU nodes come from one NodePool."""

    def __init__(self, name: str, *, settings: GpuNodeSettings, cluster_name: pulumi.Input[str], region: str,
                 node_role: aws.iam.Role, subnet_ids: pulumi.Input[list], security_group_id: pulumi.Input[str],
                 oidc_provider_arn: pulumi.Input[str], oidc_issuer_url: pulumi.Input[str], k8s_provider: k8s.Provider,
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:Karpenter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        partition = aws.get_partition_output().partition
        account = aws.get_caller_identity_output().account_id

        queue = aws.sqs.Queue(f"{name}-interruption", message_retention_seconds=render.QUEUE_RETENTION_SECONDS,
                              sqs_managed_sse_enabled=True, opts=child)
        aws.sqs.QueuePolicy(f"{name}-interruption-policy", queue_url=queue.id, policy=queue.arn.apply(render.queue_policy),
                            opts=child)
        for event in render.INTERRUPTION_EVENTS:
            rule = aws.cloudwatch.EventRule(f"{name}-{event}", event_pattern=render.event_pattern(event), opts=child)
            aws.cloudwatch.EventTarget(f"{name}-{event}", rule=rule.name, arn=queue.arn, opts=child)

        policy = pulumi.Output.all(partition, account, cluster_name, node_role.arn, queue.arn).apply(
            lambda args: render.controller_policy(partition=args[0], region=region, account=args[1],
                                                  cluster_name=args[2], node_role_arn=args[3], queue_arn=args[4]))
        role, attached = service_account_role(
            f"{name}-controller", ServiceAccountRole(render.NAMESPACE, render.SERVICE_ACCOUNT),
            oidc_provider_arn=oidc_provider_arn, oidc_issuer_url=oidc_issuer_url, partition=partition, opts=child,
            inline=policy)

        in_cluster = pulumi.ResourceOptions(parent=self, provider=k8s_provider)
        values = pulumi.Output.all(cluster_name, queue.name, role.arn).apply(
            lambda args: render.chart_values(cluster_name=args[0], queue_name=args[1], role_arn=args[2]))
        self.chart = k8s.helm.v4.Chart(
            f"{name}-chart", chart=render.CHART, name="karpenter", version=render.VERSION, namespace=render.NAMESPACE,
            values=values, opts=in_cluster.merge(pulumi.ResourceOptions(depends_on=[*depends_on, *attached])))
        after_chart = in_cluster.merge(pulumi.ResourceOptions(depends_on=[self.chart]))
        self.node_class = _custom_resource(
            f"{name}-node-class", render.ec2_node_class(settings, cluster_name=cluster_name, node_role=node_role.name,
                                                        subnet_ids=subnet_ids, security_group_id=security_group_id),
            after_chart)
        self.node_pool = _custom_resource(f"{name}-node-pool", render.eks_node_pool(settings),
                                          after_chart.merge(pulumi.ResourceOptions(depends_on=[self.node_class])))
        self.register_outputs({"interruptionQueue": queue.name, "controllerRoleArn": role.arn})


class HyperPodNodePool(pulumi.ComponentResource):
    """The HyperpodNodeClass naming the groups Karpenter scales and the NodePool over it; both need the
    cluster's autoscaling InService, so they wait for the cluster."""

    def __init__(self, name: str, *, settings: HyperPodSettings, k8s_provider: k8s.Provider,
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:HyperPodNodePool", name, None, opts)
        in_cluster = pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=depends_on)
        self.node_class = _custom_resource(f"{name}-node-class", render.hyperpod_node_class(settings), in_cluster)
        self.node_pool = _custom_resource(f"{name}-node-pool", render.hyperpod_node_pool(settings),
                                          in_cluster.merge(pulumi.ResourceOptions(depends_on=[self.node_class])))
        self.register_outputs({"nodePool": render.NODE_POOL})
