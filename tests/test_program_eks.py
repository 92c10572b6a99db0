"""Plain EKS with the open-source picker, under mocks: what `pulumi up` on the eks stack declares,
and what a weight change changes."""

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from components.llmd_router import render as router_render
from tests.stack.program import comparable, run_program
from tests.test_program import dependency_names, from_stack_file, registered_before_refusal
from tests.test_settings_hyperpod import PICKER_CONFIG

PICKER_SCHEMA = json.loads((Path(__file__).parent / "schemas" / "endpoint-picker-config.schema.json").read_text())
CHART = "kubernetes:helm.sh/v4:Chart"


def eks_run(**changes):
    config, _ = from_stack_file("eks")
    return run_program({**config, **changes}, stack="eks")


def picker_config(run, model):
    values = run.named(f"router-{model}-router").inputs["values"]
    epp = values["router"]["epp"]
    return yaml.safe_load(epp["pluginsCustomConfig"][epp["pluginsConfigFile"]]), values


def scorer_weights(config):
    (profile,) = config["schedulingProfiles"]
    return {entry["pluginRef"]: entry["weight"] for entry in profile["plugins"] if "weight" in entry}


def test_each_model_gets_a_pool_a_picker_with_the_default_weights_and_a_route():
    run = eks_run()
    for model in ("qwen", "qwen-small"):
        chart = run.named(f"router-{model}-router").inputs
        assert (chart["chart"], chart["version"], chart["name"]) == (router_render.ROUTER_CHART, "v0.10.0", model)
        config, values = picker_config(run, model)
        # The chart's InferencePool selects the model's pods on vLLM's port.
        assert values["router"]["modelServers"] == {"matchLabels": {"app": f"vllm-{model}"}, "targetPorts": [{"number": 8000}]}
        assert scorer_weights(config) == {"queue-scorer": 2, "kv-cache-utilization-scorer": 2, "prefix-cache-scorer": 3}
        assert config["schedulingProfiles"][0]["plugins"][-1] == {"pluginRef": "max-score-picker"}
        jsonschema.validate(config, PICKER_SCHEMA)
        route = run.kubernetes_object("HTTPRoute", model)["spec"]
        assert route["parentRefs"][0]["name"] == "inference-gateway"
        (rule,) = route["rules"]
        assert rule["backendRefs"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": model}]
        # Two models share the gateway: body-based routing sets this header from the request's model.
        assert rule["matches"][0]["headers"][0]["name"] == "X-Gateway-Model-Name"
    assert picker_config(run, "qwen-small")[1]["router"]["epp"]["replicas"] == 1
    gateway = run.kubernetes_object("Gateway", "inference-gateway")
    assert gateway["spec"]["gatewayClassName"] == "istio"
    assert gateway["spec"]["infrastructure"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert run.named("gateway-api-bbr").inputs["values"]["inferenceGateway"] == {"name": "inference-gateway"}
    assert "kubectl get gateway inference-gateway -n inference" in run.outputs["gatewayUrlCommand"]
    assert run.outputs["effectiveWeights"]["qwen-small"] == {"queue": 2, "kvCache": 2, "prefix": 3}


def test_the_data_plane_is_pinned_and_sized_for_the_system_nodes():
    run = eks_run()
    istiod = run.named("gateway-api-istiod").inputs
    assert istiod["version"] == "1.30.1" and istiod["values"]["env"] == {"ENABLE_GATEWAY_API_INFERENCE_EXTENSION": "true"}
    assert istiod["values"]["resources"]["requests"]["cpu"] == "200m"
    files = {r.name: r.inputs["file"] for r in run.of_type("kubernetes:yaml/v2:ConfigFile")}
    assert files["gateway-api-gateway-api-crds"].endswith("/v1.5.1/standard-install.yaml")
    assert files["gateway-api-inference-pool-crd"].endswith("/v1.5.0/v1-manifests.yaml")
    controller = run.named("gateway-api-load-balancer-controller").inputs
    assert controller["version"] == "3.5.0" and controller["values"]["clusterName"] == "inference-eks"
    # Without it the chart makes a new webhook CA and certificate at every render, so every preview
    # (a weight toggle's included) would show the Secret and both webhook configurations changing.
    assert controller["values"]["keepTLSSecret"] is True
    role = controller["values"]["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role == "arn:aws:iam::123456789012:role/gateway-api-load-balancer-controller-role"
    trust = json.loads(run.named("gateway-api-load-balancer-controller-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Condition"]["StringEquals"]["oidc.eks.us-west-2.amazonaws.com/id/ABC:sub"] == (
        "system:serviceaccount:kube-system:aws-load-balancer-controller")
    epp = picker_config(run, "qwen")[1]["router"]["epp"]
    assert epp["resources"]["requests"] == {"cpu": "250m", "memory": "512Mi"}
    assert not run.of_type("aws-native:sagemaker:Cluster") and not any("inference-addon" in r.name for r in run.resources)
    assert "gateway-api-load-balancer-controller" in dependency_names(run, run.named("gateway-api-gateway"))


def test_turning_prefix_off_changes_only_the_pickers_config_and_rolls_them():
    before = eks_run(**{"weights.prefix": "3"})
    after = eks_run(**{"weights.prefix": "0"})
    inputs_before = {(r.type, r.name): comparable(r.inputs) for r in before.resources}
    inputs_after = {(r.type, r.name): comparable(r.inputs) for r in after.resources}
    assert inputs_before.keys() == inputs_after.keys()
    changed = sorted(name for (_, name) in inputs_before if inputs_before[(_, name)] != inputs_after[(_, name)])
    assert changed == ["router-qwen-router", "router-qwen-small-router"]
    # So the monitors, rules and dashboards (observability is on) are as they were; with a scaler
    # too in tests/test_observability.py.
    assert {kind for (_, name) in inputs_before if (kind := inputs_before[(_, name)].get("kind")) in
            ("PodMonitor", "PrometheusRule", "ConfigMap")} == {"PodMonitor", "PrometheusRule", "ConfigMap"}
    for model in ("qwen", "qwen-small"):
        config, values = picker_config(after, model)
        assert "prefix-cache-scorer" not in scorer_weights(config)
        assert not any(p["type"] in ("prefix-cache-scorer", "approx-prefix-cache-producer") for p in config["plugins"])
        old_values = picker_config(before, model)[1]
        annotation = router_render.CHECKSUM_ANNOTATION
        assert values["router"]["epp"]["podAnnotations"][annotation] != old_values["router"]["epp"]["podAnnotations"][annotation]
        # Everything but the configuration and its hash is as before.
        strip = lambda v: {**v, "router": {**v["router"], "epp": {k: x for k, x in v["router"]["epp"].items()  # noqa: E731
                                                                  if k not in ("pluginsCustomConfig", "podAnnotations")}}}
        assert strip(values) == strip(old_values)


def test_a_users_picker_config_runs_verbatim(tmp_path):
    path = tmp_path / "picker.yaml"
    path.write_text(PICKER_CONFIG)
    config, _ = from_stack_file("eks")
    models = config["models"]
    models[1] = {**models[1], "pickerConfigMap": {"name": "qwen-small-picker", "file": str(path)}}
    run = run_program({**config, "models": models}, stack="eks")
    epp = run.named("router-qwen-small-router").inputs["values"]["router"]["epp"]
    assert epp["pluginsCustomConfig"][epp["pluginsConfigFile"]] == PICKER_CONFIG
    assert run.outputs["effectiveWeights"]["qwen-small"] == "set by pickerConfigMap"


def test_a_single_model_needs_no_body_based_routing():
    config, _ = from_stack_file("eks")
    run = run_program({**config, "models": config["models"][1:]}, stack="eks")
    assert not any(r.name == "gateway-api-bbr" for r in run.resources)
    assert "headers" not in run.kubernetes_object("HTTPRoute", "qwen-small")["spec"]["rules"][0]["matches"][0]


@pytest.mark.parametrize(("changes", "expected"), [
    ({"weights.predictedLatency": "1"}, "inference-gateway:weights.predictedLatency = 1: has no open-source equivalent"),
    ({"gateway": {"implementation": "hyperpod"}}, "inference-gateway:gateway.implementation = 'hyperpod'"),
    ({"models": [{"name": "m", "model": "org/m", "pickerConfigMap": {"name": "p", "file": "tests/schemas/endpoint-picker-config.schema.json"}}]},
     "is not a valid EndpointPickerConfig"),
])
def test_what_the_open_source_picker_cannot_run_declares_nothing(changes, expected):
    config, _ = from_stack_file("eks")
    resources, message = registered_before_refusal({**config, **changes})
    assert resources == [] and expected in message


def test_lru_on_a_picker_without_the_plugin_declares_nothing():
    config, _ = from_stack_file("dev")
    models = [{**config["models"][1], "scheduler": "epp"}]
    resources, message = registered_before_refusal({**config, "models": models, "weights.lru": "1"})
    assert resources == [] and "no-hit LRU scorer exists only in the llm-d picker" in message


def test_without_the_load_balancer_controller_the_gateway_stays_in_the_cluster():
    config, _ = from_stack_file("eks")
    run = run_program({**config, "gateway": {**config["gateway"], "loadBalancerController": False}}, stack="eks")
    annotations = run.kubernetes_object("Gateway", "inference-gateway")["spec"]["infrastructure"]["annotations"]
    assert annotations == {"networking.istio.io/service-type": "ClusterIP"}
    assert not any("load-balancer-controller" in r.name for r in run.resources)


GATEWAY_API_VALIDATOR = Path(__file__).parent / "gateway_api" / "validate.mjs"


def gateway_api_problems(objects) -> str:
    """What the Gateway API v1 schemas say of these objects ('' when they are valid)."""
    result = subprocess.run(["node", str(GATEWAY_API_VALIDATOR)], input=json.dumps(objects), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


def test_the_gateway_and_routes_validate_against_the_gateway_api_schemas():
    from tests.test_program import as_kubernetes_json

    run = eks_run()
    objects = [as_kubernetes_json(r.inputs) for r in run.resources
               if r.inputs.get("apiVersion") == "gateway.networking.k8s.io/v1"]
    assert sorted(o["kind"] for o in objects) == ["Gateway", "HTTPRoute", "HTTPRoute"]
    assert gateway_api_problems(objects) == ""
    broken = json.loads(json.dumps(objects))
    broken[1]["spec"]["rules"][0]["matches"][0]["path"]["type"] = "Prefix"
    assert "must be equal to one of the allowed values" in gateway_api_problems(broken)
