"""How the vLLM servers the e2e tests and benchmarks start are laid out on this machine."""

import sys

import pytest

from routing.lab.vllm_server import VllmServer, cores_of


@pytest.mark.parametrize(("bind", "cores"), [("0", {0}), ("0-3", {0, 1, 2, 3}), ("0,2", {0, 2}), ("1,4-5", {1, 4, 5})])
def test_a_cpu_bind_list_names_its_cores(bind, cores):
    assert cores_of(bind) == cores


def test_a_server_and_every_process_it_starts_run_on_its_own_cores(tmp_path, monkeypatch):
    # A stand-in for vLLM that reports its own cores and those of a process it starts, as the
    # API server starts the engine core and its worker.
    report = ("import os, subprocess, sys; print(sorted(os.sched_getaffinity(0))); sys.stdout.flush(); "
              "subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'])")
    monkeypatch.setattr(VllmServer, "command", lambda self: [sys.executable, "-c", report])
    server = VllmServer("vllm-a", tmp_path, "tiny", sys.executable, tmp_path / "vllm-a.log", port=1, cpu_bind="0")
    server.start()
    assert server.process.wait(timeout=30) == 0
    assert server.log_path.read_text().split() == ["[0]", "[0]"]
    assert server.environment()["VLLM_CPU_OMP_THREADS_BIND"] == "0"
