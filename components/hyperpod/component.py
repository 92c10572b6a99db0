"""The SageMaker HyperPod cluster that supplies the GPUs, orchestrated by the stack's EKS cluster."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_aws as aws
import pulumi_aws_native as aws_native
import pulumi_kubernetes as k8s

from components.iam import render as iam
from components.storage import PrivateBucket
from settings import HyperPodSettings

from . import render


class HyperPodCluster(pulumi.ComponentResource):
    """Execution role, lifecycle script, AWS's dependencies chart, then the HyperPod cluster itself."""

    def __init__(self, name: str, *, settings: HyperPodSettings, eks_cluster_name: pulumi.Input[str],
                 subnet_ids: pulumi.Input[list], security_group_id: pulumi.Input[str], region: str,
                 chart_path: Path, k8s_provider: k8s.Provider,
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:HyperPodCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        partition = aws.get_partition_output().partition
        account = aws.get_caller_identity_output().account_id
        # pulumi-aws-native reads its own region key; the stack has one region, aws:region.
        native = aws_native.Provider(f"{name}-aws-native", region=region, opts=child)

        lifecycle = PrivateBucket(f"{name}-lifecycle", purpose="hyperpod-lifecycle-scripts", opts=child)
        script = aws.s3.BucketObjectv2(f"{name}-on-create", bucket=lifecycle.name, key=render.lifecycle_key(),
                                       content=render.ON_CREATE_SCRIPT, content_type="text/x-shellscript",
                                       opts=pulumi.ResourceOptions(parent=self, depends_on=lifecycle.ready))

        role = aws.iam.Role(f"{name}-execution-role", assume_role_policy=render.execution_role_trust(), opts=child)
        managed = aws.iam.RolePolicyAttachment(
            f"{name}-execution-managed", role=role.name,
            policy_arn=partition.apply(lambda p: iam.managed_policy_arn(p, render.INSTANCE_POLICY)), opts=child)
        inline = aws.iam.RolePolicy(f"{name}-execution-policy", role=role.id, policy=pulumi.Output.all(
            partition, account, eks_cluster_name, lifecycle.arn, security_group_id, subnet_ids).apply(
            lambda args: render.execution_role_policy(partition=args[0], region=region, account=args[1],
                                                      eks_cluster_name=args[2], lifecycle_bucket_arn=args[3],
                                                      security_group_id=args[4], subnet_ids=args[5])),
            opts=child)

        # The EKS cluster security group already admits all traffic from itself; HyperPod also
        # documents all traffic out to itself (EFA and node-to-node traffic).
        self_egress = aws.vpc.SecurityGroupEgressRule(
            f"{name}-self-egress", security_group_id=security_group_id,
            referenced_security_group_id=security_group_id, ip_protocol="-1",
            description="HyperPod: all traffic between the cluster's instances", opts=child)

        # HyperPod's instances run EKS Pod Identity through this agent (AWS's templates install it).
        # No version pinned: AWS's templates take EKS's default for the cluster's Kubernetes version.
        pod_identity = aws.eks.Addon(f"{name}-pod-identity-agent", cluster_name=eks_cluster_name,
                                     addon_name="eks-pod-identity-agent",
                                     opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on))

        regional_values = chart_path / "regional-values" / f"values-{region}.yaml"
        # AWS requires this chart before the HyperPod cluster exists: health monitoring, deep
        # health checks and the NVIDIA device plugin the GPU instances need.
        self.dependencies = k8s.helm.v4.Chart(
            f"{name}-dependencies", chart=str(chart_path), namespace=render.DEPENDENCIES_NAMESPACE,
            dependency_update=True, value_yaml_files=[pulumi.FileAsset(str(regional_values))],
            values=render.dependencies_values(region, autoscaling=settings.karpenter is not None),
            # Its Deployments cannot be ready before the HyperPod instances they run on exist, and
            # those come after the chart: waiting here would only time out.
            skip_await=True,
            opts=pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=depends_on))

        eks_arn = pulumi.Output.all(partition, account, eks_cluster_name).apply(
            lambda args: render.eks_cluster_arn(args[0], region, args[1], args[2]))
        lifecycle_uri = lifecycle.name.apply(render.lifecycle_source)
        autoscaled = settings.karpenter.instance_groups if settings.karpenter is not None else ()
        # Karpenter's groups start in the first subnet's zone: AWS wants each such group in one zone.
        zonal_vpc = {"security_group_ids": [security_group_id],
                     "subnets": pulumi.Output.from_input(subnet_ids).apply(lambda ids: ids[:1])}
        groups = [_instance_group_args(render.instance_group(
                      group, execution_role_arn=role.arn, lifecycle_uri=lifecycle_uri,
                      zonal_vpc=zonal_vpc if group.name in autoscaled else None))
                  for group in settings.instance_groups]
        autoscaling, role_policies = self._autoscaling(name, partition, account) if autoscaled else ({}, [])
        # Karpenter sets its groups' instance counts as it adds and removes nodes; the stack's 0 must
        # not undo that on the next `pulumi up` after a refresh.
        counted_by_karpenter = [f"instanceGroups[{index}].instanceCount"
                                for index, group in enumerate(settings.instance_groups) if group.name in autoscaled]
        self.cluster = aws_native.sagemaker.Cluster(
            f"{name}-cluster",
            cluster_name=settings.name,
            orchestrator=aws_native.sagemaker.ClusterOrchestratorArgs(
                eks=aws_native.sagemaker.ClusterOrchestratorEksConfigArgs(cluster_arn=eks_arn)),
            vpc_config=aws_native.sagemaker.ClusterVpcConfigArgs(security_group_ids=[security_group_id],
                                                                 subnets=subnet_ids),
            instance_groups=groups,
            node_recovery=aws_native.sagemaker.ClusterNodeRecovery(settings.node_recovery),
            # Continuous provisioning: instances come up as capacity allows, and the cluster stays
            # InService while a group scales.
            node_provisioning_mode=aws_native.sagemaker.ClusterNodeProvisioningMode.CONTINUOUS,
            **autoscaling,
            opts=pulumi.ResourceOptions(
                parent=self, provider=native, ignore_changes=counted_by_karpenter,
                depends_on=[self.dependencies, script, managed, inline, self_egress, pod_identity,
                            *role_policies],
                custom_timeouts=pulumi.CustomTimeouts(create=render.CLUSTER_TIMEOUT, update=render.CLUSTER_TIMEOUT,
                                                      delete="1h")),
        )
        self.arn = self.cluster.cluster_arn
        self.name = pulumi.Output.from_input(settings.name)
        self.register_outputs({"arn": self.arn, "name": self.name, "executionRoleArn": role.arn})

    def _autoscaling(self, name: str, partition: pulumi.Output[str],
                     account: pulumi.Output[str]) -> tuple[dict, list[pulumi.Resource]]:
        """The cluster role and CreateCluster's autoscaling fields. AWS refuses to change the role while
        autoscaling is on: turn hyperpod.autoscaler off (one `pulumi up`) before replacing it."""
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(f"{name}-cluster-role", assume_role_policy=render.cluster_role_trust(), opts=child)
        policy = aws.iam.RolePolicy(f"{name}-cluster-role-policy", role=role.id, policy=pulumi.Output.all(
            partition, account).apply(lambda args: render.cluster_role_policy(*args)), opts=child)
        sm = aws_native.sagemaker
        return {"auto_scaling": sm.ClusterAutoScalingConfigArgs(
                    mode=sm.ClusterAutoScalingConfigMode.ENABLE,
                    auto_scaler_type=sm.ClusterAutoScalingConfigAutoScalerType.KARPENTER),
                "cluster_role": role.arn}, [policy]


class ExistingHyperPodCluster(pulumi.ComponentResource):
    """A HyperPod cluster this stack does not own: only its name and ARN are used."""

    def __init__(self, name: str, *, settings: HyperPodSettings, opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:ExistingHyperPodCluster", name, None, opts)
        self.arn = pulumi.Output.from_input(settings.arn)
        self.name = pulumi.Output.from_input(settings.name)
        self.register_outputs({"arn": self.arn, "name": self.name})


def _instance_group_args(spec: dict) -> aws_native.sagemaker.ClusterInstanceGroupArgs:
    sm = aws_native.sagemaker
    kubernetes = spec.pop("kubernetes_config")
    storage = spec.pop("instance_storage_configs", None)
    zonal_vpc = spec.pop("override_vpc_config", None)
    checks = spec.pop("on_start_deep_health_checks", None)
    return sm.ClusterInstanceGroupArgs(
        **{k: v for k, v in spec.items() if k != "life_cycle_config"},
        life_cycle_config=sm.ClusterLifeCycleConfigArgs(**spec["life_cycle_config"]),
        kubernetes_config=sm.ClusterKubernetesConfigArgs(
            labels=kubernetes["labels"],
            taints=[sm.ClusterKubernetesTaintArgs(key=t["key"], value=t["value"],
                                                  effect=sm.ClusterKubernetesTaintEffect(t["effect"]))
                    for t in kubernetes["taints"]]),
        instance_storage_configs=[sm.ClusterInstanceStorageConfigArgs(
            ebs_volume_config=sm.ClusterEbsVolumeConfigArgs(**s["ebs_volume_config"])) for s in storage]
        if storage else None,
        on_start_deep_health_checks=[sm.ClusterDeepHealthCheckType(c) for c in checks] if checks else None,
        override_vpc_config=sm.ClusterVpcConfigArgs(**zonal_vpc) if zonal_vpc else None,
    )
