"""How the vLLM servers the e2e tests and benchmarks start are laid out on this machine."""

import io
import os
import sys
import time

import pytest

from routing.lab import vllm_server
from routing.lab.vllm_server import VllmServer, cores_of, stop_servers, wait_until_healthy


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


# Lines of a real vLLM 0.32 start-up log (build/demo/logs), one that begins each stage, in order.
STAGE_LINES = [
    "(APIServer pid=1) INFO 12-04 17:36:08 [api_utils.py:286] non-default args: {'host': '127.0.0.1'}",
    "(APIServer pid=1) INFO 12-04 17:36:23 [model.py:733] Resolved architecture: Qwen2ForCausalLM",
    "(EngineCore pid=2) INFO 12-04 17:36:33 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: ...",
    "(Worker pid=3) INFO 12-04 17:36:45 [cpu_model_runner.py:68] Starting to load model /tmp/tiny-model...",
    "(Worker pid=3) INFO 12-04 17:36:47 [cpu_model_runner.py:87] Warming up model for the compilation...",
    "(Worker pid=3) INFO 12-04 17:37:25 [cpu_model_runner.py:91] Warming up done.",
    "(EngineCore pid=2) INFO 12-04 17:37:28 [core.py:402] init engine (profile, create kv cache, warmup model) took "
    "41.02 s",
]
STAGES = ["importing vLLM", "reading the model config", "starting the engine process", "starting the worker process",
          "loading the model", "compiling the model", "allocating the KV cache", "starting the API server"]


def append(server: VllmServer, *lines: str, end: str = "\n") -> None:
    with open(server.log_path, "a") as log:
        log.write("\n".join(lines) + end)


def started_stand_in(tmp_path, monkeypatch, name: str = "vllm-a") -> VllmServer:
    """A VllmServer whose process is a python that exits at once, logging where vLLM's would."""
    monkeypatch.setattr(VllmServer, "command", lambda self: [sys.executable, "-c", "pass"])
    server = VllmServer(name, tmp_path, "tiny", sys.executable, tmp_path / f"{name}.log", port=1)
    server.start()
    server.process.wait(timeout=30)
    return server


def stage_of(server: VllmServer) -> str:
    return server.startup_status(now=server.stage_since).split(" ", 1)[1].rsplit(" (", 1)[0]


def test_a_server_s_stage_follows_its_log_from_where_this_start_began(tmp_path, monkeypatch):
    log = tmp_path / "vllm-a.log"
    log.write_text("\n".join(STAGE_LINES) + "\n")  # a previous run's whole start-up, in the appended log
    server = started_stand_in(tmp_path, monkeypatch)
    seen = [stage_of(server)]
    for line in STAGE_LINES:
        append(server, "Triton is installed, but doesn't include CPU backend. Disabling Triton.", line)
        assert server.follow_stage()
        seen.append(stage_of(server))
    assert seen == STAGES
    append(server, "(APIServer pid=1) INFO [launcher.py:195] Route: /health, Methods: GET")
    assert not server.follow_stage()


def test_a_line_still_being_written_counts_once_it_is_whole(tmp_path, monkeypatch):
    server = started_stand_in(tmp_path, monkeypatch)
    append(server, "(Worker pid=3) INFO [cpu_model_runner.py:68] Starting to lo", end="")
    assert not server.follow_stage()
    append(server, "ad model /tmp/tiny-model...")
    assert server.follow_stage() and stage_of(server) == "loading the model"


class FakeClock:
    """vllm_server's `time`: monotonic() and sleep(), in seconds that pass only by sleeping."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_waiting_shows_the_time_and_each_server_s_stage_as_they_change(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(vllm_server, "time", clock)
    servers = [started_stand_in(tmp_path, monkeypatch, name) for name in ("vllm-a", "vllm-b")]
    # What each server logs at which second of its start, and when its /health answers.
    script = {"vllm-a": dict(zip((8, 9, 15, 22, 23, 40, 42), STAGE_LINES)),
              "vllm-b": dict(zip((9, 11, 16, 25, 26, 45, 47), STAGE_LINES))}
    ready_at = {"vllm-a": 44, "vllm-b": 49}
    for server in servers:
        monkeypatch.setattr(server, "check_running", lambda: None)
        monkeypatch.setattr(server, "healthy", lambda name=server.name: clock.now - 1000 >= ready_at[name])

    real_follow = VllmServer.follow_stage

    def follow_with_script(self):
        second = clock.now - 1000
        for at in sorted(script[self.name]):
            if at <= second:
                append(self, script[self.name].pop(at))
        return real_follow(self)

    monkeypatch.setattr(VllmServer, "follow_stage", follow_with_script)
    out = io.StringIO()
    assert wait_until_healthy(servers, out=out, every=5) == {"vllm-a": 44.0, "vllm-b": 49.0}
    lines = out.getvalue().splitlines()
    assert lines[0] == "     0s  vllm-a importing vLLM (0s) | vllm-b importing vLLM (0s)"
    assert "    25s  vllm-a compiling the model (2s) | vllm-b loading the model (0s)" in lines  # a stage changed
    assert "    36s  vllm-a compiling the model (13s) | vllm-b compiling the model (10s)" in lines  # 5 s on
    assert lines[-1] == "    49s  vllm-a ready after 44s | vllm-b ready after 49s"
    assert all(earlier != later for earlier, later in zip(lines, lines[1:]))
    stages_of_a = [line.split("vllm-a ", 1)[1].split(" (")[0].split(" |")[0] for line in lines]
    assert [stage for index, stage in enumerate(stages_of_a) if stage not in stages_of_a[:index]] == [
        *STAGES, "ready after 44s"]


# A stand-in for a server that shuts down on SIGTERM, saying whether the other one had been told
# to stop too by then (it waits up to 10 s for that).
SHUTS_DOWN_WITH_THE_OTHER = """
import pathlib, signal, sys, time
told = pathlib.Path(sys.argv[1])
def stop(*_):
    (told / sys.argv[2]).touch()
    deadline = time.monotonic() + 10
    while len(list(told.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    print("stopped with the other" if len(list(told.iterdir())) == 2 else "stopped alone", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("up", flush=True)
while True:
    time.sleep(1)
"""


def test_stopping_servers_tells_them_all_at_once_so_they_shut_down_together(tmp_path, monkeypatch):
    told = tmp_path / "told"
    told.mkdir()
    monkeypatch.setattr(VllmServer, "command",
                        lambda self: [sys.executable, "-c", SHUTS_DOWN_WITH_THE_OTHER, str(told), self.name])
    servers = [VllmServer(name, tmp_path, "tiny", sys.executable, tmp_path / f"{name}.log", port=1).start()
               for name in ("vllm-a", "vllm-b")]
    for server in servers:
        while "up" not in server.log_path.read_text():
            server.check_running()
            time.sleep(0.05)
    stop_servers(servers)
    assert [server.log_path.read_text().splitlines() for server in servers] == [["up", "stopped with the other"]] * 2


def test_a_relative_vllm_python_is_made_absolute_so_servers_find_it_from_their_own_directory(tmp_path, monkeypatch):
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    monkeypatch.setattr(vllm_server, "vllm_version", lambda python: "0.32.0")
    monkeypatch.chdir(tmp_path)
    resolved = vllm_server.resolve_vllm_python(os.path.join("venv", "bin", "python"))
    # The venv's own path, not the interpreter its symlink points to.
    assert resolved == str(venv_python)
