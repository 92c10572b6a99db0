"""Nodes that follow the load, under mocks: Karpenter on `eks` (gpuNodes.autoscaler) and HyperPod's
managed Karpenter (hyperpod.autoscaler), what each declares, what each refuses before declaring
anything, and that model pods land on exactly the nodes the NodePool makes."""

import copy
import json

import pytest

from components.karpenter import render as karpenter_render
from settings import parse_settings
from tests.stack.program import PROJECT, run_program
from tests.stack.provider_inputs import check_registrations
from tests.test_program import dependency_names, from_stack_file, registered_before_refusal

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
OIDC = "oidc.eks.us-west-2.amazonaws.com/id/ABC"
# HyperPod's Karpenter honours these requirement keys only (Autoscaling on HyperPod EKS, NodePool page).
HYPERPOD_REQUIREMENT_KEYS = {"node.kubernetes.io/instance-type", "topology.kubernetes.io/zone", "kubernetes.io/arch"}


def eks_karpenter(**changes):
    config, _ = from_stack_file("eks-karpenter")
    return {**config, **changes}


def hyperpod_karpenter(**hyperpod_changes):
    """The dev stack with its GPU group scaled by Karpenter (empty to start, as AWS requires)."""
    config, _ = from_stack_file("dev")
    config = copy.deepcopy(config)
    config["hyperpod"]["instanceGroups"][0]["count"] = 0
    config["hyperpod"].update(autoscaler="karpenter", **hyperpod_changes)
    return config


def model_pod_specs(run):
    return {d.name: d.inputs["spec"]["template"]["spec"] for d in run.of_type("kubernetes:apps/v1:Deployment")
            if d.inputs["spec"]["template"]["spec"]["containers"][0]["name"] == "vllm"}


def lands_on(pod, labels, taints):
    """Whether the scheduler may place `pod` on a node with these labels and taints."""
    selected = all(labels.get(key) == value for key, value in (pod.get("nodeSelector") or {}).items())
    tolerated = all(any(t.get("key") == taint["key"] and t.get("effect") in (None, taint["effect"])
                        and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
                        for t in pod.get("tolerations") or []) for taint in taints)
    return selected and tolerated


def test_eks_declares_the_pinned_chart_the_node_pool_and_class_the_iam_and_the_interruption_queue():
    run = run_program(eks_karpenter(), stack="eks-karpenter")
    chart = run.named("karpenter-chart").inputs
    assert (chart["chart"], chart["version"], chart["namespace"]) == (
        "oci://public.ecr.aws/karpenter/karpenter", "1.14.1", "kube-system")
    assert chart["values"]["settings"] == {"clusterName": "inference-eks-karpenter",
                                           "interruptionQueue": "karpenter-interruption-0123"}
    role_arn = chart["values"]["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role_arn.endswith("karpenter-controller-role")
    # IRSA, as the stack's other controllers: the chart's service account alone.
    trust = json.loads(run.named("karpenter-controller-role").inputs["assumeRolePolicy"])
    (statement,) = trust["Statement"]
    assert statement["Condition"]["StringEquals"][f"{OIDC}:sub"] == "system:serviceaccount:kube-system:karpenter"
    policy = json.loads(run.named("karpenter-controller-policy").inputs["policy"])
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    assert {"ec2:CreateFleet", "ec2:TerminateInstances", "iam:PassRole", "iam:CreateInstanceProfile",
            "sqs:ReceiveMessage", "eks:DescribeCluster", "pricing:GetProducts"} <= actions
    (pass_role,) = [s for s in policy["Statement"] if s["Action"] == ["iam:PassRole"]]
    assert pass_role["Resource"].endswith("cluster-node-role")
    # Terminating is limited to instances tagged for this cluster and a NodePool.
    (terminate,) = [s for s in policy["Statement"] if "ec2:TerminateInstances" in s["Action"]]
    assert terminate["Condition"]["StringEquals"] == {
        "aws:ResourceTag/kubernetes.io/cluster/inference-eks-karpenter": "owned"}

    queue = run.named("karpenter-interruption").inputs
    assert queue["messageRetentionSeconds"] == 300 and queue["sqsManagedSseEnabled"] is True
    queue_policy = json.loads(run.of_type("aws:sqs/queuePolicy:QueuePolicy")[0].inputs["policy"])
    assert {s["Effect"] for s in queue_policy["Statement"]} == {"Allow", "Deny"}
    rules = {r.name: json.loads(r.inputs["eventPattern"])["detail-type"] for r in
             run.of_type("aws:cloudwatch/eventRule:EventRule")}
    assert sorted(d for (d,) in rules.values()) == sorted(t for _, t in karpenter_render.INTERRUPTION_EVENTS.values())
    targets = run.of_type("aws:cloudwatch/eventTarget:EventTarget")
    assert {t.inputs["rule"] for t in targets} == {f"{name}-0123" for name in rules}
    assert {t.inputs["arn"] for t in targets} == {"arn:aws:sqs:us-west-2:123456789012:karpenter-interruption-0123"}

    node_class = run.kubernetes_object("EC2NodeClass", "gpu")["spec"]
    assert node_class["amiSelectorTerms"] == [{"alias": "al2023@v20260520"}]
    assert node_class["metadataOptions"]["httpTokens"] == "required"
    assert node_class["metadataOptions"]["httpPutResponseHopLimit"] == 1
    assert node_class["blockDeviceMappings"][0]["ebs"] == {"volumeSize": "200Gi", "volumeType": "gp3",
                                                           "encrypted": True, "deleteOnTermination": True}
    assert node_class["role"] == "cluster-node-role"
    node_pool = run.kubernetes_object("NodePool", "gpu")["spec"]
    assert node_pool["limits"] == {"nvidia.com/gpu": 6}
    requirements = {r["key"]: r["values"] for r in node_pool["template"]["spec"]["requirements"]}
    assert requirements["karpenter.k8s.aws/instance-family"] == ["g5"]
    assert requirements["karpenter.sh/capacity-type"] == ["on-demand"]
    # No managed GPU group unless asked for as a baseline; the device plugin stays.
    groups = [g.name for g in run.of_type("eks:index:ManagedNodeGroup")]
    assert groups == ["cluster-system-nodes"]
    assert run.named("gpu-nodes-device-plugin")


def test_by_default_only_empty_nodes_go_and_only_after_a_delay():
    node_pool = run_program(eks_karpenter(), stack="eks-karpenter").kubernetes_object("NodePool", "gpu")["spec"]
    assert node_pool["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m",
                                       "budgets": [{"nodes": "1"}]}


def test_spot_a_baseline_group_and_other_families_are_config():
    config = eks_karpenter()
    config["gpuNodes"] = {**config["gpuNodes"], "desired": 1, "min": 1, "max": 1,
                          "karpenter": {"instanceFamilies": ["g5", "g6"], "capacityTypes": ["spot", "on-demand"]}}
    run = run_program(config, stack="eks-karpenter")
    requirements = {r["key"]: r["values"] for r in
                    run.kubernetes_object("NodePool", "gpu")["spec"]["template"]["spec"]["requirements"]}
    assert requirements["karpenter.k8s.aws/instance-family"] == ["g5", "g6"]
    assert requirements["karpenter.sh/capacity-type"] == ["spot", "on-demand"]
    assert sorted(g.name for g in run.of_type("eks:index:ManagedNodeGroup")) == ["cluster-system-nodes", "gpu-nodes-group"]


@pytest.mark.parametrize("stack_config", ["eks", "hyperpod"])
def test_each_models_pods_land_on_exactly_the_nodes_the_node_pool_makes(stack_config):
    if stack_config == "eks":
        run = run_program(eks_karpenter(), stack="eks-karpenter")
        template = run.kubernetes_object("NodePool", "gpu")["spec"]["template"]
        labels, taints = template["metadata"]["labels"], template["spec"]["taints"]
    else:
        run = run_program(hyperpod_karpenter(), stack="dev")
        # HyperPod's nodes carry their instance group's labels and taints (CreateCluster's KubernetesConfig).
        (group,) = [g for g in run.named("hyperpod-cluster").inputs["instanceGroups"] if g["instanceGroupName"] == "gpu"]
        labels, taints = group["kubernetesConfig"]["labels"], group["kubernetesConfig"]["taints"]
        assert {r["key"] for r in run.kubernetes_object("NodePool", "gpu")["spec"]["template"]["spec"]["requirements"]} \
            <= HYPERPOD_REQUIREMENT_KEYS
    pods = model_pod_specs(run)
    assert pods
    for name, pod in pods.items():
        assert lands_on(pod, labels, taints), name
        # And on nothing else: a node without the GPU taint and label (the system nodes) is refused.
        assert not lands_on(pod, {"inference-gateway/node-pool": "system"}, []), name


def test_model_servers_wait_for_the_node_pool():
    run = run_program(eks_karpenter(), stack="eks-karpenter")
    for deployment in run.of_type("kubernetes:apps/v1:Deployment"):
        if deployment.name.startswith("model-"):
            assert {"karpenter-node-pool", "gpu-nodes-device-plugin"} <= dependency_names(run, deployment)


def test_a_weight_toggle_still_touches_only_the_pickers():
    runs = [run_program(eks_karpenter(**{"weights.prefix": str(w)}), stack="eks-karpenter") for w in (3, 0)]
    inputs = [{(r.type, r.name): r.inputs for r in run.resources} for run in runs]
    assert inputs[0].keys() == inputs[1].keys()
    assert sorted(name for (_, name) in inputs[0] if inputs[0][(_, name)] != inputs[1][(_, name)]) == [
        "router-qwen-router", "router-qwen-small-router"]


def test_hyperpod_sends_autoscaling_continuous_provisioning_and_the_cluster_role():
    run = run_program(hyperpod_karpenter(), stack="dev")
    cluster = run.named("hyperpod-cluster")
    inputs = cluster.inputs
    assert inputs["autoScaling"] == {"mode": "Enable", "autoScalerType": "Karpenter"}
    assert inputs["nodeProvisioningMode"] == "Continuous" and inputs["nodeRecovery"] == "Automatic"
    assert inputs["clusterRole"].endswith("hyperpod-cluster-role")
    trust = json.loads(run.named("hyperpod-cluster-role").inputs["assumeRolePolicy"])
    assert trust["Statement"] == [{"Effect": "Allow", "Principal": {"Service": "hyperpod.sagemaker.amazonaws.com"},
                                   "Action": "sts:AssumeRole"}]
    policy = json.loads(run.named("hyperpod-cluster-role-policy").inputs["policy"])
    assert [s["Action"] for s in policy["Statement"]] == [
        ["sagemaker:BatchAddClusterNodes", "sagemaker:BatchDeleteClusterNodes"], ["kms:CreateGrant", "kms:DescribeKey"]]
    assert "hyperpod-cluster-role-policy" in dependency_names(run, cluster)
    groups = {g["instanceGroupName"]: g for g in inputs["instanceGroups"]}
    # The autoscaled group starts empty, in one zone; Karpenter's counts survive the next `pulumi up`.
    assert groups["gpu"]["instanceCount"] == 0 and len(groups["gpu"]["overrideVpcConfig"]["subnets"]) == 1
    assert "overrideVpcConfig" not in groups["system"]
    assert cluster.options["ignoreChanges"] == ["instanceGroups[0].instanceCount"]
    assert run.kubernetes_object("HyperpodNodeClass", "gpu")["spec"] == {"instanceGroups": ["gpu"]}
    node_pool = run.kubernetes_object("NodePool", "gpu")["spec"]
    assert node_pool["template"]["spec"]["nodeClassRef"] == {
        "group": "karpenter.sagemaker.amazonaws.com", "kind": "HyperpodNodeClass", "name": "gpu"}
    assert node_pool["limits"] == {"nvidia.com/gpu": 8}
    node_class = [r for r in run.resources if r.name == "hyperpod-karpenter-node-class"][0]
    assert "hyperpod-cluster" in dependency_names(run, node_class)
    # The health-monitoring agent Karpenter needs, named so the chart's stale packaged copy cannot win.
    agent = run.named("hyperpod-dependencies").inputs["values"]["health-monitoring-agent"]
    assert agent["imageTag"] == "1.0.1892.0_1.0.424.0"


def test_the_pinned_health_agent_is_at_least_what_karpenter_needs():
    from components.hyperpod import render as hyperpod_render

    version = lambda text: tuple(int(p) for p in text.replace("_", ".").split("."))  # noqa: E731
    assert version(hyperpod_render.HEALTH_AGENT_VERSION) >= version(hyperpod_render.KARPENTER_MIN_HEALTH_AGENT)


def test_without_an_autoscaler_nothing_karpenter_is_declared():
    for stack in ("dev", "eks"):
        config, _ = from_stack_file(stack)
        run = run_program(config, stack=stack)
        assert not [r for r in run.resources if "karpenter" in r.type or "karpenter" in r.name], stack
        assert "autoScaling" not in (run.named("hyperpod-cluster").inputs if stack == "dev" else {})


@pytest.mark.parametrize(("config", "expected"), [
    (eks_karpenter(gpuNodes={"autoscaler": "karpenter", "karpenter": {"gpuLimit": 4}}),
     "inference-gateway:gpuNodes.karpenter.gpuLimit = 4: holds fewer GPUs than the models ask for at "
     "autoscaling.maxReplicas (5)"),
    (eks_karpenter(gpuNodes={"autoscaler": "karpenter", "karpenter": {"instanceFamilies": ["g5.xlarge"]}}),
     "gpuNodes.karpenter.instanceFamilies[0] = 'g5.xlarge': is an instance type; this list takes families, e.g. g5."),
    (eks_karpenter(gpuNodes={"autoscaler": "karpenter", "amiType": "BOTTLEROCKET_x86_64_NVIDIA"}),
     "gpuNodes.amiType = 'BOTTLEROCKET_x86_64_NVIDIA': is a managed node group AMI type"),
    (hyperpod_karpenter(nodeRecovery="None"), "hyperpod.nodeRecovery = 'None': must be Automatic"),
    (hyperpod_karpenter(karpenter={"gpuLimit": 2}),
     "hyperpod.karpenter.gpuLimit = 2: with the instance groups' own 0 GPUs gives 2, fewer than the models ask for (3)"),
    (hyperpod_karpenter(karpenter={"instanceGroups": ["system"]}), "is the CPU group system"),
])
def test_refused_autoscaling_declares_nothing_in_one_line(config, expected):
    resources, message = registered_before_refusal(config)
    assert resources == [] and expected in message and "nothing was deployed" in message
    (problem,) = [line for line in message.splitlines() if line.lstrip().startswith("- ")]
    assert expected in problem


def test_hyperpod_refuses_a_started_group_and_deep_health_checks_each_in_one_line():
    config, _ = from_stack_file("dev")
    config = copy.deepcopy(config)
    config["hyperpod"]["autoscaler"] = "karpenter"
    config["hyperpod"]["instanceGroups"][0]["deepHealthChecks"] = ["InstanceStress"]
    resources, message = registered_before_refusal(config)
    problems = [line for line in message.splitlines() if line.lstrip().startswith("- ")]
    assert resources == [] and len(problems) == 2
    assert "hyperpod.instanceGroups[0].count = 1: must be 0 for group gpu" in problems[0]
    assert "hyperpod.instanceGroups[0].deepHealthChecks = ['InstanceStress']: are not supported" in problems[1]


def test_an_existing_cluster_takes_no_autoscaler():
    config, _ = from_stack_file("existing")
    resources, message = registered_before_refusal({**config, "hyperpod.autoscaler": "karpenter"})
    assert resources == [] and "inference-gateway:hyperpod.autoscaler = 'karpenter': applies only to a HyperPod " \
                                  "cluster this stack creates" in message


def test_a_model_wider_than_any_allowed_instance_is_refused():
    config = eks_karpenter(gpuNodes={"autoscaler": "karpenter", "karpenter": {"instanceFamilies": ["g4dn"],
                                                                              "gpuLimit": 40}})
    config["models"] = copy.deepcopy(config["models"])
    config["models"][0]["gpus"] = 8
    resources, message = registered_before_refusal(config)
    assert resources == [] and "models[0].gpus = 8: is more than any instance of gpuNodes.karpenter.instanceFamilies " \
                               "(g4dn) has (4)" in message


def test_hyperpod_autoscaling_takes_only_inputs_the_pinned_sdk_declares():
    # No stack file turns HyperPod's Karpenter on, so tests/test_provider_inputs.py does not see it.
    run = run_program(hyperpod_karpenter(), stack="dev")
    report = check_registrations(run.resources, project=PROJECT)
    assert report.checked and not report.problems, report.format()
