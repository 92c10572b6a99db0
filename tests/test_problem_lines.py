"""Several problems are printed one line each, wherever they are found, as the README promises."""

import argparse
import json

import pytest

from dryrun.__main__ import main as dryrun
from routing.options import weights_option
from routing.workloads import WorkloadError, load_weight_changes
from settings.picker_config import PickerConfigError, render_endpoint_picker_config, render_sticky_picker_config


def test_the_dry_run_prints_a_header_then_each_refused_value_on_its_own_line(capsys):
    assert dryrun(["--stack", "eks", "--set", "gpuNodes.min=x", "--set", "weights.prefix=-1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "dryrun: stack eks with --set gpuNodes.min=x --set weights.prefix=-1: 2 problems in the stack configuration; "
        "nothing was deployed:",
        "  - inference-gateway:weights.prefix = '-1': is out of range: must be a whole number from 0 to 2147483647. "
        "Weights are non-negative integers; 0 turns a scorer off.",
        "  - inference-gateway:gpuNodes.min = 'x': must be a whole number from 0 to 1000."]


def test_a_weight_change_line_with_two_bad_weights_names_each_on_its_own_line(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"at": 1, "weights": {"prefx": 0, "queue": 2**31}}) + "\n")
    with pytest.raises(WorkloadError) as caught:
        load_weight_changes(str(path))
    lines = str(caught.value).splitlines()
    assert lines[0] == f"workload {path} line 1:" and len(lines) == 3
    assert lines[1].startswith("""  - "weights" prefx = '0': is not a scorer weight.""")
    assert lines[2].startswith("""  - "weights" queue = '2147483648': is out of range""")


def test_two_bad_weights_options_are_two_lines():
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        weights_option("prefx=1,queue=-1")
    lines = str(caught.value).splitlines()
    assert lines[0] == "2 problems:" and [line[:22] for line in lines[1:]] == [
        "  - --weights prefx = ", "  - --weights queue = "]


@pytest.mark.parametrize(("render", "parameters", "lead"), [
    (render_endpoint_picker_config, {"prefx": 3, "queue": -1}, "weights:"),
    (render_sticky_picker_config, {"maxTTFTPenalty": 1, "peakPrefill": 2}, "sticky recipe:"),
])
def test_a_picker_configuration_refused_twice_lists_each_reason_on_its_own_line(render, parameters, lead):
    with pytest.raises(PickerConfigError) as caught:
        render(parameters)
    lines = str(caught.value).splitlines()
    assert lines[0] == lead and [line.split("=")[0] for line in lines[1:]] == [f"  - {name}" for name in parameters]
