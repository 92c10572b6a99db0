"""EndpointPickerConfig: rendered from weights, loaded as llm-d router v0.10 loads it, and the
picker model built from it plugin by plugin."""

import subprocess
import sys
import textwrap

import pytest

from routing.picker.endpoint_picker import EndpointPicker, PodMetrics, Request
from settings import DEFAULT_WEIGHTS, WEIGHT_NAMES
from settings.picker_config import (KNOWN_TYPES, MODELLED_TYPES, WEIGHT_PLUGIN_TYPES, PickerConfigError,
                                    endpoint_picker_config_yaml, load_endpoint_picker_config,
                                    render_endpoint_picker_config)

HEADER = {"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig"}
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def config(**fields):
    return {**HEADER, **fields}


def refused(document) -> str:
    with pytest.raises(PickerConfigError) as error:
        load_endpoint_picker_config(document)
    return str(error.value)


def request(text: str) -> Request:
    return Request(model=MODEL, prompt=text)


# -- rendering from weights ------------------------------------------------------------------------

def test_default_weights_render_upstreams_default_profile():
    assert render_endpoint_picker_config(DEFAULT_WEIGHTS) == {
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "queue-scorer"}, {"type": "kv-cache-utilization-scorer"},
                    {"type": "approx-prefix-cache-producer"}, {"type": "prefix-cache-scorer"},
                    {"type": "max-score-picker"}, {"type": "single-profile-handler"}],
        "schedulingProfiles": [{"name": "default", "plugins": [
            {"pluginRef": "queue-scorer", "weight": 2}, {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
            {"pluginRef": "prefix-cache-scorer", "weight": 3}, {"pluginRef": "max-score-picker"}]}],
    }


def test_a_zero_weight_leaves_its_scorer_out_and_lru_alone_still_gets_the_producer():
    rendered = render_endpoint_picker_config({"prefix": 0, "queue": 3, "kvCache": 2, "lru": 1, "predictedLatency": 0})
    assert [plugin["type"] for plugin in rendered["plugins"]] == [
        "queue-scorer", "kv-cache-utilization-scorer", "approx-prefix-cache-producer", "no-hit-lru-scorer",
        "max-score-picker", "single-profile-handler"]
    assert [entry["pluginRef"] for entry in rendered["schedulingProfiles"][0]["plugins"]] == [
        "queue-scorer", "kv-cache-utilization-scorer", "no-hit-lru-scorer", "max-score-picker"]


def test_rendering_does_not_depend_on_the_order_weights_come_in():
    every = {"lru": 1, "loraAffinity": 4, "runningRequests": 5, "prefix": 3, "kvCache": 2, "queue": 6}
    assert render_endpoint_picker_config(every) == render_endpoint_picker_config(dict(reversed(every.items())))
    refs = render_endpoint_picker_config(every)["schedulingProfiles"][0]["plugins"]
    assert [(entry["pluginRef"], entry.get("weight")) for entry in refs] == [
        ("queue-scorer", 6), ("kv-cache-utilization-scorer", 2), ("prefix-cache-scorer", 3),
        ("running-requests-size-scorer", 5), ("lora-affinity-scorer", 4), ("no-hit-lru-scorer", 1),
        ("max-score-picker", None)]


def test_the_rendered_yaml_is_stable_text_that_loads_back():
    weights = {"prefix": 3, "queue": 2, "kvCache": 2, "lru": 1}
    text = endpoint_picker_config_yaml(render_endpoint_picker_config(weights))
    assert text == endpoint_picker_config_yaml(render_endpoint_picker_config(dict(reversed(weights.items()))))
    assert text.startswith("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n")
    assert load_endpoint_picker_config(text) == load_endpoint_picker_config(render_endpoint_picker_config(weights))


def test_predicted_latency_is_refused_with_the_reason():
    with pytest.raises(PickerConfigError, match="predictedLatency=1: the open-source picker has no equivalent "
                                                "without the latency-predictor sidecars"):
        render_endpoint_picker_config({"predictedLatency": 1, "queue": 2})


def test_bad_weights_are_each_named_with_the_fix():
    with pytest.raises(PickerConfigError) as error:
        render_endpoint_picker_config({"prefx": 3, "queue": -1, "kvCache": "2", "lru": True})
    message = str(error.value)
    assert "prefx=3: not a scorer weight (did you mean prefix?)" in message
    assert "queue=-1: weights are non-negative numbers, e.g. queue=2" in message
    assert "kvCache='2'" in message and "lru=True" in message


def test_weight_names_are_the_stack_settings_weight_names():
    assert set(WEIGHT_PLUGIN_TYPES) | {"predictedLatency"} == set(WEIGHT_NAMES)


def test_the_module_imports_only_the_standard_library_and_yaml():
    # The Pulumi program imports it: nothing of the routing toolkit, nor its own dependencies, may load.
    probe = ("import sys, settings.picker_config; "
             "print(sorted(m for m in ('xxhash', 'aiohttp', 'tokenizers', 'pulumi', 'routing') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


# -- loading: defaulting ---------------------------------------------------------------------------

def test_rendered_weights_load_back_as_the_same_profile():
    loaded = load_endpoint_picker_config(render_endpoint_picker_config(DEFAULT_WEIGHTS))
    (profile,) = loaded.scheduling_profiles
    assert [(entry.plugin_ref, entry.weight) for entry in profile.plugins] == [
        ("queue-scorer", 2.0), ("kv-cache-utilization-scorer", 2.0), ("prefix-cache-scorer", 3.0),
        ("max-score-picker", None)]
    assert loaded.warnings == ()


def test_defaulting_fills_names_profile_weights_picker_handler_and_producer():
    loaded = load_endpoint_picker_config(config(plugins=[{"type": "queue-scorer"}, {"type": "prefix-cache-scorer"}]))
    assert [(spec.name, spec.type) for spec in loaded.plugins] == [
        ("queue-scorer", "queue-scorer"), ("prefix-cache-scorer", "prefix-cache-scorer"),
        ("single-profile-handler", "single-profile-handler"), ("max-score-picker", "max-score-picker"),
        ("approx-prefix-cache-producer", "approx-prefix-cache-producer")]
    (profile,) = loaded.scheduling_profiles
    assert profile.name == "default"
    assert [(entry.plugin_ref, entry.weight) for entry in profile.plugins] == [
        ("queue-scorer", 1.0), ("prefix-cache-scorer", 1.0), ("max-score-picker", None)]
    producer = loaded.plugin("approx-prefix-cache-producer")
    assert dict(producer.parameters) == {"autoTune": True, "blockSizeTokens": 16, "blockSize": 0,
                                         "maxPrefixBlocksToMatch": 2048, "maxPrefixTokensToMatch": 131072,
                                         "lruCapacityPerServer": 31250}
    assert producer.origin.startswith("added")


def test_naming_the_default_producer_explicitly_still_creates_it():
    loaded = load_endpoint_picker_config(config(plugins=[
        {"type": "prefix-cache-scorer", "parameters": {"prefixMatchInfoProducerName": "approx-prefix-cache-producer"}}]))
    assert loaded.plugin("approx-prefix-cache-producer").origin.startswith("added")


def test_a_profile_without_a_picker_gets_the_declared_one_and_a_scorer_without_weight_gets_one():
    loaded = load_endpoint_picker_config(config(
        plugins=[{"type": "kv-cache-utilization-scorer", "name": "kv"}, {"type": "max-score-picker", "name": "best"}],
        schedulingProfiles=[{"name": "only", "plugins": [{"pluginRef": "kv"}]}]))
    assert [(entry.plugin_ref, entry.weight) for entry in loaded.scheduling_profiles[0].plugins] == [
        ("kv", 1.0), ("best", None)]


def test_the_deprecated_api_group_loads_with_a_warning():
    loaded = load_endpoint_picker_config(
        {"apiVersion": "inference.networking.x-k8s.io/v1alpha1", "kind": "EndpointPickerConfig"})
    assert any("deprecated" in warning and "llm-d.ai/v1alpha1" in warning for warning in loaded.warnings)


def test_no_plugins_at_all_is_a_profile_with_only_the_picker():
    loaded = load_endpoint_picker_config(HEADER)
    assert [entry.plugin_ref for entry in loaded.scheduling_profiles[0].plugins] == ["max-score-picker"]


@pytest.mark.parametrize("entry, check", [
    # Go's encoding/json matches keys case-insensitively, even decoding strictly.
    ({"type": "approx-prefix-cache-producer", "parameters": {"blocksizetokens": 128}},
     lambda spec, warnings: spec.parameters["blockSizeTokens"] == 128),
    # The deprecated character block size is mapped onto blockSizeTokens when that is left at 16.
    ({"type": "approx-prefix-cache-producer", "parameters": {"blockSize": 96}},
     lambda spec, warnings: spec.parameters["blockSizeTokens"] == 96 and any("blockSize" in w for w in warnings)),
    ({"type": "approx-prefix-cache-producer", "parameters": {"blockSizeTokens": 0, "autoTune": True}},
     lambda spec, warnings: spec.parameters["blockSizeTokens"] == 0),
    # YAML becomes JSON before Go decodes it: 128.0 reaches an int field as 128.
    ({"type": "approx-prefix-cache-producer", "parameters": {"lruCapacityPerServer": 128.0}},
     lambda spec, warnings: spec.parameters["lruCapacityPerServer"] == 128),
    # Parameter-less scorers' factories never read their parameters.
    ({"type": "queue-scorer", "parameters": {"anything": 1}},
     lambda spec, warnings: any("ignores" in w for w in warnings)),
])
def test_parameters_upstream_accepts_are_accepted(entry, check):
    loaded = load_endpoint_picker_config(config(plugins=[entry]))
    assert check(loaded.plugins[0], loaded.warnings)


def test_a_negative_weight_is_accepted_as_upstream_does_with_a_warning():
    loaded = load_endpoint_picker_config(config(plugins=[{"type": "queue-scorer"}], schedulingProfiles=[
        {"name": "default", "plugins": [{"pluginRef": "queue-scorer", "weight": -1}]}]))
    assert loaded.scheduling_profiles[0].plugins[0].weight == -1.0
    assert any("penalty" in warning for warning in loaded.warnings)


def test_the_loaded_config_is_immutable():
    loaded = load_endpoint_picker_config(render_endpoint_picker_config(DEFAULT_WEIGHTS))
    with pytest.raises(TypeError):
        loaded.plugin("approx-prefix-cache-producer").parameters["autoTune"] = False
    with pytest.raises(AttributeError):
        loaded.plugins = ()


# -- loading: refusals -----------------------------------------------------------------------------

@pytest.mark.parametrize("document, expected", [
    ({"apiVersion": "v1", "kind": "EndpointPickerConfig"}, "apiVersion: 'v1' is not a version the llm-d router v0.10 "
                                                           "reads; set apiVersion: llm-d.ai/v1alpha1"),
    ({"apiVersion": "llm-d.ai/v1alpha1", "kind": "PickerConfig"}, "kind: 'PickerConfig' is not EndpointPickerConfig"),
    (config(metadata={"name": "x"}), "metadata: not a field of EndpointPickerConfig"),
    (config(plugins=[{"name": "q"}]), "plugins[0]: plugin 'q' has no type"),
    (config(plugins=[{"type": "queue-scorr"}]), "plugins[0].type: plugin type 'queue-scorr' is not registered in "
                                                "the llm-d router v0.10; did you mean queue-scorer?"),
    (config(plugins=[{"type": "queue-scorer"}, {"type": "queue-scorer"}]), "plugins[1]: duplicate plugin name "
                                                                          "'queue-scorer'"),
    (config(plugins=[{"type": "queue-scorer", "weight": 2}]), "plugins[0].weight: not a plugin field"),
    (config(plugins=[{"type": "max-score-picker", "parameters": {"maxEndpoints": 2}}]),
     "plugins[0].parameters.maxEndpoints: max-score-picker (max-score-picker) has no parameter 'maxEndpoints' "
     "(upstream decodes parameters strictly); accepted: maxNumOfEndpoints"),
    (config(plugins=[{"type": "approx-prefix-cache-producer", "parameters": {"autoTune": "yes"}}]),
     "plugins[0].parameters.autoTune: 'yes' is not true or false"),
    (config(plugins=[{"type": "approx-prefix-cache-producer", "parameters": {"blockSizeTokens": 12.5}}]),
     "plugins[0].parameters.blockSizeTokens: 12.5 is not a whole number"),
    (config(plugins=[{"type": "approx-prefix-cache-producer", "parameters": [1]}]),
     "plugins[0].parameters: must be a mapping of approx-prefix-cache-producer's parameters"),
    (config(plugins=[{"type": "approx-prefix-cache-producer",
                      "parameters": {"autoTune": False, "blockSizeTokens": 0}}]),
     "plugins[0].parameters.blockSizeTokens: 0 with autoTune false; the block size must be > 0"),
    (config(plugins=[{"type": "approx-prefix-cache-producer", "parameters": {"maxPrefixTokensToMatch": -1}}]),
     "plugins[0].parameters.maxPrefixTokensToMatch: -1 is negative"),
    (config(plugins=[{"type": "prefix-cache-scorer", "parameters": {"matchLengthWeight": 1.5}}]),
     "plugins[0].parameters.matchLengthWeight: 1.5 is outside 0.0..1.0"),
    (config(plugins=[{"type": "prefix-cache-scorer",
                      "parameters": {"matchLengthWeight": 0.5, "matchLengthScaleTokens": 0}}]),
     "plugins[0].parameters.matchLengthScaleTokens: 0 with matchLengthWeight > 0; it must be > 0"),
    (config(plugins=[{"type": "prefix-cache-scorer", "parameters": {"prefixMatchInfoProducerName": "mine"}}]),
     "plugins[0].parameters.prefixMatchInfoProducerName: no plugin named 'mine' produces prefix match info"),
    (config(plugins=[{"type": "queue-scorer"}], schedulingProfiles=[{"name": "a", "plugins": [{"pluginRef": "q"}]}]),
     "schedulingProfiles[0].plugins[0].pluginRef: references undefined plugin 'q'; declare it under plugins "
     "(defined: queue-scorer)"),
    (config(plugins=[{"type": "queue-scorer"}],
            schedulingProfiles=[{"name": "a", "plugins": [{"pluginRef": "queue-scorer", "weight": "2"}]}]),
     "schedulingProfiles[0].plugins[0].weight: '2' is not a number"),
    (config(schedulingProfiles=[{"plugins": []}]), "schedulingProfiles[0]: is missing a name"),
    (config(schedulingProfiles=[{"name": "a"}, {"name": "a"}]), "schedulingProfiles[1]: duplicate profile name 'a'"),
    (config(schedulingProfiles=[{"name": "a"}, {"name": "b"}]), "2 profiles and no profile handler"),
    (config(plugins=[{"type": "max-score-picker"}, {"type": "random-picker"}], schedulingProfiles=[
        {"name": "a", "plugins": [{"pluginRef": "max-score-picker"}, {"pluginRef": "random-picker"}]}]),
     "profile 'a' lists pickers max-score-picker, random-picker; a profile has one picker"),
    (config(plugins=[{"type": "max-score-picker"}, {"type": "random-picker"}], schedulingProfiles=[{"name": "a"}]),
     "profile 'a' has no picker and several are declared"),
    (config(featureGates=["fastPath"]), "featureGates[0]: 'fastPath' is not a feature gate"),
    (config(featureGates=["flowControl=maybe"]), "featureGates[0]: 'maybe' is not a boolean"),
    ([1, 2], "the config must be a mapping"),
])
def test_what_upstreams_loader_refuses_is_refused_with_where_and_the_fix(document, expected):
    assert expected in refused(document)


# -- the token producer's parameters ------------------------------------------------------------------

def token_producer(parameters) -> dict:
    return config(plugins=[{"type": "prefix-cache-scorer"}, {"type": "token-producer", "parameters": parameters}])


# tokenizer_test.go@v0.10.0 TestPluginFactory_Validation (llm-d-router, dataproducer/tokenizer): its
# parameters, and what the factory's error says (None: accepted).
UPSTREAM_FACTORY_CASES = [
    ({}, None),
    (None, None),
    ({"vllm": {}}, "'modelName' must be specified"),
    ({"estimate": {"image": {"mode": "static", "static": {"staticToken": 8}}}}, None),
    ({"estimate": {"image": {"mode": "bogus"}}}, "estimate.image.mode must be"),
]


@pytest.mark.parametrize("parameters, upstream_error", UPSTREAM_FACTORY_CASES)
def test_token_producer_parameters_are_accepted_and_refused_as_upstreams_factory_does(parameters, upstream_error):
    if upstream_error is None:
        assert load_endpoint_picker_config(token_producer(parameters)).plugin("token-producer")
    else:
        # The refusal says the same thing in the loader's words: the place, the value, the fix.
        expected = {"'modelName' must be specified": "plugins[1].parameters.modelName: missing; the vllm backend",
                    "estimate.image.mode must be": "plugins[1].parameters.estimate.image.mode: 'bogus' is not a mode "
                                                   "upstream accepts; use dynamic or static"}[upstream_error]
        assert expected in refused(token_producer(parameters))


@pytest.mark.parametrize("estimate, expected", [
    ({"video": {"tokensPerFrame": {"mode": "fixed"}}},
     "plugins[1].parameters.estimate.video.tokensPerFrame.mode: 'fixed' is not a mode upstream accepts; use dynamic "
     "or static (dynamic: width x height / factor per frame; static: a constant per frame), e.g. mode: static"),
    ({"video": {"frames": {"mode": "uniform"}}},
     "plugins[1].parameters.estimate.video.frames.mode: 'uniform' is not a mode upstream accepts; use sampled or "
     "strided"),
    ({"image": {"mode": "Static"}}, "plugins[1].parameters.estimate.image.mode: 'Static' is not a mode"),
    ({"image": {"mode": 1}}, "plugins[1].parameters.estimate.image.mode: 1 is not a string"),
    ({"image": {"static": {"staticToken": 1.5}}},
     "plugins[1].parameters.estimate.image.static.staticToken: 1.5 is not a whole number (placeholder tokens per "
     "image); e.g. staticToken: 64"),
    ({"image": {"dynamic": {"factor": "1024"}}}, "plugins[1].parameters.estimate.image.dynamic.factor: '1024' is not "
                                                 "a whole number"),
    ({"image": {"defaultResolution": {"width": True}}},
     "plugins[1].parameters.estimate.image.defaultResolution.width: True is not a whole number (pixels)"),
    ({"image": {"defaultResolution": {"width": 640, "depth": 3}}},
     "plugins[1].parameters.estimate.image.defaultResolution.depth: not a field here (upstream decodes parameters "
     "strictly); the fields are width, height"),
    ({"image": [640, 360]}, "plugins[1].parameters.estimate.image: [640, 360] is not a mapping"),
    ({"audio": {}}, "plugins[1].parameters.estimate.audio: not a field here (upstream decodes parameters strictly); "
                    "the fields are image, video"),
    ({"video": {"defaultDuration": "10s"}}, "plugins[1].parameters.estimate.video.defaultDuration: '10s' is not a "
                                            "number (seconds of video); e.g. defaultDuration: 10"),
    ({"video": {"maxVideoTokens": 2 ** 63}}, "plugins[1].parameters.estimate.video.maxVideoTokens: "
                                             "9223372036854775808 is not a whole number"),
    ({"video": {"tokensPerFrame": {"static": {"numTokensPerFrame": 2.5}}}},
     "plugins[1].parameters.estimate.video.tokensPerFrame.static.numTokensPerFrame: 2.5 is not a whole number"),
    ({"video": {"frames": {"minFrames": 0.5}}}, "plugins[1].parameters.estimate.video.frames.minFrames: 0.5 is not"),
    ({"video": {"frames": {"maxFrames": "16"}}}, "plugins[1].parameters.estimate.video.frames.maxFrames: '16' is not"),
    ({"video": {"frames": {"sampled": {"sampleFPS": "2"}}}},
     "plugins[1].parameters.estimate.video.frames.sampled.sampleFPS: '2' is not a number"),
    ({"video": {"frames": {"sampled": {"temporalPatchSize": 2.5}}}},
     "plugins[1].parameters.estimate.video.frames.sampled.temporalPatchSize: 2.5 is not a whole number"),
    ({"video": {"frames": {"strided": {"defaultSourceFPS": float("inf")}}}},
     "plugins[1].parameters.estimate.video.frames.strided.defaultSourceFPS: inf is not a number"),
    ({"video": {"frames": {"strided": {"frameStride": 1.5}}}},
     "plugins[1].parameters.estimate.video.frames.strided.frameStride: 1.5 is not a whole number"),
    ({"video": {"frames": {"stride": 4}}}, "plugins[1].parameters.estimate.video.frames.stride: not a field here"),
    ("static", "plugins[1].parameters.estimate: 'static' is not a mapping"),
])
def test_each_bad_estimate_value_is_refused_at_its_place(estimate, expected):
    assert expected in refused(token_producer({"estimate": estimate}))


def test_estimates_decode_as_gos_json_does():
    # Field names match case-insensitively, null leaves a field unset, 16.0 is the int 16.
    loaded = load_endpoint_picker_config(token_producer({"estimate": {
        "Image": {"MODE": "static", "static": {"staticToken": 16.0}, "dynamic": None}, "video": None}}))
    assert loaded.plugin("token-producer").parameters["estimate"] == {"image": {"mode": "static",
                                                                                "static": {"staticToken": 16}}}


@pytest.mark.parametrize("parameters, expected", [
    ({"estimate": {}, "modelName": MODEL}, "plugins[1].parameters: estimate and modelName select different token "
                                           "backends (modelName alone selects vllm); upstream's factory takes only "
                                           "one of 'estimate', 'vllm' or 'udsTokenizerConfig'"),
    ({"estimate": {}, "vllm": {"url": "http://x"}, "modelName": MODEL}, "plugins[1].parameters: estimate and vllm "
                                                                        "and modelName select different"),
    ({"udsTokenizerConfig": {"socketFile": "/tmp/t.sock"}}, "plugins[1].parameters.modelName: missing; the "
                                                            "udsTokenizerConfig backend"),
    # Upstream's modelName also selects vllm, so a uds backend never loads in v0.10.0.
    ({"udsTokenizerConfig": {"socketFile": "/tmp/t.sock"}, "modelName": MODEL},
     "plugins[1].parameters: modelName and udsTokenizerConfig select different token backends"),
])
def test_only_one_token_backend_is_accepted(parameters, expected):
    assert expected in refused(token_producer(parameters))


def test_prefix_tuning_on_the_scorer_is_refused_with_where_it_moved():
    message = refused(textwrap.dedent("""\
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: queue-scorer
        - type: kv-cache-utilization-scorer
        - type: prefix-cache-scorer
          parameters:
            blockSize: 64
        """))
    assert message.startswith("plugins[2].parameters.blockSize: prefix-cache-scorer (prefix-cache-scorer) has no "
                              "parameter 'blockSize'")
    assert "accepted: prefixMatchInfoProducerName, matchLengthWeight, matchLengthScaleTokens" in message
    assert "declare a plugin of type approx-prefix-cache-producer with parameters: {blockSize: ...}" in message


def test_yaml_with_a_duplicate_key_is_refused():
    text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins: []\nplugins: []\n"
    assert "line 4: key 'plugins' appears twice" in refused(text)


def test_text_that_is_not_yaml_is_refused():
    assert "not YAML or JSON" in refused("apiVersion: [unclosed")


def test_every_modelled_type_is_a_known_type():
    assert MODELLED_TYPES < KNOWN_TYPES
    assert {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "approx-prefix-cache-producer",
            "running-requests-size-scorer", "lora-affinity-scorer", "no-hit-lru-scorer", "max-score-picker",
            "single-profile-handler"} <= MODELLED_TYPES


# -- the picker model built from a config -----------------------------------------------------------

HAND_WRITTEN = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: long-blocks
  type: approx-prefix-cache-producer
  parameters: {autoTune: false, blockSizeTokens: 128, maxPrefixTokensToMatch: 384, lruCapacityPerServer: 4}
- name: prefix
  type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: long-blocks, matchLengthWeight: 0.5, matchLengthScaleTokens: 512}
- name: busy
  type: running-requests-size-scorer
- name: rotate
  type: no-hit-lru-scorer
  parameters: {prefixMatchInfoProducerName: long-blocks, lruSize: 1}
- type: max-score-picker
  parameters: {maxNumOfEndpoints: 2}
- type: metrics-data-source
  parameters: {scheme: http, path: /metrics}
schedulingProfiles:
- name: tuned
  plugins:
  - {pluginRef: prefix, weight: 4.5}
  - {pluginRef: busy, weight: 0.5}
  - {pluginRef: rotate}
"""
# 128-token blocks of 4-byte pseudo-tokens: 512 characters each.
BLOCK = 128 * 4


def test_a_hand_written_config_builds_a_picker_with_exactly_its_plugins_parameters_and_weights():
    picker = EndpointPicker(load_endpoint_picker_config(HAND_WRITTEN), seed=0)
    # The pods report 16-token blocks and a big cache; autoTune is off, so neither is used.
    pods = [PodMetrics(name, running=running, block_size=16, num_gpu_blocks=10_000)
            for name, running in (("a", 0), ("b", 2))]
    prompt = "".join(letter * BLOCK for letter in "wxyz")
    first = picker.pick(request(prompt), pods)
    # maxPrefixTokensToMatch 384 / blockSizeTokens 128: 3 blocks hashed of the 4 written.
    assert first.total_blocks == 3 and dict(first.weights) == {"prefix": 4.5, "busy": 0.5, "rotate": 1.0}
    assert first.pod == "a"  # cold, so rotate ranks a (never used, first candidate) 1.0 and b 0.0
    assert dict(first.scores["rotate"]) == {"a": 1.0, "b": 0.0}

    second = picker.pick(request("".join(letter * BLOCK for letter in "wxqq")), pods)
    # Two of three blocks matched on a: 0.5 × min(1, 2·128/512)² + 0.5 × 2/3.
    assert second.scores["prefix"]["a"] == pytest.approx(0.5 * 0.25 + 0.5 * 2 / 3)
    assert second.scores["rotate"]["a"] == 0.5  # warm
    parts = {part.scorer: part for part in second.breakdown().pods[0].contributions}
    assert parts["prefix"].weight == 4.5 and parts["busy"].weight == 0.5 and parts["rotate"].weight == 1.0

    # lruCapacityPerServer 4 (not the pods' num_gpu_blocks): a holds at most 4 blocks.
    assert picker.prefix_index.capacity("a") == 4 and picker.prefix_index.blocks_held("a") == 4
    assert picker.ignored_plugins == ("metrics-data-source",)


def test_no_hit_lru_size_bounds_what_it_remembers():
    config_text = HAND_WRITTEN.replace("lruSize: 1", "lruSize: 2")
    for size, expected in ((1, ["p0", "p1", "p0"]), (2, ["p0", "p1", "p2"])):
        picker = EndpointPicker(load_endpoint_picker_config(HAND_WRITTEN if size == 1 else config_text), seed=0)
        pods = [PodMetrics(name) for name in ("p0", "p1", "p2")]
        picks = [picker.pick(request(letter * BLOCK), pods).pod for letter in "abc"]
        # With room for one pod, the LRU forgets p0 once p1 took a cold request: p0 counts as never used again.
        assert picks == expected, size


def test_the_weights_path_and_the_config_path_pick_alike():
    weights = {"queue": 2, "kvCache": 2, "prefix": 3, "lru": 1}
    by_weights = EndpointPicker(weights, seed=4)
    by_config = EndpointPicker.from_config(load_endpoint_picker_config(render_endpoint_picker_config(weights)), seed=4)
    pods = [PodMetrics("a", waiting=1, kv_usage=0.2), PodMetrics("b", kv_usage=0.5), PodMetrics("c")]
    prompts = [letter * 300 + tail for letter in "abcab" for tail in ("x", "y")]
    assert [by_weights.pick(request(p), pods) for p in prompts] == [by_config.pick(request(p), pods) for p in prompts]


@pytest.mark.parametrize("document, expected", [
    (config(plugins=[{"type": "load-aware-scorer"}]),
     "profile 'default': load-aware-scorer (load-aware-scorer) is a scorer this model does not reproduce"),
    (config(plugins=[{"type": "random-picker"}]), "random-picker (random-picker) is not modelled; only "
                                                  "max-score-picker is"),
    (config(plugins=[{"type": "decode-filter"}]), "decode-filter (decode-filter): filters are not modelled"),
    (config(plugins=[{"type": "disagg-profile-handler"}]),
     "plugin disagg-profile-handler (disagg-profile-handler): only single-profile-handler is modelled"),
    (config(plugins=[{"type": "token-producer", "parameters": {"vllm": {"url": "http://x"}, "modelName": MODEL},
                      "name": "tok"}]),
     "plugin tok (token-producer) tokenizes with the model's tokenizer"),
])
def test_plugins_the_model_does_not_reproduce_are_refused_when_they_would_take_part(document, expected):
    loaded = load_endpoint_picker_config(document)  # upstream runs these: loading accepts them
    with pytest.raises(PickerConfigError) as error:
        EndpointPicker(loaded)
    assert expected in str(error.value)


def test_token_producers_that_would_count_media_differently_are_refused_by_name():
    static = {"estimate": {"image": {"mode": "static", "static": {"staticToken": 64}}}}
    two = config(plugins=[{"type": "prefix-cache-scorer"}, {"type": "token-producer", "parameters": static},
                          {"type": "token-producer", "name": "second", "parameters": {"estimate": {}}}])
    with pytest.raises(PickerConfigError) as error:
        EndpointPicker(load_endpoint_picker_config(two))
    assert str(error.value).startswith(
        "token producers token-producer (plugins[1]: 64 tokens per image, 4500 tokens per video) and second "
        "(plugins[2]: image width x height / 1024 tokens (640x360 when undecodable), 4500 tokens per video) count "
        "images and videos differently; upstream runs every one and the prefix producer hashes the tokens of "
        "whichever runs first")
    # Named otherwise, a token producer leaves upstream to create the default one the prefix producer reads.
    renamed = config(plugins=[{"type": "prefix-cache-scorer"},
                              {"type": "token-producer", "name": "mine", "parameters": static}])
    with pytest.raises(PickerConfigError, match=r"token producers mine \(plugins\[1\]: 64 tokens per image, 4500 "
                                                r"tokens per video\) and token-producer \(auto-created, default "
                                                r"estimates: image width x height / 1024"):
        EndpointPicker(load_endpoint_picker_config(renamed))
    # They count alike, or nothing hashes their tokens: nothing to refuse.
    alike = config(plugins=[{"type": "prefix-cache-scorer"}, {"type": "token-producer", "name": "mine", "parameters": {
        "estimate": {"image": {"mode": "dynamic", "dynamic": {"factor": 1024}}}, "udsTokenizerConfig": {}}}])
    default_plan = EndpointPicker({"prefix": 1}).hash_plan(16)
    assert EndpointPicker(load_endpoint_picker_config(alike)).hash_plan(16) == default_plan
    no_prefix_scorer = config(plugins=[{"type": "queue-scorer"},
                                       {"type": "token-producer", "name": "mine", "parameters": static}])
    for unread, version in ((no_prefix_scorer, "v0.10"), (renamed, "v0.8")):  # v0.8 hashes characters, not tokens
        EndpointPicker(load_endpoint_picker_config(unread), picker_version=version)


def test_plugins_outside_the_pick_are_left_out_and_listed():
    loaded = load_endpoint_picker_config(config(plugins=[
        {"type": "queue-scorer"}, {"type": "openai-parser"}, {"type": "utilization-detector"},
        {"type": "token-producer", "parameters": {"estimate": {}}}]))
    assert EndpointPicker(loaded).ignored_plugins == ("openai-parser", "utilization-detector")
