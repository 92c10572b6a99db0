"""The `platform` choice and the `hyperpod` section: a SageMaker HyperPod cluster orchestrated by
the stack's EKS cluster, or an existing one to attach to.

Facts behind each rule: shared/reference/hyperpod-platform.md (instance groups §1.2, GPU
counts §4, the dependencies chart §2.3).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

from .errors import NO_VALUE, NOT_SET, Problem, SettingsError
from .model import (
    DEFAULT_PICKER_REPLICAS,
    GPU_NODE_LABELS,
    GPU_TAINT_KEY,
    SYSTEM_NODE_LABELS,
    ClusterSettings,
    HyperPodSettings,
    InstanceGroupSettings,
    KubernetesTaint,
    ModelSettings,
    PLATFORMS,
    Settings,
    default_of,
    frozen_mapping,
)
from .node_autoscaling import NodeAutoscalingParser
from .reader import MISSING, Coerce, ConfigNode, Problems, decode_json
from .instance_types import unknown_type_message
from .sagemaker_limits import StringShape, create_cluster_limits

HYPERPOD_KEYS = ("name", "existing", "arn", "instanceGroups", "nodeRecovery", "dependenciesChart", "autoscaler",
                 "karpenter")
# What only a cluster this stack creates takes.
NEW_CLUSTER_KEYS = {"instanceGroups", "nodeRecovery", "dependenciesChart", "autoscaler", "karpenter"}
INSTANCE_GROUP_KEYS = ("name", "instanceType", "count", "threadsPerCore", "extraStorageGiB", "deepHealthChecks",
                       "labels", "taints")
TAINT_KEYS = ("key", "value", "effect")
# What CreateCluster takes in the fields the stack sends comes from its service model
# (settings/sagemaker_limits.py); these two limits are narrower, and stated elsewhere.
# pulumi-aws-native 1.84.0's ClusterDeepHealthCheckType, which the component converts each
# check to, has two of the three checks CreateCluster lists.
DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
# AWS's manual-steps README documents 20 instance groups per cluster; CreateCluster's model says 100.
MAX_INSTANCE_GROUPS = 20
# An existing cluster's ARN is not sent to CreateCluster; this is the form SageMaker gives it.
CLUSTER_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:cluster/[a-z0-9]{12}$")

# NVIDIA GPUs per HyperPod GPU instance type (EC2 specs; reference §4). A type of a GPU family
# (ml.g*, ml.p*) that is missing here is refused rather than guessed.
GPUS_PER_ML_INSTANCE = {
    **{f"ml.{family}.{size}": 1 for family in ("g5", "g6", "g6e")
       for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    **{f"ml.{family}.{size}": 4 for family in ("g5", "g6", "g6e") for size in ("12xlarge", "24xlarge")},
    **{f"ml.{family}.48xlarge": 8 for family in ("g5", "g6", "g6e")},
    "ml.gr6.4xlarge": 1, "ml.gr6.8xlarge": 1,
    "ml.p4d.24xlarge": 8, "ml.p4de.24xlarge": 8, "ml.p5.4xlarge": 1, "ml.p5.48xlarge": 8,
    "ml.p5e.48xlarge": 8, "ml.p5en.48xlarge": 8, "ml.p6-b200.48xlarge": 8, "ml.p6-b300.48xlarge": 8,
}
GPU_FAMILY = re.compile(r"^ml\.(g|p)[0-9]")

# The seed on one instance, as AWS validated it: an ml.g5.12xlarge (4 A10G) holds qwen, two
# qwen-small replicas and the spare GPU a rolling update needs. The CPU group carries the
# add-on's operator (at least 13 pods; AWS recommends ml.c5.4xlarge or larger for it), the
# gateway's Envoy, BBR and pickers, cert-manager and CoreDNS.
DEFAULT_INSTANCE_GROUPS = (
    InstanceGroupSettings(name="gpu", instance_type="ml.g5.12xlarge", count=1, gpus_per_instance=4),
    InstanceGroupSettings(name="system", instance_type="ml.c5.4xlarge", count=1, gpus_per_instance=0),
)
RECOMMENDED_SYSTEM_TYPE = "ml.c5.4xlarge"

# aws/sagemaker-hyperpod-cli, the only place AWS publishes the HyperPod dependencies chart.
# Pinned to the commit whose chart the reference describes (chart 0.1.0, NVIDIA device plugin
# 0.16.1, inference operator chart 2.2.2; 2026-06-22).
DEPENDENCIES_REPO = "https://github.com/aws/sagemaker-hyperpod-cli.git"
DEPENDENCIES_COMMIT = "011ca927123e02b35a399935bbb3ab1905fe33c7"
DEPENDENCIES_CHART_DIR = "helm_chart/HyperPodHelmChart"
DEPENDENCIES_CHART_NAME = "hyperpod-helm-chart"


def parse_platform(top: ConfigNode, coerce: Coerce) -> str:
    return top.leaf("platform", coerce.choice(PLATFORMS), default_of(Settings, "platform"))


class HyperPodParser:
    """Reads the `hyperpod` section; the rules that tie it to `cluster` and `models` live here too."""

    def __init__(self, problems: Problems, coerce: Coerce):
        self.problems = problems
        self.coerce = coerce

    def settings(self, node: ConfigNode, cluster: ClusterSettings) -> HyperPodSettings | None:
        """None when hyperpod.existing is refused: which keys apply depends on it."""
        node.reject_unknown(HYPERPOD_KEYS)
        c = self.coerce
        existing = node.leaf("existing", c.boolean, default_of(HyperPodSettings, "existing"))
        if existing is MISSING:
            return None
        name = node.leaf("name", c.string(_cluster_name_message), MISSING)
        if existing != cluster.existing:
            self.problems.add("hyperpod.existing" if existing else "cluster.existing", True,
                              "an existing HyperPod cluster is orchestrated by the EKS cluster it was created on, and "
                              "a new one needs the VPC, subnets and security group of the EKS cluster this stack "
                              "creates. Set cluster.existing and hyperpod.existing together: both true to attach to "
                              "what you have, both false to create both.")
        if existing:
            return self.existing(node, name)
        groups = self.instance_groups(node.raw("instanceGroups"))
        recovery = node.leaf("nodeRecovery", c.choice(create_cluster_limits().node_recovery),
                             default_of(HyperPodSettings, "node_recovery"))
        chart = node.leaf("dependenciesChart", c.string(), default_of(HyperPodSettings, "dependencies_chart"))
        if isinstance(name, str):
            hyperpod_name = name
        else:
            hyperpod_name = f"{cluster.name}-hyperpod"[:create_cluster_limits().cluster_name.max].rstrip("-")
            if "name" not in node.names() and (message := _cluster_name_message(hyperpod_name)):
                self.problems.add("hyperpod.name", NOT_SET, f"defaults to {hyperpod_name!r}, which {message} "
                                                             "Set it with `pulumi config set hyperpod.name <name>`.")
        settings = HyperPodSettings(name=hyperpod_name, existing=False, instance_groups=groups,
                                    node_recovery=recovery if recovery is not MISSING else "Automatic",
                                    dependencies_chart=chart)
        nodes = NodeAutoscalingParser(self.problems, c)
        autoscaler = nodes.autoscaler(node)
        if autoscaler == "karpenter":
            karpenter = nodes.hyperpod(node.child("karpenter"), settings)
            return replace(settings, autoscaler="karpenter", karpenter=karpenter) if karpenter else settings
        if "karpenter" in node.names():
            self.problems.add("hyperpod.karpenter", node.given("karpenter"),
                              "applies with hyperpod.autoscaler karpenter. Set `pulumi config set hyperpod.autoscaler "
                              "karpenter`, or remove it (`pulumi config rm --path hyperpod.karpenter`).")
        return settings

    def existing(self, node: ConfigNode, name: Any) -> HyperPodSettings:
        arn = node.leaf("arn", self.coerce.string(_arn_message), MISSING)
        for required, value, what in (("name", name, "its name"),
                                      ("arn", arn, "its ARN, as `aws sagemaker describe-cluster --cluster-name "
                                                   "<name> --query ClusterArn` prints it")):
            if value is MISSING and required not in node.names():
                self.problems.add(f"hyperpod.{required}", NOT_SET,
                                  f"is required with hyperpod.existing: {what} (`pulumi config set hyperpod.{required} ...`).")
        for only_new in sorted(node.names() & NEW_CLUSTER_KEYS):
            self.problems.add(f"hyperpod.{only_new}", node.given(only_new),
                              "applies only to a HyperPod cluster this stack creates; an existing one is used as it is. "
                              f"Remove it (`pulumi config rm --path hyperpod.{only_new}`).")
        return HyperPodSettings(name=name if isinstance(name, str) else "", existing=True,
                                arn=arn if isinstance(arn, str) else None)

    def instance_groups(self, raw: Any) -> tuple[InstanceGroupSettings, ...]:
        key = "hyperpod.instanceGroups"
        if raw is MISSING:
            return DEFAULT_INSTANCE_GROUPS
        if isinstance(raw, str):
            decoded = decode_json(raw)
            raw = decoded if decoded is not MISSING else raw
        if not isinstance(raw, list) or not raw or len(raw) > MAX_INSTANCE_GROUPS:
            self.problems.add(key, raw, f"must be a list of 1 to {MAX_INSTANCE_GROUPS} instance groups, each "
                                        "{name, instanceType, count}, e.g. `pulumi config set --path "
                                        "'hyperpod.instanceGroups[0].instanceType' ml.g5.12xlarge`.")
            return ()
        groups = [self.instance_group(f"{key}[{index}]", entry) for index, entry in enumerate(raw)]
        seen: dict[str, int] = {}
        for index, group in enumerate(groups):
            if group is None:
                continue
            if group.name in seen:
                self.problems.add(f"{key}[{index}].name", group.name,
                                  f"is also the name of {key}[{seen[group.name]}]; each instance group needs its own name.")
            seen.setdefault(group.name, index)
        return tuple(g for g in groups if g is not None) if all(groups) else ()

    def instance_group(self, key: str, entry: Any) -> InstanceGroupSettings | None:
        if not isinstance(entry, dict):
            self.problems.add(key, entry, "must be an object {name, instanceType, count}.")
            return None
        node = ConfigNode(key, entry, {}, self.problems)
        node.reject_unknown(INSTANCE_GROUP_KEYS)
        c = self.coerce
        limits = create_cluster_limits()
        before = len(self.problems.items)
        name = node.leaf("name", c.string(_group_name_message), MISSING)
        instance_type = node.leaf("instanceType", c.string(_ml_instance_type_message), MISSING)
        count = node.leaf("count", c.integer(minimum=limits.instance_count.min, maximum=limits.instance_count.max,
                                             hint=" 0 keeps the group without instances."), MISSING)
        for required, example in (("name", "gpu"), ("instanceType", "ml.g5.12xlarge"), ("count", "1")):
            if required not in entry:
                self.problems.add(f"{key}.{required}", NOT_SET, f"is required, e.g. {example}.")
        threads = node.leaf("threadsPerCore", c.integer(minimum=limits.threads_per_core.min,
                                                        maximum=limits.threads_per_core.max,
                                                        hint=" 1 turns simultaneous multithreading off, 2 on."), 1)
        storage = node.leaf("extraStorageGiB", c.integer(minimum=limits.ebs_volume_gib.min,
                                                         maximum=limits.ebs_volume_gib.max,
                                                         hint=" An EBS volume mounted at /opt/sagemaker."), None)
        checks = node.leaf("deepHealthChecks", c.string_list(c.choice(DEEP_HEALTH_CHECKS), unique=True), ())
        labels = self.labels(node.child_key("labels"), node.raw("labels"))
        taints = self.taints(node.child_key("taints"), node.raw("taints"))
        gpus = 0
        if isinstance(instance_type, str):
            if instance_type in GPUS_PER_ML_INSTANCE:
                gpus = GPUS_PER_ML_INSTANCE[instance_type]
            elif GPU_FAMILY.match(instance_type):
                known = ", ".join(sorted(GPUS_PER_ML_INSTANCE))
                self.problems.add(f"{key}.instanceType", instance_type,
                                  f"is a GPU type whose GPU count this stack does not know, so it cannot check the "
                                  f"models fit. Use one of: {known}.")
        if len(self.problems.items) > before:
            return None
        group = InstanceGroupSettings(name=name, instance_type=instance_type, count=count, gpus_per_instance=gpus,
                                      threads_per_core=threads, extra_storage_gib=storage, deep_health_checks=checks,
                                      labels=frozen_mapping(labels), taints=taints)
        self.kubernetes_limits(key, group)
        return None if len(self.problems.items) > before else group

    def kubernetes_limits(self, key: str, group: InstanceGroupSettings) -> None:
        """CreateCluster counts the labels and taints the stack adds with the user's own."""
        limits = create_cluster_limits()
        labels, taints = instance_group_labels(group), instance_group_taints(group)
        for field, sent, own, added, most in (
                ("labels", labels, group.labels, [label for label in labels if label not in group.labels],
                 limits.max_labels),
                ("taints", taints, group.taints, [f"{t.key}={t.value}:{t.effect}" for t in taints if t not in group.taints],
                 limits.max_taints)):
            if len(sent) > most:
                self.problems.add(f"{key}.{field}", f"<{len(own)} {field}>",
                                  f"are {len(sent)} with the {len(added)} the stack adds to a "
                                  f"{'GPU' if group.gpus_per_instance else 'CPU'} group ({', '.join(added)}): "
                                  f"CreateCluster takes at most {most} per instance group. Remove {len(sent) - most} "
                                  "of yours.")

    def labels(self, key: str, raw: Any) -> dict[str, str]:
        if raw is MISSING:
            return {}
        # A YAML key with nothing after it (`node-role.kubernetes.io/inference:`) reads as null: an empty value.
        if not isinstance(raw, dict) or not all(isinstance(k, str) and (isinstance(v, str) or v is None)
                                                for k, v in raw.items()):
            self.problems.add(key, raw, 'must be an object of string labels, e.g. {"team": "ml"}.')
            return {}
        limits = create_cluster_limits()
        labels = {}
        for label, value in raw.items():
            entry = f"{key}[{json.dumps(label)}]"
            value = value or ""
            if not limits.label_key.accepts(label):
                self.problems.add(entry, NO_VALUE, _kubernetes_key_message("label", label, limits.label_key))
            elif not value:
                self.problems.add(entry, value, (
                    f"is empty, and CreateCluster takes label values of {limits.label_value.min} to "
                    f"{limits.label_value.max} characters, so a role-style label without a value cannot be sent. "
                    f"Give it one, e.g. `pulumi config set --path '{entry}' true`."))
            elif message := _kubernetes_value_message("label", value, limits.label_value):
                self.problems.add(entry, value, message)
            else:
                labels[label] = value
        return labels

    def taints(self, key: str, raw: Any) -> tuple[KubernetesTaint, ...]:
        if raw is MISSING:
            return ()
        if not isinstance(raw, list):
            self.problems.add(key, raw, "must be a list of taints, each {key, value, effect}.")
            return ()
        limits = create_cluster_limits()
        taints = []
        for index, entry in enumerate(raw):
            node = ConfigNode(f"{key}[{index}]", entry, {}, self.problems)
            node.reject_unknown(TAINT_KEYS)
            taint_key = node.leaf("key", self.coerce.string(
                lambda text: _kubernetes_key_message("taint", text, limits.taint_key)), MISSING)
            if taint_key is MISSING and "key" not in node.structured:
                self.problems.add(node.child_key("key"), NOT_SET, "is required: the taint's key.")
            value = node.leaf("value", self.taint_value, "")
            effect = node.leaf("effect", self.coerce.choice(limits.taint_effects), "NoSchedule")
            if MISSING not in (taint_key, value, effect):
                taints.append(KubernetesTaint(key=taint_key, value=value, effect=effect))
        return tuple(taints)

    def taint_value(self, key: str, value: Any) -> Any:
        """Optional: an empty value is not sent (CreateCluster takes none shorter than one character)."""
        if value is None or value == "":
            return ""
        if not isinstance(value, str):
            self.problems.add(key, value, "must be a string, e.g. inference; leave it out for a taint without a value.")
            return MISSING
        if message := _kubernetes_value_message("taint", value, create_cluster_limits().taint_value):
            self.problems.add(key, value, message)
            return MISSING
        return value


def instance_group_labels(group: InstanceGroupSettings) -> dict[str, str]:
    """The labels CreateCluster is sent for a group's nodes: the stack's, so model pods find the GPU
    groups as they find the managed GPU nodes on plain EKS, then the user's own."""
    return {**(GPU_NODE_LABELS if group.gpus_per_instance else SYSTEM_NODE_LABELS), **group.labels}


def instance_group_taints(group: InstanceGroupSettings) -> tuple[KubernetesTaint, ...]:
    """The taints CreateCluster is sent: GPU instances keep CPU-only pods off, as on plain EKS (model
    pods tolerate the taint); a taint of the user's on the same key gives way to it."""
    stack = (KubernetesTaint(key=GPU_TAINT_KEY, value="true", effect="NoSchedule"),) if group.gpus_per_instance else ()
    return stack + tuple(t for t in group.taints if t.key not in {s.key for s in stack})


def free_gpus_after_placing(hyperpod: HyperPodSettings, models: tuple[ModelSettings, ...]) -> list[int] | None:
    """Each instance's GPUs left once every replica has one instance's worth of GPUs, placed
    largest first (as the scheduler would manage); None when some replica finds no instance."""
    free = sorted((g.gpus_per_instance for g in hyperpod.instance_groups for _ in range(g.count)
                   if g.gpus_per_instance), reverse=True)
    for gpus in sorted((m.gpus for m in models for _ in range(m.max_replicas)), reverse=True):
        slot = next((i for i, left in enumerate(free) if left >= gpus), None)
        if slot is None:
            return None
        free[slot] -= gpus
    return free


def capacity_problems(hyperpod: HyperPodSettings, models: tuple[ModelSettings, ...], problems: Problems) -> None:
    """Models that do not fit would stay Pending, so they are refused: HyperPod groups are fixed in size, and
    Karpenter's NodePool stops at its GPU limit."""
    if hyperpod.existing or not hyperpod.instance_groups or not models:
        return
    wanted = sum(m.max_replicas * m.gpus for m in models)
    scaled = any(m.autoscaling is not None for m in models)
    counted = "replicas, or autoscaling.maxReplicas," if scaled else "replicas"
    lower = "replicas or autoscaling.maxReplicas" if scaled else "replicas"
    largest = max(g.gpus_per_instance for g in hyperpod.instance_groups)
    summary = ", ".join(f"{g.name}: {g.count} x {g.instance_type} = {g.gpus} GPUs" for g in hyperpod.instance_groups)
    too_wide = [(index, m) for index, m in enumerate(models) if m.gpus > largest]
    for index, model in too_wide:
        problems.add(f"models[{index}].gpus", model.gpus,
                     f"is more than any instance group's GPUs per instance ({largest}); a vLLM replica runs on "
                     "one instance. Use a larger instance type or fewer GPUs.")
    if hyperpod.karpenter is not None and not too_wide:
        # Karpenter adds instances to its groups up to the NodePool's limit, on top of the counts set.
        if wanted > hyperpod.gpus + hyperpod.karpenter.gpu_limit:
            problems.add("hyperpod.karpenter.gpuLimit", hyperpod.karpenter.gpu_limit,
                         f"with the instance groups' own {hyperpod.gpus} GPUs gives {hyperpod.gpus + hyperpod.karpenter.gpu_limit}, "
                         f"fewer than the models ask for ({wanted}): Karpenter stops at the limit and the rest stay "
                         "Pending. Raise it to at least "
                         f"{wanted - hyperpod.gpus}, or lower replicas (or maxReplicas).")
        return
    if not too_wide and free_gpus_after_placing(hyperpod, models) is None:
        problems.add("hyperpod.instanceGroups", f"<{summary}>",
                     f"cannot hold the models' replicas: they ask for {wanted} GPUs ({counted} x gpus, each replica "
                     f"on one instance) and the groups have {hyperpod.gpus}; HyperPod does not add instances on its "
                     f"own. Raise a GPU group's count or use a larger type, or lower models[].{lower}.")


def hyperpod_warnings(hyperpod: HyperPodSettings, models: tuple[ModelSettings, ...]) -> list[str]:
    warnings = []
    if hyperpod.existing or not hyperpod.instance_groups:
        return warnings
    # Karpenter starts an instance for a rolling update's extra pod; fixed groups need a spare.
    free = free_gpus_after_placing(hyperpod, models) if models and hyperpod.karpenter is None else None
    widest = max((m.gpus for m in models), default=0)
    if free is not None and not any(left >= widest for left in free):
        warnings.append(f"the models leave no instance with {widest} free GPU(s), so a rolling update (which starts "
                        "the new pod before stopping an old one) cannot place its new pod. Add one replica's worth "
                        "of spare GPUs to a GPU group.")
    if not any(g.gpus_per_instance == 0 and g.count > 0 for g in hyperpod.instance_groups):
        warnings.append("no HyperPod instance group without GPUs: the inference add-on's operator alone needs at least "
                        f"13 pods, and AWS recommends {RECOMMENDED_SYSTEM_TYPE} or larger for it. Add a CPU group, "
                        f"e.g. {{name: system, instanceType: {RECOMMENDED_SYSTEM_TYPE}, count: 1}}.")
    return warnings


def picker_replica_warnings(models: tuple[ModelSettings, ...]) -> list[str]:
    """Each picker replica learns its own prefix index, so affinity fades as pickers are added."""
    warnings = []
    for model in models:
        weights = model.effective_weights
        pickers = model.picker_replicas or DEFAULT_PICKER_REPLICAS
        if weights is not None and weights.get("prefix", 0) > 0 and pickers > 1 and model.replicas > 1:
            where = f"models[].pickerReplicas = {model.picker_replicas}" if model.picker_replicas else \
                f"the controller's default of {DEFAULT_PICKER_REPLICAS} pickers"
            warnings.append(f"model {model.name!r}: prefix scoring is on and {where}: each picker keeps its own "
                            "prefix index, so requests with a shared prefix are spread over the replicas much as "
                            "round-robin would. Set pickerReplicas to 1 to see the affinity (the workshop does), or "
                            "keep 2 for availability and expect less of it.")
    return warnings


def dependencies_chart_path(hyperpod: HyperPodSettings, project_dir: Path, *, relative: bool = False) -> Path:
    """The chart's directory; with `relative`, as a path from the project directory when it lies
    inside it (what `pulumi up` runs in), so state and diffs do not depend on where the checkout is."""
    root = Path(hyperpod.dependencies_chart).expanduser()
    chart = (root if root.is_absolute() else project_dir / root) / DEPENDENCIES_CHART_DIR
    if relative and chart.resolve().is_relative_to(project_dir.resolve()):
        return chart.resolve().relative_to(project_dir.resolve())
    return chart


def check_dependencies_chart(hyperpod: HyperPodSettings | None, project_dir: Path, region: str | None) -> list[str]:
    """The chart is installed from a local clone: refuse to start when it is not there, warn
    when the clone is at another commit than the one this stack was written against.

    Kept apart from `parse_settings` because it reads the disk: the routing toolkit parses the
    same stack on machines that have no clone.
    """
    if hyperpod is None or hyperpod.existing:
        return []
    chart = dependencies_chart_path(hyperpod, project_dir)
    clone = chart.parent.parent
    target = hyperpod.dependencies_chart
    command = (f"`.venv/bin/python -m settings clone-hyperpod-chart {target}` (or by hand: `git clone "
               f"{DEPENDENCIES_REPO} {target} && git -C {target} checkout {DEPENDENCIES_COMMIT}`)")
    manifest = chart / "Chart.yaml"
    message = None
    if not manifest.is_file():
        message = (f"holds no Helm chart at {chart} (no Chart.yaml). AWS publishes the HyperPod dependencies chart "
                   f"only in git; clone it at the pinned commit: {command}")
    elif f"name: {DEPENDENCIES_CHART_NAME}" not in manifest.read_text():
        message = (f"{manifest} is not the HyperPod dependencies chart ({DEPENDENCIES_CHART_NAME}); "
                   f"clone it at the pinned commit: {command}")
    elif region and not (chart / "regional-values" / f"values-{region}.yaml").is_file():
        message = (f"has no regional values for aws:region {region} ({chart}/regional-values/values-{region}.yaml): "
                   "HyperPod's chart supports the regions listed there.")
    if message:
        raise SettingsError([Problem("hyperpod.dependenciesChart", hyperpod.dependencies_chart, message)],
                            where="before deploying; nothing was deployed")
    head = clone / ".git" / "HEAD"
    checked_out = head.read_text().strip() if head.is_file() else DEPENDENCIES_COMMIT
    if checked_out != DEPENDENCIES_COMMIT:
        return [f"hyperpod.dependenciesChart: {clone} is at {checked_out!r}, not the pinned commit "
                f"{DEPENDENCIES_COMMIT}; the chart may install other components. {command} gives the pinned one."]
    return []


def _name_message(what: str, value: str, shape: StringShape) -> str | None:
    if shape.accepts(value):
        return None
    return (f"must be {what}: {shape.min} to {shape.max} letters, digits and '-', starting and ending with a letter "
            "or digit.")


def _cluster_name_message(value: str) -> str | None:
    return _name_message("a HyperPod cluster name", value, create_cluster_limits().cluster_name)


def _group_name_message(value: str) -> str | None:
    return _name_message("an instance group name", value, create_cluster_limits().group_name)


def _arn_message(value: str) -> str | None:
    if not CLUSTER_ARN.match(value):
        return "must be a HyperPod cluster ARN such as arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh."
    return None


def _ml_instance_type_message(value: str) -> str | None:
    if not value.startswith("ml."):
        return (f"is not a SageMaker instance type: HyperPod takes only ml.* types, e.g. ml.{value} "
                "(and the 'ml.<type> for cluster usage' service quota must allow it).")
    known = create_cluster_limits().instance_types
    if value in known:
        return None
    return unknown_type_message(value, known, "an instance type HyperPod's CreateCluster takes", "SageMaker")


def _kubernetes_key_message(what: str, key: str, shape: StringShape) -> str | None:
    if shape.accepts(key):
        return None
    prefix, slash, name = key.rpartition("/")
    suggestion = re.sub(r"[^a-z0-9.-]+", "-", prefix.lower()).strip("-.") + slash + _name_like(name)
    fix = f"Use e.g. {suggestion!r}." if shape.accepts(suggestion) else "Rename it, e.g. example.com/team."
    return (f"is not a {what} key CreateCluster takes: an optional prefix of lowercase letters, digits, '-' and '.' "
            "and a '/', then a name of letters, digits, '-', '_' and '.' that starts and ends with a letter or digit, "
            f"{shape.min} to {shape.max} characters in all. {fix}")


def _kubernetes_value_message(what: str, value: str, shape: StringShape) -> str | None:
    if shape.accepts(value):
        return None
    if len(value) > shape.max:
        return (f"is {len(value)} characters long; CreateCluster takes {what} values of {shape.min} to {shape.max}. "
                "Shorten it.")
    suggestion = _name_like(value)
    fix = f"Use e.g. {suggestion!r}." if shape.accepts(suggestion) else "Use e.g. 'inference'."
    return (f"is not a {what} value CreateCluster takes: letters, digits, '-', '_' and '.', starting and ending with "
            f"a letter or digit. {fix}")


def _name_like(text: str) -> str:
    """`text` with each run of characters a Kubernetes name cannot hold made a '-'."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")


def clone_dependencies_chart(destination: str, repository: str = DEPENDENCIES_REPO) -> str:
    """Clone (or move) the chart's repository to the pinned commit; returns what was done, or
    raises RuntimeError saying what failed and how to do it by hand."""
    target = Path(destination)
    steps = [] if (target / ".git").is_dir() else [["git", "clone", "--quiet", repository, str(target)]]
    steps.append(["git", "-C", str(target), "checkout", "--quiet", DEPENDENCIES_COMMIT])
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"`{' '.join(step)}` failed ({result.stderr.strip() or f'exit {result.returncode}'}). "
                               f"Clone {repository} at {DEPENDENCIES_COMMIT} into {target} by hand, or point "
                               "hyperpod.dependenciesChart at a clone you have.")
    return f"{target} is at {DEPENDENCIES_COMMIT}, the commit hyperpod.dependenciesChart expects."
