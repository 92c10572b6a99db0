"""Two real vLLM CPU servers serving the tiny model, shared by the whole e2e session.

No hub download: the model is built locally (routing.tinymodel). The vLLM python comes from
$VLLM_PYTHON (or .venv-vllm/bin/python); `bash .ci/setup-vllm.sh .venv-vllm` creates it.
Locally the tests skip with the reason when it is missing; they fail instead when a full run
requires them: in CI (CI=true) or with ROUTING_E2E_REQUIRED=1 (./test.sh's full mode sets it
after installing vLLM).
"""

from __future__ import annotations

import os
import time

import pytest

from routing.vllm_server import (ServerTokenizer, VllmServer, build_model, have_vllm_python, read_cache_config,
                                 reset_prefix_cache, start_servers, stop_servers, wait_until_healthy)

SERVED_MODEL = "tiny"


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


def required_by() -> str | None:
    """Why this run must not skip the real-vLLM tests (the variable that says so), or None."""
    if os.environ.get("CI") == "true":
        return "CI=true"
    if os.environ.get("ROUTING_E2E_REQUIRED") == "1":
        return "ROUTING_E2E_REQUIRED=1"
    return None


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
def tiny_model(vllm_python, tmp_path_factory, progress):
    return build_model(tmp_path_factory.mktemp("tiny-model"), vllm_python,
                       progress=lambda line: progress.write(line + "\n"))


@pytest.fixture(scope="session")
def vllm_pair(vllm_python, tiny_model, tmp_path_factory, progress):
    started = time.monotonic()
    servers = start_servers(2, tiny_model, SERVED_MODEL, vllm_python, tmp_path_factory.mktemp("vllm-logs"),
                            out=progress)
    progress.write(f"both servers healthy after {time.monotonic() - started:.0f}s\n")
    yield servers
    stop_servers(servers)


@pytest.fixture
def servers(vllm_pair: list[VllmServer], progress) -> list[VllmServer]:
    """Both servers, healthy, with empty prefix caches; one killed by an earlier test is restarted."""
    dead = [s for s in vllm_pair if s.process is None or s.process.poll() is not None]
    for server in dead:
        progress.write(f"restarting {server.name}, stopped by an earlier test\n")
        server.stop()
        server.start()
    if dead:
        wait_until_healthy(dead, out=progress)
    for server in vllm_pair:
        reset_prefix_cache(server.url)
    return vllm_pair


@pytest.fixture(scope="session")
def cache_config(vllm_pair) -> tuple[int, int]:
    """(block_size, num_gpu_blocks) as the servers report them in vllm:cache_config_info."""
    return read_cache_config(vllm_pair[0].url)


@pytest.fixture(scope="session")
def server_tokenizer(vllm_pair) -> ServerTokenizer:
    return ServerTokenizer(vllm_pair[0].url, SERVED_MODEL)
