"""The precise prefix index (`routing.prefixIndex: precise`) under mocks on the eks stack: the picker
indexes the KV-cache events of the model's own vLLM pods, so the picker config, every vLLM pod, the
NetworkPolicy and the dashboard must agree, and what cannot agree is refused before anything exists."""

import json
import re
from pathlib import Path

import jsonschema
import pytest

from components.observability import dashboard
from components.llmd_router import render as router_render
from settings import load_stack
from settings.picker_config import (PRECISE_PRODUCER, endpoint_picker_config_yaml, load_endpoint_picker_config,
                                    precise_block_tokens, render_endpoint_picker_config, speculative_ttl_seconds)
from tests.stack.program import run_program
from tests.test_program import changed_resources, from_stack_file, registered_before_refusal
from tests.test_program_eks import PICKER_SCHEMA, picker_config
from tests.test_program_security import objects, selector_problems
from tests.test_observability import ROUTER_METRICS

PRECISE = {"routing.prefixIndex": "precise"}
PICKER_LABELS = {"qwen": {"llm-d-router-gateway": "qwen-epp"}, "qwen-small": {"llm-d-router-gateway": "qwen-small-epp"}}


def eks(models=None, **changes):
    config, _ = from_stack_file("eks")
    if models is not None:
        config["models"] = [{**entry, **models.get(index, {})} for index, entry in enumerate(config["models"])]
    return {**config, **changes}


def vllm_container(run, model):
    (container,) = run.kubernetes_object("Deployment", f"vllm-{model}")["spec"]["template"]["spec"]["containers"]
    return container


def flag(args, name):
    """The value after `name` in an argument list (None when absent)."""
    return args[args.index(name) + 1] if name in args else None


def producer(config):
    (spec,) = [spec for spec in load_endpoint_picker_config(config).plugins if spec.type == PRECISE_PRODUCER]
    return spec


def test_each_picker_indexes_its_models_pods_on_vllms_own_tokens():
    run = run_program(eks(**PRECISE), stack="eks")
    settings = load_stack("eks")
    for model in settings.models:
        config, _ = picker_config(run, model.name)
        jsonschema.validate(config, PICKER_SCHEMA)
        loaded = load_endpoint_picker_config(config)
        # Nothing the loader would warn of: the producer finds pods and keys vLLM's tokens.
        assert loaded.warnings == ()
        assert loaded.plugin("prefix-cache-scorer").parameters["prefixMatchInfoProducerName"] == PRECISE_PRODUCER
        assert "approx-prefix-cache-producer" not in {spec.type for spec in loaded.plugins}
        assert {"pluginRef": "endpoint-notification-source", "extractors": [{"pluginRef": PRECISE_PRODUCER}]} in (
            config["dataLayer"]["sources"])
        tokens = loaded.plugin("token-producer").parameters
        # The model requests carry, and the model's own Service on vLLM's port.
        service = run.kubernetes_object("Service", model.deployment)
        assert tokens["modelName"] == model.model
        assert tokens["vllm"]["url"] == (f"http://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:"
                                         f"{int(service['spec']['ports'][0]['port'])}")
        assert producer(config).parameters["indexerConfig"]["kvBlockIndexConfig"]["enableMetrics"] is True
    assert run.outputs["routing"]["qwen"] == {"recipe": "weights", "prefixIndex": "precise", "blockSize": 64,
                                              "speculativeIndexing": False}


def test_every_vllm_pod_publishes_the_events_its_picker_reads():
    run = run_program(eks(**PRECISE), stack="eks")
    for model in load_stack("eks").models:
        container = vllm_container(run, model.name)
        args = container["args"]
        events = json.loads(flag(args, "--kv-events-config"))
        assert events["enable_kv_cache_events"] is True and events["publisher"] == "zmq"
        # A `*` endpoint binds (vLLM's ZmqEventPublisher); the picker dials each pod there.
        assert events["endpoint"] == "tcp://*:5557" and "replay_endpoint" not in events
        prefix, pod, served = events["topic"].split("@")
        assert (prefix, pod, served) == ("kv", "$(POD_IP)", model.model)
        assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in container["env"]
        block = precise_block_tokens(producer(picker_config(run, model.name)[0]).parameters)
        assert int(flag(args, "--block-size")) == block == 64
        assert "--enable-scale-out" in args
        assert {"name": "kv-events", "containerPort": 5557, "protocol": "TCP"} in container["ports"]


def test_only_the_models_own_pickers_reach_its_event_port():
    run = run_program(eks(**PRECISE), stack="eks")
    policies = objects(run, "NetworkPolicy")
    assert selector_problems(run, policies) == []
    for model in ("qwen", "qwen-small"):
        rules = run.kubernetes_object("NetworkPolicy", f"vllm-{model}-ingress")["spec"]["ingress"]
        to_events = [rule for rule in rules if {"protocol": "TCP", "port": 5557} in rule["ports"]]
        assert to_events == [{"from": [{"podSelector": {"matchLabels": PICKER_LABELS[model]}}],
                              "ports": [{"protocol": "TCP", "port": 5557}]}]
        # vLLM's port, where the pickers ask /render for tokens, admits them as before.
        assert {"podSelector": {"matchLabels": PICKER_LABELS[model]}} in rules[0]["from"]
    # The pickers' own policy admits only what it did; their egress is not restricted.
    assert "Egress" not in json.dumps(policies)


def test_an_approximate_model_beside_a_precise_one_is_left_as_it_was():
    before = run_program(eks(), stack="eks")
    after = run_program(eks(models={1: {"routing": {"prefixIndex": "precise"}}}), stack="eks")
    assert sorted(name for _, name in changed_resources(before, after)) == [
        "front-door-vllm-qwen-small-ingress", "model-qwen-small-deployment", "observability-qwen-small-dashboard",
        "router-qwen-small-router"]
    # Stack-wide precise, and one model keeping the approximate index.
    mixed = run_program(eks(models={0: {"routing": {"prefixIndex": "approximate"}}}, **PRECISE), stack="eks")
    assert vllm_container(mixed, "qwen") == vllm_container(before, "qwen")
    assert picker_config(mixed, "qwen") == picker_config(before, "qwen")
    assert "--kv-events-config" in vllm_container(mixed, "qwen-small")["args"]


def test_turning_prefix_off_under_precise_still_rolls_only_the_pickers():
    before = run_program(eks(**PRECISE, **{"weights.prefix": "3"}), stack="eks")
    after = run_program(eks(**PRECISE, **{"weights.prefix": "0"}), stack="eks")
    assert sorted(name for _, name in changed_resources(before, after)) == ["router-qwen-router",
                                                                             "router-qwen-small-router"]
    annotation = router_render.CHECKSUM_ANNOTATION
    for model in ("qwen", "qwen-small"):
        config, values = picker_config(after, model)
        assert "prefix-cache-scorer" not in {plugin["type"] for plugin in config["plugins"]}
        old = picker_config(before, model)[1]["router"]["epp"]["podAnnotations"][annotation]
        assert values["router"]["epp"]["podAnnotations"][annotation] != old


def test_speculative_entries_are_upstreams_with_its_two_second_ttl():
    run = run_program(eks(**PRECISE, **{"routing.speculativeIndexing": "true"}), stack="eks")
    parameters = producer(picker_config(run, "qwen")[0]).parameters
    assert parameters["speculativeIndexing"] is True and speculative_ttl_seconds(parameters) == 2.0


def test_the_sticky_recipe_reads_the_precise_index_too():
    run = run_program(eks(models={1: {"routing": {"recipe": "sticky", "prefixIndex": "precise", "blockSize": 128}}}),
                      stack="eks")
    config, _ = picker_config(run, "qwen-small")
    loaded = load_endpoint_picker_config(config)
    assert loaded.warnings == ()
    assert loaded.plugin("prefix-cache-affinity-filter").parameters["prefixMatchInfoProducerName"] == PRECISE_PRODUCER
    assert precise_block_tokens(producer(config).parameters) == 128
    assert flag(vllm_container(run, "qwen-small")["args"], "--block-size") == "128"


def precise_file(tmp_path, block=128, **events):
    """A picker file of upstream's shape with the precise producer at `block` tokens."""
    document = render_endpoint_picker_config({"prefix": 2, "queue": 1}, None)
    document["plugins"] = [plugin for plugin in document["plugins"] if plugin["type"] != "approx-prefix-cache-producer"]
    producer_parameters = {"tokenProcessorConfig": {"blockSizeTokens": block}, **({"kvEventsConfig": events} if events
                                                                                   else {})}
    document["plugins"] = [
        {"type": "token-producer", "parameters": {"modelName": "Qwen/Qwen2.5-0.5B-Instruct",
                                                  "vllm": {"url": "http://vllm-qwen-small:8000"}}},
        {"type": "endpoint-notification-source"}, {"type": "metrics-data-source"}, {"type": "core-metrics-extractor"},
        {"type": PRECISE_PRODUCER, "parameters": producer_parameters},
        *[{**plugin, "parameters": {"prefixMatchInfoProducerName": PRECISE_PRODUCER}}
          if plugin["type"] == "prefix-cache-scorer" else plugin for plugin in document["plugins"]]]
    document["dataLayer"] = {"sources": [
        {"pluginRef": "metrics-data-source", "extractors": [{"pluginRef": "core-metrics-extractor"}]},
        {"pluginRef": "endpoint-notification-source", "extractors": [{"pluginRef": PRECISE_PRODUCER}]}]}
    path = tmp_path / "precise.yaml"
    path.write_text(endpoint_picker_config_yaml(document))
    return str(path)


def test_a_picker_file_with_the_precise_producer_runs_verbatim_and_vllm_follows_its_block_size(tmp_path):
    path = precise_file(tmp_path, block=128)
    run = run_program(eks(models={1: {"pickerConfigMap": {"name": "precise", "file": path},
                                      "routing": {"prefixIndex": "precise"}}}), stack="eks")
    epp = run.named("router-qwen-small-router").inputs["values"]["router"]["epp"]
    assert epp["pluginsCustomConfig"][epp["pluginsConfigFile"]] == Path(path).read_text()
    assert flag(vllm_container(run, "qwen-small")["args"], "--block-size") == "128"
    rules = run.kubernetes_object("NetworkPolicy", "vllm-qwen-small-ingress")["spec"]["ingress"]
    assert rules[-1] == {"from": [{"podSelector": {"matchLabels": PICKER_LABELS["qwen-small"]}}],
                         "ports": [{"protocol": "TCP", "port": 5557}]}


def test_the_dashboard_shows_the_index_of_precise_models_only_from_what_the_router_exports():
    run = run_program(eks(models={1: {"routing": {"prefixIndex": "precise"}}}), stack="eks")
    titles = {model: [panel["title"] for panel in json.loads(
        run.kubernetes_object("ConfigMap", f"routing-{model}")["data"][f"routing-{model}.json"])["panels"]]
        for model in ("qwen", "qwen-small")}
    precise = [title for title in titles["qwen-small"] if title.startswith("Precise index")]
    assert precise == ["Precise index: blocks held per lookup", "Precise index: block keys admitted and evicted",
                       "Precise index: events received per vLLM pod", "Precise index: subscribed pods and ZMQ errors"]
    assert not [title for title in titles["qwen"] if title.startswith("Precise index")]
    settings = precise_settings()
    families = set(ROUTER_METRICS["families"]) | set(ROUTER_METRICS["preciseIndexFamilies"])
    names = {name for model in settings.models for expr in dashboard.every_expression(settings, model)
             for name in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr) if not name.startswith("vllm:")}
    assert {name for name in names if "kv_cache_index" in name or "kv_cache_events" in name}
    assert {re.sub(r"_bucket$", "", name) for name in names} <= families


def precise_settings():
    from settings import parse_settings, read_stack_config, stack_file

    raw, _ = read_stack_config(stack_file("eks"))
    return parse_settings({**raw, **PRECISE}, stack="eks")


def test_every_precise_index_query_passes_promtool_check(tmp_path):
    from tests.test_observability_rules import as_recording_rules, check, required_tool

    settings = precise_settings()
    expressions = [expr for model in settings.models for panel in dashboard.precise_index_panels(settings, model)
                   for expr, _ in panel.targets]
    result = check(required_tool("promtool"), tmp_path, [as_recording_rules(expressions)])
    assert result.returncode == 0, result.stdout + result.stderr


def refusal_line(config):
    resources, message = registered_before_refusal(config)
    assert resources == []
    (line,) = [line for line in message.splitlines() if line.startswith("  - ")]
    return line


@pytest.mark.parametrize(("changes", "key", "words"), [
    ({"routing.prefixIndex": "precis"}, "routing.prefixIndex = 'precis'", "Did you mean 'precise'?"),
    ({**PRECISE, "routing.blockSize": "16"}, "routing.blockSize = '16'", "multiple of 32"),
    ({**PRECISE, "routing.blockSize": "96.5"}, "routing.blockSize = '96.5'", "whole number"),
    ({"routing.speculativeIndexing": "true"}, "routing.speculativeIndexing = True",
     "applies to the precise prefix index, and routing.prefixIndex is 'approximate'"),
    ({"routing.blockSize": "128"}, "routing.blockSize = 128", "`pulumi config set --path routing.prefixIndex precise`"),
])
def test_a_bad_stack_wide_precise_value_is_one_line_with_nothing_declared(changes, key, words):
    line = refusal_line(eks(**changes))
    assert f"inference-gateway:{key}: " in line and words in line


@pytest.mark.parametrize(("model", "key", "words"), [
    ({"routing": {"prefixIndex": "precise"}, "extraArgs": ["--block-size", "128"]}, "models[1].extraArgs = '--block-size'",
     "pulumi config set --path models[1].routing.blockSize"),
    ({"routing": {"prefixIndex": "precise"}, "extraArgs": ["--kv_events_config.topic=x"]},
     "models[1].extraArgs = '--kv_events_config.topic=x'", "sets --kv-events-config"),
    ({"routing": {"prefixIndex": "precise"}, "model": "org/model@v2"}, "models[1].model = 'org/model@v2'",
     "splits vLLM's event topic"),
    ({"routing": {"prefixIndex": "approximate", "speculativeIndexing": False}},
     "models[1].routing.speculativeIndexing = False", "applies to the precise prefix index"),
])
def test_a_precise_model_that_contradicts_it_is_one_line_with_nothing_declared(model, key, words):
    line = refusal_line(eks(models={1: model}))
    assert f"inference-gateway:{key}: " in line and words in line


@pytest.mark.parametrize(("where", "key"), [("model", "models[1].routing.prefixIndex"), ("stack", "routing.prefixIndex")])
def test_hyperpod_refuses_the_precise_index_saying_why(where, key):
    config, _ = from_stack_file("dev")
    if where == "model":
        config["models"][1] = {**config["models"][1], "routing": {"prefixIndex": "precise"}}
    else:
        config["routing"] = {"prefixIndex": "precise"}
    line = refusal_line(config)
    assert f"inference-gateway:{key} = 'precise': runs only on gateway.implementation llm-d" in line
    assert "AWS does not publish which llm-d release its picker runs" in line and "v0.9.0" in line


@pytest.mark.parametrize(("file_args", "routing", "words"), [
    ({"block": 128, "zmqEndpoint": "tcp://*:5557"}, {"prefixIndex": "precise"}, "kvEventsConfig.zmqEndpoint"),
    ({"block": 128, "podDiscoveryConfig": {"socketPort": 6000}}, {"prefixIndex": "precise"}, "socketPort 6000"),
    ({"block": 128, "podDiscoveryConfig": {"replaySocketPort": 5558}}, {"prefixIndex": "precise"},
     "replaySocketPort 5558"),
    ({"block": 48}, {"prefixIndex": "precise"}, "blockSizeTokens 48 is vLLM's --block-size here"),
    ({"block": 128}, {"prefixIndex": "precise", "blockSize": 64}, "differs from the blockSizeTokens (128)"),
    ({"block": 128}, {"prefixIndex": "precise", "speculativeIndexing": True}, "Set speculativeIndexing in its"),
    ({"block": 128}, {}, "Set `pulumi config set --path models[1].routing.prefixIndex precise`"),
    (None, {"prefixIndex": "precise"}, "declares no precise-prefix-cache-producer"),
])
def test_a_picker_file_the_pods_cannot_feed_is_one_line_with_nothing_declared(tmp_path, file_args, routing, words):
    if file_args is None:
        from tests.test_settings_hyperpod import write_picker_config
        path = write_picker_config(tmp_path)
    else:
        path = precise_file(tmp_path, **file_args)
    line = refusal_line(eks(models={1: {"pickerConfigMap": {"name": "p", "file": path}, "routing": routing}}))
    assert "inference-gateway:models[1]." in line or "inference-gateway:routing." in line
    assert words in line

