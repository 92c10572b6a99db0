"""The GPU managed node group and the NVIDIA device plugin that makes its GPUs schedulable."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from settings import GpuNodeSettings

from . import render


class GpuNodes(pulumi.ComponentResource):
    """The device plugin, and the managed GPU group unless Karpenter brings every GPU node (gpuNodes.max 0)."""

    def __init__(self, name: str, *, settings: GpuNodeSettings, cluster: eks.Cluster, node_role: aws.iam.Role,
                 node_policies: list[pulumi.Resource], subnet_ids: list, k8s_provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:GpuNodes", name, None, opts)
        self.node_group = self._managed_group(name, settings, cluster, node_role, node_policies, subnet_ids) \
            if settings.managed_group else None
        if settings.needs_device_plugin:
            self.device_plugin = k8s.helm.v4.Chart(
                f"{name}-device-plugin",
                chart=render.DEVICE_PLUGIN_CHART,
                version=render.DEVICE_PLUGIN_VERSION,
                namespace=render.DEVICE_PLUGIN_NAMESPACE,
                repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=render.DEVICE_PLUGIN_REPO),
                values=render.device_plugin_values(settings),
                opts=pulumi.ResourceOptions(parent=self, provider=k8s_provider),
            )
        self.register_outputs({"nodeGroup": self.node_group.node_group if self.node_group else None})

    def _managed_group(self, name: str, settings: GpuNodeSettings, cluster: eks.Cluster, node_role: aws.iam.Role,
                       node_policies: list[pulumi.Resource], subnet_ids: list) -> eks.ManagedNodeGroup:
        template = render.launch_template(settings)
        # A launch template is the only way to require IMDSv2 with hop limit 1 and size the disk together.
        launch_template = aws.ec2.LaunchTemplate(
            f"{name}-launch-template",
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(**template["metadata_options"]),
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=mapping["device_name"], ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(**mapping["ebs"]))
                for mapping in template["block_device_mappings"]],
            opts=pulumi.ResourceOptions(parent=self),
        )
        return eks.ManagedNodeGroup(
            f"{name}-group",
            cluster=cluster,
            node_role=node_role,
            subnet_ids=subnet_ids,
            ami_type=settings.ami_type,
            instance_types=list(settings.instance_types),
            capacity_type=settings.capacity_type,
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=settings.size.desired, min_size=settings.size.min, max_size=settings.size.max),
            labels=render.node_labels(),
            taints=[aws.eks.NodeGroupTaintArgs(**taint) for taint in render.taints()],
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=launch_template.id, version=launch_template.latest_version.apply(str)),
            opts=pulumi.ResourceOptions(parent=self, depends_on=node_policies),
        )

