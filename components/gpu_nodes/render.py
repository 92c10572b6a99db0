"""What the GPU node group and the NVIDIA device plugin are given, as plain data."""

from __future__ import annotations

from typing import Any

import yaml

from settings import GpuNodeSettings
from settings.model import GPU_NODE_LABELS, GPU_PRESENT_LABEL, GPU_TAINT_KEY, NODE_POOL_LABEL

# NVIDIA device plugin chart, the version the EKS GPU guide lists for AL2023 NVIDIA AMIs.
DEVICE_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
DEVICE_PLUGIN_CHART = "nvidia-device-plugin"
DEVICE_PLUGIN_VERSION = "0.17.4"
DEVICE_PLUGIN_NAMESPACE = "kube-system"
TIME_SLICING_CONFIG = "time-slicing"


def node_labels() -> dict[str, str]:
    return dict(GPU_NODE_LABELS)


def node_selector() -> dict[str, str]:
    """What model pods select on: the label this stack puts on its GPU nodes."""
    return {NODE_POOL_LABEL: "gpu"}


def toleration() -> dict[str, str]:
    """What lets a pod onto the GPU nodes despite their taint."""
    return {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def taints() -> list[dict[str, str]]:
    # Keeps CPU-only pods off expensive GPU nodes; model pods and the device plugin tolerate it.
    return [{"key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"}]


def launch_template(gpu_nodes: GpuNodeSettings) -> dict[str, Any]:
    """Launch template inputs: IMDSv2 only, and a root disk large enough for vLLM images and weights."""
    # Bottlerocket keeps images and containers on its second (data) volume.
    device = "/dev/xvdb" if gpu_nodes.bottlerocket else "/dev/xvda"
    return {
        "metadata_options": {
            "http_endpoint": "enabled",
            "http_tokens": "required",
            # Hop limit 1: IMDS answers the node, not pods behind the extra network hop, so pods
            # cannot borrow the node role's credentials (they get IRSA roles instead).
            "http_put_response_hop_limit": 1,
        },
        "block_device_mappings": [{
            "device_name": device,
            "ebs": {"volume_size": gpu_nodes.disk_size_gib, "volume_type": "gp3", "delete_on_termination": "true",
                    "encrypted": "true"},
        }],
    }


def device_plugin_values(gpu_nodes: GpuNodeSettings) -> dict[str, Any]:
    values: dict[str, Any] = {
        "nodeSelector": {GPU_PRESENT_LABEL: "true"},
        "tolerations": [toleration()],
    }
    if gpu_nodes.time_slicing > 1:
        sharing = {"version": "v1", "sharing": {"timeSlicing": {"resources": [
            {"name": "nvidia.com/gpu", "replicas": gpu_nodes.time_slicing}]}}}
        values["config"] = {"map": {TIME_SLICING_CONFIG: yaml.safe_dump(sharing, sort_keys=False)},
                            "default": TIME_SLICING_CONFIG}
    return values
