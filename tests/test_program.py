"""The whole Pulumi program under mocks: what `pulumi up` would declare, and what a config change changes."""

import json

import pytest
from pulumi.errors import RunError
from pulumi.runtime.rpc import _special_secret_sig as SECRET_SIG, _special_sig_key as SPECIAL_SIG_KEY

from tests.stack.program import HYPERPOD_ARN, PROJECT, comparable, run_program, stack_config
from tests.test_render import NEWEST_STEP_5_SPEC, SEED_STEP_5_CONFIG

GATEWAY_TYPE = "kubernetes:inference.sagemaker.aws.amazon.com/v1alpha1:InferenceGatewayConfig"
HYPERPOD_TYPE = "aws-native:sagemaker:Cluster"
ADDON_TYPE = "aws:eks/addon:Addon"
COMPONENT_PREFIX = "inference-gateway:index:"


def from_stack_file(stack):
    """A stack file's config with object values decoded, so tests can change one field."""
    config, secrets = stack_config(stack)
    decoded = {k.removeprefix(f"{PROJECT}:"): json.loads(v) if v[:1] in "[{" else v for k, v in config.items()}
    return decoded, [s.removeprefix(f"{PROJECT}:") for s in secrets]


STACKS = ["dev", "existing", "eks"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_file_runs(stack):
    config, secrets = from_stack_file(stack)
    run = run_program(config, stack=stack, secret_keys=secrets)
    assert run.outputs["namespace"] == "inference"
    assert "kubeconfig" in run.secret_outputs


def test_dev_runs_the_seed_on_a_hyperpod_cluster_orchestrated_by_the_eks_cluster():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    cluster = run.named("cluster-eks").inputs
    assert cluster["authenticationMode"] == "API" and cluster["createOidcProvider"] is True
    assert cluster["skipDefaultNodeGroup"] is True
    assert not run.of_type("eks:index:ManagedNodeGroup"), "HyperPod instance groups replace managed node groups"
    assert not any("device-plugin" in r.name for r in run.resources), "the dependencies chart brings the only one"
    (hyperpod,) = run.of_type(HYPERPOD_TYPE)
    inputs = hyperpod.inputs
    assert inputs["orchestrator"] == {"eks": {"clusterArn": "arn:aws:eks:us-west-2:123456789012:cluster/inference-dev"}}
    assert inputs["clusterName"] == "inference-dev" and inputs["nodeRecovery"] == "Automatic"
    assert inputs["vpcConfig"]["securityGroupIds"] == ["sg-0123456789abcdef0"]
    assert len(inputs["vpcConfig"]["subnets"]) == 2
    gpu, system = inputs["instanceGroups"]
    assert (gpu["instanceGroupName"], gpu["instanceType"], gpu["instanceCount"]) == ("gpu", "ml.g5.12xlarge", 1)
    assert (system["instanceType"], system["instanceCount"]) == ("ml.c5.4xlarge", 1)
    assert gpu["executionRole"] == "arn:aws:iam::123456789012:role/hyperpod-execution-role"
    assert gpu["kubernetesConfig"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert gpu["kubernetesConfig"]["labels"]["inference-gateway/node-pool"] == "gpu"
    assert "taints" not in system["kubernetesConfig"] or system["kubernetesConfig"]["taints"] == []
    lifecycle = gpu["lifeCycleConfig"]
    assert lifecycle == {"sourceS3Uri": "s3://hyperpod-lifecycle-bucket-0123/lifecycle", "onCreate": "on_create.sh"}
    script = run.named("hyperpod-on-create").inputs
    assert script["key"] == "lifecycle/on_create.sh" and script["content"].startswith("#!/bin/bash")
    chart = run.named("hyperpod-dependencies").inputs
    # Relative to the project, so state and diffs do not depend on where the checkout lives.
    assert chart["chart"] == "tests/fixtures/sagemaker-hyperpod-cli/helm_chart/HyperPodHelmChart"
    assert chart["namespace"] == "kube-system"
    assert chart["values"]["nvidia-device-plugin"]["devicePlugin"]["enabled"] is True
    # Installed before any node exists, the chart cannot find the region on a node: without it the
    # health agent pulls us-east-1's image, then switches (and rolls) once nodes join.
    assert chart["values"]["health-monitoring-agent"]["region"] == "us-west-2"
    assert run.outputs["hyperpodClusterArn"] == HYPERPOD_ARN
    deployment = run.kubernetes_object("Deployment", "vllm-qwen-small")["spec"]["template"]["spec"]
    assert deployment["nodeSelector"] == {"inference-gateway/node-pool": "gpu"}
    assert run.outputs["effectiveWeights"]["qwen-small"] == {"queue": 2, "kvCache": 2, "prefix": 3}
    assert run.outputs["podSelectors"]["qwen-small"] == {"app": "vllm-qwen-small"}
    assert "owning-gateway-name=inference-gateway" in run.outputs["gatewayUrlCommand"]


def test_the_new_vpc_has_an_s3_gateway_endpoint_and_internal_load_balancer_subnets():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    endpoint = run.named("cluster-network-s3").inputs
    assert endpoint["vpcEndpointType"] == "Gateway" and endpoint["serviceName"] == "com.amazonaws.us-west-2.s3"
    private = [r for r in run.of_type("aws:ec2/subnet:Subnet") if "private" in r.name]
    assert len(private) == 2
    assert all(subnet.inputs["tags"]["kubernetes.io/role/internal-elb"] == "1" for subnet in private)


def test_the_inference_addon_gets_its_whole_documented_configuration():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    addon = run.named("inference-addon-addon").inputs
    assert addon["addonName"] == "amazon-sagemaker-hyperpod-inference" and addon["addonVersion"] == "v2.1.0-eksbuild.1"
    assert addon["resolveConflictsOnCreate"] == addon["resolveConflictsOnUpdate"] == "OVERWRITE"
    values = json.loads(addon["configurationValues"])
    role = "arn:aws:iam::123456789012:role/inference-addon-{}-role".format
    assert values == {
        "executionRoleArn": role("execution"),
        "tlsCertificateS3Bucket": "inference-addon-tls-bucket-0123",
        "hyperpodClusterArn": HYPERPOD_ARN,
        "inferenceOperator": {"enabled": True},
        "inferenceGateway": {"enabled": True, "serviceAccount": {"roleArn": role("gateway-controller")}},
        "alb": {"enabled": True, "serviceAccount": {"create": True, "roleArn": role("load-balancer-controller")}},
        "keda": {"enabled": False},
    }
    assert run.named("inference-addon-execution-role").inputs["namePrefix"] == "SageMakerHyperPodInference-"
    versions = {r.inputs["addonName"]: r.inputs.get("addonVersion") for r in run.of_type(ADDON_TYPE)}
    assert versions == {"aws-mountpoint-s3-csi-driver": "v1.14.1-eksbuild.1", "aws-fsx-csi-driver": "v1.6.0-eksbuild.1",
                        "metrics-server": "v0.7.2-eksbuild.4", "cert-manager": "v1.18.2-eksbuild.2",
                        "eks-pod-identity-agent": None, "amazon-sagemaker-hyperpod-inference": "v2.1.0-eksbuild.1",
                        # The monitoring stack's volumes (observability, on by default).
                        "aws-ebs-csi-driver": None}
    for name in ("aws-mountpoint-s3-csi-driver", "aws-fsx-csi-driver"):
        assert run.named(f"inference-addon-{name}").inputs["serviceAccountRoleArn"] == role(name)
    assert run.named("inference-addon-addon").options["customTimeouts"]["create"] == "40m"


def test_keda_and_gated_models_are_configured_only_when_asked():
    config, _ = from_stack_file("dev")
    run = run_program({**config, "gateway": {**config["gateway"], "keda": True, "gatedModelAccess": True,
                                             "loadBalancerController": False}}, stack="dev")
    values = json.loads(run.named("inference-addon-addon").inputs["configurationValues"])
    assert values["keda"] == {"enabled": True, "auth": {"aws": {"irsa": {
        "enabled": True, "roleArn": "arn:aws:iam::123456789012:role/inference-addon-keda-role"}}}}
    assert values["jumpstartGatedModelDownloadRoleArn"] == "arn:aws:iam::123456789012:role/inference-addon-gated-models-role"
    assert values["alb"] == {"enabled": False}
    assert not any("load-balancer-controller" in r.name for r in run.resources)


def test_a_users_execution_role_replaces_the_stacks():
    config, _ = from_stack_file("dev")
    arn = "arn:aws:iam::123456789012:role/SageMakerHyperPodInference-team"
    run = run_program({**config, "gateway": {**config["gateway"], "executionRoleArn": arn}}, stack="dev")
    assert json.loads(run.named("inference-addon-addon").inputs["configurationValues"])["executionRoleArn"] == arn
    assert not any(r.name.startswith("inference-addon-execution-role") for r in run.resources)
    # The controller still writes its certificates to the stack's bucket, so that role may.
    grant = run.named("inference-addon-execution-tls-bucket").inputs
    assert grant["role"] == "SageMakerHyperPodInference-team"
    assert json.loads(grant["policy"])["Statement"][1]["Resource"] == ["arn:aws:s3:::inference-addon-tls-bucket-0123/*"]


def test_buckets_are_private_encrypted_tls_only_and_emptied_on_destroy():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    buckets = {r.name.removesuffix("-bucket") for r in run.of_type("aws:s3/bucket:Bucket")}
    assert buckets == {"hyperpod-lifecycle", "inference-addon-tls"}
    for bucket in buckets:
        assert run.named(f"{bucket}-bucket").inputs["forceDestroy"] is True
        block = run.named(f"{bucket}-public-access").inputs
        assert all(block[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                              "restrictPublicBuckets"))
        rule = run.named(f"{bucket}-encryption").inputs["rules"][0]
        assert rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "AES256"
        policy = json.loads(run.named(f"{bucket}-tls-only").inputs["policy"])["Statement"][0]
        assert policy["Effect"] == "Deny" and policy["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


OIDC = "oidc.eks.us-west-2.amazonaws.com/id/ABC"
OIDC_ARN = f"arn:aws:iam::123456789012:oidc-provider/{OIDC}"


def service_account(namespace, name):
    return {"Effect": "Allow", "Principal": {"Federated": OIDC_ARN}, "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {f"{OIDC}:aud": "sts.amazonaws.com",
                                           f"{OIDC}:sub": f"system:serviceaccount:{namespace}:{name}"}}}


SAGEMAKER = {"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}
GATED = {"Effect": "Allow", "Principal": {"Federated": OIDC_ARN}, "Action": "sts:AssumeRoleWithWebIdentity",
         "Condition": {"StringEquals": {f"{OIDC}:aud": "sts.amazonaws.com"},
                       "StringLike": {f"{OIDC}:sub": "system:serviceaccount:*:hyperpod-inference-service-account*"}}}


@pytest.mark.parametrize(("role", "statements"), [
    ("hyperpod-execution-role", [SAGEMAKER]),
    ("inference-addon-execution-role",
     [SAGEMAKER, service_account("hyperpod-inference-system", "hyperpod-inference-controller-manager")]),
    ("inference-addon-gateway-controller-role", [service_account("hyperpod-inference-system", "inference-gateway-controller")]),
    ("inference-addon-load-balancer-controller-role",
     [service_account("hyperpod-inference-system", "aws-load-balancer-controller")]),
    ("inference-addon-keda-role", [service_account("hyperpod-inference-system", "keda-operator")]),
    ("inference-addon-gated-models-role", [SAGEMAKER, GATED]),
    ("inference-addon-aws-mountpoint-s3-csi-driver-role", [service_account("kube-system", "s3-csi-driver-sa")]),
    ("inference-addon-aws-fsx-csi-driver-role", [service_account("kube-system", "fsx-csi-controller-sa")]),
])
def test_each_role_trusts_exactly_the_principal_aws_documents(role, statements):
    config, _ = from_stack_file("dev")
    run = run_program({**config, "gateway": {**config["gateway"], "keda": True, "gatedModelAccess": True}}, stack="dev")
    trust = json.loads(run.named(role).inputs["assumeRolePolicy"])
    assert trust == {"Version": "2012-10-17", "Statement": statements}


def test_each_add_on_role_gets_the_managed_policy_aws_documents():
    # The gateway controller's: AWS's Inference Gateway guide (ACM for the certificates it issues).
    config, _ = from_stack_file("dev")
    run = run_program({**config, "gateway": {**config["gateway"], "keda": True, "gatedModelAccess": True}}, stack="dev")
    managed = {r.name: r.inputs["policyArn"] for r in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
               if r.name.startswith("inference-addon-")}
    policy = "arn:aws:iam::aws:policy/{}".format
    assert managed == {
        "inference-addon-execution-managed": policy("AmazonSageMakerHyperPodInferenceAccess"),
        "inference-addon-gateway-controller-managed": policy("AmazonSageMakerHyperPodInferenceGatewayAccess"),
        "inference-addon-gated-models-managed": policy("AmazonSageMakerHyperPodGatedModelAccess"),
        "inference-addon-aws-fsx-csi-driver-managed": policy("AmazonFSxFullAccess"),
    }


def test_the_execution_role_may_read_its_lifecycle_bucket_and_use_pod_identity_on_its_cluster_only():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    assert run.named("hyperpod-execution-managed").inputs["policyArn"] == (
        "arn:aws:iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicy")
    statements = json.loads(run.named("hyperpod-execution-policy").inputs["policy"])["Statement"]
    by_action = {action: s["Resource"] for s in statements for action in s["Action"]}
    assert by_action["eks-auth:AssumeRoleForPodIdentity"] == ["arn:aws:eks:us-west-2:123456789012:cluster/inference-dev"]
    assert "arn:aws:ec2:us-west-2:123456789012:security-group/sg-0123456789abcdef0" in by_action["ec2:CreateNetworkInterface"]
    assert not any(arn.endswith(("subnet/*", "security-group/*")) for arn in by_action["ec2:CreateNetworkInterface"])
    assert by_action["s3:GetObject"] == ["arn:aws:s3:::hyperpod-lifecycle-bucket-0123",
                                         "arn:aws:s3:::hyperpod-lifecycle-bucket-0123/*"]


def test_creation_order_follows_the_documented_dependencies():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    after = lambda name: dependency_names(run, run.named(name))  # noqa: E731
    assert "hyperpod-dependencies" in after("hyperpod-cluster")
    assert {"hyperpod-on-create", "hyperpod-execution-managed", "hyperpod-execution-policy"} <= after("hyperpod-cluster")
    assert "cluster-eks" in after("hyperpod-dependencies")
    dependencies = {f"inference-addon-{name}" for name in
                    ("aws-mountpoint-s3-csi-driver", "aws-fsx-csi-driver", "metrics-server", "cert-manager")}
    assert dependencies <= after("inference-addon-addon")
    assert "hyperpod-cluster" in after("inference-addon-addon")
    for dependency in dependencies:
        assert "hyperpod-cluster" in after(dependency), dependency
    assert {"inference-addon-execution-managed", "inference-addon-execution-policy",
            "inference-addon-tls-tls-only"} <= after("inference-addon-addon")
    assert "inference-addon-addon" in after("gateway-config")
    for deployment in run.of_type("kubernetes:apps/v1:Deployment"):
        assert "hyperpod-cluster" in dependency_names(run, deployment)


def test_seed_step_5_renders_the_newest_workshops_spec_and_deployment():
    run = run_program(SEED_STEP_5_CONFIG, stack="seed")
    gateway = run.kubernetes_object("InferenceGatewayConfig", "inference-gateway-demo")
    assert as_kubernetes_json(gateway["spec"]) == NEWEST_STEP_5_SPEC
    assert gateway["metadata"]["namespace"] == "inference"
    deployment = run.kubernetes_object("Deployment", "vllm-qwen-small")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["metadata"]["labels"]["app"] == "vllm-qwen-small"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == 8000 and "readinessProbe" in container
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert run.outputs["effectiveWeights"] == {"qwen-small": {"prefix": 0, "queue": 3, "kvCache": 2}}


def changed_resources(before, after) -> list[tuple[str, str]]:
    inputs_before = {(r.type, r.name): comparable(r.inputs) for r in before.resources}
    inputs_after = {(r.type, r.name): comparable(r.inputs) for r in after.resources}
    assert inputs_before.keys() == inputs_after.keys()
    return [key for key in inputs_before if inputs_before[key] != inputs_after[key]]


def test_toggling_prefix_weight_changes_only_the_gateway_resource():
    before = run_program({**SEED_STEP_5_CONFIG, "weights.prefix": "3"}, stack="seed")
    after = run_program(SEED_STEP_5_CONFIG, stack="seed")
    assert changed_resources(before, after) == [(GATEWAY_TYPE, "gateway-config")]
    # Its monitors, rules and dashboard among what stayed (tests/test_observability.py adds a scaler).
    assert {r.inputs.get("kind") for r in before.resources} >= {"PodMonitor", "PrometheusRule", "ConfigMap"}
    assert before.named("gateway-config").inputs["spec"]["schedulers"][0]["weights"]["prefix"] == 3
    assert after.named("gateway-config").inputs["spec"]["schedulers"][0]["weights"]["prefix"] == 0
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


def registered_before_refusal(config, **options):
    """Run the program on config it must refuse; what it registered (nothing, if it refused in time)."""
    from tests.stack import program

    mocks = program.CloudMocks()
    original = program.CloudMocks
    program.CloudMocks = lambda: mocks
    try:
        with pytest.raises(RunError) as caught:
            run_program(config, stack="seed", **options)
    finally:
        program.CloudMocks = original
    return mocks.resources, str(caught.value)


def test_bad_config_registers_no_resource():
    resources, _ = registered_before_refusal({**SEED_STEP_5_CONFIG, "models": "[]"})
    assert resources == []


@pytest.mark.parametrize(("config", "expected"), [
    ({"platform": "eks", "gateway.implementation": "hyperpod"}, "inference-gateway:gateway.implementation = 'hyperpod'"),
    ({"gateway.tls": "off"}, "inference-gateway:gateway.tls = 'off': cannot be off"),
    ({"hyperpod": {"instanceGroups": [{"name": "gpu", "instanceType": "g5.12xlarge", "count": 1}]}},
     "HyperPod takes only ml.* types"),
    ({"hyperpod": {"instanceGroups": [{"name": "gpu", "instanceType": "ml.g5.xlarge", "count": 1},
                                      {"name": "system", "instanceType": "ml.c5.4xlarge", "count": 1}]}},
     "they ask for 2 GPUs (replicas x gpus, each replica on one instance) and the groups have 1"),
    ({"gateway.executionRoleArn": "arn:aws:iam::123456789012:role/inference"}, "starts with SageMakerHyperPodInference"),
    # What CreateCluster would refuse only after the VPC, the EKS cluster and the dependencies chart are up.
    ({"hyperpod": {"instanceGroups": [{"name": "gpu", "instanceType": "ml.g5.12xlarge", "count": 1,
                                       "labels": {"example.com/Bad Key": "ml"}}]}},
     'hyperpod.instanceGroups[0].labels["example.com/Bad Key"]: is not a label key CreateCluster takes'),
    ({"hyperpod": {"instanceGroups": [{"name": "gpu", "instanceType": "ml.g5.12xlarge", "count": 1,
                                       "labels": {"team": "x" * 64}}]}},
     "is 64 characters long; CreateCluster takes label values of 1 to 63"),
    ({"hyperpod": {"instanceGroups": [{"name": "gpu", "instanceType": "ml.g5.12xlarge", "count": 1},
                                      {"name": "system", "instanceType": "ml.c7i.4xlarge", "count": 1}]}},
     "inference-gateway:hyperpod.instanceGroups[1].instanceType = 'ml.c7i.4xlarge': is not an instance type "
     "HyperPod's CreateCluster takes"),
])
def test_refused_config_declares_nothing(config, expected):
    resources, message = registered_before_refusal({**SEED_STEP_5_CONFIG, **config})
    assert resources == [] and expected in message and "nothing was deployed" in message


@pytest.mark.parametrize("chart", ["missing", "empty"])
def test_a_missing_or_empty_dependencies_chart_declares_nothing_and_says_how_to_clone(tmp_path, chart):
    clone = tmp_path / "hyperpod-cli"
    if chart == "empty":
        (clone / "helm_chart" / "HyperPodHelmChart").mkdir(parents=True)
    resources, message = registered_before_refusal({**SEED_STEP_5_CONFIG, "hyperpod.dependenciesChart": str(clone)},
                                                   dependencies_chart=None)
    assert resources == [] and "no Chart.yaml" in message and f"git -C {clone} checkout" in message


def test_hf_token_stays_secret():
    config = {**SEED_STEP_5_CONFIG, "hfToken": "hf_secret_value"}
    run = run_program(config, stack="seed", secret_keys=["hfToken"])
    string_data = run.named("models-hf-token").inputs["stringData"]
    # The engine receives the value wrapped as a secret, so state and diffs keep it encrypted.
    assert string_data[SPECIAL_SIG_KEY] == SECRET_SIG and string_data["value"] == {"token": "hf_secret_value"}
    deployment = run.kubernetes_object("Deployment", "vllm-qwen-small")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert "hf_secret_value" not in json.dumps(comparable([r.inputs for r in run.resources if r.name != "models-hf-token"]))


def dependency_names(run, resource) -> set[str]:
    return {urn.rsplit("::", 1)[-1] for urn in resource.options["dependencies"]}


def test_node_groups_wait_for_their_iam_policies():
    config, _ = from_stack_file("eks")
    run = run_program(config, stack="eks")
    policies = {r.name for r in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment") if "node" in r.name}
    assert len(policies) == 3
    for group in run.of_type("eks:index:ManagedNodeGroup"):
        assert policies <= dependency_names(run, group), group.name


def test_model_servers_wait_for_gpu_nodes_and_allow_a_slow_first_rollout():
    config, _ = from_stack_file("eks")
    run = run_program(config, stack="eks")
    for deployment in run.of_type("kubernetes:apps/v1:Deployment"):
        # Depending on the GpuNodes component means depending on each of its children.
        assert {"gpu-nodes-group", "gpu-nodes-device-plugin"} <= dependency_names(run, deployment)
    for deployment in run.of_type("kubernetes:apps/v1:Deployment"):
        assert deployment.options["customTimeouts"] == {"create": "40m", "update": "40m"}


def test_existing_cluster_looks_up_its_oidc_provider_only_for_the_addon():
    config, _ = from_stack_file("existing")
    lookup = "aws:iam/getOpenIdConnectProvider:getOpenIdConnectProvider"
    assert lookup not in [token for token, _ in run_program(config, stack="existing").calls]
    with_addon = run_program({**config, "gateway.installAddon": "true"}, stack="existing")
    assert lookup in [token for token, _ in with_addon.calls]
    trust = json.loads(with_addon.named("inference-addon-gateway-controller-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"]["Federated"].endswith("oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/ABC")


def as_kubernetes_json(value):
    """Mocks hand every number back as a float, and a value holding a secret as the secret's
    wrapper; the API schemas want integers where they are whole, and the value itself."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict) and value.get(SPECIAL_SIG_KEY) == SECRET_SIG:
        return as_kubernetes_json(value.get("value", {}))
    if isinstance(value, dict):
        return {k: as_kubernetes_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_kubernetes_json(v) for v in value]
    return value


@pytest.mark.parametrize("stack", STACKS)
def test_registered_kubernetes_objects_validate_against_the_api_schema(stack):
    from kubernetes_validate import utils as kubernetes_schemas

    config, _ = from_stack_file(stack)
    run = run_program(config, stack=stack)
    core = [r for r in run.resources if r.type.startswith("kubernetes:") and r.inputs.get("apiVersion") in
            ("v1", "apps/v1", "policy/v1")]
    assert {r.inputs["kind"] for r in core} >= {"Namespace", "Deployment", "Service"}
    for resource in core:
        kubernetes_schemas.validate(as_kubernetes_json(resource.inputs), "1.34.0", strict=True)


def test_a_picker_config_file_becomes_the_configmap_the_scheduler_names(tmp_path):
    from tests.test_settings_hyperpod import PICKER_CONFIG

    path = tmp_path / "picker.yaml"
    path.write_text(PICKER_CONFIG)
    models = json.loads(SEED_STEP_5_CONFIG["models"])
    models[0]["pickerConfigMap"] = {"name": "qwen-small-picker", "file": str(path)}
    config = {k: v for k, v in SEED_STEP_5_CONFIG.items() if not k.startswith("weights.")}
    run = run_program({**config, "models": json.dumps(models)}, stack="seed")
    config_map = run.kubernetes_object("ConfigMap", "qwen-small-picker")
    assert config_map["data"] == {"default-plugins.yaml": PICKER_CONFIG}
    scheduler = run.named("gateway-config").inputs["spec"]["schedulers"][0]
    assert scheduler["configMapRef"] == {"name": "qwen-small-picker", "key": "default-plugins.yaml"}
    assert "weights" not in scheduler
    assert "gateway-picker-0" in dependency_names(run, run.named("gateway-config"))


def test_the_load_balancer_controller_may_do_what_an_internal_nlb_needs():
    config, _ = from_stack_file("dev")
    run = run_program(config, stack="dev")
    statements = json.loads(run.named("inference-addon-load-balancer-controller-policy").inputs["policy"])["Statement"]
    granted = {action for s in statements for action in s["Action"]}
    for needed in ("elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateListener",
                   "elasticloadbalancing:CreateTargetGroup", "elasticloadbalancing:RegisterTargets",
                   "elasticloadbalancing:AddTags", "elasticloadbalancing:ModifyListenerAttributes",
                   "ec2:CreateSecurityGroup", "ec2:AuthorizeSecurityGroupIngress", "ec2:DescribeSubnets"):
        assert needed in granted, needed
    # Deleting is for what the controller made: its own tag must be on the resource.
    deletes = [s for s in statements if "elasticloadbalancing:DeleteLoadBalancer" in s["Action"]
               or "ec2:DeleteSecurityGroup" in s["Action"]]
    assert deletes and all(s["Condition"] == {"Null": {"aws:ResourceTag/elbv2.k8s.aws/cluster": "false"}} for s in deletes)
