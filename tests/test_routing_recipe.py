"""The routing recipe (`routing` / `models[].routing`): the sticky recipe on the open-source picker,
what it renders under mocks, what a change to it changes, and what is refused before anything exists."""

import json
from pathlib import Path

import jsonschema
import pytest

from settings import SettingsError, load_stack
from settings.picker import endpoint_picker_config
from settings.picker_config import STICKY_PARAMETERS, load_endpoint_picker_config
from tests.stack.program import comparable, run_program
from tests.test_program import from_stack_file, registered_before_refusal
from tests.test_program_eks import picker_config

PICKER_SCHEMA = json.loads((Path(__file__).parent / "schemas" / "endpoint-picker-config.schema.json").read_text())
FILTER = "prefix-cache-affinity-filter"


def eks_config(**small_model):
    """The eks stack file with qwen-small's entry changed."""
    config, _ = from_stack_file("eks")
    models = config["models"]
    models[1] = {**models[1], **small_model}
    return {**config, "models": models}


def filter_parameters(config):
    (entry,) = [plugin for plugin in config["plugins"] if plugin["type"] == FILTER]
    return entry.get("parameters", {})


def test_the_sticky_recipe_renders_the_filter_with_exactly_the_parameters_set():
    run = run_program(eks_config(routing={"recipe": "sticky", "maxTTFTPenaltyMs": 5000,
                                          "peakPrefillThroughput": 4200}), stack="eks")
    config, _ = picker_config(run, "qwen-small")
    jsonschema.validate(config, PICKER_SCHEMA)
    assert filter_parameters(config) == {"maxTTFTPenaltyMs": 5000, "peakPrefillThroughput": 4200}
    (profile,) = config["schedulingProfiles"]
    refs = [entry["pluginRef"] for entry in profile["plugins"]]
    types = {plugin.get("name", plugin["type"]): plugin["type"] for plugin in config["plugins"]}
    # The filter narrows, the token-load scorer picks among what it kept, the max-score picker takes the best.
    assert [types[ref] for ref in refs] == [FILTER, "token-load-scorer", "max-score-picker"]
    assert "queue-scorer" not in types.values() and "prefix-cache-scorer" not in types.values()
    # What the v0.10 loader reads back is what was set, the rest upstream's defaults.
    loaded = load_endpoint_picker_config(config)
    (spec,) = [spec for spec in loaded.plugins if spec.type == FILTER]
    assert spec.parameters["maxTTFTPenaltyMs"] == 5000 and spec.parameters["peakPrefillThroughput"] == 4200
    assert spec.parameters["affinityThreshold"] == STICKY_PARAMETERS["affinityThreshold"]
    assert run.outputs["routing"]["qwen-small"] == {"recipe": "sticky", "maxTTFTPenaltyMs": 5000,
                                                    "peakPrefillThroughput": 4200}
    assert run.outputs["routing"]["qwen"] == {"recipe": "weights"}
    assert run.outputs["effectiveWeights"]["qwen-small"] == "none: the sticky recipe"


def test_a_stack_wide_recipe_applies_to_every_model_and_a_model_overrides_it():
    config = {**eks_config(routing={"peakPrefillThroughput": 3000}), "routing": {"recipe": "sticky",
                                                                                "peakPrefillThroughput": 9000}}
    settings = run_program(config, stack="eks")
    assert filter_parameters(picker_config(settings, "qwen")[0]) == {"peakPrefillThroughput": 9000}
    assert filter_parameters(picker_config(settings, "qwen-small")[0]) == {"peakPrefillThroughput": 3000}


def test_switching_a_model_to_sticky_rolls_its_picker_and_nothing_else():
    before = run_program(eks_config(), stack="eks")
    after = run_program(eks_config(routing="sticky"), stack="eks")
    inputs_before = {(r.type, r.name): comparable(r.inputs) for r in before.resources}
    inputs_after = {(r.type, r.name): comparable(r.inputs) for r in after.resources}
    assert inputs_before.keys() == inputs_after.keys()
    changed = sorted(name for key, name in inputs_before if inputs_before[(key, name)] != inputs_after[(key, name)])
    assert changed == ["router-qwen-small-router"]
    # Changing a parameter likewise.
    tuned = run_program(eks_config(routing={"recipe": "sticky", "maxTTFTPenaltyMs": 2000}), stack="eks")
    inputs_tuned = {(r.type, r.name): comparable(r.inputs) for r in tuned.resources}
    assert sorted(name for key, name in inputs_after if inputs_after[(key, name)] != inputs_tuned[(key, name)]) == [
        "router-qwen-small-router"]


@pytest.mark.parametrize(("routing", "key", "words"), [
    ({"recipe": "sticky", "affinityThreshold": 1.5}, "models[1].routing.affinityThreshold", "affinityThreshold"),
    ({"recipe": "sticky", "explorationProbability": -0.1}, "models[1].routing.explorationProbability",
     "explorationProbability"),
    ({"recipe": "sticky", "maxTTFTPenaltyMs": -1}, "models[1].routing.maxTTFTPenaltyMs", "maxTTFTPenaltyMs"),
    ({"recipe": "sticky", "peakPrefillThroughput": 0}, "models[1].routing.peakPrefillThroughput",
     "peakPrefillThroughput"),
    ({"recipe": "sticky", "maxTTFTPenaltyMs": "soon"}, "models[1].routing.maxTTFTPenaltyMs", "must be a number"),
    ({"recipe": "sticky", "maxTtftPenaltyMs": 5}, "models[1].routing.maxTtftPenaltyMs", "maxTTFTPenaltyMs"),
    ({"recipe": "stickey"}, "models[1].routing.recipe", "Did you mean 'sticky'?"),
    ({"maxTTFTPenaltyMs": 5000}, "models[1].routing.maxTTFTPenaltyMs", "parameter of the sticky recipe"),
    ({"recipe": "sticky", "weights_too": True}, "models[1].routing.weights_too", "Valid keys"),
])
def test_a_bad_routing_value_is_refused_by_key_with_nothing_declared(routing, key, words):
    resources, message = registered_before_refusal(eks_config(routing=routing))
    assert resources == []
    assert f"inference-gateway:{key}" in message and words in message


def test_the_sticky_recipe_reads_no_weights_and_is_no_picker_file():
    resources, message = registered_before_refusal(eks_config(routing="sticky", weights={"prefix": 0}))
    assert resources == [] and "inference-gateway:models[1].routing.recipe = 'sticky': does not read scorer weights" \
        in message
    config = {**eks_config(), "routing": "sticky", "weights.queue": "3"}
    resources, message = registered_before_refusal(config)
    assert resources == [] and "weights (stack-wide) sets queue" in message


@pytest.mark.parametrize(("where", "key"), [("model", "models[1].routing.recipe"), ("stack", "routing.recipe")])
def test_hyperpod_refuses_the_sticky_recipe_naming_the_key(where, key):
    config, _ = from_stack_file("dev")
    if where == "model":
        config["models"][1] = {**config["models"][1], "routing": {"recipe": "sticky"}}
    else:
        config["routing"] = "sticky"
    resources, message = registered_before_refusal(config)
    assert resources == []
    assert f"inference-gateway:{key} = 'sticky': runs only on gateway.implementation llm-d" in message
    assert "pickerConfigMap" in message


def test_every_stack_file_keeps_the_weights_recipe_so_the_seed_walkthrough_reads_alike():
    for stack in ("dev", "eks", "existing"):
        settings = load_stack(stack)
        assert {model.routing.recipe for model in settings.models} == {"weights"}, stack


def test_predict_reads_the_deployed_sticky_config(tmp_path):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    text = (Path(__file__).parent.parent / "stacks" / "Pulumi.eks.yaml").read_text()
    text = text.replace("      pickerReplicas: 1\n", "      pickerReplicas: 1\n      routing:\n        recipe: sticky\n"
                                                      "        maxTTFTPenaltyMs: 1234\n", 1)
    (stacks / "Pulumi.eks.yaml").write_text(text)
    settings = load_stack("eks", stacks)
    model = settings.model_named("qwen-small")
    assert filter_parameters(endpoint_picker_config(model)) == {"maxTTFTPenaltyMs": 1234}
    with pytest.raises(SettingsError):
        (stacks / "Pulumi.eks.yaml").write_text(text.replace("1234", "-5"))
        load_stack("eks", stacks)


def test_on_hyperpod_the_sticky_plugins_go_in_a_picker_file_and_predict_follows_it(tmp_path, capsys):
    from routing import __main__ as cli
    from settings.picker_config import endpoint_picker_config_yaml, render_sticky_picker_config

    picker_file = tmp_path / "sticky.yaml"
    picker_file.write_text(endpoint_picker_config_yaml(render_sticky_picker_config({"maxTTFTPenaltyMs": 500})))
    dev = (Path(__file__).parent.parent / "stacks" / "Pulumi.dev.yaml").read_text()
    marker = "      model: Qwen/Qwen2.5-0.5B-Instruct\n"
    (tmp_path / "Pulumi.hp.yaml").write_text(dev.replace(marker, marker + "      pickerConfigMap:\n        name: sticky\n"
                                                                           f"        file: {picker_file}\n"))
    assert cli.main(["predict", "--stack", "hp", "--stacks-dir", str(tmp_path), "--model", "qwen-small",
                     "--concurrency", "4", "--seed", "1", "--explain", "3"]) == 0
    out = capsys.readouterr().out
    assert "profile prefix-cache-affinity-filter, token-load-scorer=1, max-score-picker" in out
    assert "prefix-cache-affinity-filter: no pod holds enough of the prefix" in out
