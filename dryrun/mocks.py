"""Pulumi's SDK mocks standing in for AWS and the Kubernetes API: nothing else of the program is replaced."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.proto import resource_pb2

HYPERPOD_ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh"
# The partitions other than `aws`, by region prefix, as the AWS provider derives them offline.
PARTITIONS = (("cn-", ("aws-cn", "amazonaws.com.cn")), ("us-gov-", ("aws-us-gov", "amazonaws.com")))


@dataclass
class Registered:
    type: str
    name: str
    inputs: dict[str, Any]
    provider: str | None
    parent: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


class NoResourceReferencesMonitor(pulumi_mocks.MockMonitor):
    """The stock mock monitor rebuilds referenced resources on another event loop and fails at
    random (pulumi/pulumi#6561); without the feature the SDK passes URNs and ids instead."""

    def __init__(self, mocks: CloudMocks):
        super().__init__(mocks)
        self.registrations: dict[tuple[str, str], Any] = {}

    def RegisterResource(self, request):
        # Resource options the mocks' new_resource does not see: parent, replacement and ignored changes.
        self.registrations[(request.type, request.name)] = {
            "parent": request.parent, "deleteBeforeReplace": request.deleteBeforeReplace,
            "replaceOnChanges": list(request.replaceOnChanges), "ignoreChanges": list(request.ignoreChanges),
            "dependencies": list(request.dependencies),
            "customTimeouts": {"create": request.customTimeouts.create, "update": request.customTimeouts.update}}
        return super().RegisterResource(request)

    def Invoke(self, request):
        if self.mocks.only_aws_knows(request.tok):
            # As the engine answers an invoke it cannot serve yet: the whole result is unknown.
            return resource_pb2.ResourceInvokeResponse(unknown=True)
        return super().Invoke(request)

    def GetDeploymentInfo(self, request):
        info = super().GetDeploymentInfo(request)
        return resource_pb2.DeploymentInfo(supportedFeatures=[
            f for f in info.supportedFeatures if f != resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES])

    def SupportsFeature(self, request):
        if request.id == "resourceReferences":
            return type("Unsupported", (), {"hasSupport": False})
        return super().SupportsFeature(request)


class CloudMocks(pulumi.runtime.Mocks):
    """Answers as AWS and the EKS component would, with just the outputs the program reads: fixed
    stand-ins (account 123456789012, ids ending in -id) that tests can assert on."""

    def __init__(self) -> None:
        self.resources: list[Registered] = []
        self.calls: list[tuple[str, dict]] = []
        self.monitor = NoResourceReferencesMonitor(self)

    def only_aws_knows(self, token: str) -> bool:
        """Whether the invoke `token` is left unknown rather than answered with a stand-in."""
        return False

    def record(self, args: pulumi.runtime.MockResourceArgs) -> None:
        options = self.monitor.registrations.get((args.typ, args.name), {})
        self.resources.append(Registered(args.typ, args.name, dict(args.inputs), args.provider,
                                         parent=options.get("parent"), options=options))

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.record(args)
        outputs = dict(args.inputs)
        if args.typ == "eks:index:Cluster":
            kubeconfig = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": args.name}]}
            outputs.update(kubeconfig=kubeconfig, kubeconfigJson=json.dumps(kubeconfig),
                           oidcProviderArn="arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/ABC",
                           oidcProviderUrl="oidc.eks.us-west-2.amazonaws.com/id/ABC",
                           clusterSecurityGroupId="sg-0123456789abcdef0")
        elif args.typ == "aws-native:sagemaker:Cluster":
            outputs["clusterArn"] = HYPERPOD_ARN
        elif args.typ == "aws:s3/bucket:Bucket":
            outputs.update(bucket=f"{args.name}-0123", arn=f"arn:aws:s3:::{args.name}-0123")
        elif args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            outputs["latestVersion"] = 1
        elif args.typ == "aws:amp/workspace:Workspace":
            workspace = f"ws-{args.name}-0123"
            outputs.update(arn=f"arn:aws:aps:us-west-2:123456789012:workspace/{workspace}",
                           prometheusEndpoint=f"https://aps-workspaces.us-west-2.amazonaws.com/workspaces/{workspace}/")
        elif args.typ == "aws:sqs/queue:Queue":
            queue = f"{args.name}-0123"
            outputs.update(name=queue, arn=f"arn:aws:sqs:us-west-2:123456789012:{queue}",
                           url=f"https://sqs.us-west-2.amazonaws.com/123456789012/{queue}")
        elif args.typ == "aws:cloudwatch/eventRule:EventRule":
            outputs["name"] = f"{args.name}-0123"
        elif args.typ == "aws:iam/role:Role":
            outputs["arn"] = f"arn:aws:iam::123456789012:role/{args.name}"
            outputs["name"] = args.name
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.calls.append((args.token, dict(args.args)))
        answers = {
            "aws:index/getAvailabilityZones:getAvailabilityZones": {"names": ["us-west-2a", "us-west-2b", "us-west-2c"]},
            "aws:index/getPartition:getPartition": {"partition": "aws", "dnsSuffix": "amazonaws.com"},
            "aws:index/getRegion:getRegion": {"region": "us-west-2", "name": "us-west-2"},
            "aws:eks/getCluster:getCluster": {
                "name": args.args.get("name"), "endpoint": "https://ABC.gr7.us-west-2.eks.amazonaws.com",
                "certificateAuthorities": [{"data": "Q0E="}],
                "identities": [{"oidcs": [{"issuer": "https://oidc.eks.us-west-2.amazonaws.com/id/ABC"}]}],
                "vpcConfig": {"vpcId": "vpc-0123456789abcdef0"},
            },
            "aws:index/getCallerIdentity:getCallerIdentity": {"accountId": "123456789012", "arn": "arn:aws:iam::123456789012:user/ci",
                                                               "userId": "AIDA", "id": "123456789012"},
            "aws:iam/getOpenIdConnectProvider:getOpenIdConnectProvider": {
                "arn": "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/ABC"},
        }
        return answers.get(args.token, {})


class PreviewMocks(CloudMocks):
    """Answers as `pulumi preview` sees a stack it is about to create: a new resource's outputs
    are its inputs, everything AWS assigns on creation (ids, ARNs, endpoints) is unknown, and so
    is every lookup that needs an AWS account. Only what the provider works out from its own
    config is answered: the region, and the partition that region is in."""

    def __init__(self, region: str) -> None:
        super().__init__()
        partition, dns_suffix = next((found for prefix, found in PARTITIONS if region.startswith(prefix)),
                                     ("aws", "amazonaws.com"))
        self.answers = {
            "aws:index/getRegion:getRegion": {"region": region, "name": region},
            "aws:index/getPartition:getPartition": {"partition": partition, "dnsSuffix": dns_suffix},
        }

    def only_aws_knows(self, token: str) -> bool:
        return token not in self.answers

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.record(args)
        # No id and no output beyond the inputs: the SDK resolves the rest as unknown in a preview.
        return "", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.calls.append((args.token, dict(args.args)))
        return self.answers[args.token]
