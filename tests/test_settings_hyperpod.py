"""The `platform` choice and the `hyperpod` section: what each key gives, and what is refused."""

import json
from pathlib import Path

import botocore
import botocore.session
import pytest

from settings import SettingsError, load_stack, parse_settings
from settings.hyperpod import (DEEP_HEALTH_CHECKS, DEFAULT_INSTANCE_GROUPS, DEPENDENCIES_COMMIT, GPUS_PER_ML_INSTANCE,
                               MAX_INSTANCE_GROUPS, check_dependencies_chart, instance_group_labels,
                               instance_group_taints)
from settings.sagemaker_limits import create_cluster_limits
from tests.stack.program import run_program

SMALL = {"name": "qwen-small", "model": "Qwen/Qwen2.5-0.5B-Instruct", "replicas": 2}
LARGE = {"name": "qwen", "model": "Qwen/Qwen2.5-1.5B-Instruct"}
HYPERPOD_ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh"
FIXTURE_CLONE = Path(__file__).parent / "fixtures" / "sagemaker-hyperpod-cli"


def parse(models=(SMALL,), **config):
    raw = {"models": json.dumps(list(models)), **{k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}}
    return parse_settings(raw, stack="test")


def problems(models=(SMALL,), **config) -> dict[str, str]:
    """Each refused key with its message."""
    with pytest.raises(SettingsError) as caught:
        parse(models, **config)
    return {p.key: str(p) for p in caught.value.problems}


def groups(*entries):
    return {"instanceGroups": [dict(zip(("name", "instanceType", "count"), entry)) for entry in entries]}


def test_hyperpod_is_the_default_platform_with_the_seeds_instances():
    settings = parse()
    assert settings.platform == "hyperpod" and settings.gateway.implementation == "hyperpod"
    assert settings.gpu_nodes is None and settings.gateway.install_addon is True
    assert [(g.name, g.instance_type, g.count, g.gpus_per_instance) for g in settings.hyperpod.instance_groups] == [
        ("gpu", "ml.g5.12xlarge", 1, 4), ("system", "ml.c5.4xlarge", 1, 0)]
    assert settings.hyperpod.name == "inference-test-hyperpod" and settings.hyperpod.node_recovery == "Automatic"


def test_the_hyperpod_gateway_on_plain_eks_is_refused_naming_both_keys():
    refused = problems(platform="eks", **{"gateway.implementation": "hyperpod"})
    message = refused["gateway.implementation"]
    assert "platform eks" in message and "pulumi config set platform hyperpod" in message
    assert "gateway.implementation llm-d" in message


def test_plain_eks_defaults_to_the_open_source_picker_and_managed_gpu_nodes():
    settings = parse(platform="eks")
    assert settings.gateway.implementation == "llm-d" and settings.hyperpod is None
    assert settings.gpu_nodes.instance_types == ("g5.xlarge",)


@pytest.mark.parametrize(("config", "key", "expected"), [
    ({"platform": "hyperpod", "gpuNodes.desired": "2"}, "gpuNodes", "applies only to platform eks"),
    ({"platform": "eks", "hyperpod.name": "hp"}, "hyperpod", "applies only to platform hyperpod"),
    ({"cluster": {"systemNodes": {"desired": 2}}}, "cluster.systemNodes", "HyperPod instance group without GPUs"),
    ({"platform": "gke"}, "platform", "'hyperpod' or 'eks'"),
    ({"hyperpod": groups(("gpu", "g5.12xlarge", 1))}, "hyperpod.instanceGroups[0].instanceType",
     "HyperPod takes only ml.* types, e.g. ml.g5.12xlarge"),
    ({"hyperpod": groups(("gpu", "ml.g7e.12xlarge", 1))}, "hyperpod.instanceGroups[0].instanceType",
     "GPU count this stack does not know"),
    ({"hyperpod": groups(("gpu", "ml.g9.xlarge", 1))}, "hyperpod.instanceGroups[0].instanceType",
     "is not an instance type HyperPod's CreateCluster takes: its families are ml.c5, "),
    ({"hyperpod": groups(("gpu", "ml.g5.3xlarge", 1))}, "hyperpod.instanceGroups[0].instanceType",
     "ml.g5 comes in ml.g5.xlarge, ml.g5.2xlarge, ml.g5.4xlarge, "),
    ({"hyperpod": groups(("gpu", "ml.g5.12xlarge", 1), ("gpu", "ml.c5.4xlarge", 1))}, "hyperpod.instanceGroups[1].name",
     "each instance group needs its own name"),
    ({"hyperpod": groups(("gpu", "ml.g5.xlarge", 2), ("system", "ml.c5.4xlarge", 1))}, "hyperpod.instanceGroups",
     "they ask for 3 GPUs (replicas x gpus, each replica on one instance) and the groups have 2"),
    ({"hyperpod": {"instanceGroups": [{"name": "gpu", "instanceType": "ml.g5.12xlarge"}]}},
     "hyperpod.instanceGroups[0].count", "is required"),
    ({"hyperpod": {"instanceGroups": [{"name": "gpu", "instanceType": "ml.g5.12xlarge", "count": 1,
                                       "threadsPerCore": 4}]}}, "hyperpod.instanceGroups[0].threadsPerCore", "from 1 to 2"),
    ({"hyperpod": {"instanceGroups": [{"name": "gpu", "instanceType": "ml.g5.12xlarge", "count": 1,
                                       "deepHealthChecks": ["InstanceStres"]}]}},
     "hyperpod.instanceGroups[0].deepHealthChecks[0]", "Did you mean 'InstanceStress'"),
    ({"hyperpod": {"instanceGroups": [{"name": "gpu", "instanceType": "ml.g5.12xlarge", "count": 1,
                                       "taints": [{"key": "k", "effect": "NoSchedul"}]}]}},
     "hyperpod.instanceGroups[0].taints[0].effect", "'NoSchedule'"),
    ({"hyperpod": {"nodeRecovery": "automatic"}}, "hyperpod.nodeRecovery", "'Automatic' or 'None'"),
    ({"hyperpod": {"name": "-hp"}}, "hyperpod.name", "HyperPod cluster name"),
    ({"hyperpod": {"existing": True, "name": "hp", "arn": HYPERPOD_ARN}}, "hyperpod.existing",
     "Set cluster.existing and hyperpod.existing together"),
    ({"cluster": {"existing": True, "name": "c"}, "hyperpod": {"existing": True, "name": "hp"}}, "hyperpod.arn",
     "aws sagemaker describe-cluster"),
    ({"cluster": {"existing": True, "name": "c"}, "hyperpod": {"existing": True, "name": "hp", "arn": HYPERPOD_ARN,
                                                               "instanceGroups": []}},
     "hyperpod.instanceGroups", "applies only to a HyperPod cluster this stack creates"),
    ({"gateway.tls": "off"}, "gateway.tls", "controller rejects a gateway without spec.tls"),
    ({"gateway.installAddon": "false"}, "gateway.installAddon", "the stack creates this cluster"),
    ({"gateway.executionRoleArn": "arn:aws:iam::123456789012:role/my-inference-role"}, "gateway.executionRoleArn",
     "starts with SageMakerHyperPodInference"),
    ({"gateway.executionRoleArn": "my-inference-role"}, "gateway.executionRoleArn", "must be an IAM role ARN"),
    ({"cluster": {"existing": True, "name": "c"}, "hyperpod": {"existing": True, "name": "hp", "arn": HYPERPOD_ARN},
      "gateway.keda": "true"}, "gateway.keda", "gateway.installAddon is false"),
])
def test_each_platform_rule_names_the_key_and_the_fix(config, key, expected):
    refused = problems([SMALL, LARGE], **{"gateway.bbr": "auto", **config})
    assert key in refused, f"no problem about {key}: {refused}"
    assert expected in refused[key], refused[key]


def test_a_model_wider_than_any_instance_is_refused():
    refused = problems([{**LARGE, "gpus": 8}], hyperpod=groups(("gpu", "ml.g5.12xlarge", 2), ("system", "ml.c5.4xlarge", 1)))
    assert "a vLLM replica runs on one instance" in refused["models[0].gpus"]


def test_a_users_execution_role_is_taken_when_its_name_is_one_the_addon_accepts():
    arn = "arn:aws:iam::123456789012:role/team/SageMakerHyperPodInference-prod"
    assert parse(**{"gateway.executionRoleArn": arn}).gateway.execution_role_arn == arn


def test_instance_groups_carry_what_users_set():
    settings = parse(hyperpod={"instanceGroups": [
        {"name": "gpu", "instanceType": "ml.g6e.12xlarge", "count": 2, "threadsPerCore": 2, "extraStorageGiB": 500,
         "deepHealthChecks": ["InstanceStress"], "labels": {"team": "ml"},
         "taints": [{"key": "dedicated", "value": "inference", "effect": "NoExecute"}]},
        {"name": "system", "instanceType": "ml.c5.4xlarge", "count": 1}]})
    gpu = settings.hyperpod.instance_groups[0]
    assert (gpu.gpus, gpu.threads_per_core, gpu.extra_storage_gib, gpu.deep_health_checks) == (8, 2, 500, ("InstanceStress",))
    assert dict(gpu.labels) == {"team": "ml"} and gpu.taints[0].effect == "NoExecute"


def test_a_group_set_flat_and_structured_reads_the_same():
    flat = parse(**{"hyperpod.instanceGroups": json.dumps(groups(("gpu", "ml.g5.12xlarge", 1))["instanceGroups"])})
    assert flat.hyperpod.instance_groups[0].instance_type == "ml.g5.12xlarge"


def with_gpu_group(instance_type="ml.g5.12xlarge", **fields):
    """The hyperpod section with a GPU group carrying `fields`, and the seed's CPU group."""
    return {"instanceGroups": [{"name": "gpu", "instanceType": instance_type, "count": 1, **fields},
                               {"name": "system", "instanceType": "ml.c5.4xlarge", "count": 1}]}


def own_labels(count):
    return {f"example.com/label-{index}": "yes" for index in range(count)}


def own_taints(count):
    return [{"key": f"example.com/taint-{index}", "value": "yes"} for index in range(count)]


def test_labels_and_taints_are_counted_with_those_the_stack_adds():
    refused = problems(hyperpod=with_gpu_group(labels=own_labels(49), taints=own_taints(50)))
    assert refused["hyperpod.instanceGroups[0].labels"] == (
        "inference-gateway:hyperpod.instanceGroups[0].labels = '<49 labels>': are 51 with the 2 the stack adds to a "
        "GPU group (nvidia.com/gpu.present, inference-gateway/node-pool): CreateCluster takes at most 50 per "
        "instance group. Remove 1 of yours.")
    assert refused["hyperpod.instanceGroups[0].taints"] == (
        "inference-gateway:hyperpod.instanceGroups[0].taints = '<50 taints>': are 51 with the 1 the stack adds to a "
        "GPU group (nvidia.com/gpu=true:NoSchedule): CreateCluster takes at most 50 per instance group. Remove 1 "
        "of yours.")
    system = {"name": "system", "instanceType": "ml.c5.4xlarge", "count": 1, "labels": own_labels(50)}
    refused = problems(hyperpod={"instanceGroups": [with_gpu_group()["instanceGroups"][0], system]})
    assert "are 51 with the 1 the stack adds to a CPU group (inference-gateway/node-pool)" in refused[
        "hyperpod.instanceGroups[1].labels"]
    gpu = parse(hyperpod=with_gpu_group(labels=own_labels(48), taints=own_taints(49))).hyperpod.instance_groups[0]
    assert (len(instance_group_labels(gpu)), len(instance_group_taints(gpu))) == (50, 50)


def test_a_taint_without_a_value_is_sent_without_one_and_a_label_without_one_is_refused():
    taints = [{"key": "dedicated", "effect": "NoExecute"}, {"key": "example.com/team", "value": ""}]
    run = run_program({"models": json.dumps([SMALL]), "hyperpod": with_gpu_group(taints=taints)})
    (cluster,) = run.of_type("aws-native:sagemaker:Cluster")
    assert cluster.inputs["instanceGroups"][0]["kubernetesConfig"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "dedicated", "effect": "NoExecute"}, {"key": "example.com/team", "effect": "NoSchedule"}]
    role = 'hyperpod.instanceGroups[0].labels["node-role.kubernetes.io/inference"]'
    assert problems(hyperpod=with_gpu_group(labels={"node-role.kubernetes.io/inference": ""}))[role] == (
        f"inference-gateway:{role} = '': is empty, and CreateCluster takes label values of 1 to 63 characters, so a "
        f"role-style label without a value cannot be sent. Give it one, e.g. `pulumi config set --path '{role}' true`.")


@pytest.mark.parametrize(("group", "key", "message"), [
    ({"labels": {"example.com/Bad Key": "ml"}}, 'hyperpod.instanceGroups[0].labels["example.com/Bad Key"]',
     "is not a label key CreateCluster takes: an optional prefix of lowercase letters, digits, '-' and '.' and a '/', "
     "then a name of letters, digits, '-', '_' and '.' that starts and ends with a letter or digit, 1 to 317 "
     "characters in all. Use e.g. 'example.com/Bad-Key'."),
    ({"labels": {"team": "x" * 64}}, 'hyperpod.instanceGroups[0].labels["team"]',
     "is 64 characters long; CreateCluster takes label values of 1 to 63. Shorten it."),
    ({"labels": {"team": "ml platform"}}, 'hyperpod.instanceGroups[0].labels["team"]',
     "is not a label value CreateCluster takes: letters, digits, '-', '_' and '.', starting and ending with a letter "
     "or digit. Use e.g. 'ml-platform'."),
    ({"taints": [{"key": "Example.com/dedicated"}]}, "hyperpod.instanceGroups[0].taints[0].key",
     "is not a taint key CreateCluster takes"),
    ({"taints": [{"key": "dedicated", "value": "inference-"}]}, "hyperpod.instanceGroups[0].taints[0].value",
     "is not a taint value CreateCluster takes: letters, digits, '-', '_' and '.', starting and ending with a letter "
     "or digit. Use e.g. 'inference'."),
    ({"instanceType": "ml.c7i.4xlarge"}, "hyperpod.instanceGroups[0].instanceType",
     "is not an instance type HyperPod's CreateCluster takes: its families are ml.c5, ml.c5n, "),
    ({"count": 6759}, "hyperpod.instanceGroups[0].count", "must be a whole number from 0 to 6758."),
    ({"name": "gpu-"}, "hyperpod.instanceGroups[0].name", "1 to 63 letters, digits and '-', starting and ending with"),
])
def test_what_createcluster_would_refuse_in_a_group_is_refused_first(group, key, message):
    refused = problems(hyperpod=with_gpu_group(**group))
    assert key in refused, refused
    assert message in refused[key]


def test_the_limits_checked_are_the_sagemaker_service_models_own():
    # Read through botocore's ServiceModel, not the loader settings use, by the shapes' names.
    model = botocore.session.get_session().get_service_model("sagemaker")
    shape = model.shape_for
    limits = create_cluster_limits()
    assert limits.botocore_version == botocore.__version__
    assert limits.instance_types == set(shape("ClusterInstanceType").enum)
    assert (limits.max_labels, limits.max_taints) == (
        shape("ClusterKubernetesLabels").metadata["max"], shape("ClusterKubernetesTaints").metadata["max"])
    for checked, name in [(limits.label_key, "ClusterKubernetesLabelKey"),
                          (limits.label_value, "ClusterKubernetesLabelValue"),
                          (limits.taint_key, "ClusterKubernetesTaintKey"),
                          (limits.taint_value, "ClusterKubernetesTaintValue"),
                          (limits.cluster_name, "ClusterName"), (limits.group_name, "ClusterInstanceGroupName")]:
        stated = shape(name).metadata
        assert (checked.min, checked.max, checked.pattern.pattern) == (stated["min"], stated["max"], stated["pattern"])
    for checked, name in [(limits.instance_count, "ClusterInstanceCount"),
                          (limits.threads_per_core, "ClusterThreadsPerCore"),
                          (limits.ebs_volume_gib, "ClusterEbsVolumeSizeInGB")]:
        assert (checked.min, checked.max) == (shape(name).metadata["min"], shape(name).metadata["max"])
    assert limits.taint_effects == tuple(shape("ClusterKubernetesTaintEffect").enum)
    assert limits.node_recovery == tuple(shape("ClusterNodeRecovery").enum)
    # The limits stated elsewhere are narrower than the model's, and every type with a known GPU
    # count, the defaults among them, is one CreateCluster takes.
    assert set(DEEP_HEALTH_CHECKS) <= set(shape("DeepHealthCheckType").enum)
    assert MAX_INSTANCE_GROUPS <= shape("ClusterInstanceGroupSpecifications").metadata["max"]
    assert set(GPUS_PER_ML_INSTANCE) | {g.instance_type for g in DEFAULT_INSTANCE_GROUPS} <= limits.instance_types


def test_groups_without_spare_gpu_or_cpu_group_warn():
    settings = parse([SMALL, LARGE], hyperpod=groups(("gpu", "ml.g5.xlarge", 3)), **{"gateway.bbr": "auto"})
    assert any("rolling update" in w for w in settings.warnings)
    assert any("13 pods" in w and "ml.c5.4xlarge" in w for w in settings.warnings)


def test_several_pickers_with_prefix_scoring_warn_that_each_learns_its_own_index():
    assert not any("own prefix index" in w for w in parse(platform="eks").warnings)
    assert any("own prefix index" in w for w in parse().warnings)
    assert any("own prefix index" in w for w in parse([{**SMALL, "pickerReplicas": 3}]).warnings)
    assert not any("own prefix index" in w for w in parse([{**SMALL, "pickerReplicas": 1}]).warnings)
    assert not any("own prefix index" in w for w in parse(**{"weights.prefix": "0"}).warnings)
    assert not any("own prefix index" in w for w in parse([{**SMALL, "replicas": 1}]).warnings)


def test_existing_hyperpod_is_attached_by_name_and_arn():
    settings = load_stack("existing")
    assert settings.hyperpod.existing and settings.hyperpod.name == "my-hyperpod-cluster"
    assert settings.hyperpod.arn == HYPERPOD_ARN and settings.hyperpod.instance_groups == ()
    assert settings.gateway.install_addon is False


def chart_problem(hyperpod_settings, project_dir, region="us-west-2") -> str:
    with pytest.raises(SettingsError) as caught:
        check_dependencies_chart(hyperpod_settings, project_dir, region)
    return str(caught.value)


def test_a_missing_dependencies_chart_prints_the_clone_command(tmp_path):
    settings = parse(**{"hyperpod.dependenciesChart": "vendor/hp-cli"})
    message = chart_problem(settings.hyperpod, tmp_path)
    assert "inference-gateway:hyperpod.dependenciesChart = 'vendor/hp-cli'" in message
    assert f"git -C vendor/hp-cli checkout {DEPENDENCIES_COMMIT}" in message
    assert "`.venv/bin/python -m settings clone-hyperpod-chart vendor/hp-cli` (or by hand: `git clone " in message and message.endswith("`)")


def test_an_empty_or_foreign_chart_directory_is_refused(tmp_path):
    chart = tmp_path / "clone" / "helm_chart" / "HyperPodHelmChart"
    chart.mkdir(parents=True)
    settings = parse(**{"hyperpod.dependenciesChart": str(tmp_path / "clone")})
    assert "no Chart.yaml" in chart_problem(settings.hyperpod, tmp_path)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: something-else\nversion: 1.0.0\n")
    assert "is not the HyperPod dependencies chart" in chart_problem(settings.hyperpod, tmp_path)


def test_the_chart_must_have_values_for_the_stacks_region():
    settings = parse(**{"hyperpod.dependenciesChart": str(FIXTURE_CLONE)})
    assert check_dependencies_chart(settings.hyperpod, Path("/"), "us-west-2") == []
    assert "no regional values for aws:region eu-south-7" in chart_problem(settings.hyperpod, Path("/"), "eu-south-7")


def test_a_clone_at_another_commit_warns(tmp_path):
    clone = tmp_path / "clone"
    (clone / "helm_chart").mkdir(parents=True)
    (clone / "helm_chart" / "HyperPodHelmChart").symlink_to(FIXTURE_CLONE / "helm_chart" / "HyperPodHelmChart")
    (clone / ".git").mkdir()
    (clone / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    settings = parse(**{"hyperpod.dependenciesChart": str(clone)})
    warnings = check_dependencies_chart(settings.hyperpod, tmp_path, "us-west-2")
    assert len(warnings) == 1 and DEPENDENCIES_COMMIT in warnings[0]
    (clone / ".git" / "HEAD").write_text(DEPENDENCIES_COMMIT + "\n")
    assert check_dependencies_chart(settings.hyperpod, tmp_path, "us-west-2") == []


PICKER_CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters:
    blockSizeTokens: 128
    autoTune: false
- type: prefix-cache-scorer
- type: running-requests-size-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
    weight: 5
  - pluginRef: running-requests-size-scorer
    weight: 1.5
  - pluginRef: max-score-picker
"""


def write_picker_config(tmp_path, text=PICKER_CONFIG):
    path = tmp_path / "picker.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("config", "key", "expected"), [
    ({"weights.predictedLatency": "2"}, "weights.predictedLatency", "no open-source equivalent"),
    ({"models": [{**SMALL, "weights": {"predictedLatency": 1}}]}, "models[0].weights.predictedLatency",
     "latency-predictor sidecars"),
    ({"models": [{**SMALL, "scheduler": "epp"}]}, "models[0].scheduler", "always runs the llm-d router"),
    ({"models": [{**SMALL, "pickerConfigMap": {"name": "mine"}}]}, "models[0].pickerConfigMap.file",
     "mounts only the ConfigMap it writes itself"),
    ({"gateway.metrics": "true"}, "gateway.metrics", "which gateway.implementation llm-d does not run"),
    ({"gateway.podDefaults": json.dumps({"labels": {"a": "b"}})}, "gateway.podDefaults", "gateway.implementation llm-d"),
    ({"gateway.installAddon": "true"}, "gateway.installAddon", "gateway.implementation llm-d"),
    ({"platform": "hyperpod", "gateway.implementation": "llm-d"}, "gateway.implementation", "runs on platform eks"),
    ({"models": [{**SMALL, "pickerReplicas": 2}]}, "models[0].pickerReplicas", "only the leader serves"),
])
def test_what_the_open_source_picker_cannot_run_is_refused(config, key, expected):
    models = config.pop("models", [SMALL])
    refused = problems(models, **{"platform": "eks", **config})
    assert key in refused, refused
    assert expected in refused[key]


def test_lru_is_accepted_by_the_llm_d_router_and_refused_with_the_epp_scheduler_on_hyperpod():
    assert parse(platform="eks", **{"weights.lru": "1"}).models[0].effective_weights["lru"] == 1
    assert "no-hit LRU scorer exists only in the llm-d picker" in problems(
        [{**SMALL, "scheduler": "epp"}], **{"weights.lru": "1"})["models[0].scheduler"]


def test_a_picker_config_file_is_read_and_checked_as_the_picker_loads_it(tmp_path):
    settings = parse([{**SMALL, "pickerConfigMap": {"name": "mine", "file": write_picker_config(tmp_path)}}],
                     platform="eks")
    config_map = settings.models[0].picker_config_map
    assert config_map.text == PICKER_CONFIG and config_map.key == "default-plugins.yaml"
    broken = write_picker_config(tmp_path, PICKER_CONFIG.replace("blockSizeTokens", "blockSizeToken"))
    refused = problems([{**SMALL, "pickerConfigMap": {"name": "mine", "file": broken}}], platform="eks")
    assert "is not a valid EndpointPickerConfig" in refused["models[0].pickerConfigMap.file"]
    assert "blockSizeToken" in refused["models[0].pickerConfigMap.file"]
    missing = problems([{**SMALL, "pickerConfigMap": {"name": "mine", "file": str(tmp_path / "nope.yaml")}}])
    assert "cannot be read" in missing["models[0].pickerConfigMap.file"]


def test_the_clone_command_says_what_failed_and_how_to_do_it_by_hand(tmp_path):
    import subprocess
    import sys

    from settings.hyperpod import clone_dependencies_chart

    with pytest.raises(RuntimeError) as caught:
        clone_dependencies_chart(str(tmp_path / "clone"), repository=str(tmp_path / "no-such-repository"))
    assert "`git clone --quiet" in str(caught.value) and DEPENDENCIES_COMMIT in str(caught.value)
    usage = subprocess.run([sys.executable, "-m", "settings"], capture_output=True, text=True,
                           cwd=Path(__file__).parent.parent)
    assert usage.returncode == 2 and "clone-hyperpod-chart [DIR]" in usage.stderr


def test_the_clone_command_checks_out_the_pinned_commit_of_an_existing_clone(tmp_path):
    import subprocess

    from settings.hyperpod import clone_dependencies_chart

    clone = tmp_path / "clone"
    subprocess.run(["git", "init", "--quiet", str(clone)], check=True)
    with pytest.raises(RuntimeError, match=f"checkout --quiet {DEPENDENCIES_COMMIT}"):
        clone_dependencies_chart(str(clone))


def test_replicas_are_placed_per_instance_not_by_the_gpu_total():
    # 12 GPUs in all, but three 3-GPU replicas per 4-GPU instance would need 4 instances.
    wide = {**LARGE, "replicas": 4, "gpus": 3}
    refused = problems([wide], hyperpod=groups(("gpu", "ml.g5.12xlarge", 3), ("system", "ml.c5.4xlarge", 1)))
    assert "cannot hold the models' replicas" in refused["hyperpod.instanceGroups"]
    fits = parse([{**wide, "replicas": 3}], hyperpod=groups(("gpu", "ml.g5.12xlarge", 4), ("system", "ml.c5.4xlarge", 1)))
    assert not any("rolling update" in w for w in fits.warnings)
    tight = parse([{**wide, "replicas": 3}], hyperpod=groups(("gpu", "ml.g5.12xlarge", 3), ("system", "ml.c5.4xlarge", 1)))
    assert any("no instance with 3 free GPU(s)" in w for w in tight.warnings)


def test_dependency_addon_versions_can_be_raised_never_lowered():
    raised = parse(gateway={"dependencyAddonVersions": {"cert-manager": "v1.19.1-eksbuild.1"}})
    assert raised.gateway.dependency_addon_versions["cert-manager"] == "v1.19.1-eksbuild.1"
    assert raised.gateway.dependency_addon_versions["metrics-server"] == "v0.7.2-eksbuild.4"
    refused = problems(gateway={"dependencyAddonVersions": {"cert-manager": "v1.17.0-eksbuild.1",
                                                            "cert-manger": "v1.19.1-eksbuild.1"}})
    assert "is older than v1.18.2-eksbuild.2" in refused["gateway.dependencyAddonVersions.cert-manager"]
    assert "Did you mean 'cert-manager'" in refused["gateway.dependencyAddonVersions.cert-manger"]
