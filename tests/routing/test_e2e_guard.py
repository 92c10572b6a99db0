"""The real-vLLM tests skip (with the reason) only when nothing requires them to run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_e2e_without_vllm(**env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("CI", "ROUTING_E2E_REQUIRED")}
    environment.update(VLLM_PYTHON="/nonexistent/vllm-venv/bin/python", **env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/e2e",
                           "-k", "test_unique_prefixes_spread_with_zero_hits"],
                          cwd=REPO, env=environment, capture_output=True, text=True, timeout=120)


def test_without_a_requirement_the_e2e_tests_skip_with_the_reason():
    result = run_e2e_without_vllm()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout
    assert "real-vLLM tests need a vLLM venv: VLLM_PYTHON '/nonexistent/vllm-venv/bin/python'" in result.stdout


@pytest.mark.parametrize("variable, value", [("ROUTING_E2E_REQUIRED", "1"), ("CI", "true")])
def test_a_full_run_fails_instead_of_skipping(variable, value):
    result = run_e2e_without_vllm(**{variable: value})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "skipped" not in result.stdout
    assert f"{variable}={value} but the real-vLLM tests cannot run" in result.stdout
