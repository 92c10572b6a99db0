"""gpuNodes.autoscaler and hyperpod.autoscaler: Karpenter's settings on each platform, and the checks
that tie the models' GPUs to what its NodePool may hold. Patterns are the NodePool and EC2NodeClass
CRDs' own at Karpenter v1.14.1 (pkg/apis/crds), so a value the API server would refuse is refused here.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import NOT_SET
from .instance_types import GPUS_PER_INSTANCE, ec2_instance_types
from .model import (NODE_AUTOSCALERS, GpuNodeSettings, HyperPodKarpenterSettings, HyperPodSettings, KarpenterSettings,
                    ModelSettings, default_of, is_bottlerocket)
from .reader import MISSING, Coerce, ConfigNode, Problems, did_you_mean

KARPENTER_KEYS = ("instanceFamilies", "capacityTypes", "gpuLimit", "consolidateAfter", "disruptionBudget", "amiAlias")
HYPERPOD_KARPENTER_KEYS = ("instanceGroups", "gpuLimit", "consolidateAfter", "disruptionBudget")
# karpenter.sh/capacity-type values a NodePool can ask for (reserved needs capacity reservations).
CAPACITY_TYPES = ("on-demand", "spot")
CONSOLIDATE_AFTER = re.compile(r"^(([0-9]+(s|m|h))+|Never)$")
BUDGET_NODES = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)$")
# A dated AL2023 release; `@latest` is refused: every AMI release would replace every GPU node.
AMI_ALIAS = re.compile(r"^al2023@v[0-9]{8}$")
# HyperPod: "a HyperpodNodeClass can reference up to 10 instance groups" (Autoscaling on HyperPod EKS).
MAX_NODE_CLASS_GROUPS = 10
# GPUs per instance of each known GPU family's largest size.
LARGEST_IN_FAMILY = {family: max(gpus for t, gpus in GPUS_PER_INSTANCE.items() if t.rpartition(".")[0] == family)
                     for family in {t.rpartition(".")[0] for t in GPUS_PER_INSTANCE}}


class NodeAutoscalingParser:
    def __init__(self, problems: Problems, coerce: Coerce):
        self.problems = problems
        self.coerce = coerce

    def autoscaler(self, node: ConfigNode) -> Any:
        return node.leaf("autoscaler", self.coerce.choice(NODE_AUTOSCALERS), "none")

    def common(self, node: ConfigNode, defaults: type) -> tuple[Any, Any, Any]:
        c = self.coerce
        gpu_limit = node.leaf("gpuLimit", c.integer(minimum=1, maximum=100000, hint=" The NodePool's limit on "
                                                    "nvidia.com/gpu: the most GPUs its nodes hold at once."),
                              default_of(defaults, "gpu_limit"))
        consolidate = node.leaf("consolidateAfter", c.string(_consolidate_message), default_of(defaults, "consolidate_after"))
        budget = node.leaf("disruptionBudget", c.string(_budget_message), default_of(defaults, "disruption_budget"))
        return gpu_limit, consolidate, budget

    def eks(self, node: ConfigNode, gpu_nodes: ConfigNode, ami_type: Any) -> KarpenterSettings | None:
        """gpuNodes.karpenter, read when gpuNodes.autoscaler is karpenter."""
        node.reject_unknown(KARPENTER_KEYS)
        c = self.coerce
        families = node.leaf("instanceFamilies", c.string_list(c.string(_family_message), min_items=1, unique=True),
                             default_of(KarpenterSettings, "instance_families"))
        capacity = node.leaf("capacityTypes", c.string_list(c.choice(CAPACITY_TYPES), min_items=1, unique=True),
                             default_of(KarpenterSettings, "capacity_types"))
        alias = node.leaf("amiAlias", c.string(_alias_message), default_of(KarpenterSettings, "ami_alias"))
        gpu_limit, consolidate, budget = self.common(node, KarpenterSettings)
        if isinstance(ami_type, str) and is_bottlerocket(ami_type):
            self.problems.add(gpu_nodes.child_key("amiType"), ami_type,
                              "is a managed node group AMI type; the Karpenter NodePool runs the AL2023 NVIDIA AMI "
                              "(gpuNodes.karpenter.amiAlias). Use an AL2023 amiType with gpuNodes.autoscaler karpenter.")
        if MISSING in (families, capacity, alias, gpu_limit, consolidate, budget):
            return None
        return KarpenterSettings(instance_families=tuple(families), capacity_types=tuple(capacity), gpu_limit=gpu_limit,
                                 consolidate_after=consolidate, disruption_budget=budget, ami_alias=alias)

    def hyperpod(self, node: ConfigNode, hyperpod: HyperPodSettings) -> HyperPodKarpenterSettings | None:
        """hyperpod.karpenter over the instance groups already read; each AWS prerequisite is one line."""
        node.reject_unknown(HYPERPOD_KARPENTER_KEYS)
        c = self.coerce
        gpu_groups = tuple(g.name for g in hyperpod.instance_groups if g.gpus_per_instance)
        names = node.leaf("instanceGroups", c.string_list(c.string(), min_items=1, unique=True), gpu_groups)
        gpu_limit, consolidate, budget = self.common(node, HyperPodKarpenterSettings)
        if hyperpod.node_recovery != "Automatic":
            self.problems.add("hyperpod.nodeRecovery", hyperpod.node_recovery,
                              "must be Automatic with hyperpod.autoscaler karpenter: AWS requires automatic node "
                              "recovery on autoscaling clusters. Remove hyperpod.nodeRecovery or set it to Automatic.")
        if names is MISSING:
            return None
        key = node.child_key("instanceGroups")
        groups = {g.name: g for g in hyperpod.instance_groups}
        for name in names:
            group = groups.get(name)
            if group is None:
                self.problems.add(key, name, f"is not an instance group of hyperpod.instanceGroups.{did_you_mean(name, groups)} "
                                             f"Its groups: {', '.join(groups) or 'none'}.")
            elif not group.gpus_per_instance:
                self.problems.add(key, name, f"is the CPU group {name} ({group.instance_type}); Karpenter here scales "
                                             "the GPU groups model pods run on. Name GPU groups only.")
            else:
                self.autoscaled_group(hyperpod, name)
        if not names:
            self.problems.add(key, NOT_SET, "names no GPU instance group: add one to hyperpod.instanceGroups "
                                            "(count 0 lets Karpenter start it from nothing).")
        elif len(names) > MAX_NODE_CLASS_GROUPS:
            self.problems.add(key, len(names), f"names {len(names)} groups; a HyperpodNodeClass takes at most "
                                               f"{MAX_NODE_CLASS_GROUPS}. Name fewer.")
        if MISSING in (gpu_limit, consolidate, budget):
            return None
        return HyperPodKarpenterSettings(instance_groups=tuple(names), gpu_limit=gpu_limit,
                                         consolidate_after=consolidate, disruption_budget=budget)


    def autoscaled_group(self, hyperpod: HyperPodSettings, name: str) -> None:
        """AWS's rules for a group in a HyperpodNodeClass (Autoscaling on HyperPod EKS, "Create a NodeClass")."""
        index, group = next((i, g) for i, g in enumerate(hyperpod.instance_groups) if g.name == name)
        key = f"hyperpod.instanceGroups[{index}]"
        if group.count:
            self.problems.add(f"{key}.count", group.count,
                              f"must be 0 for group {name}, which Karpenter scales: AWS starts autoscaled groups "
                              "empty and Karpenter would scale the instances set here down to 0. Set it to 0 (a "
                              "baseline belongs in a group Karpenter does not scale).")
        if group.deep_health_checks:
            self.problems.add(f"{key}.deepHealthChecks", list(group.deep_health_checks),
                              f"are not supported on group {name}, which Karpenter scales. Remove them, or leave the "
                              "group out of hyperpod.karpenter.instanceGroups.")


def karpenter_capacity_problems(gpu_nodes: GpuNodeSettings, models: tuple[ModelSettings, ...],
                                problems: Problems) -> None:
    """The NodePool stops at its GPU limit: replicas beyond it would stay Pending, so they are refused,
    as are replicas wider than any instance of the allowed families."""
    karpenter = gpu_nodes.karpenter
    if karpenter is None or not models:
        return
    baseline = _per_node(gpu_nodes) * gpu_nodes.size.max if gpu_nodes.managed_group else 0
    # Only when every family is known: an unknown one may hold wider instances (a warning says so).
    known = all(f in LARGEST_IN_FAMILY for f in karpenter.instance_families)
    widest = max(LARGEST_IN_FAMILY.get(f, 0) for f in karpenter.instance_families)
    for index, model in enumerate(models):
        if known and model.gpus > widest:
            problems.add(f"models[{index}].gpus", model.gpus,
                         f"is more than any instance of gpuNodes.karpenter.instanceFamilies "
                         f"({', '.join(karpenter.instance_families)}) has ({widest}); a vLLM replica runs on one node. "
                         "Add a family with larger instances, or use fewer GPUs.")
    wanted = sum(m.max_replicas * m.gpus for m in models)
    if wanted > karpenter.gpu_limit + baseline:
        scaled = " at autoscaling.maxReplicas" if any(m.autoscaling for m in models) else ""
        extra = f" plus the managed baseline's {baseline}" if baseline else ""
        problems.add("gpuNodes.karpenter.gpuLimit", karpenter.gpu_limit,
                     f"holds fewer GPUs than the models ask for{scaled} ({wanted}){extra}: Karpenter stops adding "
                     f"nodes at the limit and the rest stay Pending. Raise it to at least {wanted - baseline}, "
                     "or lower replicas (or maxReplicas).")


def node_autoscaling_warnings(gpu_nodes: GpuNodeSettings | None) -> list[str]:
    karpenter = gpu_nodes.karpenter if gpu_nodes is not None else None
    if karpenter is None:
        return []
    unknown = [f for f in karpenter.instance_families if f not in LARGEST_IN_FAMILY]
    if unknown:
        return [f"gpuNodes.karpenter.instanceFamilies {', '.join(unknown)}: this stack does not know their GPUs per "
                "instance, so it cannot check that each model's gpus fit one node. Karpenter will leave a replica "
                "Pending if none does."]
    return []


def _per_node(gpu_nodes: GpuNodeSettings) -> int:
    return GPUS_PER_INSTANCE.get(gpu_nodes.instance_types[0], 1) * gpu_nodes.time_slicing


def _family_message(value: str) -> str | None:
    families = {t.rpartition(".")[0] for t in ec2_instance_types()}
    if value in families:
        return None
    if "." in value and value in ec2_instance_types():
        return f"is an instance type; this list takes families, e.g. {value.rpartition('.')[0]}."
    return (f"is not an EC2 instance family.{did_you_mean(value, families)} GPU families include "
            f"{', '.join(sorted(LARGEST_IN_FAMILY))}.")


def _consolidate_message(value: str) -> str | None:
    if CONSOLIDATE_AFTER.match(value):
        return None
    return "must be a duration such as 10m, 1h or 30s, or Never (the NodePool's consolidateAfter)."


def _budget_message(value: str) -> str | None:
    if BUDGET_NODES.match(value):
        return None
    return "must be a node count such as 1, or a percentage such as 10% (the NodePool's disruption budget)."


def _alias_message(value: str) -> str | None:
    if AMI_ALIAS.match(value):
        return None
    if value.startswith("al2023@"):
        return ("must name a dated AL2023 release, e.g. al2023@v20260520: with @latest every AMI release replaces "
                "every GPU node, and its warm caches with it.")
    return "must be an AL2023 alias al2023@vYYYYMMDD: Karpenter picks that release's NVIDIA AMI for GPU instances."
