"""The rendered objects, without mocks: the seed's spec, the model server's shape, and schema validity."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubernetes_validate import utils as kubernetes_schemas

from components.gateway import render as gateway_render
from components.gpu_nodes import render as gpu_render
from components.model_server import render as model_render
from settings import load_stack, parse_settings

GATEWAY_SCHEMA = json.loads((Path(__file__).parent / "schemas" / "inference-gateway-config.schema.json").read_text())

# Step 5 of the seed page, verbatim apart from the shell variables.
SEED_STEP_5 = yaml.safe_load("""
apiVersion: inference.sagemaker.aws.amazon.com/v1alpha1
kind: InferenceGatewayConfig
metadata:
  name: inference-gateway-demo
  namespace: inference
spec:
  bbr:
    enabled: false
  schedulers:
    - name: qwen-small
      modelName: "Qwen/Qwen2.5-0.5B-Instruct"
      modelSelector:
        matchLabels:
          app: vllm-qwen-small
      targetPort: 8000
      scheduler: llm-d
      weights:
        prefix: 0
        queue: 3
        kvCache: 2
""")
# The workshop's newest revision of the same step: every gateway has TLS (the controller
# rejects one without), and one picker per scheduler so prefix affinity is visible.
NEWEST_STEP_5_SPEC = {**SEED_STEP_5["spec"], "tls": {},
                      "schedulers": [{**SEED_STEP_5["spec"]["schedulers"][0], "replicas": 1}]}
SEED_STEP_5_CONFIG = {
    "namespace": "inference",
    "gateway.name": "inference-gateway-demo",
    "models": json.dumps([{"name": "qwen-small", "model": "Qwen/Qwen2.5-0.5B-Instruct", "replicas": 2,
                           "pickerReplicas": 1}]),
    "weights.prefix": "0", "weights.queue": "3", "weights.kvCache": "2",
}


def seed_settings():
    return parse_settings(SEED_STEP_5_CONFIG, stack="seed")


def test_gateway_spec_is_exactly_the_newest_workshops_step_5():
    manifest = gateway_render.gateway_manifest(seed_settings())
    assert manifest["spec"] == NEWEST_STEP_5_SPEC
    assert {k: manifest["metadata"][k] for k in ("name", "namespace")} == SEED_STEP_5["metadata"]


def test_no_weights_set_renders_no_weights():
    settings = parse_settings({"models": SEED_STEP_5_CONFIG["models"]}, stack="seed")
    assert "weights" not in gateway_render.gateway_manifest(settings)["spec"]["schedulers"][0]


def test_gateway_waits_for_the_controller_to_report_ready():
    annotations = gateway_render.gateway_manifest(seed_settings())["metadata"]["annotations"]
    assert annotations["pulumi.com/waitFor"] == "condition=Ready"
    assert int(annotations["pulumi.com/timeoutSeconds"]) > 0


def test_every_optional_gateway_field_is_rendered_when_set():
    settings = parse_settings({
        "models": json.dumps([{"name": "a", "model": "org/a", "scheduler": "epp", "pickerReplicas": 3,
                               "loraAdapters": ["sql"], "routeTimeout": "300s", "logLevel": 2,
                               "pickerConfigMap": {"name": "picker", "key": "custom.yaml"}},
                              {"name": "b", "model": "org/b"}]),
        "gateway": json.dumps({"bbrReplicas": 3, "tls": "auto", "metrics": False,
                               "podDefaults": {"nodeSelector": {"pool": "system"}},
                               "jwt": {"issuer": "https://idp", "jwksUri": "https://idp/jwks", "audiences": ["api"],
                                       "requiredClaims": [{"name": "groups", "valueType": "StringArray", "values": ["ml"]}]}}),
    }, stack="t")
    spec = gateway_render.gateway_manifest(settings)["spec"]
    assert spec["bbr"] == {"enabled": True, "replicas": 3}
    assert spec["tls"] == {} and spec["observability"] == {"metrics": {"enabled": False}}
    assert spec["auth"]["jwt"]["provider"]["remoteJWKS"] == {"uri": "https://idp/jwks"}
    assert spec["auth"]["jwt"]["provider"]["requiredClaims"] == [{"name": "groups", "valueType": "StringArray", "values": ["ml"]}]
    assert spec["podDefaults"] == {"nodeSelector": {"pool": "system"}}
    first = spec["schedulers"][0]
    assert first["configMapRef"] == {"name": "picker", "key": "custom.yaml"} and "weights" not in first
    assert (first["replicas"], first["loraAdapters"], first["routeTimeout"], first["logLevel"]) == (3, ["sql"], "300s", 2)
    jsonschema.validate(gateway_render.gateway_manifest(settings), GATEWAY_SCHEMA)


@pytest.mark.parametrize("stack", ["dev", "existing"])
def test_gateway_resource_fits_the_closed_schema(stack):
    jsonschema.validate(gateway_render.gateway_manifest(load_stack(stack)), GATEWAY_SCHEMA)


def test_closed_schema_rejects_what_admission_would():
    manifest = gateway_render.gateway_manifest(seed_settings())
    unknown = json.loads(json.dumps(manifest))
    unknown["spec"]["schedulers"][0]["weight"] = {"prefix": 1}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(unknown, GATEWAY_SCHEMA)
    without_tls = json.loads(json.dumps(manifest))
    del without_tls["spec"]["tls"]
    with pytest.raises(jsonschema.ValidationError, match="'tls' is a required property"):
        jsonschema.validate(without_tls, GATEWAY_SCHEMA)
    several_without_bbr = json.loads(json.dumps(manifest))
    several_without_bbr["spec"]["schedulers"].append({**manifest["spec"]["schedulers"][0], "name": "b", "modelName": "b"})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(several_without_bbr, GATEWAY_SCHEMA)


def test_seed_deployment_matches_the_page():
    model = seed_settings().models[0]
    deployment = model_render.deployment(model, "inference", hf_token=False, gpu_node_selector=None)
    assert deployment["metadata"]["name"] == "vllm-qwen-small"
    spec = deployment["spec"]
    assert spec["replicas"] == 2 and spec["selector"]["matchLabels"] == {"app": "vllm-qwen-small"}
    assert spec["template"]["metadata"]["labels"]["app"] == "vllm-qwen-small"
    container = spec["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == 8000
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "--enable-prefix-caching" in container["args"]
    assert container["args"][0] == "Qwen/Qwen2.5-0.5B-Instruct" and "--model" not in container["args"]


def test_rolling_update_never_drops_a_serving_replica():
    deployment = model_render.deployment(seed_settings().models[0], "inference", hf_token=False, gpu_node_selector=None)
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_hf_token_comes_from_the_secret():
    container = model_render.deployment(seed_settings().models[0], "inference", hf_token=True,
                                        gpu_node_selector=None)["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}]


def test_pod_disruption_budget_only_with_several_replicas():
    settings = load_stack("dev")
    assert model_render.pod_disruption_budget(settings.model_named("qwen"), "inference") is None
    assert model_render.pod_disruption_budget(settings.model_named("qwen-small"), "inference")["spec"]["maxUnavailable"] == 1


def test_tensor_parallel_and_limits_follow_gpus():
    settings = parse_settings({"models": json.dumps([{"name": "big", "model": "org/big", "gpus": 4,
                                                      "maxModelLen": 8192, "gpuMemoryUtilization": 0.85}])}, stack="t")
    args = model_render.vllm_args(settings.models[0])
    assert args[args.index("--tensor-parallel-size") + 1] == "4"
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.85"


def test_time_slicing_configures_the_device_plugin():
    settings = parse_settings({"models": SEED_STEP_5_CONFIG["models"], "platform": "eks", "gpuNodes.timeSlicing": "4"},
                              stack="t")
    values = gpu_render.device_plugin_values(settings.gpu_nodes)
    config = yaml.safe_load(values["config"]["map"][values["config"]["default"]])
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert "config" not in gpu_render.device_plugin_values(load_stack("eks").gpu_nodes)


def test_gpu_nodes_require_imdsv2_with_hop_limit_one():
    template = gpu_render.launch_template(load_stack("eks").gpu_nodes)
    assert template["metadata_options"]["http_tokens"] == "required"
    assert template["metadata_options"]["http_put_response_hop_limit"] == 1


def all_kubernetes_objects(settings):
    objects = [model_render.namespace_manifest(settings.namespace), model_render.hf_token_secret(settings.namespace)]
    for model in settings.models:
        objects.append(model_render.deployment(model, settings.namespace, hf_token=True,
                                               gpu_node_selector=gpu_render.node_selector()))
        objects.append(model_render.service(model, settings.namespace))
        budget = model_render.pod_disruption_budget(model, settings.namespace)
        if budget:
            objects.append(budget)
    return objects


@pytest.mark.parametrize("stack", ["dev", "existing", "eks"])
def test_kubernetes_objects_validate_against_the_cluster_versions_api_schema(stack):
    settings = load_stack(stack)
    version = "1.34.0" if settings.cluster.existing else f"{settings.cluster.version}.0"
    objects = all_kubernetes_objects(settings)
    assert {o["kind"] for o in objects} >= {"Deployment", "Service", "Namespace", "Secret"}
    for obj in objects:
        kubernetes_schemas.validate(obj, version, strict=True)


def test_schema_validation_catches_a_broken_object():
    deployment = model_render.deployment(load_stack("dev").models[0], "inference", hf_token=False, gpu_node_selector=None)
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] = 1
    with pytest.raises(kubernetes_schemas.ValidationError):
        kubernetes_schemas.validate(deployment, "1.34.0", strict=True)
