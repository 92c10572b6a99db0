"""Reads every config key of the stack into `Settings`, or reports every bad value at once.

Nothing here imports Pulumi: `pulumi up`, the tests and the routing toolkit all call
`parse_settings` on the same raw key/value map, so they see exactly the same stack.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from settings.picker_config import (PRECISE_PRODUCER, STICKY_PARAMETERS, PickerConfigError, PreciseIndex,
                                    load_endpoint_picker_config, precise_block_tokens, render_sticky_picker_config)

from .errors import HIDDEN, NO_VALUE, NOT_SET, SettingsError
from .instance_types import GPUS_PER_INSTANCE, ec2_instance_type_message
from .kubernetes_names import subdomain_message
from .hyperpod import HyperPodParser, capacity_problems, hyperpod_warnings, parse_platform, picker_replica_warnings
from .model import (DEFAULT_IMPLEMENTATION, DEFAULT_NAMESPACE, DEFAULT_PRECISE_BLOCK_SIZE, DEFAULT_PREFIX_INDEX,
                    DEFAULT_VLLM_IMAGE, DEPENDENCY_ADDON_MINIMUMS, MODELLED_VLLM_VERSION, PREFIX_INDEXES,
                    GATEWAY_IMPLEMENTATIONS, WEIGHT_NAMES, ClusterSettings, GatewaySettings, GpuNodeSettings,
                    ROUTING_RECIPES, JwtSettings, ModelSettings, NodeGroupSize, PickerConfigMap, RoutingSettings,
                    Settings, SystemNodeSettings, default_of, frozen_mapping, is_bottlerocket)
from .model import NetworkPolicySettings, ObservabilitySettings
from .node_autoscaling import NodeAutoscalingParser, karpenter_capacity_problems, node_autoscaling_warnings
from .observability import ObservabilityParser, observability_warnings
from .precise import (block_size_message, declares_precise_producer, file_producer, model_name_message, precise_flags,
                      vllm_flag)
from .reader import MISSING, Coerce, ConfigNode, Problems, decode_json, did_you_mean, finite_number
from .security import security_warnings

# Where Pulumi.yaml is: relative paths in the config are read from here, as `pulumi up` runs here.
PROJECT_DIR = Path(__file__).resolve().parent.parent

# The oldest vLLM whose metrics the picker reads: 0.9.2 renamed the KV-cache gauge to
# vllm:kv_cache_usage_perc, and the picker silently ignores the old name.
MIN_VLLM_VERSION = (0, 9, 2)

# CRD limits (InferenceGatewayConfig, spec.schedulers).
MAX_SCHEDULERS = 100
MAX_SCHEDULER_NAME = 63
MAX_MODEL_NAME = 253
MAX_LORA_ADAPTERS = 50
MAX_AUDIENCES = 8
MAX_REQUIRED_CLAIMS = 16

WEIGHT_HINT = " Weights are non-negative integers; 0 turns a scorer off."
# The CRD stores weights as integers; beyond int32 the API server would reject or truncate them.
MAX_WEIGHT = 2**31 - 1

TOP_LEVEL_KEYS = ("platform", "namespace", "models", "weights", "routing", "gateway", "cluster", "hyperpod", "gpuNodes",
                  "hfToken", "observability")
MODEL_KEYS = ("name", "model", "deployment", "replicas", "image", "gpus", "cpu", "memory", "port", "maxModelLen",
              "gpuMemoryUtilization", "extraArgs", "scheduler", "weights", "routing", "pickerConfigMap",
              "loraAdapters", "pickerReplicas", "routeTimeout", "logLevel", "autoscaling")
GATEWAY_KEYS = ("name", "implementation", "bbr", "bbrReplicas", "tls", "jwt", "networkPolicy", "metrics", "podDefaults",
                "installAddon",
                "addonVersion", "loadBalancerController", "keda", "gatedModelAccess", "executionRoleArn",
                "dependencyAddonVersions")
# Keys of the HyperPod inference add-on, which only mean something when the stack installs it.
ADDON_KEYS = ("addonVersion", "keda", "gatedModelAccess", "executionRoleArn", "dependencyAddonVersions")
# Fields of the InferenceGatewayConfig and its add-on, with no counterpart in the open-source stack
# (tls and jwt have one: the same keys, read by the same code, configure the Gateway there).
HYPERPOD_GATEWAY_KEYS = ("metrics", "podDefaults", "installAddon", *ADDON_KEYS)
NETWORK_POLICY_KEYS = ("enabled", "monitoringNamespace", "apiServerCidrs")
# The add-on accepts only an execution role whose name starts with this (its chart's rule under isAddOn).
ADDON_EXECUTION_ROLE_PREFIX = "SageMakerHyperPodInference"
IAM_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/(?:[\w+=,.@-]+/)*(?P<name>[\w+=,.@-]{1,64})$")
# The routing keys that mean something only with the precise prefix index.
PRECISE_KEYS = ("speculativeIndexing", "blockSize")
# Why HyperPod's gateway runs neither the sticky recipe nor the precise prefix index.
STICKY_ON_HYPERPOD = ("HyperPod's gateway exposes scorer weights (spec.schedulers[].weights), not filters, and AWS "
                      "does not publish which llm-d release its picker runs. Keep the weights recipe, or put the sticky "
                      "plugins in a models[].pickerConfigMap.file written for the release you know yours runs "
                      "(predict follows that file).")
PRECISE_ON_HYPERPOD = ("HyperPod's gateway takes scorer weights (or a whole picker ConfigMap), and AWS does not "
                       "publish which llm-d release its picker runs: the precise-prefix-cache-producer first ships in "
                       "llm-d router v0.9.0 (Beta at v0.10.0), and the evidence bounds HyperPod's picker to v0.5-v0.10, "
                       "so the stack cannot know the producer is there to read the pods' events. Keep prefixIndex "
                       "approximate.")
ROUTING_KEYS = ("recipe", "prefixIndex", *PRECISE_KEYS, *STICKY_PARAMETERS)
_REFUSED_PARAMETER = re.compile(r"^plugins\[\d+\]\.parameters\.(?P<name>\w+): \S+ (?P<why>.*)$")
JWT_KEYS = ("name", "issuer", "jwksUri", "audiences", "requiredClaims")
CLAIM_KEYS = ("name", "valueType", "values")
POD_DEFAULT_KEYS = ("resources", "nodeSelector", "tolerations", "affinity", "labels", "annotations", "env", "envFrom")
CLUSTER_KEYS = ("name", "existing", "version", "vpcId", "privateSubnetIds", "publicSubnetIds",
                "endpointPublicAccess", "endpointPrivateAccess", "publicAccessCidrs", "systemNodes")
NODE_GROUP_KEYS = ("instanceTypes", "desired", "min", "max")
GPU_NODE_KEYS = (*NODE_GROUP_KEYS, "capacityType", "diskSize", "amiType", "timeSlicing", "autoscaler", "karpenter")
NO_MANAGED_GPU_GROUP = NodeGroupSize(desired=0, min=0, max=0)
GPU_AMI_TYPES = ("AL2023_x86_64_NVIDIA", "AL2023_ARM_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA", "BOTTLEROCKET_ARM_64_NVIDIA")
# Flags the stack sets itself; a second copy in extraArgs would silently override or conflict.
MANAGED_VLLM_FLAGS = ("--model", "--port", "--host", "--served-model-name", "--enable-prefix-caching",
                      "--no-enable-prefix-caching", "--tensor-parallel-size", "--max-model-len",
                      "--gpu-memory-utilization")

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Service names must start with a letter (RFC 1035).
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
KUBERNETES_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")
# Gateway API Duration (GEP-2257).
GATEWAY_DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
ACM_ARN = re.compile(r"^arn:aws[a-z-]*:acm:[a-z0-9-]+:[0-9]{12}:certificate/[A-Za-z0-9-]+$")
EKS_VERSION = re.compile(r"^1\.([0-9]{2})$")
EKS_MIN_MINOR = 29
ADDON_VERSION = re.compile(r"^v[0-9]+\.[0-9]+\.[0-9]+-eksbuild\.[0-9]+$")
VLLM_IMAGE = re.compile(r"^(?P<repo>(?:[a-z0-9.-]+(?::[0-9]+)?/)?(?:[a-z0-9._-]+/)*vllm-openai):v?(?P<version>[0-9]+\.[0-9]+\.[0-9]+)(?P<suffix>[-+.a-z0-9]*)$")
SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8,17}$")
VPC_ID = re.compile(r"^vpc-[0-9a-f]{8,17}$")

def parse_settings(raw: Mapping[str, Any], *, stack: str, secret_keys: frozenset[str] = frozenset(),
                   project_dir: Path = PROJECT_DIR) -> Settings:
    """Validate the stack's config (keys without the `inference-gateway:` prefix) into Settings.

    Files the config names (a picker configuration) are read relative to `project_dir`.
    Raises SettingsError listing every problem; no partial result is ever returned.
    """
    problems = Problems(secret_keys=secret_keys)
    parser = _Parser(problems, project_dir)
    top = ConfigNode("", _structured_top(raw), _flat_top(raw), problems)
    settings = parser.settings(top, stack=stack, secret_keys=secret_keys)
    if settings is None or problems.items:
        raise SettingsError(problems.items)
    return settings


def parse_weight_overrides(text: str, *, key: str = "--weights") -> dict[str, int]:
    """`prefix=0,queue=3` into {"prefix": 0, "queue": 3}, with the stack's weight rules."""
    problems = Problems(config_keys=False)
    coerce = Coerce(problems)
    weights: dict[str, int] = {}
    if not text.strip():
        problems.add(key, text, "names no weight; write name=value pairs, e.g. --weights prefix=0,queue=3.")
    for part in (p.strip() for p in text.split(",") if text.strip()):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name:
            problems.add(key, part, "write each weight as name=value, e.g. --weights prefix=0,queue=3.")
            continue
        if name not in WEIGHT_NAMES:
            problems.add(f"{key} {name}", value, f"is not a scorer weight.{did_you_mean(name, WEIGHT_NAMES)} "
                                                 f"Valid weights: {', '.join(WEIGHT_NAMES)}.")
            continue
        number = coerce.integer(minimum=0, maximum=MAX_WEIGHT, hint=WEIGHT_HINT)(f"{key} {name}", value)
        if number is not MISSING:
            weights[name] = number
    if problems.items:
        raise SettingsError(problems.items, where=f"in {key}")
    return weights


def lru_conflict(scheduler: str, weights: Mapping[str, int]) -> bool:
    """CRD admission rule 4: the lru weight (no-hit LRU scorer) exists only in the llm-d picker."""
    return scheduler == "epp" and "lru" in weights


def _structured_top(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if "." not in k}


def _flat_top(raw: Mapping[str, Any]) -> dict[str, str]:
    return {k: v for k, v in raw.items() if "." in k}


class _Parser:
    def __init__(self, problems: Problems, project_dir: Path):
        self.problems = problems
        self.coerce = Coerce(problems)
        self.project_dir = project_dir

    # -- top level -------------------------------------------------------------------------

    def settings(self, top: ConfigNode, *, stack: str, secret_keys: frozenset[str]) -> Settings | None:
        unknown = top.names() - set(TOP_LEVEL_KEYS)
        for name in sorted(unknown):
            for key, value in top.set_under(name):
                self.problems.add(key, value, f"is not a key of this project.{did_you_mean(name, TOP_LEVEL_KEYS)} "
                                              f"Valid keys: {', '.join(TOP_LEVEL_KEYS)}. Remove it with "
                                              f"`pulumi config rm {key}`.")
        platform = parse_platform(top, self.coerce)
        namespace = top.leaf("namespace", self.coerce.string(_dns_label_message), DEFAULT_NAMESPACE)
        weights = self.weights(top.child("weights"))
        routing = self.routing(top, "routing")
        if platform is MISSING:
            # Every check below depends on the platform; with a refused one they would only guess.
            return None
        cluster = self.cluster(top.child("cluster"), stack, platform)
        if cluster is None:
            return None
        hyperpod, gpu_nodes = None, None
        if platform == "hyperpod":
            self._only_on("eks", platform, top, "gpuNodes", "GPUs come from hyperpod.instanceGroups")
            hyperpod = HyperPodParser(self.problems, self.coerce).settings(top.child("hyperpod"), cluster)
        else:
            self._only_on("hyperpod", platform, top, "hyperpod", "GPUs come from gpuNodes")
            gpu_nodes = self.gpu_nodes(top.child("gpuNodes"), cluster)
        top.reject_below("models", "a list, set entry by entry with `pulumi config set --path 'models[0].<field>' <value>`")
        gateway_node = top.child("gateway")
        implementation = self.implementation(gateway_node, platform)
        if routing:
            self.routing_rules("routing", routing, {}, implementation)
        models = self.models(top.raw("models"), weights, routing, implementation,
                             namespace if isinstance(namespace, str) else DEFAULT_NAMESPACE)
        if hyperpod is not None:
            capacity_problems(hyperpod, models, self.problems)
        if gpu_nodes is not None:
            karpenter_capacity_problems(gpu_nodes, models, self.problems)
        gateway = self.gateway(gateway_node, models, implementation, cluster)
        hf_token = self.hf_token(top, secret_keys)
        observability = ObservabilityParser(self.problems, self.coerce).settings(
            top.child("observability"), namespace=gateway.network_policy.monitoring_namespace, models_namespace=namespace,
            secret_keys=secret_keys)
        self.autoscaling_rules(models, observability)
        if self.problems.items:
            return None
        warnings = list(self.warnings(gateway, models, gpu_nodes))
        warnings += security_warnings(gateway, cluster)
        warnings += node_autoscaling_warnings(gpu_nodes)
        warnings += observability_warnings(observability, cluster)
        if hyperpod is not None:
            warnings += hyperpod_warnings(hyperpod, models)
        if gateway.implementation == "hyperpod":
            warnings += picker_replica_warnings(models)
        return Settings(stack=stack, namespace=namespace, models=models, gateway=gateway, cluster=cluster,
                        gpu_nodes=gpu_nodes, platform=platform, hyperpod=hyperpod, hf_token=hf_token,
                        observability=observability, warnings=tuple(warnings))

    def autoscaling_rules(self, models: tuple[ModelSettings, ...], observability: ObservabilitySettings) -> None:
        """What a model's scaler needs: the stack's Prometheus to query (KEDA to run it: `gateway`)."""
        if observability.enabled:
            return
        for index, model in enumerate(models):
            if model.autoscaling is not None:
                self.problems.add(f"models[{index}].autoscaling", NO_VALUE,
                                  "queries the stack's Prometheus, and observability.enabled is false. Remove "
                                  "observability.enabled, or remove the autoscaling block.")

    def _only_on(self, wanted: str, platform: str, node: ConfigNode, name: str, why: str) -> None:
        if name in node.names():
            key = node.child_key(name)
            self.problems.add(key, node.given(name),
                              f"applies only to platform {wanted}; on platform {platform} {why}. Remove it "
                              f"(`pulumi config rm --path {key}`) or set `pulumi config set platform {wanted}`.")

    def hf_token(self, top: ConfigNode, secret_keys: frozenset[str]) -> bool:
        top.reject_below("hfToken")
        value = top.structured.get("hfToken", MISSING)
        if value is MISSING or value == "":
            return False
        if "hfToken" not in secret_keys:
            # The value itself is never echoed: it is a credential.
            self.problems.add("hfToken", HIDDEN, "is stored in plain text in the stack file. Store it encrypted with "
                                                     "`pulumi config set --secret hfToken <token>`.")
        return True

    # -- weights ---------------------------------------------------------------------------

    def weights(self, node: ConfigNode) -> dict[str, int]:
        for name in sorted(node.names() - set(WEIGHT_NAMES)):
            for key, value in node.set_under(name):
                self.problems.add(key, value, f"is not a scorer weight.{did_you_mean(name, WEIGHT_NAMES)} Valid "
                                              f"weights: {', '.join(WEIGHT_NAMES)}.")
        weight = self.coerce.integer(minimum=0, maximum=MAX_WEIGHT, hint=WEIGHT_HINT)
        weights = {}
        for name in WEIGHT_NAMES:
            value = node.leaf(name, weight, MISSING)
            if value is not MISSING:
                weights[name] = value
        return weights

    # -- models ----------------------------------------------------------------------------

    def models(self, raw: Any, gateway_weights: dict[str, int], gateway_routing: dict[str, Any],
               implementation: str, namespace: str) -> tuple[ModelSettings, ...]:
        if isinstance(raw, str):
            decoded = decode_json(raw)
            raw = decoded if decoded is not MISSING else raw
        if raw is MISSING or raw is None or raw == []:
            self.problems.add("models", NOT_SET if raw is MISSING else raw,
                              "the stack must serve at least one model. Add one with "
                              "`pulumi config set --path 'models[0].name' qwen` and "
                              "`pulumi config set --path 'models[0].model' Qwen/Qwen2.5-1.5B-Instruct`.")
            return ()
        if not isinstance(raw, list):
            self.problems.add("models", raw, "must be a list of model entries, e.g. set with "
                                             "`pulumi config set --path 'models[0].name' qwen`.")
            return ()
        if len(raw) > MAX_SCHEDULERS:
            self.problems.add("models", f"<{len(raw)} entries>", f"the gateway takes at most {MAX_SCHEDULERS} schedulers "
                                                                 "(one per model); split the models over several stacks.")
        models = []
        for index, entry in enumerate(raw):
            model = self.model(f"models[{index}]", entry, gateway_weights, gateway_routing, implementation, namespace)
            if model is not None:
                models.append(model)
        self._unique(models, "name", "name", "each model's scheduler needs its own name.")
        self._unique(models, "model", "model", "the gateway routes by the request's `model`, so each "
                                               "Hugging Face id may be served by one entry only (CRD rule: modelName is unique).")
        self._unique(models, "deployment", "deployment", "two models cannot share one Deployment and Service.")
        return tuple(models) if len(models) == len(raw) else ()

    def _unique(self, models: list[ModelSettings], attribute: str, key: str, why: str) -> None:
        first_index: dict[str, int] = {}
        for index, model in enumerate(models):
            value = getattr(model, attribute)
            if value in first_index:
                self.problems.add(f"models[{index}].{key}", value,
                                  f"is also used by models[{first_index[value]}]; {why}")
            else:
                first_index[value] = index

    def model(self, key: str, entry: Any, gateway_weights: dict[str, int], gateway_routing: dict[str, Any],
              implementation: str, namespace: str) -> ModelSettings | None:
        if not isinstance(entry, dict):
            self.problems.add(key, entry, "must be an object with at least `name` and `model`.")
            return None
        node = ConfigNode(key, entry, {}, self.problems)
        node.reject_unknown(MODEL_KEYS)
        c = self.coerce
        before = len(self.problems.items)
        name = node.leaf("name", c.string(lambda v: _dns_label_message(v, MAX_SCHEDULER_NAME)), MISSING)
        if name is MISSING and "name" not in entry:
            self.problems.add(f"{key}.name", NOT_SET, "is required: the scheduler's name, a DNS label such as `qwen-small`.")
        model_id = node.leaf("model", c.string(_model_name_message), MISSING)
        if model_id is MISSING and "model" not in entry:
            self.problems.add(f"{key}.model", NOT_SET, "is required: the Hugging Face model id vLLM serves and "
                                                       "requests name, such as `Qwen/Qwen2.5-0.5B-Instruct`.")
        deployment = node.leaf("deployment", c.string(_service_name_message),
                               f"vllm-{name}" if isinstance(name, str) else MISSING)
        if isinstance(deployment, str) and (message := _service_name_message(deployment)) and "deployment" not in entry:
            self.problems.add(f"{key}.deployment", deployment, message)
        replicas = node.leaf("replicas", c.integer(minimum=0, hint=" 0 scales the model down."),
                               default_of(ModelSettings, "replicas"))
        image = node.leaf("image", c.string(_vllm_image_message), default_of(ModelSettings, "image"))
        gpus = node.leaf("gpus", c.integer(minimum=1, maximum=8, hint=" vLLM uses them as tensor-parallel ranks."),
                           default_of(ModelSettings, "gpus"))
        cpu = node.leaf("cpu", c.string(_quantity_message), default_of(ModelSettings, "cpu"))
        memory = node.leaf("memory", c.string(_quantity_message), default_of(ModelSettings, "memory"))
        port = node.leaf("port", c.integer(minimum=1, maximum=65535), default_of(ModelSettings, "port"))
        max_model_len = node.leaf("maxModelLen", c.integer(minimum=1), None)
        gpu_memory = node.leaf("gpuMemoryUtilization", c.number(0.0, 1.0, " vLLM's share of GPU memory, e.g. 0.9."), None)
        extra_args = node.leaf("extraArgs", c.string_list(c.string(_managed_flag_message)), ())
        scheduler = node.leaf("scheduler", c.choice(("llm-d", "epp")), default_of(ModelSettings, "scheduler"))
        own_weights = self.weights(node.child("weights"))
        own_routing = self.routing(node, "routing")
        config_map = self.picker_config_map(node) if "pickerConfigMap" in entry else None
        loras = node.leaf("loraAdapters", c.string_list(c.string(_model_name_message), max_items=MAX_LORA_ADAPTERS,
                                                        unique=True), ())
        picker_replicas = node.leaf("pickerReplicas", c.integer(minimum=1), None)
        route_timeout = node.leaf("routeTimeout", c.string(_duration_message), None)
        log_level = node.leaf("logLevel", c.integer(minimum=0, maximum=5, hint=" It is the picker's verbosity."), None)
        autoscaling = (ObservabilityParser(self.problems, c).autoscaling(f"{key}.autoscaling", entry, "replicas" in entry)
                       if "autoscaling" in entry else None)
        weights = {**gateway_weights, **own_weights}
        if config_map is not None and weights:
            where = f"{key}.weights" if own_weights else "weights (gateway-wide, applied to every model)"
            self.problems.add(f"{key}.pickerConfigMap", entry.get("pickerConfigMap"),
                              f"cannot be combined with {where}: the ConfigMap is a full picker configuration "
                              "(CRD rule: weights and configMapRef are mutually exclusive). Put the weights in the "
                              "ConfigMap, or remove pickerConfigMap.")
        routing = {**gateway_routing, **own_routing}
        if own_routing:
            self.routing_rules(f"{key}.routing", routing, gateway_routing, implementation)
        if routing.get("recipe") == "sticky":
            self.sticky_conflicts(key, own_routing, own_weights, weights, config_map)
        if lru_conflict(scheduler, weights):
            where = f"{key}.weights.lru" if "lru" in own_weights else "weights.lru (gateway-wide)"
            self.problems.add(f"{key}.scheduler", scheduler,
                              f"cannot use the lru weight set by {where}: the no-hit LRU scorer exists only in "
                              "the llm-d picker (CRD rule). Use scheduler 'llm-d' or remove the lru weight.")
        if implementation == "llm-d":
            self.open_source_picker_rules(key, entry, scheduler, own_weights, weights, config_map, picker_replicas)
        precise = None
        if implementation == "llm-d" and routing.get("prefixIndex") == "precise":
            precise = self.precise_index(key, routing, own_routing, config_map, model_id, extra_args,
                                         f"http://{deployment}.{namespace}.svc:{port}")
        elif implementation == "llm-d" and config_map is not None and declares_precise_producer(config_map.text):
            index_key = f"{key}.routing.prefixIndex"
            self.problems.add(f"{key}.pickerConfigMap.file", config_map.file,
                              f"declares {PRECISE_PRODUCER}, which indexes the KV-cache events of the model's pods, "
                              f"and the model's routing.prefixIndex is {DEFAULT_PREFIX_INDEX!r}: its pods publish "
                              f"none, so every prefix score would be 0. Set `pulumi config set --path {index_key} "
                              "precise`.")
        if len(self.problems.items) > before:
            return None
        return ModelSettings(
            name=name, model=model_id, deployment=deployment,
            replicas=autoscaling.min_replicas if autoscaling is not None else replicas, image=image, gpus=gpus, cpu=cpu,
            memory=memory, port=port,
            max_model_len=max_model_len, gpu_memory_utilization=gpu_memory, extra_args=extra_args,
            scheduler=scheduler, weights=frozen_mapping(weights), picker_config_map=config_map,
            routing=RoutingSettings(routing.get("recipe", default_of(RoutingSettings, "recipe")),
                                    frozen_mapping({n: v for n, v in routing.items() if n in STICKY_PARAMETERS}),
                                    precise),
            lora_adapters=loras, picker_replicas=picker_replicas, route_timeout=route_timeout, log_level=log_level,
            autoscaling=autoscaling)

    # -- routing recipe ----------------------------------------------------------------------

    def routing(self, parent: ConfigNode, name: str) -> dict[str, Any]:
        """The routing fields set at one level (stack-wide or a model's), each checked alone:
        `routing: sticky` is short for `routing.recipe: sticky`."""
        value = parent.raw(name)
        if isinstance(value, str) and decode_json(value) is MISSING:
            parent.reject_below(name, "set as a recipe name here; set the recipe as routing.recipe instead")
            recipe = self.coerce.choice(ROUTING_RECIPES)(parent.child_key(name), value)
            return {} if recipe is MISSING else {"recipe": recipe}
        node = parent.child(name)
        node.reject_unknown(ROUTING_KEYS)
        fields = {}
        c = self.coerce
        for field_name, coerce in (("recipe", c.choice(ROUTING_RECIPES)), ("prefixIndex", c.choice(PREFIX_INDEXES)),
                                   ("speculativeIndexing", c.boolean), ("blockSize", self.block_size)):
            value = node.leaf(field_name, coerce, MISSING)
            if value is not MISSING:
                fields[field_name] = value
        for parameter in STICKY_PARAMETERS:
            value = node.leaf(parameter, self.sticky_number, MISSING)
            if value is not MISSING:
                fields[parameter] = value
        return fields

    def block_size(self, key: str, value: Any) -> Any:
        size = self.coerce.integer(hint=" It is vLLM's --block-size, in tokens.")(key, value)
        if size is not MISSING and (message := block_size_message(size)) is not None:
            self.problems.add(key, value, message)
            return MISSING
        return size

    def sticky_number(self, key: str, value: Any) -> Any:
        number = finite_number(value)
        if number is MISSING:
            self.problems.add(key, value, f"must be a number, e.g. `pulumi config set --path {key} "
                                          f"{STICKY_PARAMETERS[key.rsplit('.', 1)[-1]]:g}` (upstream's default).")
            return MISSING
        return int(number) if number.is_integer() else number

    def routing_rules(self, key: str, routing: dict[str, Any], inherited: dict[str, Any], implementation: str) -> None:
        """What a routing block (`key`, merged over the stack-wide `inherited`) may not do."""
        recipe = routing.get("recipe", default_of(RoutingSettings, "recipe"))
        parameters = {name: value for name, value in routing.items() if name in STICKY_PARAMETERS}
        own = {name for name, value in routing.items() if inherited.get(name, MISSING) != value}

        def where(name: str) -> str:
            return f"{key}.{name}" if name in own or not inherited else f"routing.{name}"

        # Each switch: its key and default, the value that runs on llm-d only (and why), the keys
        # that mean something only with that value.
        switches = (("recipe", default_of(RoutingSettings, "recipe"), "sticky", STICKY_ON_HYPERPOD, STICKY_PARAMETERS,
                     "is a parameter of the sticky recipe"),
                    ("prefixIndex", DEFAULT_PREFIX_INDEX, "precise", PRECISE_ON_HYPERPOD, PRECISE_KEYS,
                     "applies to the precise prefix index"))
        for switch, default, llm_d_only, why_not_hyperpod, dependents, what in switches:
            value = routing.get(switch, default)
            if value == llm_d_only and implementation == "hyperpod" and switch in own:
                self.problems.add(where(switch), value, f"runs only on gateway.implementation llm-d: {why_not_hyperpod}")
            elif value != llm_d_only:
                for name in sorted(set(dependents) & own):
                    self.problems.add(where(name), routing[name],
                                      f"{what}, and {where(switch)} is {value!r}. Set "
                                      f"`pulumi config set --path {where(switch)} {llm_d_only}`, or remove it.")
        if recipe != "sticky" or not parameters or (implementation == "hyperpod" and "recipe" in own):
            return
        try:
            load_endpoint_picker_config(render_sticky_picker_config(parameters))
        except PickerConfigError as error:
            # The loader names the filter's parameter first: `plugins[0].parameters.<name>: <value> <why>`.
            refused = _REFUSED_PARAMETER.match(str(error))
            if refused and refused["name"] in parameters:
                self.problems.add(where(refused["name"]), parameters[refused["name"]], refused["why"])
            else:
                self.problems.add(key, routing, f"is refused as the llm-d router v0.10 refuses it: {error}")

    def precise_index(self, key: str, routing: dict[str, Any], own_routing: dict[str, Any],
                      config_map: PickerConfigMap | None, model_id: Any, extra_args: Any,
                      vllm_url: str) -> PreciseIndex | None:
        """What the model's picker and its vLLM pods share under routing.prefixIndex precise; None
        when something in the model's config contradicts it (each problem added)."""
        def where(name: str) -> str:
            return f"{key}.routing.{name}" if name in own_routing else f"routing.{name}"

        before = len(self.problems.items)
        block = routing.get("blockSize", DEFAULT_PRECISE_BLOCK_SIZE)
        speculative = routing.get("speculativeIndexing", False)
        if isinstance(model_id, str) and (message := model_name_message(model_id)) is not None:
            self.problems.add(f"{key}.model", model_id, message)
        for arg in precise_flags(extra_args if isinstance(extra_args, tuple) else ()):
            fix = (f"; set the block size with `pulumi config set --path {key}.routing.blockSize <tokens>`"
                   if vllm_flag(arg) == "--block-size" else "")
            self.problems.add(f"{key}.extraArgs", arg, f"sets {vllm_flag(arg)}, which the stack sets itself with "
                                                       f"{where('prefixIndex')} precise{fix}. Remove it.")
        if config_map is not None and config_map.text is not None:
            parameters, problems = file_producer(config_map.text)
            for problem in problems:
                self.problems.add(f"{key}.pickerConfigMap.file", config_map.file, problem)
            if "speculativeIndexing" in routing:
                self.problems.add(where("speculativeIndexing"), routing["speculativeIndexing"],
                                  f"configures the picker, which {key}.pickerConfigMap.file configures instead. Set "
                                  f"speculativeIndexing in its {PRECISE_PRODUCER}'s parameters, and remove this key.")
            if parameters is not None:
                block, speculative = precise_block_tokens(parameters), parameters["speculativeIndexing"]
                if routing.get("blockSize", block) != block:
                    self.problems.add(where("blockSize"), routing["blockSize"],
                                      f"differs from the blockSizeTokens ({block}) of the {PRECISE_PRODUCER} in "
                                      f"{key}.pickerConfigMap.file, which vLLM's --block-size follows. Remove it.")
        if len(self.problems.items) > before:
            return None
        return PreciseIndex(block_size_tokens=block, model_name=model_id, vllm_url=vllm_url, speculative=speculative)

    def sticky_conflicts(self, key: str, own_routing: dict[str, Any], own_weights: dict[str, int],
                         weights: dict[str, int], config_map: PickerConfigMap | None) -> None:
        """The sticky recipe is a whole picker configuration: weights and a picker file would be ignored."""
        recipe_key = f"{key}.routing.recipe" if "recipe" in own_routing else "routing.recipe"
        if weights:
            where = f"{key}.weights" if own_weights else "weights (stack-wide)"
            self.problems.add(recipe_key, "sticky",
                              f"does not read scorer weights, and {where} sets {', '.join(sorted(weights))}: the "
                              "recipe's token-load scorer picks among the pods its filter keeps. Remove the weights, or "
                              f"set `pulumi config set --path {recipe_key} weights`.")
        if config_map is not None:
            self.problems.add(recipe_key, "sticky",
                              f"and {key}.pickerConfigMap are both whole picker configurations. Keep one: remove "
                              "pickerConfigMap, or the recipe.")

    def open_source_picker_rules(self, key: str, entry: dict, scheduler: Any, own_weights: dict[str, int],
                                 weights: dict[str, int], config_map: PickerConfigMap | None,
                                 picker_replicas: Any) -> None:
        """What gateway.implementation llm-d cannot run: it deploys the llm-d router and nothing else."""
        if "scheduler" in entry and scheduler not in ("llm-d", MISSING):
            self.problems.add(f"{key}.scheduler", scheduler,
                              "chooses between HyperPod's two pickers; gateway.implementation llm-d always runs the "
                              "llm-d router. Remove the key.")
        if weights.get("predictedLatency", 0) > 0:
            where = f"{key}.weights.predictedLatency" if "predictedLatency" in own_weights else "weights.predictedLatency"
            self.problems.add(where, weights["predictedLatency"],
                              "has no open-source equivalent here: the llm-d router's latency scorer needs the "
                              "latency-predictor sidecars, which replace the whole scoring profile. Set it to 0 or "
                              "remove it on gateway.implementation llm-d.")
        if isinstance(picker_replicas, int) and picker_replicas > 1:
            self.problems.add(f"{key}.pickerReplicas", picker_replicas,
                              "must be 1 on gateway.implementation llm-d: above one the router's pickers elect a "
                              "leader, only the leader serves, and the standbys never report Ready, so the rollout "
                              "(and `pulumi up`) would never finish. Remove the key.")
        if config_map is not None and config_map.file is None:
            self.problems.add(f"{key}.pickerConfigMap.file", NOT_SET,
                              "is required on gateway.implementation llm-d: the llm-d router's chart mounts only the "
                              "ConfigMap it writes itself, so the stack needs the configuration's text. Set it to the "
                              "path of your EndpointPickerConfig YAML file.")

    def picker_config_map(self, model: ConfigNode) -> PickerConfigMap | None:
        node = model.child("pickerConfigMap")
        node.reject_unknown(("name", "key", "file"))
        name = node.leaf("name", self.coerce.string(subdomain_message), MISSING)
        if name is MISSING:
            if "name" not in node.structured:
                self.problems.add(node.child_key("name"), NOT_SET, "is required: the ConfigMap holding the picker configuration.")
            return None
        key = node.leaf("key", self.coerce.string(_config_map_key_message), default_of(PickerConfigMap, "key"))
        file = node.leaf("file", self.coerce.string(), None)
        text = self.picker_config_file(node.child_key("file"), file) if isinstance(file, str) else None
        if MISSING in (key, text):
            return None
        return PickerConfigMap(name=name, key=key, file=file, text=text)

    def picker_config_file(self, key: str, file: str) -> Any:
        """The file's text, once it loads as an EndpointPickerConfig exactly as the picker would load it."""
        path = Path(file).expanduser()
        path = path if path.is_absolute() else self.project_dir / path
        try:
            text = path.read_text()
        except OSError as error:
            self.problems.add(key, file, f"cannot be read ({error.strerror}): give the path of an EndpointPickerConfig "
                                         "YAML file, absolute or relative to the project directory.")
            return MISSING
        try:
            load_endpoint_picker_config(text)
        except PickerConfigError as error:
            self.problems.add(key, file, f"is not a valid EndpointPickerConfig for the llm-d router v0.10: {error}")
            return MISSING
        return text

    # -- gateway ---------------------------------------------------------------------------

    def gateway(self, node: ConfigNode, models: tuple[ModelSettings, ...], implementation: str,
                cluster: ClusterSettings) -> GatewaySettings:
        node.reject_unknown(GATEWAY_KEYS)
        c = self.coerce
        name = node.leaf("name", c.string(_dns_label_message), default_of(GatewaySettings, "name"))
        if implementation == "llm-d":
            for hyperpod_only in sorted(node.names() & set(HYPERPOD_GATEWAY_KEYS)):
                self.problems.add(f"gateway.{hyperpod_only}", node.given(hyperpod_only),
                                  "configures the HyperPod Inference Gateway (its InferenceGatewayConfig or add-on), "
                                  "which gateway.implementation llm-d does not run. Remove it, or use platform hyperpod.")
        bbr_raw = node.leaf("bbr", self._bbr, "auto")
        if bbr_raw == "auto":
            bbr = len(models) > 1
        else:
            bbr = bbr_raw
            if bbr is False and len(models) > 1:
                self.problems.add("gateway.bbr", False, f"must be on when the stack serves more than one model "
                                                        f"({len(models)} here): body-based routing picks each request's "
                                                        "model pool (CRD rule). Set `pulumi config set gateway.bbr auto`.")
        bbr_replicas = node.leaf("bbrReplicas", c.integer(minimum=1), None)
        tls = node.leaf("tls", c.string(_tls_message), "auto")
        if tls == "off" and implementation == "hyperpod":
            self.problems.add("gateway.tls", tls, "cannot be off: every HyperPod gateway terminates TLS, and the "
                                                  "controller rejects a gateway without spec.tls. Use auto (cert-manager "
                                                  "issues a certificate, imported to ACM) or an ACM certificate ARN.")
        tls_arn = None if tls == "off" else "" if tls in ("auto", MISSING) else tls
        # One parse for both implementations: HyperPod's auth.jwt.provider and the Istio objects
        # on the llm-d Gateway are rendered from the same JwtSettings.
        jwt = self.jwt(node.child("jwt")) if "jwt" in node.names() else None
        network_policy = self.network_policy(node.child("networkPolicy"))
        metrics = node.leaf("metrics", c.boolean, None)
        pod_defaults = self.pod_defaults(node) if "podDefaults" in node.names() else None
        install_addon = self.install_addon(node, cluster) if implementation == "hyperpod" else False
        for addon_key in sorted(node.names() & set(ADDON_KEYS)) if install_addon is False and implementation == "hyperpod" else ():
            self.problems.add(f"gateway.{addon_key}", node.given(addon_key),
                              "configures the HyperPod inference add-on, which this stack does not install here "
                              "(gateway.installAddon is false). Remove it, or set gateway.installAddon true.")
        addon_version = node.leaf("addonVersion", c.string(_addon_version_message),
                                  default_of(GatewaySettings, "addon_version"))
        load_balancer = node.leaf("loadBalancerController", c.boolean,
                                  default_of(GatewaySettings, "load_balancer_controller"))
        if implementation == "llm-d" and tls_arn and load_balancer is False:
            self.problems.add("gateway.tls", tls, "is an ACM certificate, which the NLB terminates, and "
                                                  "gateway.loadBalancerController is false, so no NLB is made. Use auto "
                                                  "(the Gateway terminates TLS with a certificate from the stack's "
                                                  "private CA), or remove gateway.loadBalancerController.")
        # On when a model autoscales: HyperPod's KEDA is the add-on's own option.
        scaled = [index for index, model in enumerate(models) if model.autoscaling is not None]
        keda = node.leaf("keda", c.boolean, bool(scaled) and install_addon is True)
        if keda is False and scaled and install_addon is True:
            self.problems.add("gateway.keda", False,
                              f"is false, and models[{scaled[0]}].autoscaling needs KEDA, which on HyperPod comes "
                              "from the inference add-on's own option. Remove gateway.keda (it is on when a model "
                              "autoscales), or remove the autoscaling block.")
        gated = node.leaf("gatedModelAccess", c.boolean, default_of(GatewaySettings, "gated_model_access"))
        execution_role = node.leaf("executionRoleArn", c.string(_execution_role_message), None)
        dependency_versions = self.dependency_addon_versions(node.child("dependencyAddonVersions"))
        return GatewaySettings(name=name, implementation=implementation, bbr_enabled=bbr is True,
                               bbr_replicas=bbr_replicas, tls_acm_arn=tls_arn, jwt=jwt,
                               network_policy=network_policy, metrics=metrics,
                               pod_defaults=pod_defaults, install_addon=install_addon, addon_version=addon_version,
                               load_balancer_controller=load_balancer is not False, keda=keda is True,
                               gated_model_access=gated is True,
                               execution_role_arn=execution_role if isinstance(execution_role, str) else None,
                               dependency_addon_versions=dependency_versions)

    def network_policy(self, node: ConfigNode) -> NetworkPolicySettings:
        node.reject_unknown(NETWORK_POLICY_KEYS)
        c = self.coerce
        enabled = node.leaf("enabled", c.boolean, default_of(NetworkPolicySettings, "enabled"))
        monitoring = node.leaf("monitoringNamespace", c.string(_dns_label_message),
                               default_of(NetworkPolicySettings, "monitoring_namespace"))
        cidrs = node.leaf("apiServerCidrs", c.string_list(c.string(_cidr_message), unique=True), ())
        if enabled is False:
            for only_with_policies in sorted(node.names() - {"enabled"}):
                self.problems.add(node.child_key(only_with_policies), node.raw(only_with_policies),
                                  "says what the NetworkPolicies admit, and gateway.networkPolicy.enabled is false. "
                                  "Remove it, or turn the policies back on.")
        return NetworkPolicySettings(enabled=enabled is not False,
                                     monitoring_namespace=monitoring if isinstance(monitoring, str) else "",
                                     api_server_cidrs=cidrs if isinstance(cidrs, tuple) else ())

    def dependency_addon_versions(self, node: ConfigNode) -> Mapping[str, str]:
        """The pinned versions, raised where the user asks (EKS offers each version only for some
        Kubernetes versions: `aws eks describe-addon-versions --addon-name <name>` lists them)."""
        node.reject_unknown(DEPENDENCY_ADDON_MINIMUMS)
        versions = dict(DEPENDENCY_ADDON_MINIMUMS)
        for name, minimum in DEPENDENCY_ADDON_MINIMUMS.items():
            version = node.leaf(name, self.coerce.string(_addon_version_message), MISSING)
            if version is MISSING:
                continue
            if _addon_version_key(version) < _addon_version_key(minimum):
                self.problems.add(node.child_key(name), version,
                                  f"is older than {minimum}, the version AWS's own install uses with the inference "
                                  "add-on. Use that or newer.")
                continue
            versions[name] = version
        return frozen_mapping(versions)

    def implementation(self, node: ConfigNode, platform: str) -> str:
        implementation = node.leaf("implementation", self.coerce.choice(GATEWAY_IMPLEMENTATIONS),
                                   DEFAULT_IMPLEMENTATION[platform])
        if implementation == "hyperpod" and platform != "hyperpod":
            self.problems.add("gateway.implementation", implementation,
                              f"cannot run on platform {platform}: AWS documents the HyperPod Inference Gateway (its "
                              "add-on and InferenceGatewayConfig) only on a SageMaker HyperPod cluster with EKS "
                              "orchestration. Set `pulumi config set platform hyperpod`, or use the open-source picker "
                              "with `pulumi config set gateway.implementation llm-d`.")
        if implementation == "llm-d" and platform == "hyperpod":
            self.problems.add("gateway.implementation", implementation,
                              "runs on platform eks (managed GPU node groups); on platform hyperpod the stack runs "
                              "AWS's HyperPod Inference Gateway. Set `pulumi config set platform eks`, or "
                              "`pulumi config set gateway.implementation hyperpod`.")
        return implementation if isinstance(implementation, str) else DEFAULT_IMPLEMENTATION[platform]

    def install_addon(self, node: ConfigNode, cluster: ClusterSettings) -> Any:
        """Whether the stack installs the inference add-on; MISSING when gateway.installAddon is refused."""
        install = node.leaf("installAddon", self.coerce.boolean, None)
        if cluster.existing:
            return MISSING if install is MISSING else install is True
        if install is False:
            self.problems.add("gateway.installAddon", False,
                              "the stack creates this cluster, so it installs the inference add-on the gateway needs; "
                              "only on an existing cluster (cluster.existing) is that your choice. Remove the key.")
        return True

    def _bbr(self, key: str, value: Any) -> Any:
        if value == "auto":
            return value
        boolean = self.coerce.boolean(key, value) if isinstance(value, bool) or str(value).lower() in ("true", "false") else MISSING
        if boolean is MISSING:
            self.problems.add(key, value, "must be auto, true or false; auto turns body-based routing on exactly "
                                          "when the stack serves more than one model.")
        return boolean

    def jwt(self, node: ConfigNode) -> JwtSettings | None:
        node.reject_unknown(JWT_KEYS)
        c = self.coerce
        before = len(self.problems.items)
        name = node.leaf("name", c.string(_dns_label_message), default_of(JwtSettings, "name"))
        issuer = node.leaf("issuer", c.string(_https_message), MISSING)
        jwks = node.leaf("jwksUri", c.string(_https_message), MISSING)
        for field_name, value in (("issuer", issuer), ("jwksUri", jwks)):
            if value is MISSING and field_name not in node.names():
                self.problems.add(node.child_key(field_name), NOT_SET, "is required for JWT authentication: an https URL "
                                                                       "of your identity provider.")
        audiences = node.leaf("audiences", c.string_list(max_items=MAX_AUDIENCES, unique=True), ())
        claims = self.required_claims(node.key + ".requiredClaims", node.raw("requiredClaims"))
        if not audiences and not claims and len(self.problems.items) == before:
            self.problems.add(node.child_key("audiences"), NOT_SET,
                              "JWT authentication needs at least one of audiences or requiredClaims, or every token "
                              "from the issuer would pass. Set e.g. `pulumi config set --path 'gateway.jwt.audiences[0]' my-api`.")
        if len(self.problems.items) > before:
            return None
        return JwtSettings(issuer=issuer, jwks_uri=jwks, name=name, audiences=audiences, required_claims=claims)

    def required_claims(self, key: str, raw: Any) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        if raw is MISSING:
            return ()
        if not isinstance(raw, list) or len(raw) > MAX_REQUIRED_CLAIMS:
            self.problems.add(key, raw, f"must be a list of at most {MAX_REQUIRED_CLAIMS} claims, each "
                                        "{name, valueType: String|StringArray, values: [...]}.")
            return ()
        claims = []
        for index, entry in enumerate(raw):
            node = ConfigNode(f"{key}[{index}]", entry, {}, self.problems)
            node.reject_unknown(CLAIM_KEYS)
            name = node.leaf("name", self.coerce.string(), MISSING)
            value_type = node.leaf("valueType", self.coerce.choice(("String", "StringArray")), "String")
            values = node.leaf("values", self.coerce.string_list(self.coerce.string(_claim_value_message),
                                                                 min_items=1, max_items=128), MISSING)
            if values is MISSING and "values" not in node.structured:
                self.problems.add(node.child_key("values"), NOT_SET, "is required: 1 to 128 accepted values.")
            if MISSING not in (name, value_type, values):
                claims.append((name, value_type, values))
        return tuple(claims)

    def pod_defaults(self, gateway: ConfigNode) -> Mapping[str, object] | None:
        node = gateway.child("podDefaults")
        node.reject_unknown(POD_DEFAULT_KEYS)
        list_fields = ("tolerations", "env", "envFrom")
        values = {}
        for name in POD_DEFAULT_KEYS:
            value = node.raw(name) if name in node.names() else MISSING
            if value is MISSING:
                continue
            wanted = list if name in list_fields else dict
            if not isinstance(value, wanted):
                self.problems.add(node.child_key(name), value, f"must be {'a list' if wanted is list else 'an object'}, "
                                                               "as in a Kubernetes pod spec.")
                continue
            values[name] = value
        return frozen_mapping(values)

    # -- cluster and nodes -----------------------------------------------------------------

    def cluster(self, node: ConfigNode, stack: str, platform: str) -> ClusterSettings | None:
        """None when cluster.existing is refused: whether the stack creates the cluster decides every
        other check of the stack."""
        node.reject_unknown(CLUSTER_KEYS)
        if platform == "hyperpod":
            self._only_on("eks", platform, node, "systemNodes", "system pods run on a HyperPod instance group "
                                                                "without GPUs (hyperpod.instanceGroups)")
        c = self.coerce
        existing = node.leaf("existing", c.boolean, default_of(ClusterSettings, "existing"))
        if existing is MISSING:
            return None
        name = node.leaf("name", c.string(_cluster_name_message), MISSING)
        if existing is True:
            if name is MISSING and "name" not in node.names():
                self.problems.add("cluster.name", NOT_SET, "is required with cluster.existing: the name of the EKS "
                                                           "cluster to attach to (`pulumi config set cluster.name my-cluster`).")
            for only_new in sorted(node.names() & (set(CLUSTER_KEYS) - {"name", "existing"})):
                self.problems.add(f"cluster.{only_new}", node.given(only_new),
                                  "applies only to a cluster this stack creates; with cluster.existing the "
                                  f"cluster is used as it is. Remove it (`pulumi config rm --path cluster.{only_new}`).")
            return ClusterSettings(name=name if isinstance(name, str) else "", existing=True)
        version = node.leaf("version", c.string(_eks_version_message), default_of(ClusterSettings, "version"))
        vpc_id = node.leaf("vpcId", c.string(_pattern_message(VPC_ID, "a VPC id such as vpc-0123456789abcdef0")), None)
        subnet = c.string(_pattern_message(SUBNET_ID, "a subnet id such as subnet-0123456789abcdef0"))
        private = node.leaf("privateSubnetIds", c.string_list(subnet, unique=True), ())
        public = node.leaf("publicSubnetIds", c.string_list(subnet, unique=True), ())
        if isinstance(vpc_id, str) and isinstance(private, tuple) and len(private) < 2:
            self.problems.add("cluster.privateSubnetIds", list(private), "needs at least two private subnets in "
                                                                         "different availability zones when cluster.vpcId is set.")
        if any(isinstance(ids, tuple) and ids for ids in (private, public)) and vpc_id is None:
            self.problems.add("cluster.vpcId", NOT_SET, "is required when subnet ids are given; set the VPC they "
                                                        "belong to, or remove the subnets to get a dedicated VPC.")
        public_access = node.leaf("endpointPublicAccess", c.boolean, default_of(ClusterSettings, "endpoint_public_access"))
        private_access = node.leaf("endpointPrivateAccess", c.boolean,
                                   default_of(ClusterSettings, "endpoint_private_access"))
        if public_access is False and private_access is False:
            self.problems.add("cluster.endpointPrivateAccess", False, "the API server must be reachable one way: "
                                                                      "turn on endpointPrivateAccess or endpointPublicAccess.")
        cidrs = node.leaf("publicAccessCidrs", c.string_list(c.string(_cidr_message), unique=True), ())
        if cidrs and public_access is False:
            self.problems.add("cluster.publicAccessCidrs", list(cidrs), "only applies with endpointPublicAccess true.")
        system_node = node.child("systemNodes")
        system_node.reject_unknown(NODE_GROUP_KEYS)
        system = SystemNodeSettings(
            instance_types=system_node.leaf("instanceTypes", c.string_list(c.string(ec2_instance_type_message), min_items=1),
                                            default_of(SystemNodeSettings, "instance_types")),
            size=self.node_group_size(system_node, default_of(SystemNodeSettings, "size")))
        return ClusterSettings(name=name if isinstance(name, str) else f"inference-{stack}", existing=False,
                               version=version, vpc_id=vpc_id, private_subnet_ids=private, public_subnet_ids=public,
                               endpoint_public_access=public_access is not False,
                               endpoint_private_access=private_access is not False, public_access_cidrs=cidrs,
                               system_nodes=system)

    def node_group_size(self, node: ConfigNode, default: NodeGroupSize, *, may_be_empty: bool = False) -> NodeGroupSize:
        """`may_be_empty`: max 0 declares no group (Karpenter brings the nodes)."""
        count = self.coerce.integer(minimum=0, maximum=1000)
        desired = node.leaf("desired", count, default.desired)
        low = node.leaf("min", count, default.min)
        high = node.leaf("max", count, default.max)
        if MISSING in (desired, low, high):
            return default
        if not low <= desired <= high or (high < 1 and not may_be_empty):
            at_least = "" if may_be_empty else ", and max must be at least 1"
            self.problems.add(node.child_key("desired"), desired,
                              f"must lie between {node.key}.min ({low}) and {node.key}.max ({high}){at_least}.")
        return NodeGroupSize(desired=desired, min=low, max=high)

    def gpu_nodes(self, node: ConfigNode, cluster: ClusterSettings) -> GpuNodeSettings | None:
        if cluster.existing:
            if node.is_set:
                self.problems.add("gpuNodes", node.structured or node.flat,
                                  "applies only to a cluster this stack creates; an existing cluster must already have "
                                  "GPU nodes with the NVIDIA device plugin. Remove gpuNodes from this stack.")
            return None
        node.reject_unknown(GPU_NODE_KEYS)
        c = self.coerce
        ami = node.leaf("amiType", c.choice(GPU_AMI_TYPES), default_of(GpuNodeSettings, "ami_type"))
        time_slicing = node.leaf("timeSlicing", c.integer(minimum=1, maximum=48, hint=" 1 turns time-slicing off."),
                                   default_of(GpuNodeSettings, "time_slicing"))
        if isinstance(ami, str) and is_bottlerocket(ami) and isinstance(time_slicing, int) and time_slicing > 1:
            self.problems.add("gpuNodes.timeSlicing", time_slicing,
                              "is configured through the NVIDIA device plugin this stack installs on AL2023 nodes; "
                              "Bottlerocket ships its own plugin. Use an AL2023 amiType or timeSlicing 1.")
        nodes = NodeAutoscalingParser(self.problems, c)
        autoscaler = nodes.autoscaler(node)
        karpenter = None
        if autoscaler == "karpenter":
            karpenter = nodes.eks(node.child("karpenter"), node, ami)
        elif "karpenter" in node.names():
            self.problems.add("gpuNodes.karpenter", node.given("karpenter"),
                              "applies with gpuNodes.autoscaler karpenter. Set `pulumi config set gpuNodes.autoscaler "
                              "karpenter`, or remove it (`pulumi config rm --path gpuNodes.karpenter`).")
        # With Karpenter the managed GPU group is a baseline, and by default there is none.
        size_default = NO_MANAGED_GPU_GROUP if autoscaler == "karpenter" else default_of(GpuNodeSettings, "size")
        result = GpuNodeSettings(
            instance_types=node.leaf("instanceTypes", c.string_list(c.string(ec2_instance_type_message), min_items=1),
                                     default_of(GpuNodeSettings, "instance_types")),
            size=self.node_group_size(node, size_default, may_be_empty=autoscaler == "karpenter"),
            capacity_type=node.leaf("capacityType", c.choice(("ON_DEMAND", "SPOT")),
                                    default_of(GpuNodeSettings, "capacity_type")),
            disk_size_gib=node.leaf("diskSize", c.integer(minimum=50, maximum=16384, hint=" GiB; vLLM images are "
                                                          "about 10 GiB before any model weights."),
                                    default_of(GpuNodeSettings, "disk_size_gib")),
            ami_type=ami, time_slicing=time_slicing, autoscaler=autoscaler if autoscaler is not MISSING else "none",
            karpenter=karpenter)
        return result

    # -- advice that does not block a deployment ---------------------------------------------

    def warnings(self, gateway: GatewaySettings, models: tuple[ModelSettings, ...],
                 gpu_nodes: GpuNodeSettings | None) -> tuple[str, ...]:
        warnings = []
        if gateway.implementation == "hyperpod" and gateway.tls_acm_arn == "" and not gateway.install_addon:
            warnings.append("gateway.tls is auto: the controller has cert-manager issue the certificate and imports it "
                            "to ACM, which needs cert-manager in the cluster and the add-on's roles; with "
                            "gateway.installAddon false this stack installs neither. Without them the gateway never "
                            "reports Ready.")
        if (gateway.implementation == "hyperpod" and not gateway.install_addon
                and any(model.autoscaling is not None for model in models)):
            warnings.append("models[].autoscaling on an existing cluster whose inference add-on this stack does not "
                            "install: its ScaledObjects need KEDA, which on HyperPod is the add-on's keda option. "
                            "Check `kubectl get deploy -n hyperpod-inference-system keda-operator`.")
        for index, model in enumerate(models):
            if (note := other_vllm_release(model.image)) is not None:
                warnings.append(f"models[{index}].image {model.image} {note}")
        if gpu_nodes is not None and gpu_nodes.karpenter is None and models:
            per_node = GPUS_PER_INSTANCE.get(gpu_nodes.instance_types[0])
            # At most: a model that autoscales counts at its maxReplicas.
            wanted = sum(m.max_replicas * m.gpus for m in models)
            if per_node is not None:
                # Without Karpenter nothing scales the node group: `desired` nodes are what the pods get.
                available = per_node * gpu_nodes.time_slicing * gpu_nodes.size.desired
                if wanted > available:
                    scaled = " at autoscaling.maxReplicas" if any(m.autoscaling for m in models) else ""
                    warnings.append(f"the models ask for {wanted} GPUs{scaled} but gpuNodes.desired="
                                    f"{gpu_nodes.size.desired} nodes of {gpu_nodes.instance_types[0]} give {available}; "
                                    "some replicas will stay Pending. Raise gpuNodes.desired or lower replicas "
                                    "(or maxReplicas).")
                elif wanted == available:
                    warnings.append(f"the models use all {available} GPUs of gpuNodes.desired={gpu_nodes.size.desired} "
                                    "nodes, so a rolling update (which starts the new pod before stopping an old one) "
                                    "cannot place its new pod. Raise gpuNodes.desired by one node.")
        return tuple(warnings)


# -- string checks: each returns the fix, or None when the value is fine -----------------------

def _dns_label_message(value: str, max_length: int = 63) -> str | None:
    if len(value) > max_length:
        return f"is {len(value)} characters; it must be at most {max_length}."
    if not DNS_LABEL.match(value):
        return "must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit."
    return None


def _service_name_message(value: str) -> str | None:
    if len(value) > 63 or not DNS_1035_LABEL.match(value):
        return ("names the Deployment and Service, so it must be a DNS-1035 label of at most 63 characters: "
                "lower-case letters, digits and '-', starting with a letter. Set models[].deployment explicitly.")
    return None


def _config_map_key_message(value: str) -> str | None:
    if len(value) > 253 or not re.match(r"^[-._a-zA-Z0-9]+$", value):
        return "must be a ConfigMap key: letters, digits, '-', '_' and '.'."
    return None


def _model_name_message(value: str) -> str | None:
    if len(value) > MAX_MODEL_NAME:
        return f"is {len(value)} characters; the gateway accepts at most {MAX_MODEL_NAME}."
    if value.strip() != value:
        return "has leading or trailing spaces; requests would never match it."
    return None


def vllm_release(image: str) -> tuple[int, int] | None:
    """The (major, minor) vLLM release of a vllm-openai image pinned to a version tag."""
    match = VLLM_IMAGE.match(image)
    return tuple(int(part) for part in match["version"].split(".")[:2]) if match else None


def other_vllm_release(image: str) -> str | None:
    """What differs when `image` runs another vLLM minor release than the one the toolkit models;
    None when it runs that release."""
    modelled = tuple(int(part) for part in MODELLED_VLLM_VERSION.split(".")[:2])
    release = vllm_release(image)
    if release is None or release == modelled:
        return None
    return (f"runs vLLM {release[0]}.{release[1]}, and `python -m routing predict` and `calibrate` model vLLM "
            f"{modelled[0]}.{modelled[1]}, whose scheduling, admission and metrics differ between releases: its "
            f"predictions describe a server this stack does not run. Use {DEFAULT_VLLM_IMAGE} to predict what runs.")


def _vllm_image_message(value: str) -> str | None:
    match = VLLM_IMAGE.match(value)
    if not match:
        return (f"must be a vllm/vllm-openai image pinned to a version tag, e.g. {DEFAULT_VLLM_IMAGE}; "
                "a floating tag such as `latest` changes under a running stack.")
    version = tuple(int(part) for part in match["version"].split("."))
    if version < MIN_VLLM_VERSION:
        return ("is older than vLLM 0.9.2, which renamed the KV-cache metric the endpoint picker reads "
                f"(older servers are silently scored as idle). Use {DEFAULT_VLLM_IMAGE} or newer.")
    return None


def _managed_flag_message(value: str) -> str | None:
    flag = value.split("=", 1)[0]
    if flag in MANAGED_VLLM_FLAGS:
        return ("is set by the stack itself; use the model's own key instead (model, port, gpus, maxModelLen, "
                "gpuMemoryUtilization). Prefix caching stays on because the gateway's prefix scorer relies on it.")
    return None


def _https_message(value: str) -> str | None:
    if not value.startswith("https://") or len(value) <= len("https://"):
        return "must be an https:// URL."
    return None


def _claim_value_message(value: str) -> str | None:
    return "must be 1 to 1024 characters." if len(value) > 1024 else None


def _tls_message(value: str) -> str | None:
    if value in ("off", "auto") or ACM_ARN.match(value):
        return None
    return ("must be auto (a certificate cert-manager issues: imported to ACM on HyperPod, from the stack's "
            "private CA on llm-d), an ACM certificate ARN such as "
            "arn:aws:acm:us-west-2:123456789012:certificate/<id>, or off (llm-d only).")


def _addon_version_key(version: str) -> tuple[int, ...]:
    """v1.18.2-eksbuild.2 -> (1, 18, 2, 2), to compare EKS add-on versions."""
    return tuple(int(part) for part in re.findall(r"[0-9]+", version))


def _execution_role_message(value: str) -> str | None:
    match = IAM_ROLE_ARN.match(value)
    if not match:
        return "must be an IAM role ARN such as arn:aws:iam::123456789012:role/SageMakerHyperPodInference-gateway."
    if not match["name"].startswith(ADDON_EXECUTION_ROLE_PREFIX):
        return (f"names the role {match['name']!r}, but the inference add-on accepts only an execution role whose name "
                f"starts with {ADDON_EXECUTION_ROLE_PREFIX}. Rename the role, or remove the key to let the stack "
                "create one.")
    return None


def _eks_version_message(value: str) -> str | None:
    match = EKS_VERSION.match(value)
    if not match or int(match[1]) < EKS_MIN_MINOR:
        return f"must be an EKS Kubernetes version such as 1.34, at least 1.{EKS_MIN_MINOR}."
    return None


def _cluster_name_message(value: str) -> str | None:
    if len(value) > 100 or not re.match(r"^[0-9A-Za-z][A-Za-z0-9\-_]*$", value):
        return "must be an EKS cluster name: letters, digits, '-' and '_', starting with a letter or digit, at most 100."
    return None


def _cidr_message(value: str) -> str | None:
    try:
        ipaddress.ip_network(value)
    except ValueError:
        return "must be a CIDR block such as 203.0.113.0/24."
    return None


def _pattern_message(pattern: re.Pattern, what: str):
    def check(value: str) -> str | None:
        return None if pattern.match(value) else f"must be {what}."

    return check


_quantity_message = _pattern_message(KUBERNETES_QUANTITY, "a Kubernetes quantity such as 2, 500m, 8Gi or 16G")
_duration_message = _pattern_message(
    GATEWAY_DURATION, "a Gateway API duration such as 300s, 5m or 1h30m; 0s turns the timeout off")
_addon_version_message = _pattern_message(
    ADDON_VERSION, "an EKS add-on version such as v2.0.0-eksbuild.2 (the first with the inference gateway)")



