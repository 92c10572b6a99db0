"""predict follows the picker configuration a stack deploys, on either implementation."""

import json
from pathlib import Path

import pytest
from test_predict import run_cli

from routing import __main__ as cli
from tests.test_settings_hyperpod import PICKER_CONFIG

STACKS = Path(__file__).resolve().parents[2] / "stacks"


def predict_json(capsys, *args):
    assert cli.main(["predict", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_llm_d_stack_predicts_what_the_hyperpod_stack_does_with_the_same_weights(capsys):
    for weights in ([], ["--weights", "prefix=0,queue=3,kvCache=2"]):
        common = ["--model", "qwen-small", "--workload", "seed-shared", "--seed", "1", *weights]
        assert predict_json(capsys, "--stack", "eks", *common) == predict_json(capsys, "--stack", "dev", *common)


def stack_with_picker_config(tmp_path) -> Path:
    (tmp_path / "picker.yaml").write_text(PICKER_CONFIG)
    eks = (STACKS / "Pulumi.eks.yaml").read_text()
    marker = "      pickerReplicas: 1\n"
    assert marker in eks
    custom = f"      pickerConfigMap:\n        name: qwen-small-picker\n        file: {tmp_path / 'picker.yaml'}\n"
    (tmp_path / "Pulumi.custom.yaml").write_text(eks.replace(marker, marker + custom))
    return tmp_path


def test_a_hand_written_picker_config_is_predicted_with_exactly_its_plugins_and_weights(tmp_path, capsys):
    stacks = stack_with_picker_config(tmp_path)
    args = ["predict", "--stack", "custom", "--stacks-dir", str(stacks), "--model", "qwen-small",
            "--workload", "seed-shared", "--seed", "1", "--explain", "1"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "picker configuration" in out and "profile prefix-cache-scorer=5" in out
    # The breakdown scores with the file's scorers and weights, and none of the defaults.
    assert "prefix-cache-scorer ×5" in out and "running-requests-size-scorer ×1.5" in out
    assert "queue-scorer" not in out and "kv-cache-utilization-scorer" not in out
    # blockSizeTokens 128 without autoTune: the prompt is 14 blocks to the picker, not the 27 of 64-token blocks.
    assert "the request has 14 prefix blocks" in out


def test_weights_cannot_be_laid_over_a_whole_picker_config(tmp_path, capsys):
    stacks = stack_with_picker_config(tmp_path)
    code = cli.main(["predict", "--stack", "custom", "--stacks-dir", str(stacks), "--model", "qwen-small",
                     "--workload", "seed-shared", "--weights", "prefix=0"])
    assert code == 2 and "runs its own EndpointPickerConfig" in capsys.readouterr().err


def test_predict_names_the_vllm_release_it_models_and_flags_a_model_image_of_another(tmp_path, capsys):
    args = ["--model", "qwen-small", "--workload", "seed-shared", "--seed", "1"]
    assert cli.main(["predict", "--stack", "eks", *args]) == 0
    out = capsys.readouterr().out
    assert "servers: vLLM 0.32 prefix caching" in out and "runs vLLM" not in out
    eks = (STACKS / "Pulumi.eks.yaml").read_text()
    marker = "      pickerReplicas: 1\n"
    (tmp_path / "Pulumi.older.yaml").write_text(eks.replace(marker, marker + "      image: vllm/vllm-openai:v0.11.0\n"))
    assert cli.main(["predict", "--stack", "older", "--stacks-dir", str(tmp_path), *args]) == 0
    out = capsys.readouterr().out
    assert "the model's image vllm/vllm-openai:v0.11.0 runs vLLM 0.11" in out and "model vLLM 0.32" in out


# -- --compare: what is proposed beside what runs ----------------------------------------------------

def test_compare_sets_more_replicas_beside_the_stacks_two_in_one_table(capsys):
    argv = ("--stack", "dev", "--model", "qwen-small", "--workload", "examples/trace.jsonl", "--concurrency", "8",
            "--seed", "1", "--replicas", "3", "--compare")
    status, out, _ = run_cli(*argv, capsys=capsys)
    assert status == 0
    lines = out.splitlines()
    assert "deployed: weights queue=2 kvCache=2 prefix=3, approximate prefix index, 2 pods (stack dev as its file sets it)" in out
    assert "proposed: weights queue=2 kvCache=2 prefix=3, approximate prefix index, 3 pods (--replicas 3)" in out
    header = next(line for line in lines if line.split() == ["deployed", "proposed", "change"])
    rows = [line.strip().split("  ")[0] for line in lines[lines.index(header) + 1:]]
    assert rows == ["hit rate", "busiest pod's share", "TTFT p50", "TTFT p95", "queue p95", "round-robin hit rate"]
    status, out, _ = run_cli(*argv, "--json", capsys=capsys)
    report = json.loads(out)
    assert len(report["pods"]) == 3 and len(report["deployed"]["pods"]) == 2
    # The deployed column is the stack's prediction, figure for figure.
    status, alone, _ = run_cli(*argv[:-3], "--json", capsys=capsys)
    assert report["deployed"]["hitRate"] == json.loads(alone)["hitRate"]


@pytest.mark.parametrize("extra, message", [
    ((), "--compare: nothing is proposed beside what runs; give --weights, --routing, --replicas or --prefix-index"),
    (("--weights", "prefix=0", "--sweep", "queue=0..1"), "--compare with --sweep: a sweep sets the deployed setting"),
])
def test_compare_without_a_proposal_or_with_a_sweep_is_refused(capsys, extra, message):
    status, out, err = run_cli("--stack", "dev", "--model", "qwen-small", "--compare", *extra, capsys=capsys)
    assert status == 2 and out == "" and message in err
