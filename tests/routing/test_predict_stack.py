"""predict follows the picker configuration a stack deploys, on either implementation."""

import json
from pathlib import Path

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
