"""Every resource the program registers takes only inputs its pinned provider SDK declares.

Mocks accept any input, so without this a misspelled property, a wrong nested key, a missing
required input or a value outside an SDK enum would only fail in a real `pulumi up`.
Rules (see tests/stack/provider_inputs.py):
- this project's components (inference-gateway:index:*) are skipped: they are Python classes
  whose children are the registrations that get checked;
- Kubernetes custom resources (an apiVersion pulumi_kubernetes does not know, e.g. the
  InferenceGatewayConfig) are skipped: the SDK gives them a free-form spec;
- Kubernetes objects (pulumi_kubernetes types with apiVersion/kind) have their top-level input
  names checked only: their bodies are validated against the Kubernetes OpenAPI schemas elsewhere;
- everything else (AWS, AWS Cloud Control, EKS components, Helm charts, providers) is checked in
  full: names, required inputs, nested types, enums and scalar kinds.
"""

import pulumi
import pytest
from pulumi.output import Unknown
from pulumi.runtime.rpc import wrap_rpc_secret

from settings.stackfile import STACKS_DIR
from tests.stack.program import PROJECT, Registered, run_program
from tests.stack.provider_inputs import (
    KUBERNETES_OBJECT_SCOPE,
    Checked,
    SKIP_CUSTOM_RESOURCE,
    SKIP_PROJECT_COMPONENT,
    check_registrations,
)
from tests.test_program import from_stack_file

STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS_DIR.glob("Pulumi.*.yaml"))

SAGEMAKER_CLUSTER = "aws-native:sagemaker:Cluster"


def problems_of(typ, inputs):
    report = check_registrations([Registered(typ, "r", inputs, provider=None)], project=PROJECT)
    return {p.path: p.message for p in report.problems}


def sagemaker_cluster(taint):
    return {"instanceGroups": [{
        "instanceGroupName": "workers", "instanceType": "ml.g5.xlarge", "instanceCount": 2.0,
        "executionRole": "arn:aws:iam::123456789012:role/hyperpod",
        "lifeCycleConfig": {"onCreate": "on_create.sh", "sourceS3Uri": "s3://lifecycle/"},
        "kubernetesConfig": {"labels": {"pool": "gpu"}, "taints": [taint]}}],
        "orchestrator": {"eks": {"clusterArn": "arn:aws:eks:us-west-2:123456789012:cluster/inference-dev"}},
        "nodeRecovery": "Automatic"}


GOOD_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
@pytest.mark.parametrize("stack", STACKS)
def test_every_registered_resource_takes_only_inputs_its_sdk_declares(stack, preview):
    config, secrets = from_stack_file(stack)
    run = run_program(config, stack=stack, secret_keys=secrets, preview=preview)
    report = check_registrations(run.resources, project=PROJECT)
    assert report.checked, f"stack {stack!r}: no registration was checked"
    assert len(report.checked) + len(report.skipped) == len(run.resources)
    assert not report.problems, f"stack {stack!r} ({'preview' if preview else 'up'}): " + report.format()


def test_a_correct_hand_made_registration_has_no_problems():
    assert problems_of(SAGEMAKER_CLUSTER, sagemaker_cluster(GOOD_TAINT)) == {}


def test_a_misspelled_top_level_input_is_named_with_the_valid_names():
    problems = problems_of("aws:ec2/vpc:Vpc", {"cidrBlok": "10.0.0.0/16"})
    assert list(problems) == ["cidrBlok"]
    assert "did you mean 'cidrBlock'?" in problems["cidrBlok"] and "enableDnsHostnames" in problems["cidrBlok"]


def test_a_misspelled_nested_key_is_found_by_its_full_path():
    taint = {"key": "nvidia.com/gpu", "efect": "NoSchedule"}
    problems = problems_of(SAGEMAKER_CLUSTER, sagemaker_cluster(taint))
    path = "instanceGroups[0].kubernetesConfig.taints[0]"
    assert "did you mean 'effect'?" in problems[f"{path}.efect"]
    assert "missing required input 'effect'" in problems[f"{path}.effect"]
    assert len(problems) == 2


def test_a_nested_key_is_checked_against_an_input_type_of_another_sdk():
    # pulumi_eks's ManagedNodeGroup takes its taints as pulumi_aws's NodeGroupTaintArgs.
    problems = problems_of("eks:index:ManagedNodeGroup", {
        "cluster": "urn:pulumi:dev::inference-gateway::eks:index:Cluster::c", "nodeRoleArn": "arn:aws:iam::1:role/n",
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "efect": "NO_SCHEDULE"}]})
    assert "NodeGroupTaintArgs takes: effect, key, value" in problems["taints[0].efect"]


def test_a_missing_required_input_is_reported():
    assert problems_of("aws:iam/role:Role", {"description": "no trust policy"}) == {
        "assumeRolePolicy": "missing required input 'assumeRolePolicy' of RoleArgs"}


def test_a_value_outside_the_sdk_enum_is_reported_with_the_allowed_values():
    assert problems_of("eks:index:Cluster", {"authenticationMode": "APII"}) == {
        "authenticationMode": "'APII' is not a value of AuthenticationMode: 'CONFIG_MAP', 'API', 'API_AND_CONFIG_MAP'"}
    taint = {**GOOD_TAINT, "effect": "NO_SCHEDULE"}
    problems = problems_of(SAGEMAKER_CLUSTER, sagemaker_cluster(taint))
    assert list(problems) == ["instanceGroups[0].kubernetesConfig.taints[0].effect"]
    assert "'NoSchedule'" in problems["instanceGroups[0].kubernetesConfig.taints[0].effect"]


def test_an_input_typed_as_a_string_or_an_enum_takes_any_string():
    # aws.ec2.InstanceType lags behind AWS: the SDK types instanceType as str or that enum.
    assert problems_of("aws:ec2/instance:Instance", {"instanceType": "g7e.2xlarge"}) == {}
    assert problems_of("aws:ec2/instance:Instance", {"instanceType": 4.0})["instanceType"].startswith(
        "4.0 is not a value of InstanceType: 'a1.2xlarge', ")


def test_scalar_kinds_are_checked_with_numbers_as_the_engine_sends_them():
    problems = problems_of("aws:ec2/vpc:Vpc", {
        "enableDnsSupport": "true", "ipv4NetmaskLength": 16.5, "ipv6NetmaskLength": 56.0, "cidrBlock": 10,
        "tags": {"Name": True}})
    assert problems == {
        "enableDnsSupport": "expected bool, got str 'true'",
        "ipv4NetmaskLength": "expected an integer, got 16.5",
        "cidrBlock": "expected str, got int 10",
        "tags['Name']": "expected str, got bool True"}


def test_secrets_are_checked_unwrapped_and_unknown_values_match_any_type():
    secret = wrap_rpc_secret('{"apiVersion": "v1"}')
    assert problems_of("pulumi:providers:kubernetes", {"kubeconfig": secret, "namespace": Unknown()}) == {}
    assert problems_of("pulumi:providers:kubernetes", {"kubeconfig": wrap_rpc_secret(3.0)}) == {
        "kubeconfig": "expected str, got float 3.0"}


def test_helm_charts_and_providers_are_checked_in_full():
    problems = problems_of("kubernetes:helm.sh/v4:Chart", {
        "chart": "nvidia-device-plugin", "repositoryOpts": {"rpo": "x"},
        "valueYamlFiles": [pulumi.FileAsset("values.yaml"), "values.yaml"]})
    assert "did you mean 'repo'?" in problems["repositoryOpts.rpo"]
    assert problems["valueYamlFiles[1]"] == "expected Asset or Archive, got str 'values.yaml'"
    assert len(problems) == 2


def test_provider_config_is_checked_after_decoding_the_json_its_sdk_sends():
    problems = problems_of("pulumi:providers:aws", {
        "region": "us-west-2", "maxRetries": "3", "insecure": "false",
        "assumeRoles": '[{"roleArn": "arn:aws:iam::123456789012:role/deploy", "sesionName": "ci"}]',
        "skipMetadataApiCheck": "maybe"})
    assert list(problems) == ["assumeRoles[0].sesionName", "skipMetadataApiCheck"]
    assert "did you mean 'sessionName'?" in problems["assumeRoles[0].sesionName"]


def test_a_provider_config_dict_with_python_names_is_caught():
    # The SDK JSON-encodes a plain dict as written, so `assume_roles=[{"role_arn": ...}]` reaches
    # the provider as role_arn, which it ignores: "IAM Role ARN not set" (pulumi/pulumi-aws#5271).
    problems = problems_of("pulumi:providers:aws", {"assumeRoles": '[{"role_arn": "arn:aws:iam::123456789012:role/x"}]'})
    assert "did you mean 'roleArn'?" in problems["assumeRoles[0].role_arn"]


def test_kubernetes_objects_are_checked_at_the_top_level_only():
    report = check_registrations([Registered("kubernetes:apps/v1:Deployment", "d", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metdata": {}, "spec": {"replicaz": 2}}, provider=None)],
        project=PROJECT)
    assert [(p.path, p.message.split(";")[0]) for p in report.problems] == [
        ("metdata", "unknown input 'metdata' (did you mean 'metadata'?)")]
    assert report.checked == (Checked("kubernetes:apps/v1:Deployment", "d", KUBERNETES_OBJECT_SCOPE),)


def test_custom_resources_and_project_components_are_skipped_by_rule():
    report = check_registrations([
        Registered("kubernetes:inference.sagemaker.aws.amazon.com/v1alpha1:InferenceGatewayConfig", "g",
                   {"spec": {"anything": True}}, provider=None),
        Registered(f"{PROJECT}:index:Gateway", "gateway", {"whatever": 1}, provider=None)], project=PROJECT)
    assert not report.problems and not report.checked
    assert [s.rule for s in report.skipped] == [SKIP_CUSTOM_RESOURCE, SKIP_PROJECT_COMPONENT]


@pytest.mark.parametrize(("typ", "expected"), [
    ("aws:ec2/vpcc:Vpc", "pulumi_aws 7.51.1 registers no resource type 'aws:ec2/vpcc:Vpc'"),
    ("kubernetes:apps/v1:Deploymnet", "pulumi_kubernetes 4.34.2 registers no resource type"),
    ("gcp:compute/instance:Instance", "no installed Pulumi SDK provides package 'gcp'"),
])
def test_a_type_token_no_pinned_sdk_registers_is_a_problem(typ, expected):
    assert expected in problems_of(typ, {})[""]
