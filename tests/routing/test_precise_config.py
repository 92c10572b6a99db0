"""The precise prefix index in an EndpointPickerConfig: the precise-prefix-cache-producer read as
LDR v0.10.0's factory reads it, what a config must wire around it, and the configs the stack renders."""

from __future__ import annotations

import pytest
import yaml

from settings.picker_config import (PRECISE_PRODUCER, PickerConfigError, PreciseIndex, endpoint_picker_config_yaml,
                                    go_duration_seconds, load_endpoint_picker_config, precise_block_tokens,
                                    render_endpoint_picker_config, render_sticky_picker_config,
                                    speculative_ttl_seconds)

# deploy/config/epp-precise-prefix-cache-config.yaml at llm-d-router v0.10.0, as published.
UPSTREAM_SAMPLE = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: token-producer
    parameters:
      modelName: hf-repo/model-name
      vllm:
        url: http://localhost:8000
  - type: endpoint-notification-source
  - type: metrics-data-source
  - type: core-metrics-extractor
  - type: single-profile-handler
  - type: decode-filter
  - type: precise-prefix-cache-producer
    parameters:
      tokenProcessorConfig:
        blockSize: 64
      indexerConfig:
        kvBlockIndexConfig:
          enableMetrics: true
  - type: prefix-cache-scorer
    parameters:
      prefixMatchInfoProducerName: precise-prefix-cache-producer
  - type: kv-cache-utilization-scorer
  - type: queue-scorer
  - type: max-score-picker
dataLayer:
  sources:
    - pluginRef: metrics-data-source
      extractors:
        - pluginRef: core-metrics-extractor
    - pluginRef: endpoint-notification-source
      extractors:
        - pluginRef: precise-prefix-cache-producer
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: decode-filter
      - pluginRef: prefix-cache-scorer
        weight: 2.0
      - pluginRef: kv-cache-utilization-scorer
        weight: 1.0
      - pluginRef: queue-scorer
        weight: 1.0
      - pluginRef: max-score-picker
"""
PRECISE = PreciseIndex(64, "Qwen/Qwen2.5-0.5B-Instruct", "http://vllm-qwen-small.inference:8000")


def producer_of(config):
    return next(spec for spec in config.plugins if spec.type == PRECISE_PRODUCER)


def test_upstreams_sample_loads_with_its_deprecated_block_size_named():
    config = load_endpoint_picker_config(UPSTREAM_SAMPLE)
    assert config.warnings == ("plugins[6].parameters.tokenProcessorConfig.blockSize is deprecated; use "
                               "blockSizeTokens",)
    producer = producer_of(config)
    assert precise_block_tokens(producer.parameters) == 64 and speculative_ttl_seconds(producer.parameters) is None
    assert [source["pluginRef"] for source in config.data_sources] == ["metrics-data-source",
                                                                       "endpoint-notification-source"]


@pytest.mark.parametrize("tokens, expected", [
    (None, 16), ({"blockSizeTokens": 64}, 64), ({"blockSize": 32}, 32), ({"blockSize": 32, "blockSizeTokens": 64}, 64),
    ({"blockSizeTokens": 0}, 16),
])
def test_the_block_size_defaults_as_the_token_processor_does(tokens, expected):
    document = yaml.safe_load(UPSTREAM_SAMPLE)
    document["plugins"][6]["parameters"] = {"tokenProcessorConfig": tokens} if tokens is not None else {}
    assert precise_block_tokens(producer_of(load_endpoint_picker_config(document)).parameters) == expected


@pytest.mark.parametrize("parameters, message", [
    ({"tokenProcessorConfig": {"blockSizeTokens": -16}},
     "tokenProcessorConfig.blockSizeTokens: -16 is not above 0, which upstream refuses"),
    ({"tokenProcessorConfig": {"blockSizeToken": 64}}, "tokenProcessorConfig.blockSizeToken: not a field here"),
    ({"kvEventsConfig": {"engineType": "trtllm"}}, "engineType: 'trtllm' is not a mode upstream accepts; use vllm or "
                                                   "sglang"),
    ({"kvEventsConfig": {"concurrency": 0}}, "kvEventsConfig.concurrency: 0 is not above 0"),
    ({"kvEventsConfig": {"podDiscoveryConfig": {"socketPort": "5557"}}}, "socketPort: '5557' is not a whole number"),
    ({"indexerConfig": {"tokenizersPoolConfig": {}}}, "tokenizersPoolConfig is not supported"),
    ({"speculativeIndexing": True, "speculativeTTL": "2 seconds"}, "speculativeTTL: '2 seconds' is not a Go duration"),
    ({"speculativeTTL": 2}, "speculativeTTL: 2 is not a string"),
    ({"speculativeIndex": True}, "has no parameter 'speculativeIndex'"),
])
def test_what_the_producers_factory_refuses_is_refused_at_its_place(parameters, message):
    document = yaml.safe_load(UPSTREAM_SAMPLE)
    document["plugins"][6]["parameters"] = parameters
    with pytest.raises(PickerConfigError) as refused:
        load_endpoint_picker_config(document)
    assert message in str(refused.value) and str(refused.value).startswith("plugins[6]")


def test_a_bad_speculative_ttl_is_only_read_when_speculative_indexing_is_on():
    document = yaml.safe_load(UPSTREAM_SAMPLE)
    document["plugins"][6]["parameters"] = {"speculativeTTL": "soon"}
    assert speculative_ttl_seconds(producer_of(load_endpoint_picker_config(document)).parameters) is None
    document["plugins"][6]["parameters"] = {"speculativeIndexing": True, "speculativeTTL": "-1s"}
    config = load_endpoint_picker_config(document)
    assert speculative_ttl_seconds(producer_of(config).parameters) == 2.0
    assert any("speculativeTTL -1s: not above 0; upstream uses 2s" in warning for warning in config.warnings)


@pytest.mark.parametrize("text, seconds", [("2s", 2.0), ("500ms", 0.5), ("1m30s", 90.0), ("1.5h", 5400.0),
                                           ("0", 0.0), ("-2s", -2.0), ("", None), ("2", None), ("1h2", None)])
def test_go_durations_read_as_time_parse_duration_reads_them(text, seconds):
    assert go_duration_seconds(text) == seconds


def test_a_producer_nothing_discovers_pods_for_or_keyed_on_estimated_tokens_is_warned_of():
    document = yaml.safe_load(UPSTREAM_SAMPLE)
    del document["dataLayer"]
    document["plugins"][0] = {"type": "token-producer"}
    warnings = load_endpoint_picker_config(document).warnings
    assert any("finds pods only as an extractor of an endpoint-notification-source" in warning for warning in warnings)
    assert any("keys the tokens of token-producer, which counts them with the estimate backend" in warning
               for warning in warnings)


def test_a_data_source_naming_an_undeclared_plugin_is_refused():
    document = yaml.safe_load(UPSTREAM_SAMPLE)
    document["dataLayer"]["sources"][1]["extractors"] = [{"pluginRef": "precise"}]
    with pytest.raises(PickerConfigError, match=r"dataLayer.sources\[1\].extractors\[0\].pluginRef: references "
                                                r"undefined plugin 'precise'"):
        load_endpoint_picker_config(document)


@pytest.mark.parametrize("render", [
    lambda precise: render_endpoint_picker_config({"queue": 2, "kvCache": 2, "prefix": 3}, precise),
    lambda precise: render_endpoint_picker_config({"prefix": 1, "lru": 2}, precise),
    lambda precise: render_sticky_picker_config({"maxTTFTPenaltyMs": 5000}, precise),
])
def test_a_rendered_config_with_the_precise_index_reads_it_everywhere_the_approximate_one_was_read(render):
    config = load_endpoint_picker_config(render(PRECISE))
    assert config.warnings == ()
    types = [spec.type for spec in config.plugins]
    assert "approx-prefix-cache-producer" not in types and types.count(PRECISE_PRODUCER) == 1
    readers = [spec for spec in config.plugins if "prefixMatchInfoProducerName" in spec.parameters]
    assert readers and all(spec.parameters["prefixMatchInfoProducerName"] == PRECISE_PRODUCER for spec in readers)
    assert precise_block_tokens(producer_of(config).parameters) == 64
    tokens = next(spec for spec in config.plugins if spec.type == "token-producer").parameters
    assert tokens["modelName"] == PRECISE.model_name and tokens["vllm"]["url"] == PRECISE.vllm_url
    # The profile is the recipe's own: the index changes where match info comes from, nothing else.
    without = load_endpoint_picker_config(render(None))
    assert config.scheduling_profiles == without.scheduling_profiles


def test_speculative_entries_are_rendered_only_when_asked_for():
    plain = render_endpoint_picker_config({"prefix": 3}, PRECISE)
    speculative = render_endpoint_picker_config({"prefix": 3}, PreciseIndex(64, "m", "http://m:8000", True))
    assert "speculativeIndexing" not in endpoint_picker_config_yaml(plain)
    assert speculative_ttl_seconds(producer_of(load_endpoint_picker_config(speculative)).parameters) == 2.0
