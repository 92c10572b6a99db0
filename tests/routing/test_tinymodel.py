"""The tiny model's build options and what counts as built (no torch needed here)."""

import json

import pytest

from routing.lab import tinymodel


def write_build(out, summary: dict) -> None:
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (out / name).write_text("{}")
    (out / "tinymodel.json").write_text(json.dumps(summary))


def test_a_build_without_the_servers_tokenizer_is_not_built(tmp_path):
    # Builds before the tokenizer fix shipped a tokenizer.json vLLM does not count with.
    write_build(tmp_path, {"hiddenSize": 128})
    assert not tinymodel.is_built(tmp_path)
    write_build(tmp_path, {"hiddenSize": 128, "serverTokenizer": "Qwen2Tokenizer"})
    assert tinymodel.is_built(tmp_path)


@pytest.mark.parametrize("argv, message", [
    (["out", "--size", "huge"], "invalid choice: 'huge'"),
    (["out", "--layers", "0"], "--layers 0: a model needs at least one layer"),
    (["out", "--size", "small", "--hidden-size", "12"], "--hidden-size 12: must be a multiple of 8"),
])
def test_bad_sizes_are_refused_with_the_fix(argv, message, capsys):
    with pytest.raises(SystemExit):
        tinymodel.main(argv)
    assert message in capsys.readouterr().err

