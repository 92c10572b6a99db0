"""The amazon-sagemaker-hyperpod-inference EKS add-on, configured as AWS documents it: its four
dependency add-ons first, every role it names, and the bucket for its TLS certificates."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from components.iam import render as iam
from components.iam.render import ServiceAccountRole
from components.iam.role import service_account_role
from components.storage import PrivateBucket
from settings import GatewaySettings

from . import render


class InferenceAddon(pulumi.ComponentResource):
    def __init__(self, name: str, *, settings: GatewaySettings, cluster_name: pulumi.Input[str],
                 oidc_provider_arn: pulumi.Input[str], oidc_issuer_url: pulumi.Input[str],
                 hyperpod_cluster_arn: pulumi.Input[str], depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:InferenceAddon", name, None, opts)
        self._oidc = (oidc_provider_arn, oidc_issuer_url)
        self._partition = aws.get_partition_output().partition
        self._child = pulumi.ResourceOptions(parent=self)
        self.role_arns: dict[str, pulumi.Output[str]] = {}
        granted: list[pulumi.Resource] = []

        # Every dependency runs pods, so it can go ACTIVE only once the nodes are there.
        dependencies = []
        for addon_name, version in settings.dependency_addon_versions.items():
            role_arn = None
            if addon_name in render.DEPENDENCY_ROLES:
                role_spec = render.DEPENDENCY_ROLES[addon_name]
                role, attached = self._role(f"{name}-{addon_name}", role_spec, inline=(
                    self._partition.apply(render.s3_csi_policy) if role_spec is render.S3_CSI else None))
                role_arn = role.arn
                granted += attached
            dependencies.append(aws.eks.Addon(
                f"{name}-{addon_name}", cluster_name=cluster_name, addon_name=addon_name,
                addon_version=version, service_account_role_arn=role_arn,
                resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE",
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*depends_on, *granted],
                                            custom_timeouts=pulumi.CustomTimeouts(create=render.ADDON_TIMEOUT))))

        self.tls_bucket = PrivateBucket(f"{name}-tls", purpose="hyperpod-inference-tls-certificates", opts=self._child)
        if settings.execution_role_arn is not None:
            execution_role_arn = pulumi.Output.from_input(settings.execution_role_arn)
            # The controller writes the certificates it issues to the bucket this stack made, so
            # your role is granted that bucket (an inline policy, removed with the stack).
            granted.append(aws.iam.RolePolicy(
                f"{name}-execution-tls-bucket", role=render.role_name(settings.execution_role_arn),
                policy=self.tls_bucket.arn.apply(render.tls_bucket_policy), opts=self._child))
        else:
            execution, attached = self._role(
                f"{name}-execution", render.EXECUTION, name_prefix=render.EXECUTION_ROLE_PREFIX,
                inline=self.tls_bucket.arn.apply(render.tls_bucket_policy))
            execution_role_arn, granted = execution.arn, granted + attached
        controller, attached = self._role(f"{name}-gateway-controller", render.GATEWAY_CONTROLLER)
        granted += attached
        load_balancer = keda = gated = None
        if settings.load_balancer_controller:
            load_balancer, attached = self._role(f"{name}-load-balancer-controller", render.LOAD_BALANCER_CONTROLLER,
                                                 inline=self._partition.apply(iam.load_balancer_controller_policy))
            granted += attached
        if settings.keda:
            keda, attached = self._role(f"{name}-keda", render.KEDA, inline=render.keda_policy())
            granted += attached
        if settings.gated_model_access:
            gated, attached = self._role(f"{name}-gated-models", render.GATED_MODELS)
            granted += attached

        configuration = pulumi.Output.all(
            execution_role_arn, self.tls_bucket.name, hyperpod_cluster_arn, controller.arn,
            *(role.arn if role is not None else None for role in (load_balancer, keda, gated)),
        ).apply(lambda values: render.configuration_values(
            settings, execution_role_arn=values[0], tls_bucket=values[1], hyperpod_cluster_arn=values[2],
            controller_role_arn=values[3], load_balancer_role_arn=values[4], keda_role_arn=values[5],
            gated_model_role_arn=values[6]))
        # Roles, their policies and the bucket exist before the add-on starts its controllers;
        # OVERWRITE on both create and update, as AWS's install does.
        self.addon = aws.eks.Addon(
            f"{name}-addon",
            cluster_name=cluster_name,
            addon_name=render.ADDON_NAME,
            addon_version=settings.addon_version,
            configuration_values=configuration,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[*dependencies, *granted, *self.tls_bucket.ready, *depends_on],
                custom_timeouts=pulumi.CustomTimeouts(create=render.ADDON_TIMEOUT, update=render.ADDON_TIMEOUT)),
        )
        self.register_outputs({"addon": self.addon.addon_name, "roles": self.role_arns,
                               "tlsBucket": self.tls_bucket.name})

    def _role(self, name: str, role: ServiceAccountRole, *, name_prefix: str | None = None,
              inline: pulumi.Input[str] | None = None) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
        created, attached = service_account_role(
            name, role, oidc_provider_arn=self._oidc[0], oidc_issuer_url=self._oidc[1], partition=self._partition,
            opts=self._child, name_prefix=name_prefix, inline=inline)
        self.role_arns[role.service_account] = created.arn
        return created, attached
