"""Every config key the stack reads: defaults, both ways of setting weights, and every error rule."""

import json
import math
import re
from pathlib import Path

import pytest
import botocore.session
from hypothesis import given, settings as hypothesis_settings, strategies as st

from settings import (DEFAULT_VLLM_IMAGE, DEFAULT_WEIGHTS, MODELLED_VLLM_VERSION, WEIGHT_NAMES, SettingsError,
                      load_stack, parse_settings, parse_weight_overrides)
from settings.instance_types import ec2_instance_types

SMALL = {"name": "qwen-small", "model": "Qwen/Qwen2.5-0.5B-Instruct", "replicas": 2}
HYPERPOD_ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh"
LARGE = {"name": "qwen", "model": "Qwen/Qwen2.5-1.5B-Instruct"}


def parse(models=(SMALL,), **config):
    raw = {"models": json.dumps(list(models)), **config}
    return parse_settings(raw, stack="test")


def problems(models=(SMALL,), **config) -> str:
    with pytest.raises(SettingsError) as caught:
        parse(models, **config)
    return str(caught.value)


def test_defaults_match_the_seed():
    settings = parse()
    model = settings.models[0]
    assert settings.namespace == "inference"
    assert model.deployment == "vllm-qwen-small" and dict(model.selector) == {"app": "vllm-qwen-small"}
    assert model.port == 8000 and model.scheduler == "llm-d" and model.gpus == 1
    assert dict(model.weights) == {}  # nothing set: the resource carries no weights
    assert dict(model.effective_weights) == {"queue": 2, "kvCache": 2, "prefix": 3}
    assert settings.gateway.bbr_enabled is False and settings.gateway.name == "inference-gateway"


def test_flat_weight_keys_are_read_as_integers_and_zero_is_kept():
    model = parse(**{"weights.prefix": "0", "weights.queue": "3", "weights.kvCache": "2"}).models[0]
    assert dict(model.weights) == {"prefix": 0, "queue": 3, "kvCache": 2}
    assert model.effective_weights["prefix"] == 0


def test_path_weights_object_is_read_the_same_way():
    model = parse(weights=json.dumps({"prefix": 0, "queue": 3})).models[0]
    assert dict(model.weights) == {"prefix": 0, "queue": 3}


def test_same_weight_both_ways_with_equal_values_is_fine():
    assert parse(**{"weights": '{"prefix": 0}', "weights.prefix": "0"}).models[0].weights["prefix"] == 0


def test_same_weight_both_ways_with_different_values_names_both_keys():
    message = problems(**{"weights": '{"prefix": 0}', "weights.prefix": "5"})
    assert "inference-gateway:weights.prefix" in message and "inference-gateway:weights`" in message
    assert "pulumi config rm" in message


def test_per_model_weights_merge_over_gateway_weights():
    model = parse([{**SMALL, "weights": {"queue": 7}}], **{"weights.prefix": "0", "weights.queue": "1"}).models[0]
    assert dict(model.weights) == {"prefix": 0, "queue": 7}
    assert model.effective_weights == {"queue": 7, "kvCache": 2, "prefix": 0}


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("weights.prefx", "1", "Did you mean 'prefix'? Valid weights: queue, kvCache, prefix"),
    ("weights.prefix", "-1", "non-negative integers"),
    ("weights.prefix", "1.5", "must be a whole number"),
    ("weights.prefix", "high", "must be a whole number"),
])
def test_bad_weights_are_rejected_with_the_key_and_the_fix(key, value, expected):
    message = problems(**{key: value})
    assert f"inference-gateway:{key} = '{value}'" in message and expected in message


def test_bbr_off_with_several_models_is_rejected():
    message = problems([SMALL, LARGE], **{"gateway.bbr": "false"})
    assert "gateway.bbr = False" in message and "more than one model" in message and "gateway.bbr auto" in message


def test_bbr_auto_turns_on_exactly_with_several_models():
    assert parse([SMALL, LARGE]).gateway.bbr_enabled is True
    assert parse([SMALL]).gateway.bbr_enabled is False


def test_duplicate_model_id_is_rejected():
    message = problems([SMALL, {**LARGE, "model": SMALL["model"]}], **{"gateway.bbr": "true"})
    assert "models[1].model" in message and "also used by models[0]" in message and "modelName is unique" in message


def test_duplicate_model_name_is_rejected():
    message = problems([SMALL, {**LARGE, "name": "qwen-small"}])
    assert "models[1].name = 'qwen-small'" in message and "also used by models[0]" in message


def test_weights_with_picker_config_map_is_rejected():
    message = problems([{**SMALL, "weights": {"prefix": 1}, "pickerConfigMap": {"name": "picker"}}])
    assert "models[0].pickerConfigMap" in message and "mutually exclusive" in message


def test_gateway_wide_weights_with_picker_config_map_is_rejected():
    message = problems([{**SMALL, "pickerConfigMap": {"name": "picker"}}], **{"weights.prefix": "1"})
    assert "gateway-wide" in message and "mutually exclusive" in message


def test_picker_config_map_alone_has_no_effective_weights():
    model = parse([{**SMALL, "pickerConfigMap": {"name": "picker"}}]).models[0]
    assert model.effective_weights is None and model.picker_config_map.key == "default-plugins.yaml"


def test_lru_with_epp_scheduler_is_rejected():
    message = problems([{**SMALL, "scheduler": "epp"}], **{"weights.lru": "2"})
    assert "models[0].scheduler = 'epp'" in message and "lru" in message and "llm-d" in message


def test_empty_model_list_is_rejected():
    message = problems([])
    assert "inference-gateway:models" in message and "at least one model" in message


def test_missing_models_key_is_rejected():
    with pytest.raises(SettingsError, match="at least one model"):
        parse_settings({}, stack="test")


def test_more_than_100_schedulers_is_rejected():
    models = [{"name": f"m{i}", "model": f"org/m{i}"} for i in range(101)]
    assert "at most 100 schedulers" in problems(models)


def test_long_scheduler_name_is_rejected():
    message = problems([{**SMALL, "name": "a" * 64, "deployment": "vllm-a"}])
    assert "is 64 characters; it must be at most 63" in message


def test_long_model_name_is_rejected():
    assert "at most 253" in problems([{**SMALL, "model": "m" * 254}])


def test_too_many_lora_adapters_is_rejected():
    message = problems([{**SMALL, "loraAdapters": [f"a{i}" for i in range(51)]}])
    assert "models[0].loraAdapters" in message and "between 0 and 50" in message


@pytest.mark.parametrize("port", [0, 65536])
def test_port_out_of_range_is_rejected(port):
    assert "from 1 to 65535" in problems([{**SMALL, "port": port}])


@pytest.mark.parametrize("level", [-1, 6])
def test_log_level_out_of_range_is_rejected(level):
    message = problems([{**SMALL, "logLevel": level}])
    assert "models[0].logLevel" in message and "from 0 to 5" in message


@pytest.mark.parametrize(("image", "expected"), [
    ("vllm/vllm-openai:latest", "pinned to a version tag"),
    ("vllm/vllm-openai:v0.8.5", "older than vLLM 0.9.2"),
    ("vllm/vllm-openai:v0.9.2", None),
    ("123456789012.dkr.ecr.us-west-2.amazonaws.com/vllm/vllm-openai:v0.11.0", None),
])
def test_vllm_image_must_be_pinned_and_recent_enough(image, expected):
    if expected is None:
        assert parse([{**SMALL, "image": image}]).models[0].image == image
    else:
        assert expected in problems([{**SMALL, "image": image}])


def test_the_default_image_is_the_vllm_release_the_toolkit_models_and_the_e2e_tests_run():
    # .ci/setup-vllm.sh installs the CPU build of the release predict models and the e2e tests
    # drive; the stack must deploy that release too, or a prediction describes another server.
    setup = (Path(__file__).resolve().parent.parent / ".ci" / "setup-vllm.sh").read_text()
    installed = re.search(r'^vllm_version="([0-9.]+)"$', setup, re.M).group(1)
    assert MODELLED_VLLM_VERSION == installed
    model = parse().models[0]
    assert model.image == f"vllm/vllm-openai:v{installed}" == DEFAULT_VLLM_IMAGE
    assert not [w for w in parse().warnings if "image" in w]


@pytest.mark.parametrize(("image", "warned"), [
    ("vllm/vllm-openai:v0.11.0", "runs vLLM 0.11"),
    ("vllm/vllm-openai:v0.34.0", "runs vLLM 0.34"),
    ("vllm/vllm-openai:v0.32.4", None),  # a patch release of the modelled one
])
def test_an_image_of_another_vllm_minor_release_warns_that_predictions_model_another_server(image, warned):
    warnings = [w for w in parse([{**SMALL, "image": image}]).warnings if "models[0].image" in w]
    if warned is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warned in warnings[0] and "model vLLM 0.32" in warnings[0]
        assert DEFAULT_VLLM_IMAGE in warnings[0]


def test_managed_vllm_flags_are_rejected_in_extra_args():
    assert "set by the stack itself" in problems([{**SMALL, "extraArgs": ["--port=9000"]}])


def test_unknown_keys_are_reported_with_a_suggestion():
    assert "Did you mean 'replicas'?" in problems([{**SMALL, "replica": 2}])
    assert "Did you mean 'weights'?" in problems(**{"wieghts.prefix": "1"})
    assert "Did you mean 'tls'?" in problems(**{"gateway.tsl": "auto"})


def test_every_problem_is_reported_at_once():
    message = problems([{**SMALL, "replicas": -1, "port": 0}], **{"weights.prefix": "-2"})
    assert message.startswith("3 problems")


@pytest.mark.parametrize(("tls", "rendered"), [
    (None, ""), ("auto", ""), ("arn:aws:acm:us-west-2:123456789012:certificate/abc-123", "arn:aws:acm:us-west-2:123456789012:certificate/abc-123")])
def test_tls_modes(tls, rendered):
    config = {} if tls is None else {"gateway.tls": tls}
    assert parse(**config).gateway.tls_acm_arn == rendered


def test_tls_off_is_refused_with_the_reason():
    message = problems(**{"gateway.tls": "off"})
    assert "inference-gateway:gateway.tls = 'off': cannot be off" in message and "spec.tls" in message


def test_bad_tls_is_rejected():
    assert "ACM certificate ARN" in problems(**{"gateway.tls": "on"})


def test_jwt_needs_https_and_an_audience_or_claim():
    message = problems(gateway=json.dumps({"jwt": {"issuer": "http://idp", "jwksUri": "https://idp/jwks"}}))
    assert "gateway.jwt.issuer" in message and "https://" in message
    message = problems(gateway=json.dumps({"jwt": {"issuer": "https://idp", "jwksUri": "https://idp/jwks"}}))
    assert "at least one of audiences or requiredClaims" in message


def test_jwt_silences_the_open_gateway_warning():
    open_gateway = parse()
    assert any("authenticates nobody" in w for w in open_gateway.warnings)
    secured = parse(gateway=json.dumps({"jwt": {"issuer": "https://idp", "jwksUri": "https://idp/jwks",
                                                "audiences": ["api"]}}))
    assert not any("authenticates nobody" in w for w in secured.warnings)
    assert secured.gateway.jwt.audiences == ("api",)


def test_gpu_node_sizes_must_be_ordered():
    assert "must lie between gpuNodes.min (3) and gpuNodes.max (2)" in problems(
        gpuNodes=json.dumps({"desired": 1, "min": 3, "max": 2}), platform="eks")


def test_time_slicing_on_bottlerocket_is_rejected():
    assert "Bottlerocket ships its own plugin" in problems(
        gpuNodes=json.dumps({"amiType": "BOTTLEROCKET_x86_64_NVIDIA", "timeSlicing": 4}), platform="eks")


def test_existing_cluster_needs_a_name_and_refuses_new_cluster_keys():
    message = problems(cluster=json.dumps({"existing": True, "version": "1.34"}), platform="eks")
    assert "cluster.name" in message and "cluster.version" in message and "applies only to a cluster this stack creates" in message
    assert "gpuNodes" in problems(cluster=json.dumps({"existing": True, "name": "c"}), platform="eks",
                                  **{"gpuNodes.desired": "2"})


def test_plain_text_hf_token_is_rejected_without_echoing_it():
    with pytest.raises(SettingsError) as caught:
        parse_settings({"models": json.dumps([SMALL]), "hfToken": "hf_abc"}, stack="test")
    assert "--secret hfToken" in str(caught.value) and "hf_abc" not in str(caught.value)
    settings = parse_settings({"models": json.dumps([SMALL]), "hfToken": "hf_abc"}, stack="test",
                              secret_keys=frozenset({"hfToken"}))
    assert settings.hf_token is True


def test_gpu_capacity_shortfall_is_a_warning():
    settings = parse([{**SMALL, "replicas": 5}], platform="eks", **{"gpuNodes.max": "2"})
    assert any("ask for 5 GPUs" in w for w in settings.warnings)


@pytest.mark.parametrize("stack", ["dev", "existing"])
def test_every_stack_file_validates(stack):
    settings = load_stack(stack)
    assert settings.models


def test_dev_stack_is_the_seed_topology():
    settings = load_stack("dev")
    assert [(m.name, m.model, m.replicas) for m in settings.models] == [
        ("qwen", "Qwen/Qwen2.5-1.5B-Instruct", 1), ("qwen-small", "Qwen/Qwen2.5-0.5B-Instruct", 2)]
    assert settings.platform == "hyperpod" and settings.gpu_nodes is None
    # Three GPU replicas plus the spare a rolling update needs, and a CPU group for the add-on.
    assert settings.hyperpod.gpus == 4
    assert [(g.instance_type, g.count) for g in settings.hyperpod.instance_groups if not g.gpus_per_instance] == [
        ("ml.c5.4xlarge", 1)]
    assert settings.model_named("qwen-small").picker_replicas == 1
    assert not settings.warnings[1:], settings.warnings


def test_weight_overrides_for_the_routing_tools():
    assert parse_weight_overrides("prefix=0, queue=3,kvCache=2") == {"prefix": 0, "queue": 3, "kvCache": 2}
    with pytest.raises(SettingsError, match="Did you mean 'prefix'"):
        parse_weight_overrides("prefx=0")
    with pytest.raises(SettingsError, match="name=value"):
        parse_weight_overrides("prefix")


@pytest.mark.parametrize(("config", "key", "expected"), [
    ({"namespace": "Inference"}, "namespace", "must be a DNS label"),
    ({"models": [{**SMALL, "gpus": 9}]}, "models[0].gpus", "from 1 to 8"),
    ({"models": [{**SMALL, "gpuMemoryUtilization": 1.5}]}, "models[0].gpuMemoryUtilization", "at most 1"),
    ({"models": [{**SMALL, "routeTimeout": "5 minutes"}]}, "models[0].routeTimeout", "Gateway API duration"),
    ({"models": [{**SMALL, "cpu": "two"}]}, "models[0].cpu", "Kubernetes quantity"),
    ({"models": [{**SMALL, "memory": "8 GB"}]}, "models[0].memory", "Kubernetes quantity"),
    ({"models": [{**SMALL, "deployment": "1vllm"}]}, "models[0].deployment", "DNS-1035 label"),
    ({"models": [SMALL, {**LARGE, "deployment": "vllm-qwen-small"}], "gateway.bbr": "true"}, "models[1].deployment",
     "cannot share one Deployment"),
    ({"models": [{"model": "org/m"}]}, "models[0].name", "is required"),
    ({"models": [{"name": "m"}]}, "models[0].model", "is required"),
    ({"models": [{**SMALL, "pickerConfigMap": {"key": "k"}}]}, "models[0].pickerConfigMap.name", "is required"),
    ({"models": [SMALL, SMALL, "qwen"]}, "models[2]", "must be an object"),
    ({"models": {"name": "qwen"}}, "models", "must be a list"),
    ({"cluster.version": "1.27"}, "cluster.version", "at least 1.29"),
    ({"cluster.vpcId": "vpc-1"}, "cluster.vpcId", "a VPC id"),
    ({"cluster": {"vpcId": "vpc-0123456789abcdef0", "privateSubnetIds": ["subnet-0123456789abcdef0"]}},
     "cluster.privateSubnetIds", "at least two private subnets"),
    ({"cluster": {"privateSubnetIds": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]}}, "cluster.vpcId",
     "is required when subnet ids are given"),
    ({"cluster": {"privateSubnetIds": ["subnet-1"]}}, "cluster.privateSubnetIds[0]", "a subnet id"),
    ({"cluster": {"endpointPublicAccess": False, "endpointPrivateAccess": False}}, "cluster.endpointPrivateAccess",
     "must be reachable one way"),
    ({"cluster.publicAccessCidrs": '["10.0.0.0/33"]'}, "cluster.publicAccessCidrs[0]", "CIDR block"),
    ({"cluster": {"systemNodes": {"instanceTypes": ["big"]}}, "platform": "eks"}, "cluster.systemNodes.instanceTypes[0]",
     "EC2 instance type"),
    ({"cluster": {"systemNodes": {"instanceTypes": ["m6i.larg"]}}, "platform": "eks"},
     "cluster.systemNodes.instanceTypes[0]", "is not an EC2 instance type: m6i comes in m6i.large, m6i.xlarge, "),
    ({"gpuNodes.instanceTypes": '["g5.xlarg"]', "platform": "eks"}, "gpuNodes.instanceTypes[0]",
     "g5 comes in g5.xlarge, g5.2xlarge, g5.4xlarge, g5.8xlarge, g5.12xlarge, g5.16xlarge, g5.24xlarge, g5.48xlarge. "
     "Did you mean 'g5.xlarge'? (These are the types botocore 1.44.5's EC2 model lists"),
    ({"gpuNodes.instanceTypes": '["ml.g5.xlarge"]', "platform": "eks"}, "gpuNodes.instanceTypes[0]",
     "is a SageMaker instance type; platform eks runs EC2 managed node groups, which take EC2 types, e.g. g5.xlarge."),
    ({"gpuNodes.instanceTypes": "[]", "platform": "eks"}, "gpuNodes.instanceTypes", "must hold at least 1 entry"),
    ({"gpuNodes.capacityType": "spot", "platform": "eks"}, "gpuNodes.capacityType", "'ON_DEMAND' or 'SPOT'"),
    ({"gpuNodes.diskSize": "20", "platform": "eks"}, "gpuNodes.diskSize", "from 50 to 16384"),
    ({"gpuNodes.amiType": "AL2_x86_64_GPU", "platform": "eks"}, "gpuNodes.amiType", "AL2023_x86_64_NVIDIA"),
    ({"gpuNodes.timeSlicing": "0", "platform": "eks"}, "gpuNodes.timeSlicing", "from 1 to 48"),
    ({"gateway.addonVersion": "2.0.0"}, "gateway.addonVersion", "v2.0.0-eksbuild.2"),
    ({"gateway.bbr": "sometimes"}, "gateway.bbr", "auto, true or false"),
    ({"gateway.bbrReplicas": "0"}, "gateway.bbrReplicas", "at least 1"),
    ({"gateway.metrics": "yes"}, "gateway.metrics", "true or false"),
    ({"gateway.podDefaults": '{"tolerations": {}}'}, "gateway.podDefaults.tolerations", "must be a list"),
    ({"gateway": {"jwt": {"issuer": "https://idp", "jwksUri": "https://idp/jwks", "requiredClaims": [
        {"name": "groups", "values": ["x" * 1025]}]}}}, "gateway.jwt.requiredClaims[0].values[0]", "1 to 1024 characters"),
    ({"gateway": {"jwt": {"issuer": "https://idp", "jwksUri": "https://idp/jwks",
                          "audiences": [f"a{i}" for i in range(9)]}}}, "gateway.jwt.audiences", "between 0 and 8"),
    ({"gateway": "on"}, "gateway", "must be an object"),
    ({"gateway": {"name": "gw"}, "gateway.jwt": "x"}, "gateway.jwt", "is an object"),
    ({"namespac": "x"}, "namespac", "Did you mean 'namespace'?"),
    ({"weights.prefix.x": "1"}, "weights.prefix.x", "weights.prefix is a single value"),
    ({"models.0": "x"}, "models.0", "models is a list"),
    ({"weights.prefix": "1_0"}, "weights.prefix", "must be a whole number"),
    ({"weights.prefix": str(2**31)}, "weights.prefix", "from 0 to 2147483647"),
])
def test_each_rule_names_the_key_and_the_fix(config, key, expected):
    raw = {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
    raw.setdefault("models", json.dumps([SMALL]))
    with pytest.raises(SettingsError) as caught:
        parse_settings(raw, stack="test")
    matching = [str(p) for p in caught.value.problems if p.key == key]
    assert matching, f"no problem about {key}: {caught.value}"
    assert any(expected in line for line in matching), matching


def test_secret_values_never_appear_in_errors():
    raw = {"models": json.dumps([SMALL]), "hfTokn": "hf_SECRET", "hfToken": "hf_OTHER"}
    with pytest.raises(SettingsError) as caught:
        parse_settings(raw, stack="test", secret_keys=frozenset({"hfTokn", "hfToken"}))
    assert "hf_SECRET" not in str(caught.value) and "inference-gateway:hfTokn = <secret>" in str(caught.value)


def test_tls_auto_warns_about_what_it_needs_when_the_stack_does_not_install_the_addon():
    existing = {"cluster": json.dumps({"existing": True, "name": "c"}),
                "hyperpod": json.dumps({"existing": True, "name": "hp", "arn": HYPERPOD_ARN})}
    assert any("cert-manager" in w for w in parse(**existing).warnings)
    assert not any("cert-manager" in w for w in parse(**existing, **{"gateway.installAddon": "true"}).warnings)
    assert not any("cert-manager" in w for w in parse().warnings)


def test_a_full_gpu_node_group_warns_that_rollouts_need_a_spare_gpu():
    settings = parse([{**SMALL, "replicas": 2}], gpuNodes=json.dumps({"desired": 2, "min": 2, "max": 3}), platform="eks")
    assert any("rolling update" in w for w in settings.warnings)
    assert not any("rolling update" in w for w in load_stack("dev").warnings)


@pytest.mark.parametrize(("body", "expected"), [
    (b"config: [1, 2]", "needs a top-level `config:` mapping"),
    (b"config: {a: [", "is not valid YAML: line 1, column 14: expected the node content, but found '<stream end>'."),
    (b"config:\n  1: 2\n", "YAML read as int"),
    (b"config:\n  inference-gateway:namespace: caf\xe9\n", "cannot be read as UTF-8 text"),
])
def test_broken_stack_files_get_a_clear_error_in_one_line(tmp_path, body, expected):
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_bytes(body)
    with pytest.raises(SettingsError) as caught:
        load_stack("broken", tmp_path)
    message = str(caught.value)
    assert message.startswith(f"stack 'broken': {path} ") and expected in message
    assert "\n" not in message and "deployed" not in message


def test_unknown_stack_names_its_missing_file_and_lists_the_known_ones(monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    with pytest.raises(SettingsError) as caught:
        load_stack("prod")
    assert str(caught.value) == "stack 'prod' has no file stacks/Pulumi.prod.yaml; stacks here: dev, eks, eks-karpenter, existing"


def test_a_stack_with_invalid_config_names_the_stack_its_file_and_each_problem_not_a_deploy(tmp_path):
    (tmp_path / "Pulumi.one.yaml").write_text("config:\n  inference-gateway:models: 5\n")
    with pytest.raises(SettingsError) as caught:
        load_stack("one", tmp_path)
    assert str(caught.value).startswith(f"stack 'one' ({tmp_path / 'Pulumi.one.yaml'}): inference-gateway:models = 5: ")
    (tmp_path / "Pulumi.two.yaml").write_text("config:\n  inference-gateway:models: 5\n"
                                              "  inference-gateway:namespace: 7\n")
    with pytest.raises(SettingsError) as caught:
        load_stack("two", tmp_path)
    lines = str(caught.value).splitlines()
    assert lines[0] == f"stack 'two' ({tmp_path / 'Pulumi.two.yaml'}) has 2 problems:" and len(lines) == 3
    assert "deployed" not in str(caught.value)
    # `pulumi up` parses the same config and keeps its own words.
    with pytest.raises(SettingsError, match="nothing was deployed"):
        parse_settings({"models": 5}, stack="two")


weight_values = st.one_of(st.integers(-5, 10), st.floats(allow_nan=True), st.text(max_size=4), st.booleans(),
                          st.none(), st.lists(st.integers(), max_size=2))
weight_names = st.one_of(st.sampled_from(WEIGHT_NAMES), st.text(min_size=1, max_size=8))


def expected_weight(value):
    """What a user means by a raw weight value, or None when it is not a valid weight: a whole
    number from 0 to 2**31-1, as a JSON number or as ASCII digits with an optional sign."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        number = int(value) if math.isfinite(value) and value.is_integer() else None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
        number = int(value.strip())
    else:
        number = None
    return number if number is not None and 0 <= number <= 2**31 - 1 else None


def should_reject(structured, flat) -> bool:
    if (set(structured) | set(flat)) - set(WEIGHT_NAMES):
        return True
    if any(expected_weight(v) is None for v in [*structured.values(), *flat.values()]):
        return True
    return any(expected_weight(structured[n]) != expected_weight(flat[n]) for n in set(structured) & set(flat))


@hypothesis_settings(max_examples=400, deadline=None)
@given(structured=st.dictionaries(weight_names, weight_values, max_size=5),
       flat=st.dictionaries(weight_names, st.one_of(st.text(max_size=4), st.integers(-3, 9).map(str)), max_size=5))
def test_any_weight_map_is_accepted_as_meant_or_rejected_with_a_clear_error(structured, flat):
    raw = {"models": json.dumps([SMALL]), "weights": json.dumps(structured),
           **{f"weights.{name}": value for name, value in flat.items()}}
    try:
        model = parse_settings(raw, stack="test").models[0]
    except SettingsError as error:
        assert should_reject(structured, flat), f"a valid weight map was refused: {error}"
        assert error.problems, "a rejection must carry at least one problem"
        for problem in error.problems:
            assert problem.key.startswith("weights") and str(problem).startswith("inference-gateway:weights")
        return
    assert not should_reject(structured, flat), "an invalid weight map was accepted"
    # Accepted: each weight is exactly what was set (the flat key over the --path object).
    meant = {name: expected_weight(value) for name, value in structured.items()}
    meant.update({name: expected_weight(value) for name, value in flat.items()})
    assert dict(model.weights) == meant
    assert dict(model.effective_weights) == {**DEFAULT_WEIGHTS, **meant}


def test_the_instance_types_checked_on_eks_are_the_ec2_service_models_own():
    # Read through botocore's ServiceModel, not the loader settings use.
    listed = set(botocore.session.get_session().get_service_model("ec2").shape_for("InstanceType").enum)
    assert ec2_instance_types() == listed
    config = {"platform": "eks", "cluster.systemNodes.instanceTypes": json.dumps(sorted(listed)[:16])}
    assert parse(**config, **{"gpuNodes.instanceTypes": json.dumps(sorted(listed)[-16:])}).gpu_nodes

