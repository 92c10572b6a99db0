"""Trust policies and permission policies as JSON strings, from plain values.

Every trust policy names exactly one principal: an AWS service, or one Kubernetes service
account through the cluster's OIDC provider (IRSA). Where AWS's own templates grant a
service and a service account the same role, both appear, each with its own statement.
"""

from __future__ import annotations

import json
from collections.abc import Sequence


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


def trust_policy(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def policy(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(actions: Sequence[str], resources: Sequence[str] | str = "*", **condition: dict) -> dict:
    statement = {"Effect": "Allow", "Action": sorted(actions),
                 "Resource": resources if isinstance(resources, str) else list(resources)}
    if condition:
        statement["Condition"] = condition
    return statement


def bucket_arns(bucket_arn: str) -> list[str]:
    return [bucket_arn, f"{bucket_arn}/*"]


def bucket_read_policy(bucket_arn: str) -> str:
    return policy(allow(["s3:ListBucket", "s3:GetObject"], bucket_arns(bucket_arn)))


def load_balancer_controller_policy(partition: str) -> str:
    """What the AWS Load Balancer Controller does for a LoadBalancer Service or Gateway: discover
    subnets and security groups, make the load balancer, its listeners, target groups and their
    security group, and register pod IPs. Changes to EC2 security groups and ELB resources are
    limited to those the controller tagged as its own (elbv2.k8s.aws/cluster)."""
    tagged = {"Null": {"aws:ResourceTag/elbv2.k8s.aws/cluster": "false"}}
    tagging_new = {"Null": {"aws:RequestTag/elbv2.k8s.aws/cluster": "false"}}
    return policy(
        allow(["iam:CreateServiceLinkedRole"],
              StringEquals={"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}),
        allow(["ec2:DescribeAccountAttributes", "ec2:DescribeAddresses", "ec2:DescribeAvailabilityZones",
               "ec2:DescribeInternetGateways", "ec2:DescribeVpcs", "ec2:DescribeVpcPeeringConnections",
               "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeInstances",
               "ec2:DescribeNetworkInterfaces", "ec2:DescribeTags", "ec2:GetCoipPoolUsage", "ec2:DescribeCoipPools",
               "ec2:GetSecurityGroupsForVpc", "ec2:DescribeIpamPools", "ec2:DescribeRouteTables",
               "elasticloadbalancing:Describe*", "acm:ListCertificates", "acm:DescribeCertificate",
               "wafv2:GetWebACL", "wafv2:GetWebACLForResource", "shield:GetSubscriptionState"]),
        allow(["ec2:CreateSecurityGroup"]),
        allow(["ec2:CreateTags"], f"arn:{partition}:ec2:*:*:security-group/*",
              StringEquals={"ec2:CreateAction": "CreateSecurityGroup"}, **tagging_new),
        allow(["ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress", "ec2:DeleteSecurityGroup",
               "ec2:CreateTags", "ec2:DeleteTags"], f"arn:{partition}:ec2:*:*:security-group/*", **tagged),
        allow(["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup"], **tagging_new),
        allow(["elasticloadbalancing:CreateListener", "elasticloadbalancing:DeleteListener",
               "elasticloadbalancing:CreateRule", "elasticloadbalancing:DeleteRule",
               "elasticloadbalancing:ModifyListener", "elasticloadbalancing:AddListenerCertificates",
               "elasticloadbalancing:RemoveListenerCertificates", "elasticloadbalancing:ModifyRule"]),
        allow(["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags",
               "elasticloadbalancing:ModifyLoadBalancerAttributes", "elasticloadbalancing:SetIpAddressType",
               "elasticloadbalancing:SetSecurityGroups", "elasticloadbalancing:SetSubnets",
               "elasticloadbalancing:DeleteLoadBalancer", "elasticloadbalancing:ModifyTargetGroup",
               "elasticloadbalancing:ModifyTargetGroupAttributes", "elasticloadbalancing:DeleteTargetGroup",
               "elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"], **tagged),
        allow(["elasticloadbalancing:AddTags"],
              StringEquals={"elasticloadbalancing:CreateAction": ["CreateTargetGroup", "CreateLoadBalancer"]},
              **tagging_new),
    )
