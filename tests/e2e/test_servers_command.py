"""`python -m routing servers` for real: two vLLM CPU servers up, serving the model name it
prints, and gone, every process of theirs, after Ctrl-C."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from routing.lab.vllm_server import REPO_ROOT, free_port

SERVER_LINE = re.compile(r"^  (vllm-[ab])  (http://127\.0\.0\.1:\d+)  \(cpu \d+, pid (\d+), log ")
UP = "Ctrl-C here stops both servers."
STOPPED = "servers: stopped; no vLLM server of this command is left running"


def lines_of(process: subprocess.Popen) -> queue.Queue:
    """The process's output lines, as they come (None at its end), read on a thread of their own."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def read_until(lines: queue.Queue, last: str, progress, timeout: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=5)
        except queue.Empty:
            continue
        if line is None:
            break
        progress.write(f"servers: {line}\n")
        seen.append(line)
        if line == last:
            return seen
    raise AssertionError(f"`servers` never printed {last!r}; it printed:\n" + "\n".join(seen))


def group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_servers_serves_the_printed_model_until_ctrl_c_then_leaves_no_process(vllm_python, tmp_path, progress):
    ports = f"{free_port()},{free_port()}"
    command = [sys.executable, "-m", "routing", "servers", "--vllm-python", vllm_python, "--work-dir", str(tmp_path),
               "--ports", ports]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    groups: list[int] = []
    try:
        lines = lines_of(process)
        out = read_until(lines, UP, progress, timeout=900)
        servers = {match[1]: (match[2], int(match[3])) for match in map(SERVER_LINE.match, out) if match}
        groups = [pid for _, pid in servers.values()]
        assert sorted(servers) == ["vllm-a", "vllm-b"]
        assert sorted(url.rsplit(":", 1)[1] for url, _ in servers.values()) == sorted(ports.split(","))
        [name] = re.findall(r"under the name '([^']+)'", "\n".join(out))
        # The start-up was shown stage by stage, as the real vLLM's log told it.
        # (Only stages long enough to be seen between two looks at the log: loading the model takes ~1 s.)
        stages = ("importing vLLM", "starting the worker process", "compiling the model", "ready after")
        first_seen = [next(index for index, line in enumerate(out) if f"vllm-a {stage}" in line) for stage in stages]
        assert first_seen == sorted(first_seen)

        for url, _ in servers.values():
            with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as response:
                assert [model["id"] for model in json.load(response)["data"]] == [name]

        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0
        rest = read_until(lines, STOPPED, progress, timeout=30)
        assert "stopping the vLLM servers ..." in rest
        assert [pid for pid in groups if group_alive(pid)] == []  # API server, EngineCore and Worker alike
        for url, _ in servers.values():
            with pytest.raises(urllib.error.URLError):
                urllib.request.urlopen(f"{url}/health", timeout=5)
    finally:
        # A failed test must not leave servers behind either.
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        for pid in groups:
            if group_alive(pid):
                os.killpg(pid, signal.SIGKILL)
