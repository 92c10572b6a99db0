"""Trust policies and permission policies as JSON strings, from plain values.

Every trust policy names exactly one principal: an AWS service, or one Kubernetes service
account through the cluster's OIDC provider (IRSA). Where AWS's own templates grant a
service and a service account the same role, both appear, each with its own statement.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass


SAGEMAKER_SERVICE = "sagemaker.amazonaws.com"


def managed_policy_arn(partition: str, policy: str) -> str:
    """An AWS managed IAM policy's ARN in the given partition (aws, aws-cn, aws-us-gov)."""
    return f"arn:{partition}:iam::aws:policy/{policy}"


def service_account_subject(namespace: str, service_account: str) -> str:
    return f"system:serviceaccount:{namespace}:{service_account}"


def service_trust_statement(service: str) -> dict:
    return {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}


def service_account_trust_statement(oidc_provider_arn: str, oidc_issuer_url: str, subject: str,
                                    *, wildcard: bool = False) -> dict:
    """IRSA: tokens of the one service account `subject`, for STS only."""
    issuer = oidc_issuer_url.removeprefix("https://")
    conditions = {"StringEquals": {f"{issuer}:aud": "sts.amazonaws.com"}}
    if wildcard:
        conditions["StringLike"] = {f"{issuer}:sub": subject}
    else:
        conditions["StringEquals"][f"{issuer}:sub"] = subject
    return {"Effect": "Allow", "Principal": {"Federated": oidc_provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity", "Condition": conditions}


@dataclass(frozen=True)
class ServiceAccountRole:
    """An IRSA role: which service account may assume it, and which managed policy it gets."""

    namespace: str
    service_account: str
    managed_policy: str | None = None
    # StringLike on the subject: the gated-model role serves every inference service account.
    wildcard: bool = False
    # AWS's templates let SageMaker assume these roles as well.
    also_sagemaker: bool = False


def trust_policy(role: ServiceAccountRole, oidc_provider_arn: str, oidc_issuer_url: str) -> str:
    subject = service_account_subject(role.namespace, role.service_account)
    statements = [service_account_trust_statement(oidc_provider_arn, oidc_issuer_url, subject,
                                                  wildcard=role.wildcard)]
    if role.also_sagemaker:
        statements.insert(0, service_trust_statement(SAGEMAKER_SERVICE))
    return policy(*statements)


def policy(*statements: dict) -> str:
    """An IAM policy document (trust or permissions) of these statements."""
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(actions: Sequence[str], resources: Sequence[str] | str = "*", **condition: dict) -> dict:
    statement = {"Effect": "Allow", "Action": sorted(actions),
                 "Resource": resources if isinstance(resources, str) else list(resources)}
    if condition:
        statement["Condition"] = condition
    return statement


def bucket_arns(bucket_arn: str) -> list[str]:
    return [bucket_arn, f"{bucket_arn}/*"]


def load_balancer_controller_policy(partition: str) -> str:
    """What the AWS Load Balancer Controller (v3.5) does for a LoadBalancer Service or Gateway:
    discover subnets, security groups and certificates; make the load balancer, its listeners,
    rules and target groups and their security group; open the nodes' security groups to it;
    register pod IPs. Deleting or reshaping ELB resources and security groups is limited to
    those the controller tagged as its own (elbv2.k8s.aws/cluster)."""
    owned = {"Null": {"aws:ResourceTag/elbv2.k8s.aws/cluster": "false"}}
    tagging_new = {"Null": {"aws:RequestTag/elbv2.k8s.aws/cluster": "false"}}
    not_retagging = {"Null": {"aws:RequestTag/elbv2.k8s.aws/cluster": "true",
                              "aws:ResourceTag/elbv2.k8s.aws/cluster": "false"}}
    elb = f"arn:{partition}:elasticloadbalancing:*:*"
    security_groups = f"arn:{partition}:ec2:*:*:security-group/*"
    balancers = [f"{elb}:targetgroup/*/*", f"{elb}:loadbalancer/net/*/*", f"{elb}:loadbalancer/app/*/*"]
    return policy(
        allow(["iam:CreateServiceLinkedRole"],
              StringEquals={"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}),
        allow(["ec2:DescribeAccountAttributes", "ec2:DescribeAddresses", "ec2:DescribeAvailabilityZones",
               "ec2:DescribeInternetGateways", "ec2:DescribeVpcs", "ec2:DescribeVpcPeeringConnections",
               "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeInstances",
               "ec2:DescribeNetworkInterfaces", "ec2:DescribeTags", "ec2:GetCoipPoolUsage", "ec2:DescribeCoipPools",
               "ec2:GetSecurityGroupsForVpc", "ec2:DescribeIpamPools", "ec2:DescribeRouteTables",
               "elasticloadbalancing:DescribeLoadBalancers", "elasticloadbalancing:DescribeLoadBalancerAttributes",
               "elasticloadbalancing:DescribeListeners", "elasticloadbalancing:DescribeListenerCertificates",
               "elasticloadbalancing:DescribeSSLPolicies", "elasticloadbalancing:DescribeRules",
               "elasticloadbalancing:DescribeTargetGroups", "elasticloadbalancing:DescribeTargetGroupAttributes",
               "elasticloadbalancing:DescribeTargetHealth", "elasticloadbalancing:DescribeTags",
               "elasticloadbalancing:DescribeTrustStores", "elasticloadbalancing:DescribeListenerAttributes",
               "elasticloadbalancing:DescribeCapacityReservation"]),
        allow(["cognito-idp:DescribeUserPoolClient", "acm:ListCertificates", "acm:DescribeCertificate",
               "iam:ListServerCertificates", "iam:GetServerCertificate", "waf-regional:GetWebACL",
               "waf-regional:GetWebACLForResource", "waf-regional:AssociateWebACL", "waf-regional:DisassociateWebACL",
               "wafv2:GetWebACL", "wafv2:GetWebACLForResource", "wafv2:AssociateWebACL", "wafv2:DisassociateWebACL",
               "shield:GetSubscriptionState", "shield:DescribeProtection", "shield:CreateProtection",
               "shield:DeleteProtection"]),
        # The nodes' (or cluster's) security group is not the controller's: it opens it to the NLB.
        allow(["ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"]),
        allow(["ec2:CreateSecurityGroup"]),
        allow(["ec2:CreateTags"], security_groups, StringEquals={"ec2:CreateAction": "CreateSecurityGroup"},
              **tagging_new),
        allow(["ec2:CreateTags", "ec2:DeleteTags"], security_groups, **not_retagging),
        allow(["ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress", "ec2:DeleteSecurityGroup"],
              **owned),
        allow(["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup"], **tagging_new),
        allow(["elasticloadbalancing:CreateListener", "elasticloadbalancing:DeleteListener",
               "elasticloadbalancing:CreateRule", "elasticloadbalancing:DeleteRule"]),
        allow(["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"], balancers, **not_retagging),
        allow(["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"],
              [f"{elb}:listener/net/*/*/*", f"{elb}:listener/app/*/*/*", f"{elb}:listener-rule/net/*/*/*",
               f"{elb}:listener-rule/app/*/*/*"]),
        allow(["elasticloadbalancing:ModifyLoadBalancerAttributes", "elasticloadbalancing:SetIpAddressType",
               "elasticloadbalancing:SetSecurityGroups", "elasticloadbalancing:SetSubnets",
               "elasticloadbalancing:DeleteLoadBalancer", "elasticloadbalancing:ModifyTargetGroup",
               "elasticloadbalancing:ModifyTargetGroupAttributes", "elasticloadbalancing:DeleteTargetGroup",
               "elasticloadbalancing:ModifyListenerAttributes", "elasticloadbalancing:ModifyCapacityReservation",
               "elasticloadbalancing:ModifyIpPools"], **owned),
        allow(["elasticloadbalancing:AddTags"], balancers,
              StringEquals={"elasticloadbalancing:CreateAction": ["CreateTargetGroup", "CreateLoadBalancer"]},
              **tagging_new),
        allow(["elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"],
              [f"{elb}:targetgroup/*/*"]),
        allow(["elasticloadbalancing:SetWebAcl", "elasticloadbalancing:ModifyListener",
               "elasticloadbalancing:AddListenerCertificates", "elasticloadbalancing:RemoveListenerCertificates",
               "elasticloadbalancing:ModifyRule", "elasticloadbalancing:SetRulePriorities"]),
    )
