"""The promtool checks skip (with the reason) only when nothing requires them, as the real-vLLM
tests do (tests/routing/test_e2e_guard.py): the PR workflow's `./test.sh --unit` runs in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_rule_checks_without_promtool(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("CI", "ROUTING_E2E_REQUIRED")}
    # A PATH with nothing on it: no promtool to find.
    environment.update(PATH=str(tmp_path), **env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/test_observability_rules.py", "-k", "refuses_a_broken_expression"],
                          cwd=REPO, env=environment, capture_output=True, text=True, timeout=300)


def test_without_a_requirement_the_promtool_checks_skip_with_the_reason(tmp_path):
    result = run_rule_checks_without_promtool(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout and "promtool is not installed" in result.stdout


@pytest.mark.parametrize("variable, value", [("ROUTING_E2E_REQUIRED", "1"), ("CI", "true")])
def test_in_ci_or_a_full_run_they_fail_instead_of_skipping(tmp_path, variable, value):
    result = run_rule_checks_without_promtool(tmp_path, **{variable: value})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "skipped" not in result.stdout
    assert f"{variable}={value} but promtool is not installed" in result.stdout
