"""What SageMaker's CreateCluster accepts in the fields this stack sends, read from the API's own
service model: botocore ships it (the `sagemaker` service-2 model), so limits are never typed by
hand, and raising the botocore pin (requirements.txt) brings AWS's newer instance types. How the
model is read: settings/instance_types.py.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .instance_types import botocore_version, service_shapes

SERVICE = "sagemaker"


@dataclass(frozen=True)
class StringShape:
    """A string the API takes: its length bounds and a pattern, which AWS matches against the whole value."""

    min: int
    max: int
    pattern: re.Pattern[str] | None

    def accepts(self, value: str) -> bool:
        return self.min <= len(value) <= self.max and (self.pattern is None or bool(self.pattern.fullmatch(value)))


@dataclass(frozen=True)
class IntegerShape:
    min: int
    max: int


@dataclass(frozen=True)
class CreateClusterLimits:
    """CreateCluster's limits on the fields this stack sets, as the model of one botocore release states them."""

    botocore_version: str
    cluster_name: StringShape
    node_recovery: tuple[str, ...]
    group_name: StringShape
    instance_types: frozenset[str]
    instance_count: IntegerShape
    threads_per_core: IntegerShape
    ebs_volume_gib: IntegerShape
    max_labels: int
    label_key: StringShape
    label_value: StringShape
    max_taints: int
    taint_key: StringShape
    taint_value: StringShape
    taint_effects: tuple[str, ...]


@functools.cache
def create_cluster_limits() -> CreateClusterLimits:
    shapes = service_shapes(SERVICE)

    def shape(name: str) -> Mapping[str, Any]:
        return shapes[name]

    def member(structure: str, name: str) -> Mapping[str, Any]:
        return shape(shape(structure)["members"][name]["shape"])

    def string(spec: Mapping[str, Any]) -> StringShape:
        pattern = spec.get("pattern")
        return StringShape(spec.get("min", 0), spec["max"], re.compile(pattern) if pattern else None)

    def integer(spec: Mapping[str, Any]) -> IntegerShape:
        return IntegerShape(spec["min"], spec["max"])

    group = "ClusterInstanceGroupSpecification"
    labels = member("ClusterKubernetesConfig", "Labels")
    taints = member("ClusterKubernetesConfig", "Taints")
    taint = taints["member"]["shape"]
    return CreateClusterLimits(
        botocore_version=botocore_version(),
        cluster_name=string(member("CreateClusterRequest", "ClusterName")),
        node_recovery=tuple(member("CreateClusterRequest", "NodeRecovery")["enum"]),
        group_name=string(member(group, "InstanceGroupName")),
        instance_types=frozenset(member(group, "InstanceType")["enum"]),
        instance_count=integer(member(group, "InstanceCount")),
        threads_per_core=integer(member(group, "ThreadsPerCore")),
        ebs_volume_gib=integer(member("ClusterEbsVolumeConfig", "VolumeSizeInGB")),
        max_labels=labels["max"],
        label_key=string(shape(labels["key"]["shape"])),
        label_value=string(shape(labels["value"]["shape"])),
        max_taints=taints["max"],
        taint_key=string(member(taint, "Key")),
        taint_value=string(member(taint, "Value")),
        taint_effects=tuple(member(taint, "Effect")["enum"]),
    )
