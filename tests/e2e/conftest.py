"""Two real vLLM CPU servers serving the tiny model, shared by the whole e2e session.

No hub download: the model is built locally (routing.lab.tinymodel). The vLLM python comes from
$VLLM_PYTHON (or .venv-vllm/bin/python); `bash .ci/setup-vllm.sh .venv-vllm` creates it.
Locally the tests skip with the reason when it is missing; they fail instead when a full run
requires them: in CI (CI=true) or with ROUTING_E2E_REQUIRED=1 (./test.sh's full mode sets it
after installing vLLM).
"""

from __future__ import annotations

import pytest

from routing.lab.vllm_server import VllmPair, have_vllm_python, vllm_pair, wait_until_healthy
from tests.full_run import required_by


class TerminalLines:
    """A text stream that writes whole lines to pytest's terminal as they come, past output
    capture, so a two-minute server start shows its progress."""

    def __init__(self, pytestconfig):
        self.reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        self.capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        with self.capture.global_and_fixture_disabled():
            for line in lines:
                self.reporter.write_line(f"[e2e] {line}")
        return len(text)

    def flush(self) -> None:
        pass


@pytest.fixture(scope="session")
def progress(pytestconfig) -> TerminalLines:
    return TerminalLines(pytestconfig)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    python, why = have_vllm_python()
    if python is None:
        required = required_by()
        if required:
            pytest.fail(f"{required} but the real-vLLM tests cannot run: {why} (the full run must install vLLM "
                        "first, e.g. `bash .ci/setup-vllm.sh .venv-vllm`, and export VLLM_PYTHON)", pytrace=False)
        pytest.skip(f"real-vLLM tests need a vLLM venv: {why}")
    return python


@pytest.fixture(scope="session")
def started_pair(vllm_python, tmp_path_factory, progress):
    work = tmp_path_factory.mktemp("vllm")
    with vllm_pair(work / "tiny-model", work / "logs", vllm_python, out=progress) as pair:
        yield pair


@pytest.fixture
def pair(started_pair: VllmPair, progress) -> VllmPair:
    """Both servers, healthy, with empty prefix caches; one killed by an earlier test is restarted."""
    dead = [s for s in started_pair.servers if s.process is None or s.process.poll() is not None]
    for server in dead:
        progress.write(f"restarting {server.name}, stopped by an earlier test\n")
        server.stop()
        server.start()
    if dead:
        wait_until_healthy(dead, out=progress)
    started_pair.reset_prefix_caches()
    return started_pair
