"""The endpoint picker's configuration, as the llm-d router v0.10 reads it: `EndpointPickerConfig`.

One config drives both sides: the Pulumi program renders it from the stack's weights
(`render_endpoint_picker_config`) or its sticky recipe (`render_sticky_picker_config`) for the
picker it deploys, and the routing toolkit loads it
(`load_endpoint_picker_config`) to build its picker model plugin by plugin. Loading follows
upstream's config loader (LDR pkg/epp/config/loader/{configloader,defaults,validation}.go and
each plugin's factory @v0.10.0): what it refuses is refused here with the place, the value and
the fix; what it accepts is accepted, with a warning where upstream would quietly do something
a reader might not expect. Standard library and PyYAML only: the Pulumi program imports this.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from .errors import problem_lines

__all__ = [
    "API_VERSION", "DEPRECATED_API_VERSION", "KIND", "WEIGHT_PLUGIN_TYPES", "MODELLED_TYPES", "KNOWN_TYPES",
    "PickerConfigError", "Parameter", "PluginSpec", "ProfilePlugin", "SchedulingProfile", "EndpointPickerConfig",
    "load_endpoint_picker_config", "render_endpoint_picker_config", "endpoint_picker_config_yaml", "plugin_role",
    "plugin_parameters", "token_backend", "render_sticky_picker_config", "STICKY_PARAMETERS", "PreciseIndex",
    "PRECISE_PRODUCER", "precise_block_tokens", "speculative_ttl_seconds", "go_duration_seconds",
]

API_VERSION = "llm-d.ai/v1alpha1"
# LDR configloader.go@v0.10.0 deprecatedSchemeGroupVersion: still decoded, with a deprecation log line.
DEPRECATED_API_VERSION = "inference.networking.x-k8s.io/v1alpha1"
KIND = "EndpointPickerConfig"
# LDR defaults.go@v0.10.0 DefaultScorerWeight, for a scorer listed in a profile without a weight.
DEFAULT_SCORER_WEIGHT = 1.0
DEFAULT_PROFILE = "default"

QUEUE = "queue-scorer"
KV_CACHE = "kv-cache-utilization-scorer"
PREFIX = "prefix-cache-scorer"
PREFIX_PRODUCER = "approx-prefix-cache-producer"
RUNNING_REQUESTS = "running-requests-size-scorer"
LORA_AFFINITY = "lora-affinity-scorer"
NO_HIT_LRU = "no-hit-lru-scorer"
MAX_SCORE_PICKER = "max-score-picker"
SINGLE_PROFILE_HANDLER = "single-profile-handler"
TOKEN_PRODUCER = "token-producer"
AFFINITY_FILTER = "prefix-cache-affinity-filter"
TOKEN_LOAD = "token-load-scorer"
ACTIVE_REQUEST = "active-request-scorer"
INFLIGHT_PRODUCER = "inflight-load-producer"
PREDICTED_LATENCY_PRODUCER = "predicted-latency-producer"
PRECISE_PRODUCER = "precise-prefix-cache-producer"
# The data layer's plugins a precise prefix index needs: pods are found by the endpoint
# notifications the producer extracts from, and the scorers' metrics come from the metrics
# source, which an explicit dataLayer must then list too (deploy/config/epp-precise-prefix-
# cache-config.yaml@v0.10.0).
ENDPOINT_NOTIFICATION_SOURCE = "endpoint-notification-source"
METRICS_DATA_SOURCE = "metrics-data-source"
CORE_METRICS_EXTRACTOR = "core-metrics-extractor"
# The producers of prefix match info (each one's Produces()@v0.10.0).
PREFIX_MATCH_PRODUCERS = frozenset({PREFIX_PRODUCER, PRECISE_PRODUCER, "burst-prefix-cache-producer",
                                    "multicluster-approx-prefix-cache-producer"})
# The filter's ttftSource values (prefixcacheaffinity/plugin.go@v0.10.0).
PREFILL_THROUGHPUT, LATENCY_PREDICTOR = "prefillThroughput", "latencyPredictor"

# HyperPod InferenceGatewayConfig weight -> the scorer that runs it (open-source-picker.md 3.2).
# predictedLatency has none here: see render_endpoint_picker_config.
WEIGHT_PLUGIN_TYPES: Mapping[str, str] = MappingProxyType({
    "queue": QUEUE, "kvCache": KV_CACHE, "prefix": PREFIX, "runningRequests": RUNNING_REQUESTS,
    "loraAffinity": LORA_AFFINITY, "lru": NO_HIT_LRU,
})
_ALL_WEIGHT_NAMES = ("queue", "kvCache", "prefix", "runningRequests", "loraAffinity", "predictedLatency", "lru")

_TOP_LEVEL_KEYS = ("apiVersion", "kind", "featureGates", "plugins", "schedulingProfiles", "dataLayer", "flowControl",
                   "requestHandler", "saturationDetector", "parser")
# LDR cmd/epp/runner/runner.go@v0.10.0 RegisterFeatureGate calls, with their defaults.
_FEATURE_GATES = {"flowControl": False, "haPopulateNonLeaderDatastore": True}


class PickerConfigError(ValueError):
    """Weights, an EndpointPickerConfig or parameters the picker (or this model of it) cannot run with."""


@dataclass(frozen=True)
class Parameter:
    """One key a plugin's factory decodes from `parameters` (Go encoding/json, unknown keys refused)."""

    key: str
    kind: type  # int, float, bool, str or dict (a nested object): what the Go field's type accepts
    default: Any
    meaning: str
    # A nested Go struct's fields, decoded as strictly (None: the mapping is kept as written).
    fields: tuple[Parameter, ...] | None = None
    # The values a string field accepts, checked by the factory after decoding ("" keeps the default).
    choices: tuple[str, ...] = ()
    example: str = ""  # a value to show in errors, when the default is not a useful one


@dataclass(frozen=True)
class _PluginType:
    role: str  # filter, scorer, picker, profile-handler, producer, ...
    # The keys its factory decodes; None when the factory never reads its parameters (so upstream
    # accepts anything there).
    parameters: tuple[Parameter, ...] | None = None
    alpha: bool = False
    deprecated: bool = False

    def accepted_keys(self) -> str:
        return ", ".join(parameter.key for parameter in self.parameters or ()) or "none"


_PREFIX_PRODUCER_PARAMETERS = (
    Parameter("autoTune", bool, True, "take block size and index capacity from each pod's vllm:cache_config_info"),
    Parameter("blockSizeTokens", int, 16, "tokens per hashed block, raised to at least 64 at request time"),
    Parameter("blockSize", int, 0, "deprecated: mapped onto blockSizeTokens when that is left at 16"),
    Parameter("maxPrefixBlocksToMatch", int, 2048, "deprecated block cap, used only when maxPrefixTokensToMatch is 0"),
    Parameter("maxPrefixTokensToMatch", int, 131072, "tokens of prefix hashed at most; 0 with a block cap of 0: all"),
    Parameter("lruCapacityPerServer", int, 31250, "blocks remembered per pod without autoTune; <= 0 means 31250"),
)
_PRODUCER_NAME = Parameter("prefixMatchInfoProducerName", str, "", "which prefix producer's match info to read")


def _resolution(meaning: str) -> Parameter:
    return Parameter("defaultResolution", dict, None, meaning, example="{width: 640, height: 360}",
                     fields=(Parameter("width", int, 640, "pixels"), Parameter("height", int, 360, "pixels")))


def _mode(choices: tuple[str, ...], meaning: str) -> Parameter:
    return Parameter("mode", str, "", meaning, choices=choices, example=choices[-1])


def _one_field(key: str, meaning: str, field: Parameter) -> Parameter:
    return Parameter(key, dict, None, meaning, fields=(field,), example=f"{{{field.key}: {field.example}}}")


# dataproducer/tokenizer/tokenizer.go@v0.10.0 estimateConfig and the structs under it, by JSON
# name. A zero or absent field takes mm_estimate.go's built-in default, the `default` shown here.
def _counted(meaning: str, static_count: Parameter) -> tuple[Parameter, ...]:
    # The mode, static and dynamic fields imageEstimateConfig and tokensPerFrameConfig share.
    return (_mode(("dynamic", "static"), meaning), _one_field("static", "static mode's count", static_count),
            _one_field("dynamic", "dynamic mode's divisor",
                       Parameter("factor", int, 1024, "pixels per placeholder token", example="1024")))


_IMAGE_ESTIMATE = (
    *_counted("dynamic: width x height / factor tokens; static: the same count for every image",
              Parameter("staticToken", int, 0, "placeholder tokens per image", example="64")),
    _resolution("the size of an image whose header cannot be decoded (dynamic mode)"),
)
_TOKENS_PER_FRAME = _counted("dynamic: width x height / factor per frame; static: a constant per frame",
                             Parameter("numTokensPerFrame", int, 0, "placeholder tokens per frame", example="256"))
_FRAMES = (
    _mode(("sampled", "strided"), "sampled: duration x sampleFPS; strided: duration x source fps / frameStride"),
    Parameter("minFrames", int, 0, "the fewest frames counted; 0: no floor", example="4"),
    Parameter("maxFrames", int, 0, "the most frames counted; 0: no cap", example="16"),
    Parameter("sampled", dict, None, "sampled mode", example="{sampleFPS: 2}", fields=(
        Parameter("sampleFPS", float, 2.0, "frames sampled per second", example="2"),
        Parameter("temporalPatchSize", int, 0, "sampled frames merged into one", example="2"))),
    Parameter("strided", dict, None, "strided mode", example="{frameStride: 4}", fields=(
        Parameter("defaultSourceFPS", float, 24.0, "the video's frame rate", example="24"),
        Parameter("frameStride", int, 1, "every Nth source frame is kept", example="4"))),
)
_ESTIMATE_FIELDS = (
    Parameter("image", dict, None, "how many placeholder tokens an image part gets", example="{mode: static}",
              fields=_IMAGE_ESTIMATE),
    Parameter("video", dict, None, "how many placeholder tokens a video part gets", example="{maxVideoTokens: 4096}",
              fields=(
                  _resolution("the frame size for dynamic tokens per frame"),
                  Parameter("defaultDuration", float, 10.0, "seconds of video", example="10"),
                  Parameter("tokensPerFrame", dict, None, "placeholder tokens per frame", example="{mode: static}",
                            fields=_TOKENS_PER_FRAME),
                  Parameter("frames", dict, None, "frames counted", example="{mode: strided}", fields=_FRAMES),
                  Parameter("maxVideoTokens", int, 0, "the most placeholder tokens a video gets; 0: no cap",
                            example="4096"))),
)

_INFLIGHT_NAME = Parameter("inFlightLoadProducerName", str, "", "which in-flight-load producer's counts to read")

# dataproducer/preciseprefixcache/producer.go PluginConfig@v0.10.0 and the structs it decodes into:
# pkg/kvcache/kvblock/token_processor.go TokenProcessorConfig, pkg/kvevents/pool.go Config and
# PodDiscoveryConfig. indexerConfig (pkg/kvcache/indexer.go Config: the index's backend and the
# tiers' weights) is kept as written.
_PRECISE_PRODUCER_PARAMETERS = (
    Parameter("tokenProcessorConfig", dict, None, "how the producer cuts a request's tokens into block keys",
              example="{blockSizeTokens: 64}", fields=(
                  Parameter("blockSizeTokens", int, 16, "tokens per block key; 0 means 16; set it to vLLM's "
                            "--block-size, or keys and the pods' events do not line up", example="64"),
                  Parameter("blockSize", int, 0, "deprecated: taken when blockSizeTokens is left out"),
                  Parameter("hashSeed", str, "", "a seed for the keys' hash (need not match vLLM's)"))),
    Parameter("indexerConfig", dict, None, "the index's backend (in memory, cost-aware, Redis) and each tier's "
              "weight", example="{kvBlockIndexConfig: {enableMetrics: true}}"),
    Parameter("kvEventsConfig", dict, None, "where the pods' KV-cache events come from",
              example="{podDiscoveryConfig: {socketPort: 5557}}", fields=(
                  Parameter("zmqEndpoint", str, "", "one socket the picker binds for every engine to connect to "
                            "(instead of a subscriber per pod)"),
                  Parameter("topicFilter", str, "kv@", "the ZMQ subscription prefix; vLLM's topic must start with it"),
                  Parameter("concurrency", int, 4, "workers applying events to the index"),
                  Parameter("engineType", str, "", "whose event format to decode", choices=("vllm", "sglang"),
                            example="vllm"),
                  Parameter("discoverPods", bool, True, "subscribe to each pod the picker learns of"),
                  Parameter("podDiscoveryConfig", dict, None, "the ports of each pod's event sockets",
                            example="{socketPort: 5557}", fields=(
                                Parameter("podLabelSelector", str, "llm-d.ai/inference-serving=true",
                                          "never read at v0.10.0"),
                                Parameter("podNamespace", str, "", "never read at v0.10.0"),
                                Parameter("socketPort", int, 5557, "each pod's event PUB port (plus its data-"
                                          "parallel rank)"),
                                Parameter("replaySocketPort", int, 0, "each pod's replay port; 0: the picker "
                                          "never asks for a replay", example="5558"))))),
    Parameter("speculativeIndexing", bool, False, "index a request's blocks on its pod when picked, before its "
              "events arrive"),
    Parameter("speculativeTTL", str, "2s", "how long a speculative entry lasts (a Go duration)", example="2s"),
)

# filter/prefixcacheaffinity/plugin.go@v0.10.0 Config and DefaultConfig, in the struct's order.
_AFFINITY_FILTER_PARAMETERS = (
    Parameter("affinityThreshold", float, 0.80, "share of the request's prefix blocks a pod must hold to count as "
              "sticky; <= 0 turns the filter off"),
    Parameter("explorationProbability", float, 0.0, "chance, per pick, of skipping the filter and keeping every pod"),
    Parameter("maxTTFTPenaltyMs", float, 18000.0, "how much longer (estimated TTFT, ms) the best sticky pod may take "
              "than the best other pod before stickiness breaks; 0 always sticks"),
    Parameter("ttftSource", str, PREFILL_THROUGHPUT, "where the load gate reads each pod's TTFT",
              choices=(PREFILL_THROUGHPUT, LATENCY_PREDICTOR), example=PREFILL_THROUGHPUT),
    Parameter("peakPrefillThroughput", float, 15928.0, "a pod's prefill tokens per second: estimated TTFT = in-flight "
              "tokens / this x 1000 ms"),
    _PRODUCER_NAME,
    Parameter("latencyPredictionInfoProducerName", str, "", "which latency predictor's TTFT to read"),
    _INFLIGHT_NAME,
)
# The sticky recipe's parameters (the filter's), with upstream's defaults, in the order a stack lists them.
_FILTER_DEFAULTS = {parameter.key: parameter.default for parameter in _AFFINITY_FILTER_PARAMETERS}
STICKY_PARAMETERS: Mapping[str, float] = MappingProxyType({
    key: _FILTER_DEFAULTS[key]
    for key in ("maxTTFTPenaltyMs", "peakPrefillThroughput", "affinityThreshold", "explorationProbability")})

# Every plugin type LDR v0.10.0 registers (cmd/epp/runner/runner.go registerInTreePlugins), by role.
# Parameters are listed for the types this toolkit models; the others load (their parameters
# unchecked) and are refused by the picker model when they would take part in a pick.
_MODELLED: dict[str, _PluginType] = {
    QUEUE: _PluginType("scorer"),  # scorer/queuedepth/queue.go: factory ignores parameters
    KV_CACHE: _PluginType("scorer"),
    RUNNING_REQUESTS: _PluginType("scorer"),
    LORA_AFFINITY: _PluginType("scorer"),
    PREFIX: _PluginType("scorer", (  # scorer/prefix/plugin.go Config
        _PRODUCER_NAME,
        Parameter("matchLengthWeight", float, 0.0, "share of the score from absolute match length, 0..1"),
        Parameter("matchLengthScaleTokens", int, 8192, "match length that counts as full, with matchLengthWeight > 0"),
    )),
    NO_HIT_LRU: _PluginType("scorer", (  # scorer/nohitlru/no_hit_lru.go Parameters
        Parameter("lruSize", int, 1024, "pods remembered in the cold-request LRU; <= 0 means 1024"),
        _PRODUCER_NAME,
        Parameter("prefixPluginType", str, "", "deprecated, never read"),
        Parameter("prefixPluginName", str, "", "deprecated, never read"),
    )),
    PREFIX_PRODUCER: _PluginType("producer", _PREFIX_PRODUCER_PARAMETERS),  # dataproducer/approximateprefix/types.go
    MAX_SCORE_PICKER: _PluginType("picker", (  # picker/common.go PickerParameters
        Parameter("maxNumOfEndpoints", int, 1, "endpoints returned, best first; the request goes to the first"),
    )),
    SINGLE_PROFILE_HANDLER: _PluginType("profile-handler"),
    AFFINITY_FILTER: _PluginType("filter", _AFFINITY_FILTER_PARAMETERS),
    TOKEN_LOAD: _PluginType("scorer", (  # scorer/tokenload/token_load.go Config
        Parameter("queueThresholdTokens", int, 4194304, "in-flight tokens at which a pod scores 0; <= 0 means "
                  "4194304 (128 requests of 32K tokens)"),
        _INFLIGHT_NAME,
    )),
    ACTIVE_REQUEST: _PluginType("scorer", (  # scorer/activerequest/active_request.go Parameters
        Parameter("requestTimeout", str, "", "deprecated, never read", example="30s"),
        Parameter("idleThreshold", int, 0, "in-flight requests at or below which a pod counts as idle and scores 1; "
                  "< 0 means 0"),
        Parameter("maxBusyScore", float, 1.0, "the best score a busy pod can get, 0..1 (outside it: 1)"),
        _INFLIGHT_NAME,
    )),
    INFLIGHT_PRODUCER: _PluginType("producer", (  # dataproducer/inflightload/producer.go Config
        Parameter("addEstimatedOutputTokens", bool, False, "count an estimate of each request's output tokens too, "
                  "until it ends"),
        Parameter("outputRatio", float, 1.5, "estimated output tokens per input token, >= 0"),
        Parameter("maxEstimatedOutputTokens", int, None, "a cap on the estimated output tokens, >= 0 (unset: none)",
                  example="4096"),
        Parameter("prefixMatchInfoProducerName", str, "", "which prefix producer's match info discounts cached tokens"),
        Parameter("syncCrossReplicaState", bool, True, "share the counts across picker replicas when a "
                  "cross-replica syncer is configured"),
    )),
    PRECISE_PRODUCER: _PluginType("producer", _PRECISE_PRODUCER_PARAMETERS),
    # dataproducer/tokenizer/tokenizer.go tokenizerPluginConfig. The model hashes what the
    # `estimate` backend (the one used with no tokenizer) produces, its media estimates
    # included; the picker model refuses the vllm and uds backends, which count real tokens.
    # `vllm` and `udsTokenizerConfig` are kept as written (their fields are not checked).
    TOKEN_PRODUCER: _PluginType("producer", (
        Parameter("estimate", dict, None, "the tokenizer-free backend's media placeholder estimates",
                  fields=_ESTIMATE_FIELDS, example="{image: {mode: static, static: {staticToken: 64}}}"),
        Parameter("vllm", dict, None, "tokenize through a vLLM /render endpoint"),
        Parameter("udsTokenizerConfig", dict, None, "deprecated gRPC-over-UDS tokenizer"),
        Parameter("modelName", str, "", "the model whose tokenizer the vllm and uds backends load"),
    )),
}


def _roles(role: str, *names: str, alpha: tuple[str, ...] = (), deprecated: tuple[str, ...] = ()) -> dict:
    return {name: _PluginType(role, alpha=name in alpha, deprecated=name in deprecated) for name in names}


_NOT_MODELLED: dict[str, _PluginType] = {
    **_roles("filter", "label-selector-filter", "by-label-selector", "by-label", "encode-filter", "decode-filter",
             "prefill-filter", "session-affinity-filter", "endpoint-attribute-filter", "topology-affinity-filter",
             "utilization-filter", "multicluster-session-affinity-filter", "slo-headroom-tier-filter",
             "header-based-testing-filter",
             alpha=("session-affinity-filter", "endpoint-attribute-filter", "topology-affinity-filter",
                    "utilization-filter", "multicluster-session-affinity-filter"),
             deprecated=("by-label-selector", "by-label")),
    **_roles("scorer", "load-aware-scorer", "context-length-aware", "session-affinity-scorer",
             "header-label-affinity-scorer", "precise-prefix-cache-scorer",
             "mm-embeddings-cache-scorer", "endpoint-attribute-scorer", "topology-affinity-scorer",
             "multicluster-queue-scorer", "multicluster-kv-cache-utilization-scorer",
             "multicluster-prefix-cache-scorer", "latency-scorer",
             alpha=("session-affinity-scorer", "header-label-affinity-scorer", "endpoint-attribute-scorer",
                    "topology-affinity-scorer", "multicluster-queue-scorer",
                    "multicluster-kv-cache-utilization-scorer", "multicluster-prefix-cache-scorer")),
    **_roles("picker", "random-picker", "weighted-random-picker"),
    **_roles("profile-handler", "data-parallel-profile-handler", "disagg-profile-handler", "disagg-headers-handler",
             "prefill-header-handler", "pd-profile-handler", "header-profile-handler",
             alpha=("header-profile-handler",),
             deprecated=("disagg-headers-handler", "prefill-header-handler", "pd-profile-handler")),
    **_roles("decider", "always-disagg-pd-decider", "prefix-based-pd-decider", "always-disagg-multimodal-decider"),
    **_roles("producer", "burst-prefix-cache-producer", "p2p-source-producer",
             "multicluster-approx-prefix-cache-producer", PREDICTED_LATENCY_PRODUCER,
             "tokenizer", "mm-embeddings-cache-producer", "session-id-producer",
             alpha=("burst-prefix-cache-producer", "p2p-source-producer", "multicluster-approx-prefix-cache-producer"),
             deprecated=("tokenizer",)),
    **_roles("data-layer", "metrics-data-source", "core-metrics-extractor", "models-data-source", "models-data-extractor", "topology-extractor", "dcgm-data-source",
             "dcgm-extractor", "multicluster-metrics-data-source", "multicluster-metrics-extractor",
             "k8s-notification-source", "endpoint-notification-source", "file-discovery",
             "multicluster-file-discovery",
             alpha=("topology-extractor", "dcgm-data-source", "dcgm-extractor", "multicluster-metrics-data-source",
                    "multicluster-metrics-extractor", "multicluster-file-discovery")),
    **_roles("flow-control", "global-strict-fairness-policy", "round-robin-fairness-policy", "program-aware-fairness",
             "fcfs-ordering-policy", "edf-ordering-policy", "slo-deadline-ordering-policy",
             "static-usage-limit-policy", "sheddable-eviction-filter", "priority-then-time-eviction-order-policy",
             "priority-holdback-policy", "soft-reflective-ceiling-policy", "concurrency-detector",
             "utilization-detector",
             alpha=("sheddable-eviction-filter", "priority-then-time-eviction-order-policy",
                    "priority-holdback-policy", "soft-reflective-ceiling-policy")),
    **_roles("request-control", "latency-slo-admitter", "probabilistic-admitter", "disaggregatedset-rollout-screener",
             "request-attribute-reporter", "agent-identity", "destination-endpoint-served-verifier",
             alpha=("disaggregatedset-rollout-screener", "agent-identity")),
    **_roles("parser", "openai-parser", "anthropic-parser", "vllmhttp-parser", "vllmgrpc-parser", "passthrough-parser",
             "vertexai-parser"),
}

MODELLED_TYPES: frozenset[str] = frozenset(_MODELLED)
KNOWN_TYPES: frozenset[str] = frozenset(_MODELLED) | frozenset(_NOT_MODELLED)
_PLUGIN_TYPES: Mapping[str, _PluginType] = MappingProxyType({**_NOT_MODELLED, **_MODELLED})
# Roles a profile holds (LDR scheduler_profile.go AddPlugins); other plugins listed there are ignored.
_PROFILE_ROLES = ("filter", "scorer", "picker")


def plugin_role(plugin_type: str) -> str:
    """filter, scorer, picker, profile-handler, producer, ... for a type LDR v0.10.0 registers."""
    return _PLUGIN_TYPES[plugin_type].role


def plugin_parameters(plugin_type: str) -> tuple[Parameter, ...] | None:
    """The parameters a modelled plugin type accepts (None: its factory ignores them)."""
    return _MODELLED[plugin_type].parameters


@dataclass(frozen=True)
class PluginSpec:
    """One plugin instance. For the modelled types `parameters` holds every key the factory
    decodes, as written or defaulted; for the others, what was written (not checked)."""

    name: str
    type: str
    parameters: Mapping[str, Any]
    # Where it came from: "plugins[2]", or the defaulting rule that added it.
    origin: str
    # The parameter keys the config wrote (the rest are defaults).
    written: frozenset[str] = frozenset()

    @property
    def role(self) -> str:
        return plugin_role(self.type)

    @property
    def modelled(self) -> bool:
        return self.type in MODELLED_TYPES


@dataclass(frozen=True)
class ProfilePlugin:
    plugin_ref: str
    weight: float | None  # scorers only (defaulted to 1.0); None for filters and pickers


@dataclass(frozen=True)
class SchedulingProfile:
    name: str
    plugins: tuple[ProfilePlugin, ...]


@dataclass(frozen=True)
class EndpointPickerConfig:
    """An EndpointPickerConfig after upstream's defaulting: every plugin named, every profile
    with a picker, every scorer with a weight, the profile handler and the prefix producers
    the scorers need in place. `warnings` are what upstream would log (or quietly do)."""

    api_version: str
    plugins: tuple[PluginSpec, ...]
    scheduling_profiles: tuple[SchedulingProfile, ...]
    feature_gates: Mapping[str, bool]
    warnings: tuple[str, ...]
    # dataLayer.sources as written, each {pluginRef, extractors: [{pluginRef}]} (none: upstream's defaults).
    data_sources: tuple[Mapping[str, Any], ...] = ()

    def plugin(self, name: str) -> PluginSpec:
        for spec in self.plugins:
            if spec.name == name:
                return spec
        raise KeyError(name)


# -- loading ---------------------------------------------------------------------------------------

class _StrictYamlLoader(yaml.SafeLoader):
    """YAML with duplicate keys refused, as upstream's strict decoder refuses them."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    mapping = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            raise PickerConfigError(f"line {key_node.start_mark.line + 1}: key {key!r} appears twice; upstream's "
                                    "strict decoder refuses duplicate keys. Keep one.")
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_StrictYamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def load_endpoint_picker_config(source: str | bytes | Mapping[str, Any]) -> EndpointPickerConfig:
    """Parse, default and validate an EndpointPickerConfig (YAML/JSON text, or its decoded mapping)
    the way LDR v0.10.0's loader does; PickerConfigError says where, what and the fix."""
    document = _decode_document(source)
    warnings: list[str] = []
    api_version = _check_header(document, warnings)
    feature_gates = _feature_gates(document.get("featureGates"), warnings)
    for key in ("dataLayer", "flowControl", "requestHandler", "saturationDetector", "parser"):
        if document.get(key) is not None and not isinstance(document[key], Mapping):
            raise PickerConfigError(f"{key}: must be a mapping, got {_shown(document[key])}")
    plugins = _plugins(document.get("plugins"), warnings)
    data_sources = _data_sources(document.get("dataLayer") or {}, plugins)
    profiles = _profiles(document.get("schedulingProfiles"), plugins, warnings)
    plugins, profiles = _apply_system_defaults(plugins, profiles, warnings)
    _check_producers(plugins, warnings)
    _check_precise_wiring(plugins, data_sources, warnings)
    return EndpointPickerConfig(api_version=api_version, plugins=tuple(plugins.values()),
                                scheduling_profiles=profiles, feature_gates=MappingProxyType(feature_gates),
                                warnings=tuple(warnings), data_sources=data_sources)


def _data_sources(data_layer: Mapping[str, Any], plugins: Mapping[str, PluginSpec]) -> tuple[Mapping[str, Any], ...]:
    """dataLayer.sources (LDR config DataLayerConfig@v0.10.0): each a declared data-layer plugin
    and the declared plugins that extract from what it delivers."""
    sources = data_layer.get("sources")
    if sources is None:
        return ()
    if not isinstance(sources, list):
        raise PickerConfigError(f"dataLayer.sources: must be a list of {{pluginRef, extractors}}, got {_shown(sources)}")
    for index, source in enumerate(sources):
        where = f"dataLayer.sources[{index}]"
        if not isinstance(source, Mapping) or not isinstance(source.get("pluginRef"), str):
            raise PickerConfigError(f"{where}: must be a mapping with pluginRef (a data source plugin) and "
                                    f"extractors, got {_shown(source)}")
        refs = [(where, source["pluginRef"])]
        extractors = source.get("extractors") or []
        if not isinstance(extractors, list):
            raise PickerConfigError(f"{where}.extractors: must be a list of {{pluginRef}}, got {_shown(extractors)}")
        for position, extractor in enumerate(extractors):
            if not isinstance(extractor, Mapping) or not isinstance(extractor.get("pluginRef"), str):
                raise PickerConfigError(f"{where}.extractors[{position}]: must be a mapping with pluginRef, got "
                                        f"{_shown(extractor)}")
            refs.append((f"{where}.extractors[{position}]", extractor["pluginRef"]))
        for place, ref in refs:
            if ref not in plugins:
                raise PickerConfigError(f"{place}.pluginRef: references undefined plugin {ref!r}; declare it under "
                                        f"plugins (defined: {', '.join(plugins) or 'none'})")
    return tuple(_frozen(source) for source in sources)


def _check_precise_wiring(plugins: Mapping[str, PluginSpec], sources: tuple[Mapping[str, Any], ...],
                          warnings: list[str]) -> None:
    """What a precise-prefix-cache-producer needs from the rest of the config to score anything,
    which upstream does not check: pods to subscribe to, and the engine's own tokens."""
    for spec in plugins.values():
        if spec.type != PRECISE_PRODUCER:
            continue
        events = spec.parameters["kvEventsConfig"] or {}
        discovering = events.get("discoverPods", True) and not events.get("zmqEndpoint")
        extracted = any(plugins[source["pluginRef"]].type == ENDPOINT_NOTIFICATION_SOURCE
                        and any(extractor["pluginRef"] == spec.name for extractor in source.get("extractors") or ())
                        for source in sources)
        if discovering and not extracted:
            warnings.append(f"{spec.origin}: {spec.name} finds pods only as an extractor of an "
                            f"{ENDPOINT_NOTIFICATION_SOURCE} in dataLayer.sources, and none lists it: it subscribes "
                            "to no pod's events (every prefix score 0)")
        tokens = plugins.get(TOKEN_PRODUCER)
        if tokens is None or token_backend(tokens.parameters) != "vllm":
            warnings.append(f"{spec.origin}: {spec.name} keys the tokens of {TOKEN_PRODUCER}, which counts them with "
                            "the estimate backend (4 bytes a token): vLLM's events carry vLLM's tokens, so no key "
                            f"lines up (every prefix score 0). Declare {TOKEN_PRODUCER} with modelName and vllm: "
                            "{url: ...}")


def _decode_document(source: str | bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    document: Any = source
    if isinstance(source, (str, bytes)):
        try:
            document = yaml.load(source, Loader=_StrictYamlLoader)  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError as error:
            raise PickerConfigError(f"not YAML or JSON: {error}. Pass an EndpointPickerConfig document.") from error
    if not isinstance(document, Mapping):
        raise PickerConfigError(f"the config must be a mapping with apiVersion {API_VERSION} and kind {KIND}, "
                                f"got {_shown(document)}")
    unknown = [key for key in document if key not in _TOP_LEVEL_KEYS]
    if unknown:
        raise PickerConfigError(f"{unknown[0]}: not a field of {KIND} (strict decoding); its fields are "
                                f"{', '.join(_TOP_LEVEL_KEYS)}")
    return document


def _check_header(document: Mapping[str, Any], warnings: list[str]) -> str:
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if api_version not in (API_VERSION, DEPRECATED_API_VERSION):
        raise PickerConfigError(f"apiVersion: {_shown(api_version)} is not a version the llm-d router v0.10 reads; "
                                f"set apiVersion: {API_VERSION}")
    if api_version == DEPRECATED_API_VERSION:
        warnings.append(f"apiVersion {DEPRECATED_API_VERSION} is deprecated (upstream logs a DEPRECATION line); "
                        f"use {API_VERSION}")
    if kind != KIND:
        raise PickerConfigError(f"kind: {_shown(kind)} is not {KIND}; set kind: {KIND}")
    return api_version


def _feature_gates(gates: Any, warnings: list[str]) -> dict[str, bool]:
    enabled = dict(_FEATURE_GATES)
    if gates is None:
        return enabled
    if not isinstance(gates, list) or not all(isinstance(gate, str) for gate in gates):
        raise PickerConfigError(f"featureGates: must be a list of gate names (name or name=false), got {_shown(gates)}")
    for index, gate in enumerate(gates):
        name, _, value = gate.partition("=")
        if name not in _FEATURE_GATES:
            raise PickerConfigError(f"featureGates[{index}]: {gate!r} is not a feature gate of the llm-d router v0.10; "
                                    f"known gates: {', '.join(_FEATURE_GATES)}")
        enabled[name] = _go_bool(value, f"featureGates[{index}]") if value else True
    if enabled["flowControl"]:
        warnings.append("featureGates: flowControl queues requests in the picker under saturation; this model "
                        "does not, so its picks assume requests are dispatched at once")
    return enabled


def _go_bool(text: str, where: str) -> bool:
    # strconv.ParseBool after trimming and lower-casing (configloader.go loadFeatureConfig).
    value = text.strip().lower()
    if value in ("1", "t", "true"):
        return True
    if value in ("0", "f", "false"):
        return False
    raise PickerConfigError(f"{where}: {text!r} is not a boolean; write true or false")


def _plugins(entries: Any, warnings: list[str]) -> dict[str, PluginSpec]:
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise PickerConfigError(f"plugins: must be a list of {{type, name, parameters}}, got {_shown(entries)}")
    plugins: dict[str, PluginSpec] = {}
    for index, entry in enumerate(entries):
        where = f"plugins[{index}]"
        if not isinstance(entry, Mapping):
            raise PickerConfigError(f"{where}: must be a mapping with `type` (and optionally `name`, `parameters`), "
                                    f"got {_shown(entry)}")
        unknown = [key for key in entry if key not in ("name", "type", "parameters")]
        if unknown:
            raise PickerConfigError(f"{where}.{unknown[0]}: not a plugin field (strict decoding); a plugin has "
                                    "name, type and parameters")
        plugin_type, name = entry.get("type"), entry.get("name")
        for field_name, value in (("type", plugin_type), ("name", name)):
            if value is not None and not isinstance(value, str):
                raise PickerConfigError(f"{where}.{field_name}: must be a string, got {_shown(value)}")
        name = name or plugin_type or ""  # defaults.go applyStaticDefaults: name defaults to type
        if not plugin_type:
            raise PickerConfigError(f"{where}: plugin {name!r} has no type; set type to a plugin type, e.g. {QUEUE}")
        if name in plugins:
            raise PickerConfigError(f"{where}: duplicate plugin name {name!r} (plugins[].name defaults to the type); "
                                    "give each instance its own name")
        if plugin_type not in _PLUGIN_TYPES:
            close = _closest(plugin_type, KNOWN_TYPES)
            hint = f"; did you mean {close}?" if close else f"; modelled types: {', '.join(sorted(MODELLED_TYPES))}"
            raise PickerConfigError(f"{where}.type: plugin type {plugin_type!r} is not registered in the llm-d "
                                    f"router v0.10{hint}")
        kind = _PLUGIN_TYPES[plugin_type]
        if kind.alpha:
            warnings.append(f"{where}: {plugin_type} is Alpha; the picker starts only with "
                            "--allow-experimental-plugins=true")
        if kind.deprecated:
            warnings.append(f"{where}: {plugin_type} is deprecated in the llm-d router v0.10")
        parameters, written = _decode_parameters(plugin_type, entry.get("parameters"), where, name, warnings)
        plugins[name] = PluginSpec(name=name, type=plugin_type, parameters=parameters, origin=where, written=written)
    return plugins


def _decode_parameters(plugin_type: str, raw: Any, where: str, name: str,
                       warnings: list[str]) -> tuple[Mapping[str, Any], frozenset[str]]:
    kind = _PLUGIN_TYPES[plugin_type]
    if plugin_type not in MODELLED_TYPES or kind.parameters is None:
        if raw and plugin_type in MODELLED_TYPES:
            warnings.append(f"{where}.parameters: {plugin_type} takes no parameters; upstream's factory ignores "
                            f"{_shown(raw)}")
        raw = raw if isinstance(raw, Mapping) else {}
        return _frozen(raw), frozenset(raw)
    values = {parameter.key: parameter.default for parameter in kind.parameters}
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise PickerConfigError(f"{where}.parameters: must be a mapping of {plugin_type}'s parameters "
                                f"({kind.accepted_keys()}), got {_shown(raw)}")
    by_folded_key = {parameter.key.lower(): parameter for parameter in kind.parameters}
    written = set()
    for key, value in raw.items():
        # Go's encoding/json matches field names case-insensitively, even with unknown fields refused.
        parameter = by_folded_key.get(str(key).lower())
        if parameter is None:
            raise PickerConfigError(f"{where}.parameters.{key}: {name} ({plugin_type}) has no parameter {key!r} "
                                    f"(upstream decodes parameters strictly); accepted: {kind.accepted_keys()}"
                                    f"{_moved_prefix_parameter_hint(plugin_type, key)}")
        if value is not None:  # JSON null leaves a Go field at its default
            values[parameter.key] = _decoded_value(parameter, value, f"{where}.parameters.{key}")
            written.add(parameter.key)
    _check_plugin_parameters(plugin_type, values, written, where, warnings)
    return MappingProxyType(values), frozenset(written)


def _moved_prefix_parameter_hint(plugin_type: str, key: Any) -> str:
    if plugin_type == PREFIX and any(str(key).lower() == p.key.lower() for p in _PREFIX_PRODUCER_PARAMETERS):
        return (f". Since llm-d router v0.9 the prefix tuning lives on the producer: declare a plugin of type "
                f"{PREFIX_PRODUCER} with parameters: {{{key}: ...}} and leave prefix-cache-scorer's parameters out")
    return ""


def _decoded_value(parameter: Parameter, value: Any, where: str) -> Any:
    kind = parameter.kind
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        # YAML becomes JSON before Go decodes it, so 16.0 reaches an int field as 16; 1.5, or a
        # number beyond Go's 64-bit int, is refused.
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
        ok = ok and _GO_INT_MIN <= value <= _GO_INT_MAX
        value = int(value) if ok else value
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        value = float(value) if ok else value
    elif kind is dict:
        ok = isinstance(value, Mapping)
        if ok:
            return _frozen(value) if parameter.fields is None else _decoded_fields(parameter.fields, value, where)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise PickerConfigError(f"{where}: {_shown(value)} is not {_KIND_NAMES[kind]} ({parameter.meaning}); "
                                f"e.g. {parameter.key}: {_example(parameter)}")
    return value


def _decoded_fields(fields: tuple[Parameter, ...], raw: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """A nested struct as Go's strict decoder reads it: keys matched case-insensitively, unknown
    keys refused, null leaving a field unset. Holds the fields written, by their JSON names."""
    by_folded_key = {field.key.lower(): field for field in fields}
    decoded = {}
    for key, value in raw.items():
        field = by_folded_key.get(str(key).lower())
        if field is None:
            raise PickerConfigError(f"{where}.{key}: not a field here (upstream decodes parameters strictly); "
                                    f"the fields are {', '.join(field.key for field in fields)}")
        if value is not None:
            decoded[field.key] = _decoded_value(field, value, f"{where}.{key}")
    return MappingProxyType(decoded)


_GO_INT_MIN, _GO_INT_MAX = -2 ** 63, 2 ** 63 - 1
_KIND_NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
               dict: "a mapping"}


def _example(parameter: Parameter) -> str:
    if parameter.example:
        return parameter.example
    if parameter.kind is bool:
        return "true" if parameter.default else "false"
    if parameter.kind is dict:
        return "{}"
    return str(parameter.default) if parameter.default != "" else "my-producer"


def _check_plugin_parameters(plugin_type: str, values: dict[str, Any], written: set[str], where: str,
                             warnings: list[str]) -> None:
    """The checks each factory makes after decoding (the refusals are upstream's, word for word in substance)."""
    if plugin_type == PREFIX_PRODUCER:
        # approximateprefix/plugin.go ApproxPrefixCacheFactory and newDataProducer@v0.10.0.
        if values["blockSize"] > 0:
            warnings.append(f"{where}.parameters.blockSize is deprecated; use blockSizeTokens")
            if values["blockSizeTokens"] == 16:
                values["blockSizeTokens"] = values["blockSize"]
            values["blockSize"] = 0
        if not values["autoTune"] and values["blockSizeTokens"] <= 0:
            raise PickerConfigError(f"{where}.parameters.blockSizeTokens: {values['blockSizeTokens']} with autoTune "
                                    "false; the block size must be > 0 when autoTune is off (set blockSizeTokens, "
                                    "e.g. 64, or autoTune: true)")
        if values["maxPrefixTokensToMatch"] < 0:
            raise PickerConfigError(f"{where}.parameters.maxPrefixTokensToMatch: {values['maxPrefixTokensToMatch']} "
                                    "is negative; use 0 (no token cap) or a positive number of tokens")
        if "blockSizeTokens" in written and 0 < values["blockSizeTokens"] < 64:
            warnings.append(f"{where}.parameters.blockSizeTokens {values['blockSizeTokens']} is below 64; the "
                            "picker raises it to 64 at request time")
    elif plugin_type == PREFIX:
        # scorer/prefix/plugin.go PrefixCachePluginFactory@v0.10.0.
        weight = values["matchLengthWeight"]
        if not 0.0 <= weight <= 1.0:
            raise PickerConfigError(f"{where}.parameters.matchLengthWeight: {weight} is outside 0.0..1.0; it is the "
                                    "share of the score taken by match length, e.g. 0.5")
        if weight > 0.0 and values["matchLengthScaleTokens"] <= 0:
            raise PickerConfigError(f"{where}.parameters.matchLengthScaleTokens: {values['matchLengthScaleTokens']} "
                                    "with matchLengthWeight > 0; it must be > 0, e.g. 8192")
    elif plugin_type == AFFINITY_FILTER:
        _check_affinity_filter(values, where, warnings)
    elif plugin_type == TOKEN_LOAD:
        # scorer/tokenload/token_load.go TokenLoadScorerFactory@v0.10.0.
        if values["queueThresholdTokens"] <= 0:
            warnings.append(f"{where}.parameters.queueThresholdTokens {values['queueThresholdTokens']} is not "
                            "positive; upstream uses 4194304 instead")
            values["queueThresholdTokens"] = _default_of(TOKEN_LOAD, "queueThresholdTokens")
    elif plugin_type == ACTIVE_REQUEST:
        # scorer/activerequest/active_request.go NewActiveRequest@v0.10.0: out-of-range values are
        # replaced (and logged), not refused.
        if values["requestTimeout"]:
            warnings.append(f"{where}.parameters.requestTimeout is deprecated and ignored; the in-flight-load "
                            "producer tracks requests until they end")
        if values["idleThreshold"] < 0:
            warnings.append(f"{where}.parameters.idleThreshold {values['idleThreshold']} is negative; upstream uses 0")
            values["idleThreshold"] = 0
        if not 0.0 <= values["maxBusyScore"] <= 1.0:
            warnings.append(f"{where}.parameters.maxBusyScore {values['maxBusyScore']:g} is outside 0..1; upstream "
                            "ignores it and uses 1.0")
            values["maxBusyScore"] = 1.0
    elif plugin_type == INFLIGHT_PRODUCER:
        # dataproducer/inflightload/producer.go InFlightLoadProducerFactory@v0.10.0.
        for key, example in (("outputRatio", "1.5"), ("maxEstimatedOutputTokens", "4096")):
            if values[key] is not None and values[key] < 0:
                raise PickerConfigError(f"{where}.parameters.{key}: {values[key]:g} is negative, which the "
                                        f"{INFLIGHT_PRODUCER} factory refuses ({key} must be non-negative); set "
                                        f"{key}: {example} or leave it out")
    elif plugin_type == PRECISE_PRODUCER:
        _check_precise_producer(values, where, warnings)
    elif plugin_type == TOKEN_PRODUCER:
        _check_token_backend(values, where)
        if values["estimate"] is not None:
            _check_choices(_ESTIMATE_FIELDS, values["estimate"], f"{where}.parameters.estimate")


def _check_affinity_filter(values: Mapping[str, Any], where: str, warnings: list[str]) -> None:
    """prefixcacheaffinity/plugin.go Config.validate@v0.10.0, check by check in its order."""
    threshold, exploration = values["affinityThreshold"], values["explorationProbability"]
    penalty, peak, source = values["maxTTFTPenaltyMs"], values["peakPrefillThroughput"], values["ttftSource"]
    name = f"the {AFFINITY_FILTER} factory"
    if threshold > 1.0:
        raise PickerConfigError(f"{where}.parameters.affinityThreshold: {threshold:g} is above 1.0, which {name} "
                                "refuses; it is the share of the request's prefix blocks a pod must hold to be "
                                "sticky: use e.g. 0.8 (the default), or 0 to turn the filter off")
    if not 0.0 <= exploration <= 1.0:
        raise PickerConfigError(f"{where}.parameters.explorationProbability: {exploration:g} is outside [0, 1], which "
                                f"{name} refuses; it is the chance of skipping the filter per pick: use e.g. 0.01, "
                                "or 0 (the default) never to skip it")
    if penalty < 0:
        raise PickerConfigError(f"{where}.parameters.maxTTFTPenaltyMs: {penalty:g} is negative, which {name} refuses; "
                                "use 0 to always stick, or the milliseconds of extra TTFT stickiness may cost, e.g. "
                                "18000 (the default)")
    if peak < 0:
        raise PickerConfigError(f"{where}.parameters.peakPrefillThroughput: {peak:g} is negative, which {name} "
                                "refuses; use the pods' prefill tokens per second (`calibrate` measures it), e.g. "
                                "15928 (the default)")
    if source not in (PREFILL_THROUGHPUT, LATENCY_PREDICTOR):
        raise PickerConfigError(f"{where}.parameters.ttftSource: {_shown(source)} is not a TTFT source {name} "
                                f"accepts; use {PREFILL_THROUGHPUT} (in-flight tokens / peakPrefillThroughput, the "
                                f"default) or {LATENCY_PREDICTOR}")
    if source == PREFILL_THROUGHPUT and penalty > 0 and peak == 0:
        raise PickerConfigError(f"{where}.parameters.peakPrefillThroughput: 0 with the TTFT load gate on, which "
                                f"{name} refuses (it must be > 0 when ttftSource is {PREFILL_THROUGHPUT}: the gate "
                                "divides in-flight tokens by it); set the pods' prefill tokens per second "
                                "(`calibrate` measures it, e.g. 15928) or maxTTFTPenaltyMs: 0 to always stick")
    if threshold <= 0:
        warnings.append(f"{where}.parameters.affinityThreshold {threshold:g}: the filter keeps every pod "
                        "(upstream turns it off at <= 0)")


def _check_precise_producer(values: Mapping[str, Any], where: str, warnings: list[str]) -> None:
    """preciseprefixcache/producer.go PluginFactory@v0.10.0 and the configs it validates, in order."""
    indexer = values["indexerConfig"] or {}
    if any(str(key).lower() == "tokenizerspoolconfig" for key in indexer):
        raise PickerConfigError(f"{where}.parameters.indexerConfig.tokenizersPoolConfig: upstream's factory refuses it "
                                "(\"tokenizersPoolConfig is not supported; configure a token-producer plugin "
                                "instead\"); remove it and declare a token-producer with the vllm backend")
    tokens = values["tokenProcessorConfig"] or {}
    if tokens.get("blockSize"):
        warnings.append(f"{where}.parameters.tokenProcessorConfig.blockSize is deprecated; use blockSizeTokens")
    block = precise_block_tokens(values)
    if block <= 0:
        raise PickerConfigError(f"{where}.parameters.tokenProcessorConfig.blockSizeTokens: {block} is not above 0, "
                                "which upstream refuses (\"blockSizeTokens must be greater than 0\"); set vLLM's "
                                "--block-size, e.g. blockSizeTokens: 64")
    events = values["kvEventsConfig"] or {}
    _check_choices(_PRECISE_PRODUCER_PARAMETERS[2].fields, events, f"{where}.parameters.kvEventsConfig")
    if events.get("concurrency", 4) <= 0:
        raise PickerConfigError(f"{where}.parameters.kvEventsConfig.concurrency: {events['concurrency']} is not above "
                                "0; upstream does not check it and its event pool divides by it, so the picker would "
                                "crash at the first event: set 4 (the default) or leave it out")
    if values["speculativeIndexing"]:
        ttl = go_duration_seconds(values["speculativeTTL"])
        if ttl is None:
            raise PickerConfigError(f"{where}.parameters.speculativeTTL: {_shown(values['speculativeTTL'])} is not a "
                                    "Go duration, which upstream refuses with speculativeIndexing on; write one, e.g. "
                                    "2s or 500ms")
        if ttl <= 0:
            warnings.append(f"{where}.parameters.speculativeTTL {values['speculativeTTL']}: not above 0; upstream "
                            "uses 2s")


def precise_block_tokens(parameters: Mapping[str, Any]) -> int:
    """The tokens per block key a decoded precise-prefix-cache-producer cuts (token_processor.go
    defaulting@v0.10.0): blockSizeTokens, else the deprecated blockSize, else 16."""
    tokens = parameters["tokenProcessorConfig"] or {}
    return tokens.get("blockSizeTokens", 0) or tokens.get("blockSize", 0) or 16


def speculative_ttl_seconds(parameters: Mapping[str, Any]) -> float | None:
    """How long a decoded precise-prefix-cache-producer keeps a speculative entry; None when it
    makes none (prerequest.go@v0.10.0: a TTL not above 0 means 2s)."""
    if not parameters["speculativeIndexing"]:
        return None
    ttl = go_duration_seconds(parameters["speculativeTTL"])
    return ttl if ttl is not None and ttl > 0 else 2.0


# Go's time.ParseDuration units, in seconds.
_GO_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def go_duration_seconds(text: str) -> float | None:
    """A Go duration string (time.ParseDuration: "2s", "1m30s", "-1.5h", "0") in seconds; None
    when Go would refuse it."""
    sign, body = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text[1:] if text[:1] == "+" else text)
    if body == "0":
        return 0.0
    seconds, position = 0.0, 0
    for part in _GO_DURATION_PART.finditer(body):
        if part.start() != position:
            return None
        seconds += float(part.group(1)) * _GO_DURATION_UNITS[part.group(2)]
        position = part.end()
    return sign * seconds if body and position == len(body) else None


def _default_of(plugin_type: str, key: str) -> Any:
    return next(parameter.default for parameter in _MODELLED[plugin_type].parameters if parameter.key == key)


def token_backend(parameters: Mapping[str, Any]) -> str:
    """The backend a token-producer's decoded parameters select (tokenizer.go NewPlugin@v0.10.0):
    udsTokenizerConfig when its socketFile is set, vllm when `vllm` or `modelName` is, else
    estimate, which is also the zero-config default."""
    uds = parameters["udsTokenizerConfig"]
    if isinstance(uds, Mapping) and any(str(key).lower() == "socketfile" and value for key, value in uds.items()):
        return "udsTokenizerConfig"
    if parameters["vllm"] is not None or parameters["modelName"]:
        return "vllm"
    return "estimate"


def _check_token_backend(values: Mapping[str, Any], where: str) -> None:
    # tokenizer.go PluginFactory@v0.10.0, its conditions as written: modelName alone selects vllm,
    # so a uds backend (which needs modelName) is always refused with one or the other message.
    estimate = values["estimate"] is not None
    uds = token_backend(values) == "udsTokenizerConfig"
    vllm = values["vllm"] is not None or bool(values["modelName"])
    if (estimate and (uds or vllm)) or (uds and vllm):
        written = [key for key, on in (("estimate", estimate), ("vllm", values["vllm"] is not None),
                                       ("modelName", bool(values["modelName"])), ("udsTokenizerConfig", uds)) if on]
        raise PickerConfigError(f"{where}.parameters: {' and '.join(written)} select different token backends "
                                "(modelName alone selects vllm); upstream's factory takes only one of 'estimate', "
                                "'vllm' or 'udsTokenizerConfig'. Keep estimate, the backend this model predicts, and "
                                "drop the others")
    if (uds or vllm) and not values["modelName"]:
        backend = "udsTokenizerConfig" if uds else "vllm"
        raise PickerConfigError(f"{where}.parameters.modelName: missing; the {backend} backend loads the model's "
                                "tokenizer and upstream's factory refuses it without one. Set modelName (e.g. "
                                "modelName: Qwen/Qwen2.5-0.5B-Instruct) or use estimate: {}")


def _check_choices(fields: tuple[Parameter, ...], decoded: Mapping[str, Any], where: str) -> None:
    # The factory's mode checks, in its order (image.mode, video.tokensPerFrame.mode, video.frames.mode).
    for field in fields:
        value = decoded.get(field.key)
        if field.fields is not None and value is not None:
            _check_choices(field.fields, value, f"{where}.{field.key}")
        elif field.choices and value not in ("", None, *field.choices):
            raise PickerConfigError(f"{where}.{field.key}: {_shown(value)} is not a mode upstream accepts; use "
                                    f"{' or '.join(field.choices)} ({field.meaning}), "
                                    f"e.g. {field.key}: {field.example}")


def _profiles(entries: Any, plugins: Mapping[str, PluginSpec], warnings: list[str]) -> list[SchedulingProfile]:
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise PickerConfigError(f"schedulingProfiles: must be a list of {{name, plugins}}, got {_shown(entries)}")
    profiles: list[SchedulingProfile] = []
    for index, entry in enumerate(entries):
        where = f"schedulingProfiles[{index}]"
        if not isinstance(entry, Mapping):
            raise PickerConfigError(f"{where}: must be a mapping with name and plugins, got {_shown(entry)}")
        unknown = [key for key in entry if key not in ("name", "plugins")]
        if unknown:
            raise PickerConfigError(f"{where}.{unknown[0]}: not a profile field (strict decoding); a profile has "
                                    "name and plugins")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise PickerConfigError(f"{where}: is missing a name; set name, e.g. {DEFAULT_PROFILE}")
        if any(profile.name == name for profile in profiles):
            raise PickerConfigError(f"{where}: duplicate profile name {name!r}; give each profile its own name")
        refs = entry.get("plugins") or []
        if not isinstance(refs, list):
            raise PickerConfigError(f"{where}.plugins: must be a list of {{pluginRef, weight}}, got {_shown(refs)}")
        profiles.append(SchedulingProfile(name, tuple(
            _profile_plugin(ref, f"{where}.plugins[{position}]", plugins, warnings)
            for position, ref in enumerate(refs))))
    return profiles


def _profile_plugin(entry: Any, where: str, plugins: Mapping[str, PluginSpec], warnings: list[str]) -> ProfilePlugin:
    if not isinstance(entry, Mapping):
        raise PickerConfigError(f"{where}: must be a mapping with pluginRef (and weight for a scorer), "
                                f"got {_shown(entry)}")
    unknown = [key for key in entry if key not in ("pluginRef", "weight")]
    if unknown:
        raise PickerConfigError(f"{where}.{unknown[0]}: not a field here (strict decoding); a profile entry has "
                                "pluginRef and weight")
    ref, weight = entry.get("pluginRef"), entry.get("weight")
    if not isinstance(ref, str) or not ref:
        raise PickerConfigError(f"{where}: is missing a pluginRef; name one of the plugins: {', '.join(plugins)}")
    if ref not in plugins:
        raise PickerConfigError(f"{where}.pluginRef: references undefined plugin {ref!r}; declare it under plugins "
                                f"(defined: {', '.join(plugins) or 'none'})")
    if weight is not None:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise PickerConfigError(f"{where}.weight: {_shown(weight)} is not a number; weights are numbers, e.g. "
                                    "weight: 2")
        weight = float(weight)
        if weight < 0:
            warnings.append(f"{where}.weight {weight:g}: upstream accepts negative weights, which turn "
                            f"{ref} into a penalty")
    role = plugins[ref].role
    if role != "scorer":
        if weight is not None:
            warnings.append(f"{where}.weight: {ref} is a {role}, not a scorer; upstream ignores its weight")
        weight = None
        if role not in _PROFILE_ROLES:
            warnings.append(f"{where}: {ref} is a {role}; a profile uses only filters, scorers and a picker, so "
                            "upstream ignores it here")
    elif weight is None:
        weight = DEFAULT_SCORER_WEIGHT  # defaults.go ensureSchedulingLayer
    return ProfilePlugin(ref, weight)


def _apply_system_defaults(plugins: dict[str, PluginSpec], profiles: list[SchedulingProfile],
                           warnings: list[str]) -> tuple[dict[str, PluginSpec], tuple[SchedulingProfile, ...]]:
    """LDR defaults.go ensureSchedulingLayer and data_graph.go CreateMissingDataProducers@v0.10.0."""
    plugins = dict(plugins)
    if not profiles:
        # Every filter, scorer and picker, each scorer at weight 1.
        profiles = [SchedulingProfile(DEFAULT_PROFILE, tuple(
            ProfilePlugin(spec.name, DEFAULT_SCORER_WEIGHT if spec.role == "scorer" else None)
            for spec in plugins.values() if spec.role in _PROFILE_ROLES))]
    handlers = [spec.name for spec in plugins.values() if spec.role == "profile-handler"]
    if len(handlers) > 1:
        raise PickerConfigError(f"plugins: several profile handlers ({', '.join(handlers)}); only one is allowed")
    if not handlers:
        if len(profiles) > 1:
            raise PickerConfigError(f"schedulingProfiles: {len(profiles)} profiles and no profile handler; "
                                    f"{SINGLE_PROFILE_HANDLER} runs one profile, so declare a handler that runs "
                                    "several (e.g. disagg-profile-handler) or keep one profile")
        plugins[SINGLE_PROFILE_HANDLER] = _default_plugin(SINGLE_PROFILE_HANDLER, "added: one profile, no handler")
    elif plugins[handlers[0]].type == SINGLE_PROFILE_HANDLER and len(profiles) > 1:
        raise PickerConfigError(f"schedulingProfiles: {SINGLE_PROFILE_HANDLER} cannot run {len(profiles)} profiles; "
                                "keep one profile or use a handler that runs several")
    pickers = [spec.name for spec in plugins.values() if spec.role == "picker"]
    shared_picker = pickers[0] if pickers else MAX_SCORE_PICKER
    completed = []
    for index, profile in enumerate(profiles):
        in_profile = [entry.plugin_ref for entry in profile.plugins if plugins[entry.plugin_ref].role == "picker"]
        if len(in_profile) > 1:
            raise PickerConfigError(f"schedulingProfiles[{index}]: profile {profile.name!r} lists pickers "
                                    f"{', '.join(in_profile)}; a profile has one picker")
        if not in_profile:
            if len(pickers) > 1:
                # Upstream takes whichever picker its plugin map yields first: not reproducible.
                raise PickerConfigError(f"schedulingProfiles[{index}]: profile {profile.name!r} has no picker and "
                                        f"several are declared ({', '.join(pickers)}); list the one it uses")
            if shared_picker not in plugins:
                plugins[MAX_SCORE_PICKER] = _default_plugin(MAX_SCORE_PICKER, "added: a profile without a picker")
            profile = SchedulingProfile(profile.name, profile.plugins + (ProfilePlugin(shared_picker, None),))
        completed.append(profile)
    _add_missing_producers(plugins)
    return plugins, tuple(completed)


# The data plugins pass each other (LDR attribute/*/data_types.go@v0.10.0), by kind. A key is a
# kind and the name of the plugin that makes it: a consumer's *ProducerName parameter names it,
# by default the name of the kind's default producer.
_MATCH_INFO, _IN_FLIGHT, _UNCACHED, _LATENCY = ("prefix match info", "in-flight load", "uncached request tokens",
                                              "latency prediction")
# runner.go RegisterAsDefaultProducer@v0.10.0: the producer upstream creates, with no parameters,
# for a key some plugin requires and none makes. Uncached request tokens have none.
_DEFAULT_PRODUCERS = {_MATCH_INFO: PREFIX_PRODUCER, _IN_FLIGHT: INFLIGHT_PRODUCER, _LATENCY: PREDICTED_LATENCY_PRODUCER}
# The producer name a key has when its consumer names none.
_DEFAULT_NAMES = {**_DEFAULT_PRODUCERS, _UNCACHED: INFLIGHT_PRODUCER}
# What each producer type makes (its Produces()), under its own name.
_PRODUCED_KINDS = {
    **{producer: (_MATCH_INFO,) for producer in PREFIX_MATCH_PRODUCERS},
    INFLIGHT_PRODUCER: (_IN_FLIGHT, _UNCACHED), PREDICTED_LATENCY_PRODUCER: (_LATENCY,)}


def _required(spec: PluginSpec) -> list[tuple[str, str, str]]:
    """The data `spec` cannot run without (its Consumes().Required): (kind, producer name, the
    parameter naming the producer)."""
    parameters = spec.parameters

    def named(kind: str, key: str) -> tuple[str, str, str]:
        return kind, parameters[key] or _DEFAULT_NAMES[kind], key

    if spec.type in (PREFIX, NO_HIT_LRU):
        return [named(_MATCH_INFO, "prefixMatchInfoProducerName")]
    if spec.type == AFFINITY_FILTER:
        # The load gate's source only when the gate is on (plugin.go Consumes).
        gate = []
        if parameters["maxTTFTPenaltyMs"] > 0 and parameters["ttftSource"] == LATENCY_PREDICTOR:
            gate = [named(_LATENCY, "latencyPredictionInfoProducerName")]
        elif parameters["maxTTFTPenaltyMs"] > 0:
            gate = [named(_IN_FLIGHT, "inFlightLoadProducerName")]
        return [named(_MATCH_INFO, "prefixMatchInfoProducerName"), *gate]
    if spec.type == TOKEN_LOAD:
        return [named(_IN_FLIGHT, "inFlightLoadProducerName"), named(_UNCACHED, "inFlightLoadProducerName")]
    if spec.type == ACTIVE_REQUEST:
        return [named(_IN_FLIGHT, "inFlightLoadProducerName")]
    return []


def _add_missing_producers(plugins: dict[str, PluginSpec]) -> None:
    """data_graph.go CreateMissingDataProducers@v0.10.0: for every key a plugin requires and no
    plugin makes, the kind's default producer is created with default parameters, under the
    name the key gives. A key with no default producer, or naming another producer, stops the
    picker from starting. The producers created here require only the token producer's tokens,
    which upstream creates the same way; that one is left implicit: the picker model takes
    upstream's default one when no plugin is named token-producer (endpoint_picker.py
    _media_estimates), so one pass creates everything."""
    made = {(kind, spec.name) for spec in plugins.values() for kind in _PRODUCED_KINDS.get(spec.type, ())}
    missing: dict[tuple[str, str], tuple[PluginSpec, str]] = {}
    for spec in plugins.values():
        for kind, producer, parameter in _required(spec):
            if (kind, producer) not in made:
                missing.setdefault((kind, producer), (spec, parameter))
    for (kind, producer), (consumer, parameter) in missing.items():
        if _DEFAULT_PRODUCERS.get(kind) != producer:
            raise PickerConfigError(_no_producer(kind, producer, consumer, parameter))
        if producer not in plugins:  # a plugin of that name that makes something else: left alone
            plugins[producer] = _default_plugin(producer, f"added: {consumer.name} needs its {kind}")


def _no_producer(kind: str, producer: str, consumer: PluginSpec, parameter: str) -> str:
    types = [name for name, kinds in _PRODUCED_KINDS.items() if kind in kinds]
    if kind == _UNCACHED and producer == INFLIGHT_PRODUCER:
        return (f"{consumer.origin}: {consumer.name} ({consumer.type}) reads the {kind} of a plugin named "
                f"{producer!r}, and upstream creates no producer of those by default (the picker does not start); "
                f"declare one: {{type: {INFLIGHT_PRODUCER}}}")
    return (f"{consumer.origin}.parameters.{parameter}: no plugin named {producer!r} produces {kind}; declare it "
            f"(type {' or '.join(types[:2])}) or leave the parameter out to use {_DEFAULT_PRODUCERS[kind]}")


def _check_producers(plugins: Mapping[str, PluginSpec], warnings: list[str]) -> None:
    """A key's name taken by a plugin that does not make it: upstream creates nothing there and the
    consumer runs without the data."""
    for spec in plugins.values():
        for kind, producer, parameter in _required(spec):
            if kind not in _PRODUCED_KINDS.get(plugins[producer].type, ()):
                warnings.append(f"{spec.origin}.parameters.{parameter}: {producer!r} is a {plugins[producer].role} "
                                f"({plugins[producer].type}), not a producer of {kind}; upstream then runs "
                                f"{spec.name} without it{_WITHOUT.get(kind, '')}")


# What a consumer does without the data (each plugin's Score / Filter@v0.10.0).
_WITHOUT = {_MATCH_INFO: " (every prefix score 0)", _IN_FLIGHT: " (every pod counted idle)"}


def _default_plugin(plugin_type: str, origin: str) -> PluginSpec:
    parameters = {parameter.key: parameter.default for parameter in _PLUGIN_TYPES[plugin_type].parameters or ()}
    return PluginSpec(name=plugin_type, type=plugin_type, parameters=MappingProxyType(parameters), origin=origin)


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _closest(name: str, choices: frozenset[str] | tuple[str, ...]) -> str | None:
    close = difflib.get_close_matches(name, sorted(choices), n=1)
    return close[0] if close else None


# -- rendering from weights ------------------------------------------------------------------------

@dataclass(frozen=True)
class PreciseIndex:
    """What a rendered config needs to route on the pods' own KV-cache events (the precise
    prefix index): vLLM's block size, which the block keys take; the served model's name, which
    seeds them; the URL the token producer asks vLLM for its tokens at (its /render endpoints,
    so the keys are cut from vLLM's own tokens); whether picks add speculative entries."""

    block_size_tokens: int
    model_name: str
    vllm_url: str
    speculative: bool = False


# The plugins that read a prefix producer's match info, by the parameter that names it.
_MATCH_INFO_READERS = (PREFIX, NO_HIT_LRU, AFFINITY_FILTER, INFLIGHT_PRODUCER)


def _with_precise_index(document: dict[str, Any], precise: PreciseIndex | None) -> dict[str, Any]:
    """`document` reading the precise producer's match info instead of the approximate one's:
    upstream's sample (deploy/config/epp-precise-prefix-cache-config.yaml@v0.10.0) with the
    document's own profile: the token producer on vLLM's tokens, the producer subscribed to each
    pod it learns of through the endpoint notifications, the index's metrics on."""
    if precise is None:
        return document
    producer: dict[str, Any] = {"tokenProcessorConfig": {"blockSizeTokens": precise.block_size_tokens},
                                "indexerConfig": {"kvBlockIndexConfig": {"enableMetrics": True}}}
    if precise.speculative:
        producer["speculativeIndexing"] = True
    plugins = [
        {"type": TOKEN_PRODUCER, "parameters": {"modelName": precise.model_name, "vllm": {"url": precise.vllm_url}}},
        {"type": METRICS_DATA_SOURCE}, {"type": CORE_METRICS_EXTRACTOR}, {"type": ENDPOINT_NOTIFICATION_SOURCE},
        {"type": PRECISE_PRODUCER, "parameters": producer}]
    for plugin in document["plugins"]:
        if plugin["type"] == PREFIX_PRODUCER:
            continue
        if plugin["type"] in _MATCH_INFO_READERS:
            plugin = {**plugin, "parameters": {**plugin.get("parameters", {}),
                                               "prefixMatchInfoProducerName": PRECISE_PRODUCER}}
        plugins.append(plugin)
    return {**document, "plugins": plugins, "dataLayer": {"sources": [
        {"pluginRef": METRICS_DATA_SOURCE, "extractors": [{"pluginRef": CORE_METRICS_EXTRACTOR}]},
        {"pluginRef": ENDPOINT_NOTIFICATION_SOURCE, "extractors": [{"pluginRef": PRECISE_PRODUCER}]}]}}


def render_endpoint_picker_config(weights: Mapping[str, Any], precise: PreciseIndex | None = None) -> dict[str, Any]:
    """The EndpointPickerConfig (llm-d.ai/v1alpha1) that runs HyperPod-style `weights`.

    One scorer per non-zero weight (queue -> queue-scorer, ..., lru -> no-hit-lru-scorer), the
    approximate prefix producer when prefix or lru needs it (where v0.9+ reads the prefix
    tuning), one `default` profile with the max-score picker; with `precise`, the precise
    prefix index in the approximate one's place. Plugins and profile entries always come in the
    same order, so the rendered text, and any hash of it, is stable.
    """
    problems = []
    for name, value in weights.items():
        if name not in _ALL_WEIGHT_NAMES:
            close = _closest(name, _ALL_WEIGHT_NAMES)
            hint = f" (did you mean {close}?)" if close else ""
            problems.append(f"{name}={value!r}: not a scorer weight{hint}; valid weights: {', '.join(_ALL_WEIGHT_NAMES)}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or not math.isfinite(value):
            problems.append(f"{name}={value!r}: weights are non-negative numbers, e.g. {name}=2")
        elif name == "predictedLatency" and value > 0:
            problems.append(f"predictedLatency={value!r}: the open-source picker has no equivalent without the "
                            "latency-predictor sidecars (latency-scorer with predicted-latency-producer, trained "
                            "online by the chart's router.latencyPredictor sidecars), which neither this stack nor "
                            "the routing model provides; set predictedLatency=0")
    if problems:
        raise PickerConfigError(problem_lines("weights:", problems))
    active = [(name, weights[name]) for name in _ALL_WEIGHT_NAMES if name in WEIGHT_PLUGIN_TYPES and weights.get(name)]
    types = [WEIGHT_PLUGIN_TYPES[name] for name, _ in active]
    plugins = [{"type": plugin_type} for plugin_type in types]
    if PREFIX in types or NO_HIT_LRU in types:
        plugins.insert(types.index(PREFIX) if PREFIX in types else types.index(NO_HIT_LRU), {"type": PREFIX_PRODUCER})
    plugins += [{"type": MAX_SCORE_PICKER}, {"type": SINGLE_PROFILE_HANDLER}]
    refs = [{"pluginRef": WEIGHT_PLUGIN_TYPES[name], "weight": value} for name, value in active]
    return _with_precise_index({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "plugins": plugins,
        "schedulingProfiles": [{"name": DEFAULT_PROFILE, "plugins": refs + [{"pluginRef": MAX_SCORE_PICKER}]}],
    }, precise)


def render_sticky_picker_config(parameters: Mapping[str, Any], precise: PreciseIndex | None = None) -> dict[str, Any]:
    """The EndpointPickerConfig (llm-d.ai/v1alpha1) of upstream's "sticky until saturated" recipe.

    The prefix-cache-affinity filter, with exactly the `parameters` given (each one of
    STICKY_PARAMETERS; those left out take upstream's defaults in the picker), keeps a request on
    the pods holding its prefix until their in-flight load would cost more than its TTFT penalty;
    the token-load scorer (weight 1) and the max-score picker choose among the pods it keeps. The
    producers they read are declared: the token-load scorer's uncached-tokens key has no default
    producer, so upstream would not start without inflight-load-producer. One `default` profile,
    plugins in a fixed order, so the text and its hash are stable. Values are written as given;
    load_endpoint_picker_config refuses those upstream's factory refuses, naming the parameter.
    With `precise`, the filter and the in-flight-load producer read the precise prefix index
    (both take prefixMatchInfoProducerName at v0.10.0).
    """
    unknown = [name for name in parameters if name not in STICKY_PARAMETERS]
    if unknown:
        problems = []
        for name in unknown:
            close = _closest(str(name), tuple(STICKY_PARAMETERS))
            problems.append(f"{name}={parameters[name]!r}: not a parameter of the sticky recipe"
                            + (f" (did you mean {close}?)" if close else "")
                            + f"; its parameters are {', '.join(STICKY_PARAMETERS)}, e.g. maxTTFTPenaltyMs=5000")
        raise PickerConfigError(problem_lines("sticky recipe:", problems))
    affinity_filter: dict[str, Any] = {"type": AFFINITY_FILTER}
    given = {name: parameters[name] for name in STICKY_PARAMETERS if name in parameters}
    if given:
        affinity_filter["parameters"] = given
    return _with_precise_index({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "plugins": [affinity_filter, {"type": TOKEN_LOAD}, {"type": PREFIX_PRODUCER}, {"type": INFLIGHT_PRODUCER},
                    {"type": MAX_SCORE_PICKER}, {"type": SINGLE_PROFILE_HANDLER}],
        "schedulingProfiles": [{"name": DEFAULT_PROFILE, "plugins": [
            {"pluginRef": AFFINITY_FILTER}, {"pluginRef": TOKEN_LOAD, "weight": 1}, {"pluginRef": MAX_SCORE_PICKER}]}],
    }, precise)


def endpoint_picker_config_yaml(document: Mapping[str, Any]) -> str:
    """`document` (e.g. a rendered config) as the YAML text a ConfigMap carries: keys in the
    document's own order, block style, so equal documents give equal text and equal hashes."""
    return yaml.safe_dump(dict(document), sort_keys=False, default_flow_style=False, allow_unicode=True)
