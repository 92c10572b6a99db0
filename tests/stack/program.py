"""Runs __main__.py under Pulumi's mocks: AWS and the Kubernetes API are the only things mocked."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.proto import resource_pb2

from settings import NAMESPACE, read_stack_config, stack_file

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "__main__.py"
PROJECT = NAMESPACE
# A stand-in clone of aws/sagemaker-hyperpod-cli, used wherever a test does not name its own.
DEPENDENCIES_CLONE = ROOT / "tests" / "fixtures" / "sagemaker-hyperpod-cli"
HYPERPOD_ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh"


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

    def __init__(self, mocks: "CloudMocks"):
        super().__init__(mocks)
        self.registrations: dict[tuple[str, str], Any] = {}

    def RegisterResource(self, request):
        # Resource options the mocks' new_resource does not see: parent and replacement behaviour.
        self.registrations[(request.type, request.name)] = {
            "parent": request.parent, "deleteBeforeReplace": request.deleteBeforeReplace,
            "replaceOnChanges": list(request.replaceOnChanges), "dependencies": list(request.dependencies),
            "customTimeouts": {"create": request.customTimeouts.create, "update": request.customTimeouts.update}}
        return super().RegisterResource(request)

    def GetDeploymentInfo(self, request):
        info = super().GetDeploymentInfo(request)
        return resource_pb2.DeploymentInfo(supportedFeatures=[
            f for f in info.supportedFeatures if f != resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES])

    def SupportsFeature(self, request):
        if request.id == "resourceReferences":
            return type("Unsupported", (), {"hasSupport": False})
        return super().SupportsFeature(request)


class CloudMocks(pulumi.runtime.Mocks):
    """Answers as AWS and the EKS component would, with just the outputs the program reads."""

    def __init__(self) -> None:
        self.resources: list[Registered] = []
        self.calls: list[tuple[str, dict]] = []
        self.monitor = NoResourceReferencesMonitor(self)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        options = self.monitor.registrations.get((args.typ, args.name), {})
        self.resources.append(Registered(args.typ, args.name, dict(args.inputs), args.provider,
                                         parent=options.get("parent"), options=options))
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


@dataclass
class ProgramRun:
    resources: list[Registered]
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)
    calls: list[tuple[str, dict]] = field(default_factory=list)

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.type == typ]

    def named(self, name: str) -> Registered:
        matches = [r for r in self.resources if r.name == name]
        assert len(matches) == 1, f"expected one resource named {name!r}, found {len(matches)}"
        return matches[0]

    def kubernetes_object(self, kind: str, name: str) -> dict[str, Any]:
        matches = [r.inputs for r in self.resources if r.inputs.get("kind") == kind
                   and r.inputs.get("metadata", {}).get("name") == name]
        assert len(matches) == 1, f"expected one {kind} {name!r}, found {len(matches)}"
        return matches[0]


def comparable(value: Any) -> Any:
    """Registered inputs as plain data: assets by their path (two FileAssets of one file differ as objects)."""
    return json.loads(json.dumps(value, default=lambda v: {"asset": getattr(v, "path", repr(v))}))


def stack_config(stack: str) -> tuple[dict[str, str], list[str]]:
    """A stack file's config as the language host passes it: every value a string, objects as JSON."""
    raw, secret_keys = read_stack_config(stack_file(stack))
    as_strings = {f"{PROJECT}:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    return as_strings, [f"{PROJECT}:{k}" for k in secret_keys]


def with_test_defaults(config: dict[str, Any], dependencies_chart: Path | None) -> dict[str, Any]:
    """The region every stack file sets, and (unless None) the dependencies chart clone to use
    in place of whatever path the config names: tests never have AWS's real clone."""
    config = {"aws:region": "us-west-2", **config}
    hyperpod = config.get("hyperpod")
    if isinstance(hyperpod, str):
        hyperpod = json.loads(hyperpod)
    existing = str((hyperpod or {}).get("existing", config.get("hyperpod.existing", "false"))).lower() == "true"
    if dependencies_chart is None or config.get("platform") == "eks" or existing:
        return config
    if isinstance(hyperpod, dict):
        config["hyperpod"] = {**hyperpod, "dependenciesChart": str(dependencies_chart)}
    else:
        config["hyperpod.dependenciesChart"] = str(dependencies_chart)
    return config


def run_program(config: dict[str, Any], *, stack: str = "test", secret_keys: list[str] | None = None,
                preview: bool = False, dependencies_chart: Path | None = DEPENDENCIES_CLONE) -> ProgramRun:
    """Evaluate __main__.py once under fresh mocks; `config` keys are without the namespace."""
    mocks = CloudMocks()
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=preview, monitor=mocks.monitor)
    pulumi.runtime.set_all_config(
        {f"{PROJECT}:{k}" if ":" not in k else k: v if isinstance(v, str) else json.dumps(v)
         for k, v in with_test_defaults(config, dependencies_chart).items()},
        [f"{PROJECT}:{k}" if ":" not in k else k for k in (secret_keys or [])])
    run = ProgramRun(mocks.resources)
    exports: dict[str, Any] = {}

    @pulumi.runtime.test
    def evaluate():
        spec = importlib.util.spec_from_file_location("inference_gateway_program", PROGRAM)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        names = list(exports)
        values = [pulumi.Output.from_input(exports[name]) for name in names]
        secrets = pulumi.Output.all(*[pulumi.Output.unsecret(v).apply(lambda _: True) for v in values])

        def store(resolved):
            for name, value in zip(names, resolved):
                run.outputs[name] = value

        return pulumi.Output.all(pulumi.Output.all(*values).apply(store), secrets)

    original_export = pulumi.export
    pulumi.export = lambda name, value: exports.__setitem__(name, value)
    try:
        evaluate()
        run.secret_outputs = _secret_exports(exports)
    finally:
        pulumi.export = original_export
        pulumi.runtime.set_all_config({}, [])
    run.calls = mocks.calls
    return run


def _secret_exports(exports: dict[str, Any]) -> set[str]:
    outputs = {name: value for name, value in exports.items() if isinstance(value, pulumi.Output)}
    loop = asyncio.new_event_loop()
    try:
        return {name for name, value in outputs.items() if loop.run_until_complete(value.is_secret())}
    finally:
        loop.close()
