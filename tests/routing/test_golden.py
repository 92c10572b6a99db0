"""Every prediction as it was before the simulator was made faster, bit for bit
(tests/routing/golden.py says what the cases cover and how to rewrite them)."""

import json
from pathlib import Path

import pytest
from golden import cases, golden_path

CASES = sorted(cases(Path("unused")))


def test_every_golden_file_has_its_case():
    stored = sorted(path.stem for path in golden_path("x").parent.glob("*.json"))
    assert stored == CASES


@pytest.mark.parametrize("name", CASES)
def test_prediction_matches_its_golden_file(name, tmp_path):
    expected = json.loads(golden_path(name).read_text(encoding="utf-8"))
    # Through JSON as the file was written, so a float compares by its exact repr.
    assert json.loads(json.dumps(cases(tmp_path)[name]())) == expected
