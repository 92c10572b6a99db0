"""A refused value is reported once, as the user set it, and feeds no other check."""

import copy
import re

import pytest

from settings import SettingsError, parse_settings, read_stack_config, stack_file

# Values no leaf the shipped stacks set accepts in their place: the wrong type, and a word.
REFUSED_VALUES = ({"not": "a value"}, "abc")
# Keys the stack files leave at their defaults, where a refused value would fall back to one.
UNSET_KEYS = {
    "dev": ("gateway.metrics", "gateway.keda", "gateway.gatedModelAccess", "gateway.bbr", "gateway.bbrReplicas",
            "gateway.networkPolicy.enabled", "gateway.networkPolicy.monitoringNamespace", "hyperpod.existing",
            "hyperpod.instanceGroups[0].threadsPerCore", "cluster.existing", "cluster.vpcId",
            "cluster.privateSubnetIds", "cluster.endpointPublicAccess", "cluster.endpointPrivateAccess",
            "observability.enabled", "observability.retention", "weights.prefix", "routing.recipe",
            "models[0].scheduler", "models[0].gpus", "models[0].port"),
    "eks": ("platform", "gpuNodes.capacityType", "gpuNodes.diskSize", "gpuNodes.amiType", "gpuNodes.timeSlicing",
            "cluster.existing", "cluster.vpcId", "cluster.publicSubnetIds", "cluster.systemNodes.desired",
            "cluster.systemNodes.max", "cluster.systemNodes.instanceTypes", "gateway.loadBalancerController",
            "gateway.bbr", "models[1].scheduler", "models[0].image", "observability.scrapeInterval"),
    "existing": ("gateway.installAddon", "gateway.tls", "observability.enabled", "models[0].gpus"),
}


def leaves(value, path=""):
    """Every single value a stack file sets, by its config path."""
    if isinstance(value, dict):
        for name, child in value.items():
            yield from leaves(child, f"{path}.{name}" if path else name)
    elif isinstance(value, list) and value and all(isinstance(entry, dict) for entry in value):
        for index, entry in enumerate(value):
            yield from leaves(entry, f"{path}[{index}]")
    else:
        yield path


def with_value(raw: dict, path: str, value) -> dict:
    """The config with `path` set as `pulumi config set --path` would set it, or as a flat key."""
    raw = copy.deepcopy(raw)
    names = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    if not isinstance(raw.get(names[0]), (dict, list)):
        raw[path] = value
        return raw
    node = raw[names[0]]
    for name in names[1:-1]:
        node = node[int(name[1:-1])] if name.startswith("[") else node.setdefault(name, {})
    last = names[-1]
    node[int(last[1:-1]) if last.startswith("[") else last] = value
    return raw


@pytest.mark.parametrize("stack", sorted(UNSET_KEYS))
def test_a_refused_value_is_the_only_problem_it_causes(stack):
    raw, secrets = read_stack_config(stack_file(stack))
    stray = []
    for path in [*leaves(raw), *UNSET_KEYS[stack]]:
        for value in REFUSED_VALUES:
            try:
                parse_settings(with_value(raw, path, value), stack=stack, secret_keys=secrets)
            except SettingsError as error:
                stray += [f"{path}={value!r} -> {problem}" for problem in error.problems
                          if not ((problem.key == path and problem.value == value) or problem.key.startswith(path + "["))]
    assert not stray, "\n".join(stray)


def test_node_counts_refused_are_not_compared_with_the_defaults():
    with pytest.raises(SettingsError) as caught:
        parse_settings({"platform": "eks", "models": '[{"name": "a", "model": "m"}]',
                        "gpuNodes": '{"desired": "abc", "min": 4, "max": 5}'}, stack="test")
    assert [str(p) for p in caught.value.problems] == [
        "inference-gateway:gpuNodes.desired = 'abc': must be a whole number from 0 to 1000."]


@pytest.mark.parametrize(("config", "shown"), [
    ({"weight.prefix": "0"}, "inference-gateway:weight.prefix = '0': is not a key of this project. Did you mean "
                             "'weights'?"),
    ({"weights.prefx.x": "1"}, "inference-gateway:weights.prefx.x = '1': is not a scorer weight. Did you mean "
                               "'prefix'?"),
    ({"gateway.tsl.mode": "auto"}, "inference-gateway:gateway.tsl.mode = 'auto': is not a known key of gateway. "
                                   "Did you mean 'tls'?"),
    ({"cluster.existing": "true", "cluster.name": "c", "cluster.systemNodes.desired": "3"},
     "inference-gateway:cluster.systemNodes = {'cluster.systemNodes.desired': '3'}: applies only to a cluster"),
])
def test_a_key_the_user_set_is_shown_with_the_value_set(config, shown):
    with pytest.raises(SettingsError) as caught:
        parse_settings({"platform": "eks", "models": '[{"name": "a", "model": "m"}]', **config}, stack="test")
    assert any(str(problem).startswith(shown) for problem in caught.value.problems), str(caught.value)
