"""Typed, immutable settings: everything a stack deploys, decided before any resource is declared."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping

from .picker_config import PreciseIndex


# The scorer weights the InferenceGatewayConfig CRD accepts (spec.schedulers[].weights).
WEIGHT_NAMES = ("queue", "kvCache", "prefix", "runningRequests", "loraAffinity", "predictedLatency", "lru")

# The controller's defaults when a scheduler carries no weights; they equal the upstream
# picker's built-in profile (queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3).
DEFAULT_WEIGHTS: Mapping[str, int] = MappingProxyType({"queue": 2, "kvCache": 2, "prefix": 3})

# The HyperPod inference add-on runs its controller and each gateway's Envoy Service here;
# the Envoy Service carries this label with the gateway's name.
GATEWAY_SYSTEM_NAMESPACE = "hyperpod-inference-system"
GATEWAY_OWNER_LABEL = "gateway.envoyproxy.io/owning-gateway-name"

# vLLM's OpenAI server listens here; the seed's Services and the CRD's targetPort default agree.
VLLM_PORT = 8000
# The namespace the NetworkPolicies admit scrapers from (gateway.networkPolicy.monitoringNamespace).
DEFAULT_MONITORING_NAMESPACE = "monitoring"

# What the stack puts on its nodes, on plain EKS and HyperPod alike: the node pool pods select,
# the label the NVIDIA device plugin chart's default node affinity requires on GPU nodes (or
# NFD's pci-10de label), and the taint that keeps CPU-only pods off GPU nodes. Kept in settings
# because HyperPod counts them in an instance group's limits, which are checked before deploying.
NODE_POOL_LABEL = "inference-gateway/node-pool"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_NODE_LABELS: Mapping[str, str] = MappingProxyType({GPU_PRESENT_LABEL: "true", NODE_POOL_LABEL: "gpu"})
SYSTEM_NODE_LABELS: Mapping[str, str] = MappingProxyType({NODE_POOL_LABEL: "system"})

# The vLLM release the routing toolkit models (predict's scheduler and KV cache, calibrate's
# metrics) and the end-to-end tests run (.ci/setup-vllm.sh installs its CPU build): the stack
# deploys the same release, so a prediction describes the server the stack runs. Scheduling,
# admission and metrics moved between 0.11 and 0.32; raise the two together. Its image is the
# one vLLM publishes with every release on Docker Hub (vllm/vllm-openai:v<version>).
MODELLED_VLLM_VERSION = "0.32.0"
DEFAULT_VLLM_IMAGE = f"vllm/vllm-openai:v{MODELLED_VLLM_VERSION}"
DEFAULT_NAMESPACE = "inference"

# Where the GPUs come from. AWS documents the HyperPod Inference Gateway only on a SageMaker
# HyperPod cluster with EKS orchestration; plain EKS runs managed GPU node groups.
PLATFORMS = ("hyperpod", "eks")
# Which endpoint picker fronts the models: the HyperPod add-on's InferenceGatewayConfig, or
# the open-source llm-d router behind a Gateway API data plane.
GATEWAY_IMPLEMENTATIONS = ("hyperpod", "llm-d")
DEFAULT_IMPLEMENTATION = MappingProxyType({"hyperpod": "hyperpod", "eks": "llm-d"})
# The EKS add-ons the HyperPod inference operator fails to install without, at the versions
# AWS's own install pins (the newest figures the reference has; no minimum is published).
DEPENDENCY_ADDON_MINIMUMS: Mapping[str, str] = MappingProxyType({
    "aws-mountpoint-s3-csi-driver": "v1.14.1-eksbuild.1",
    "aws-fsx-csi-driver": "v1.6.0-eksbuild.1",
    "metrics-server": "v0.7.2-eksbuild.4",
    "cert-manager": "v1.18.2-eksbuild.2",
})
# How a model's picker chooses (models[].routing.recipe, or the stack-wide routing.recipe):
# `weights` is the weighted blend of queue, KV-cache and prefix scorers that HyperPod's gateway
# exposes; `sticky` is upstream's "sticky until saturated" (llm-d guides' default since August
# 2026): a prefix-cache-affinity filter keeps a request on the pods holding its prefix until
# their in-flight load would cost more than a TTFT penalty, a token-load scorer picks among them.
# The sticky recipe runs on gateway.implementation llm-d only (settings/parse.py says why).
ROUTING_RECIPES = ("weights", "sticky")
DEFAULT_ROUTING_RECIPE = "weights"
# Where a model's picker learns which pods hold a request's prefix (models[].routing.prefixIndex,
# or the stack-wide routing.prefixIndex): `approximate`, its own record of where it sent each
# prefix; `precise`, the KV-cache events each vLLM pod publishes (llm-d's precise prefix-cache
# routing, gateway.implementation llm-d only: settings/precise.py says what it needs and why).
PREFIX_INDEXES = ("approximate", "precise")
DEFAULT_PREFIX_INDEX = "approximate"
# vLLM's block size under the precise index: 64 is a multiple of what vLLM 0.32's CPU attention
# takes (32) and of what its GPU backends take (16), and upstream's precise sample uses it.
DEFAULT_PRECISE_BLOCK_SIZE = 64

# The controller runs this many pickers per scheduler when `replicas` is not set.
DEFAULT_PICKER_REPLICAS = 2
# The llm-d router's Deployment (components/llmd_router) runs one picker unless told more: a
# second would keep a prefix index of its own and halve the affinity.
LLMD_DEFAULT_PICKER_REPLICAS = 1


def is_bottlerocket(ami_type: str) -> bool:
    return ami_type.startswith("BOTTLEROCKET")


def default_of(cls: type, name: str):
    """A settings field's default: the dataclasses below are the one place defaults are written."""
    return next(f.default for f in fields(cls) if f.name == name)


def frozen_mapping(values: Mapping[str, object] | None = None) -> Mapping:
    return MappingProxyType(dict(values or {}))


@dataclass(frozen=True)
class PickerConfigMap:
    """A full custom endpoint-picker configuration (the CRD's configMapRef): a ConfigMap already
    in the cluster, or one the stack makes from a file in the project (`file`, whose validated
    text is `text`), which the routing toolkit then reads as well."""

    name: str
    key: str = "default-plugins.yaml"
    file: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class RoutingSettings:
    """A model's routing recipe and, for `sticky`, the filter parameters set (upstream's names;
    those not set take upstream's defaults in the picker, so only these are rendered); with the
    precise prefix index, what the picker's index and the model's vLLM pods share."""

    recipe: str = DEFAULT_ROUTING_RECIPE
    parameters: Mapping[str, float] = field(default_factory=frozen_mapping)
    precise: PreciseIndex | None = None

    @property
    def prefix_index(self) -> str:
        return "precise" if self.precise is not None else DEFAULT_PREFIX_INDEX

    def as_config(self) -> dict[str, object]:
        """The routing keys as the stack's config sets them (the precise index's only when it runs)."""
        shown: dict[str, object] = {"recipe": self.recipe, **self.parameters}
        if self.precise is not None:
            shown.update(prefixIndex=self.prefix_index, blockSize=self.precise.block_size_tokens,
                         speculativeIndexing=self.precise.speculative)
        return shown


# KEDA's polling interval and the HorizontalPodAutoscaler's scale-down stabilization window, at
# their own defaults (keda.sh ScaledObject spec; Kubernetes HPA behavior), written out so the
# preview shows them.
DEFAULT_POLLING_SECONDS = 30
DEFAULT_SCALE_DOWN_SECONDS = 300


@dataclass(frozen=True)
class AutoscalingSettings:
    """models[].autoscaling: a KEDA ScaledObject on the model's Deployment, on one vLLM gauge
    (settings/observability.py says which)."""

    min_replicas: int
    max_replicas: int
    metric: str = "waiting"
    target: float = 2
    polling_seconds: int = DEFAULT_POLLING_SECONDS
    scale_down_seconds: int = DEFAULT_SCALE_DOWN_SECONDS


@dataclass(frozen=True)
class ModelSettings:
    """One model: a vLLM Deployment + Service and the gateway scheduler in front of it."""

    name: str
    model: str
    deployment: str
    replicas: int = 1
    image: str = DEFAULT_VLLM_IMAGE
    gpus: int = 1
    # Requests sized for a 0.5B-8B model on one GPU; a g5.xlarge (4 vCPU, 16 GiB) fits one.
    cpu: str = "2"
    memory: str = "8Gi"
    port: int = VLLM_PORT
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    extra_args: tuple[str, ...] = ()
    scheduler: str = "llm-d"
    # Weights set in config (gateway-wide merged with this model's); empty means the controller's defaults.
    weights: Mapping[str, int] = field(default_factory=frozen_mapping)
    picker_config_map: PickerConfigMap | None = None
    routing: RoutingSettings = field(default_factory=RoutingSettings)
    lora_adapters: tuple[str, ...] = ()
    picker_replicas: int | None = None
    route_timeout: str | None = None
    log_level: int | None = None
    # With autoscaling, `replicas` is its minReplicas: what the model runs at least.
    autoscaling: AutoscalingSettings | None = None

    @property
    def max_replicas(self) -> int:
        """The most replicas the model can run: what its GPUs must be there for."""
        return self.autoscaling.max_replicas if self.autoscaling is not None else self.replicas

    @property
    def selector(self) -> Mapping[str, str]:
        """Labels of this model's pods, which the scheduler's modelSelector matches."""
        return frozen_mapping({"app": self.deployment})

    @property
    def effective_weights(self) -> Mapping[str, int] | None:
        """What the picker will actually use; None when a custom picker ConfigMap or the sticky
        recipe decides."""
        if self.picker_config_map is not None or self.routing.recipe != "weights":
            return None
        return frozen_mapping({**DEFAULT_WEIGHTS, **self.weights})


@dataclass(frozen=True)
class JwtSettings:
    """Request authentication at the gateway, one meaning on both implementations: HyperPod's
    auth.jwt.provider, or Istio's RequestAuthentication and AuthorizationPolicy on the Gateway."""

    issuer: str
    jwks_uri: str
    name: str = "jwt"
    audiences: tuple[str, ...] = ()
    # Each claim: (name, valueType, values).
    required_claims: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class NetworkPolicySettings:
    """gateway.networkPolicy: the model pods' port reachable only through the front door."""

    enabled: bool = True
    # Admitted to the model pods' and pickers' metrics ports, for the monitoring stack to come.
    monitoring_namespace: str = DEFAULT_MONITORING_NAMESPACE
    # Where the API server's pod proxy comes from (routing verify's counter reads); none by default.
    api_server_cidrs: tuple[str, ...] = ()


# An Amazon Managed Service for Prometheus workspace's ARN; its region is where remote write goes.
AMP_WORKSPACE_ARN = re.compile(
    r"^arn:aws[a-z-]*:aps:(?P<region>[a-z0-9-]+):[0-9]{12}:workspace/(?P<id>ws-[0-9a-f-]{8,})$")


@dataclass(frozen=True)
class RemoteWriteSettings:
    """Remote write to Amazon Managed Service for Prometheus: to a workspace the stack creates
    (workspace_arn None), or to the one given."""

    workspace_arn: str | None = None

    @property
    def region(self) -> str | None:
        match = AMP_WORKSPACE_ARN.match(self.workspace_arn or "")
        return match["region"] if match else None


@dataclass(frozen=True)
class ObservabilitySettings:
    """observability: Prometheus, Grafana and the alerts, in the namespace the model pods'
    NetworkPolicies admit (gateway.networkPolicy.monitoringNamespace)."""

    enabled: bool = True
    namespace: str = DEFAULT_MONITORING_NAMESPACE
    scrape_interval_seconds: int = 15
    retention_days: int = 15
    prometheus_storage_gib: int = 20
    # None: the stack's own encrypted gp3 class on a cluster it creates, the cluster's default
    # class on an existing one.
    storage_class: str | None = None
    # True when the stack config holds the password (a secret); otherwise the stack generates one.
    grafana_password_given: bool = False
    remote_write: RemoteWriteSettings | None = None


@dataclass(frozen=True)
class GatewaySettings:
    name: str = "inference-gateway"
    implementation: str = "hyperpod"
    bbr_enabled: bool = False
    bbr_replicas: int | None = None
    # gateway.tls: "" for auto (HyperPod: tls: {}, cert-manager issues and ACM imports; llm-d:
    # cert-manager issues from the stack's private CA and the Gateway terminates TLS), an ACM
    # certificate ARN (llm-d: terminated at the NLB), None for off (llm-d only: the HyperPod
    # controller rejects a gateway without TLS).
    tls_acm_arn: str | None = ""
    jwt: JwtSettings | None = None
    network_policy: NetworkPolicySettings = NetworkPolicySettings()
    metrics: bool | None = None
    pod_defaults: Mapping[str, object] | None = None
    install_addon: bool = False
    # The add-on version AWS's inference-gateway workshop installs with the gateway enabled.
    addon_version: str = "v2.1.0-eksbuild.1"
    # The AWS Load Balancer Controller gives the gateway its internal load balancer (its address).
    load_balancer_controller: bool = True
    keda: bool = False
    gated_model_access: bool = False
    # The add-on's execution role, when the user brings their own instead of the stack's.
    execution_role_arn: str | None = None
    # Versions of the add-on's dependency add-ons, the pinned minimums unless raised.
    dependency_addon_versions: Mapping[str, str] = field(default_factory=lambda: DEPENDENCY_ADDON_MINIMUMS)


@dataclass(frozen=True)
class NodeGroupSize:
    desired: int
    min: int
    max: int


@dataclass(frozen=True)
class SystemNodeSettings:
    instance_types: tuple[str, ...] = ("m6i.large",)
    size: NodeGroupSize = NodeGroupSize(desired=2, min=1, max=3)


@dataclass(frozen=True)
class ClusterSettings:
    name: str
    existing: bool = False
    version: str = "1.34"
    vpc_id: str | None = None
    private_subnet_ids: tuple[str, ...] = ()
    public_subnet_ids: tuple[str, ...] = ()
    endpoint_public_access: bool = True
    endpoint_private_access: bool = True
    public_access_cidrs: tuple[str, ...] = ()
    system_nodes: SystemNodeSettings = SystemNodeSettings()


# Node autoscalers: none keeps the GPU nodes at the sizes set; karpenter adds and removes them.
NODE_AUTOSCALERS = ("none", "karpenter")


@dataclass(frozen=True)
class KarpenterSettings:
    """gpuNodes.karpenter on plain EKS: the GPU NodePool and its EC2NodeClass."""

    instance_families: tuple[str, ...] = ("g5",)
    capacity_types: tuple[str, ...] = ("on-demand",)
    # The most GPUs the NodePool may hold at once (its spec.limits), on top of any managed baseline.
    gpu_limit: int = 8
    # Empty nodes go only after this long: a replica that scales back in soon finds its node (and
    # the image on its disk) still there. Karpenter's own default is 0s.
    consolidate_after: str = "10m"
    # At most this many nodes (or percent) disrupted at once, for consolidation, drift and expiry alike.
    disruption_budget: str = "1"
    # A pinned AL2023 EKS AMI release: Karpenter picks its NVIDIA variant for GPU instances, and
    # replaces nodes (and their warm caches) only when this pin moves. The release Karpenter
    # v1.14.1's own AMI tests use (test/suites/ami/suite_test.go).
    ami_alias: str = "al2023@v20260520"


@dataclass(frozen=True)
class GpuNodeSettings:
    instance_types: tuple[str, ...] = ("g5.xlarge",)
    size: NodeGroupSize = NodeGroupSize(desired=1, min=1, max=2)
    capacity_type: str = "ON_DEMAND"
    disk_size_gib: int = 200
    ami_type: str = "AL2023_x86_64_NVIDIA"
    time_slicing: int = 1
    autoscaler: str = "none"
    karpenter: KarpenterSettings | None = None

    @property
    def managed_group(self) -> bool:
        """Whether a managed GPU node group is declared: always without Karpenter; with it, only as a
        baseline (gpuNodes.max above 0)."""
        return self.size.max > 0

    @property
    def arch(self) -> str:
        """The Kubernetes architecture of the AMI type's nodes."""
        return "arm64" if "_ARM_64_" in self.ami_type else "amd64"

    @property
    def bottlerocket(self) -> bool:
        return is_bottlerocket(self.ami_type)

    @property
    def needs_device_plugin(self) -> bool:
        # Bottlerocket's NVIDIA variants ship the device plugin; AL2023's NVIDIA AMI does not.
        return not self.bottlerocket


@dataclass(frozen=True)
class KubernetesTaint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class InstanceGroupSettings:
    """One HyperPod instance group: `count` instances of one `ml.*` type."""

    name: str
    instance_type: str
    count: int
    gpus_per_instance: int
    threads_per_core: int = 1
    # A secondary EBS volume, mounted at /opt/sagemaker on each instance.
    extra_storage_gib: int | None = None
    deep_health_checks: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=frozen_mapping)
    taints: tuple[KubernetesTaint, ...] = ()

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_instance


@dataclass(frozen=True)
class HyperPodKarpenterSettings:
    """hyperpod.karpenter: HyperPod's managed Karpenter over some of the cluster's instance groups."""

    # The instance groups Karpenter scales (its HyperpodNodeClass names them).
    instance_groups: tuple[str, ...]
    # The most GPUs the NodePool may hold at once (its spec.limits).
    gpu_limit: int = 8
    consolidate_after: str = "10m"
    disruption_budget: str = "1"


@dataclass(frozen=True)
class HyperPodSettings:
    """The SageMaker HyperPod cluster the EKS cluster orchestrates: created by the stack, or attached."""

    name: str
    existing: bool = False
    # Known up front only for an existing cluster (a new one's ARN comes from SageMaker).
    arn: str | None = None
    instance_groups: tuple[InstanceGroupSettings, ...] = ()
    node_recovery: str = "Automatic"
    autoscaler: str = "none"
    karpenter: HyperPodKarpenterSettings | None = None
    # A local clone of aws/sagemaker-hyperpod-cli: its Helm chart must be installed before the cluster.
    dependencies_chart: str = "vendor/sagemaker-hyperpod-cli"

    @property
    def gpus(self) -> int:
        return sum(group.gpus for group in self.instance_groups)


@dataclass(frozen=True)
class Settings:
    stack: str
    namespace: str
    models: tuple[ModelSettings, ...]
    gateway: GatewaySettings
    cluster: ClusterSettings
    gpu_nodes: GpuNodeSettings | None
    platform: str = "hyperpod"
    hyperpod: HyperPodSettings | None = None
    hf_token: bool = False
    observability: ObservabilitySettings = ObservabilitySettings()
    warnings: tuple[str, ...] = ()

    def model_named(self, name: str) -> ModelSettings:
        """The model entry called `name`; LookupError (listing the names there are) if none is."""
        for model in self.models:
            if model.name == name:
                return model
        names = ", ".join(m.name for m in self.models)
        raise LookupError(f"stack {self.stack!r} has no model named {name!r}; its models are: {names}")

    @property
    def effective_weights(self) -> Mapping[str, Mapping[str, int] | None]:
        return frozen_mapping({m.name: m.effective_weights for m in self.models})

    def picker_replicas(self, model: ModelSettings) -> int:
        """The model's picker pods as deployed: its pickerReplicas, else the gateway
        implementation's default."""
        if model.picker_replicas is not None:
            return model.picker_replicas
        return DEFAULT_PICKER_REPLICAS if self.gateway.implementation == "hyperpod" else LLMD_DEFAULT_PICKER_REPLICAS
