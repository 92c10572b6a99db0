"""An IRSA role and its policies, created as children of the component that needs them."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from . import render


def service_account_role(name: str, role: render.ServiceAccountRole, *, oidc_provider_arn: pulumi.Input[str],
                         oidc_issuer_url: pulumi.Input[str], partition: pulumi.Input[str],
                         opts: pulumi.ResourceOptions, name_prefix: str | None = None,
                         inline: pulumi.Input[str] | None = None) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
    """`<name>-role`, trusted by `role`'s service account alone (and SageMaker where AWS's
    templates add it), with `<name>-managed` (its managed policy) and `<name>-policy` (`inline`)
    when it has them. Returns the role and the policy resources, which whatever runs as the
    service account should depend on."""
    trust = pulumi.Output.all(oidc_provider_arn, oidc_issuer_url).apply(
        lambda args: render.trust_policy(role, *args))
    created = aws.iam.Role(f"{name}-role", name_prefix=name_prefix, assume_role_policy=trust, opts=opts)
    attached: list[pulumi.Resource] = []
    if role.managed_policy is not None:
        attached.append(aws.iam.RolePolicyAttachment(
            f"{name}-managed", role=created.name,
            policy_arn=pulumi.Output.from_input(partition).apply(
                lambda p: render.managed_policy_arn(p, role.managed_policy)),
            opts=opts))
    if inline is not None:
        attached.append(aws.iam.RolePolicy(f"{name}-policy", role=created.id, policy=inline, opts=opts))
    return created, attached
