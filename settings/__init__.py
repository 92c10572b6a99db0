"""Stack configuration, parsed and validated before anything is deployed. No Pulumi import here:
the routing toolkit reads a stack through this package exactly as `pulumi up` does."""

from .errors import NAMESPACE, Problem, SettingsError
from .model import (
    DEFAULT_VLLM_IMAGE,
    MODELLED_VLLM_VERSION,
    DEFAULT_WEIGHTS,
    GATEWAY_OWNER_LABEL,
    GATEWAY_SYSTEM_NAMESPACE,
    VLLM_PORT,
    WEIGHT_NAMES,
    ClusterSettings,
    GatewaySettings,
    GpuNodeSettings,
    HyperPodSettings,
    InstanceGroupSettings,
    JwtSettings,
    ModelSettings,
    NodeGroupSize,
    PickerConfigMap,
    Settings,
)
from .parse import lru_conflict, other_vllm_release, parse_settings, parse_weight_overrides
from .stackfile import load_stack, read_stack_config, stack_file

__all__ = [
    "NAMESPACE", "Problem", "SettingsError", "DEFAULT_WEIGHTS", "GATEWAY_OWNER_LABEL", "GATEWAY_SYSTEM_NAMESPACE",
    "VLLM_PORT", "WEIGHT_NAMES", "ClusterSettings", "GatewaySettings", "GpuNodeSettings", "HyperPodSettings",
    "InstanceGroupSettings", "JwtSettings", "ModelSettings", "NodeGroupSize", "PickerConfigMap", "Settings",
    "DEFAULT_VLLM_IMAGE", "MODELLED_VLLM_VERSION", "lru_conflict", "other_vllm_release", "parse_settings",
    "parse_weight_overrides", "load_stack",
    "read_stack_config", "stack_file",
]
