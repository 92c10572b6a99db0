"""The whole Pulumi program under mocks: what `pulumi up` would declare, and what a config change changes."""

import json

import pytest
from pulumi.errors import RunError
from pulumi.runtime.rpc import _special_secret_sig as SECRET_SIG, _special_sig_key as SPECIAL_SIG_KEY

from tests.stack.program import PROJECT, run_program, stack_config
from tests.test_render import SEED_STEP_5, SEED_STEP_5_CONFIG

GATEWAY_TYPE = "kubernetes:inference.sagemaker.aws.amazon.com/v1alpha1:InferenceGatewayConfig"
COMPONENT_PREFIX = "inference-gateway:index:"


def from_stack_file(stack):
    config, secrets = stack_config(stack)
    return {k.removeprefix(f"{PROJECT}:"): v for k, v in config.items()}, [s.removeprefix(f"{PROJECT}:") for s in secrets]


@pytest.mark.parametrize("stack", ["dev", "existing"])
def test_every_stack_file_runs(stack):
    config, secrets = from_stack_file(stack)
    run = run_program(config, stack=stack, secret_keys=secrets)
    assert len(run.of_type(GATEWAY_TYPE)) == 1
    assert run.outputs["namespace"] == "inference"
    assert "kubeconfig" in run.secret_outputs


def test_dev_stack_declares_cluster_gpu_nodes_models_addon_and_gateway():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    assert len(run.of_type("eks:index:Cluster")) == 1
    cluster = run.of_type("eks:index:Cluster")[0].inputs
    assert cluster["authenticationMode"] == "API" and cluster["createOidcProvider"] is True
    assert cluster["skipDefaultNodeGroup"] is True
    gpu_group = run.named("gpu-nodes-group").inputs
    assert gpu_group["amiType"] == "AL2023_x86_64_NVIDIA"
    assert gpu_group["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert gpu_group["labels"]["nvidia.com/gpu.present"] == "true"
    assert gpu_group["scalingConfig"]["desiredSize"] == 4
    assert run.named("gpu-nodes-device-plugin").inputs["version"] == "0.17.4"
    assert {r.inputs["metadata"]["name"] for r in run.of_type("kubernetes:apps/v1:Deployment")} == {"vllm-qwen", "vllm-qwen-small"}
    addon = run.named("inference-addon-addon").inputs
    assert addon["addonName"] == "amazon-sagemaker-hyperpod-inference"
    assert json.loads(addon["configurationValues"])["inferenceGateway"]["enabled"] is True
    trust = json.loads(run.named("inference-addon-controller-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Condition"]["StringEquals"][
        "oidc.eks.us-west-2.amazonaws.com/id/ABC:sub"] == "system:serviceaccount:hyperpod-inference-system:inference-gateway-controller"
    assert run.outputs["effectiveWeights"]["qwen-small"] == {"queue": 2, "kvCache": 2, "prefix": 3}
    assert run.outputs["podSelectors"]["qwen-small"] == {"app": "vllm-qwen-small"}
    assert "owning-gateway-name=inference-gateway" in run.outputs["gatewayUrlCommand"]


def test_existing_cluster_creates_no_cluster_and_no_nodes():
    config, _ = from_stack_file("existing")
    run = run_program(config, stack="existing")
    assert not run.of_type("eks:index:Cluster") and not run.of_type("eks:index:ManagedNodeGroup")
    assert run.outputs["clusterName"] == "my-eks-cluster"
    kubeconfig = json.loads(run.outputs["kubeconfig"])
    assert kubeconfig["users"][0]["user"]["exec"]["args"][:4] == ["eks", "get-token", "--cluster-name", "my-eks-cluster"]


def test_seed_step_5_renders_the_pages_spec_and_deployment():
    run = run_program(SEED_STEP_5_CONFIG, stack="seed")
    gateway = run.kubernetes_object("InferenceGatewayConfig", "inference-gateway-demo")
    assert gateway["spec"] == SEED_STEP_5["spec"]
    assert gateway["metadata"]["namespace"] == "inference"
    deployment = run.kubernetes_object("Deployment", "vllm-qwen-small")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["metadata"]["labels"]["app"] == "vllm-qwen-small"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == 8000 and "readinessProbe" in container
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert run.outputs["effectiveWeights"] == {"qwen-small": {"prefix": 0, "queue": 3, "kvCache": 2}}


def test_toggling_prefix_weight_changes_only_the_gateway_resource():
    before = run_program({**SEED_STEP_5_CONFIG, "weights.prefix": "3"}, stack="seed")
    after = run_program(SEED_STEP_5_CONFIG, stack="seed")
    inputs_before = {(r.type, r.name): r.inputs for r in before.resources}
    inputs_after = {(r.type, r.name): r.inputs for r in after.resources}
    assert inputs_before.keys() == inputs_after.keys()
    changed = [key for key in inputs_before if inputs_before[key] != inputs_after[key]]
    assert changed == [(GATEWAY_TYPE, "gateway-config")]
    assert inputs_before[changed[0]]["spec"]["schedulers"][0]["weights"]["prefix"] == 3
    assert inputs_after[changed[0]]["spec"]["schedulers"][0]["weights"]["prefix"] == 0
    gateway = after.named("gateway-config")
    # An in-place patch: nothing forces delete-and-recreate of the gateway resource.
    assert gateway.options["deleteBeforeReplace"] is False and gateway.options["replaceOnChanges"] == []


def test_every_resource_is_parented_to_a_component():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    for resource in run.resources:
        if resource.type.startswith(COMPONENT_PREFIX):
            continue
        assert COMPONENT_PREFIX in resource.parent.split("::")[-2], f"{resource.type} {resource.name} has no component parent"


def test_kubernetes_resources_use_the_clusters_provider():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    for resource in run.resources:
        if resource.type.startswith("kubernetes:") and not resource.type.startswith("kubernetes:helm"):
            assert resource.provider and "pulumi:providers:kubernetes::cluster-k8s" in resource.provider, resource.name


def test_bad_config_declares_nothing():
    with pytest.raises(RunError) as caught:
        run_program({**SEED_STEP_5_CONFIG, "weights.prefix": "-1", "gateway.bbr": "maybe"}, stack="seed")
    message = str(caught.value)
    assert "inference-gateway:weights.prefix = '-1'" in message and "gateway.bbr" in message


def test_bad_config_registers_no_resource():
    from tests.stack import program

    mocks = program.CloudMocks()
    original = program.CloudMocks
    program.CloudMocks = lambda: mocks
    try:
        with pytest.raises(RunError):
            run_program({**SEED_STEP_5_CONFIG, "models": "[]"}, stack="seed")
    finally:
        program.CloudMocks = original
    assert mocks.resources == []


def test_hf_token_stays_secret():
    config = {**SEED_STEP_5_CONFIG, "hfToken": "hf_secret_value"}
    run = run_program(config, stack="seed", secret_keys=["hfToken"])
    string_data = run.named("models-hf-token").inputs["stringData"]
    # The engine receives the value wrapped as a secret, so state and diffs keep it encrypted.
    assert string_data[SPECIAL_SIG_KEY] == SECRET_SIG and string_data["value"] == {"token": "hf_secret_value"}
    deployment = run.kubernetes_object("Deployment", "vllm-qwen-small")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert "hf_secret_value" not in json.dumps([r.inputs for r in run.resources if r.name != "models-hf-token"])


def dependency_names(run, resource) -> set[str]:
    return {urn.rsplit("::", 1)[-1] for urn in resource.options["dependencies"]}


def test_node_groups_wait_for_their_iam_policies():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    policies = {r.name for r in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment") if "node" in r.name}
    assert len(policies) == 3
    for group in run.of_type("eks:index:ManagedNodeGroup"):
        assert policies <= dependency_names(run, group), group.name


def test_model_servers_wait_for_gpu_nodes_and_allow_a_slow_first_rollout():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    for server in run.of_type("inference-gateway:index:ModelServer"):
        # Depending on the GpuNodes component means depending on each of its children.
        assert {"gpu-nodes-group", "gpu-nodes-device-plugin"} <= dependency_names(run, server)
    for deployment in run.of_type("kubernetes:apps/v1:Deployment"):
        assert deployment.options["customTimeouts"] == {"create": "40m", "update": "40m"}


def test_addon_keeps_the_operator_off_the_gateway_resource():
    config, _ = from_stack_file("dev")
    values = json.loads(run_program(config, stack="dev").named("inference-addon-addon").inputs["configurationValues"])
    assert values["inferenceOperator"] == {"enabled": False}


def test_existing_cluster_looks_up_its_oidc_provider_only_for_the_addon():
    config, _ = from_stack_file("existing")
    lookup = "aws:iam/getOpenIdConnectProvider:getOpenIdConnectProvider"
    assert lookup not in [token for token, _ in run_program(config, stack="existing").calls]
    with_addon = run_program({**config, "gateway.installAddon": "true"}, stack="existing")
    assert lookup in [token for token, _ in with_addon.calls]
    trust = json.loads(with_addon.named("inference-addon-controller-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"]["Federated"].endswith("oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/ABC")


def as_kubernetes_json(value):
    """Mocks hand every number back as a float; the API schemas want integers where they are whole."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: as_kubernetes_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_kubernetes_json(v) for v in value]
    return value


@pytest.mark.parametrize("stack", ["dev", "existing"])
def test_registered_kubernetes_objects_validate_against_the_api_schema(stack):
    from kubernetes_validate import utils as kubernetes_schemas

    config, _ = from_stack_file(stack)
    run = run_program(config, stack=stack)
    core = [r for r in run.resources if r.type.startswith("kubernetes:") and r.inputs.get("apiVersion") in
            ("v1", "apps/v1", "policy/v1")]
    assert {r.inputs["kind"] for r in core} >= {"Namespace", "Deployment", "Service"}
    for resource in core:
        kubernetes_schemas.validate(as_kubernetes_json(resource.inputs), "1.34.0", strict=True)
