"""The amazon-sagemaker-hyperpod-inference EKS add-on with the gateway on, and its controller's IRSA role."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from settings import GatewaySettings

from . import render


class InferenceAddon(pulumi.ComponentResource):
    def __init__(self, name: str, *, settings: GatewaySettings, cluster_name: pulumi.Input[str],
                 oidc_provider_arn: pulumi.Input[str], oidc_issuer_url: pulumi.Input[str],
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:InferenceAddon", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        trust = pulumi.Output.all(oidc_provider_arn, oidc_issuer_url).apply(
            lambda args: render.controller_trust_policy(*args))
        role = aws.iam.Role(f"{name}-controller-role", assume_role_policy=trust, opts=child)
        partition = aws.get_partition_output().partition
        attachment = aws.iam.RolePolicyAttachment(f"{name}-controller-policy", role=role.name,
                                                  policy_arn=partition.apply(render.gateway_policy_arn), opts=child)
        # The role and its policy must exist before the add-on starts its controller.
        self.addon = aws.eks.Addon(
            f"{name}-addon",
            cluster_name=cluster_name,
            addon_name=render.ADDON_NAME,
            addon_version=settings.addon_version,
            configuration_values=role.arn.apply(render.configuration_values),
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="PRESERVE",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attachment, *depends_on]),
        )
        self.register_outputs({"addon": self.addon.addon_name, "controllerRoleArn": role.arn})
