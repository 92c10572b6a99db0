"""`servers` with its vLLM servers replaced by stand-ins: what it prints, and how it stops."""

from __future__ import annotations

import os
import shlex
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from routing import __main__ as cli
from routing.lab import servers as servers_command
from routing.lab import vllm_server
from routing.lab.vllm_server import VllmServer

TOOLKIT = ".venv/bin/python -m routing "


@dataclass
class StandInProcess:
    """A started server's process: `on_poll` runs at each poll (Ctrl-C, or an exit code)."""

    pid: int
    on_poll: Callable[[], int | None] = lambda: None

    def poll(self) -> int | None:
        return self.on_poll()


@dataclass
class Lab:
    """What `servers` did to its stand-ins."""

    tmp_path: Path
    built: list[tuple[Path, int, int]] = field(default_factory=list)
    started: list[VllmServer] = field(default_factory=list)
    stopped: list[list[str]] = field(default_factory=list)
    on_poll: Callable[[], int | None] = lambda: None
    while_stopping: Callable[[], None] = lambda: None

    def run(self, *args: str) -> int:
        return cli.main(["servers", "--work-dir", str(self.tmp_path), "--ports", ",".join(map(str, free_ports())),
                         *args])


def free_ports() -> tuple[int, int]:
    return vllm_server.free_port(), vllm_server.free_port()


def interrupt(signum: int = signal.SIGINT) -> Callable[[], None]:
    """What Ctrl-C (or `kill`) does to the command: the signal, sent to this process."""

    def send() -> None:
        # Without a handler of the command's, SIGTERM would end pytest itself instead of failing the test.
        assert signal.getsignal(signum) not in (signal.SIG_DFL, None), f"no handler for {signum!r}"
        os.kill(os.getpid(), signum)

    return send


@pytest.fixture
def lab(monkeypatch, tmp_path) -> Lab:
    lab = Lab(tmp_path)

    def start(count, model_dir, served_model_name, vllm_python, log_dir, timeout, out, max_model_len, extra_args,
              ports):
        for index in range(count):
            server = VllmServer(f"vllm-{'ab'[index]}", model_dir, served_model_name, vllm_python,
                                log_dir / f"vllm-{'ab'[index]}.log", port=ports[index], cpu_bind=str(index))
            server.process = StandInProcess(4000 + index, lambda: lab.on_poll())
            lab.started.append(server)
        return lab.started

    def stop(started):
        lab.while_stopping()
        lab.stopped.append([server.name for server in started])

    monkeypatch.setattr(servers_command, "resolve_vllm_python", lambda explicit: "/usr/bin/python3")
    monkeypatch.setattr(vllm_server, "build_model", lambda out_dir, python, progress, hidden_size, layers:
                        lab.built.append((out_dir, hidden_size, layers)))
    monkeypatch.setattr(vllm_server, "start_servers", start)
    monkeypatch.setattr(vllm_server, "stop_servers", stop)
    monkeypatch.setattr(vllm_server, "read_cache_config", lambda url: (128, 8192))
    monkeypatch.setattr(vllm_server, "ServerTokenizer", lambda url, model: None)
    return lab


def printed_commands(out: str) -> list[list[str]]:
    return [shlex.split(line.strip()) for line in out.splitlines() if line.strip().startswith(TOOLKIT)]


def test_it_prints_the_urls_the_model_name_and_commands_the_real_parsers_take(lab, capsys):
    lab.on_poll = interrupt()
    assert lab.run() == 0
    out = capsys.readouterr().out
    urls = {server.name: server.url for server in lab.started}
    for name, url in urls.items():
        assert f"  {name}  {url}  (cpu" in out
    assert "under the name 'tiny'" in out
    assert "  the model's replies are gibberish by design: its weights are random" in out

    parsed = [cli.build_parser().parse_args(argv[3:]) for argv in printed_commands(out)]
    assert [args.command for args in parsed] == ["serve", "serve", "verify", "predict", "calibrate", "predict"]
    serve, precise, verify, predict_batch, calibrate, predict_load = parsed
    assert dict(serve.backend) == dict(precise.backend) == urls
    assert (serve.prefix_index, precise.prefix_index) == ("approximate", "precise")
    assert "its events published on ipc://" in out
    gateway = f"http://127.0.0.1:{serve.port}"
    assert dict(verify.pod_url) == urls and verify.gateway_url == gateway and verify.model_id == "tiny"
    assert verify.reset_caches  # run again, it compares with predict's empty caches all the same
    assert (predict_batch.pods, predict_batch.seed, predict_batch.block_size, predict_batch.capacity_blocks) == (
        2, serve.seed, 128, 8192)
    assert dict(calibrate.pod_url) == urls and calibrate.gateway_url == gateway
    assert predict_load.latency_profile == calibrate.out
    assert predict_batch.tokenizer == predict_load.tokenizer == str(lab.tmp_path.resolve() / "tiny-model")


def test_ctrl_c_stops_both_servers_and_exits_0(lab, capsys):
    # Whatever handled Ctrl-C before (pytest's own, or SIG_IGN under a background shell) again after.
    before = signal.getsignal(signal.SIGINT)
    lab.on_poll = interrupt()
    assert lab.run() == 0
    assert lab.stopped == [["vllm-a", "vllm-b"]]
    assert capsys.readouterr().out.endswith("stopping the vLLM servers ...\n"
                                            "servers: stopped; no vLLM server of this command is left running\n")
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_kill_or_a_closed_terminal_stops_them_as_ctrl_c_does(lab, signum):
    before = signal.getsignal(signum)  # SIG_DFL, or SIG_IGN under nohup
    lab.on_poll = interrupt(signum)
    assert lab.run() == 0
    assert lab.stopped == [["vllm-a", "vllm-b"]]
    assert signal.getsignal(signum) is before


def test_a_second_ctrl_c_while_they_stop_does_not_cut_the_stopping_short(lab):
    lab.on_poll = interrupt()
    lab.while_stopping = interrupt()
    assert lab.run() == 0
    assert lab.stopped == [["vllm-a", "vllm-b"]]


def test_a_server_that_exits_is_named_and_the_other_stopped(lab, capsys):
    lab.on_poll = lambda: 1
    assert lab.run() == 1
    err = capsys.readouterr().err
    assert err.startswith("servers: keeping the servers up failed: vLLM server vllm-a exited with code 1")
    assert "servers: fix: read the log above" in err and "Traceback" not in err
    assert lab.stopped == [["vllm-a", "vllm-b"]]


def test_a_larger_size_is_built_apart_from_the_demo_s_tiny_model(lab, capsys):
    lab.on_poll = interrupt()
    assert lab.run("--size", "small") == 0
    assert lab.built == [(lab.tmp_path / "tiny-model-small", 512, 4)]
    assert "serving the small model (512 wide, 4 layers" in capsys.readouterr().out


def test_a_port_in_use_is_refused_before_anything_is_built(lab, capsys):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        other = vllm_server.free_port()
        code = cli.main(["servers", "--work-dir", str(lab.tmp_path), "--ports", f"{other},{port}"])
    assert code == 2
    assert capsys.readouterr().err == (
        f"servers: --ports {other},{port}: 127.0.0.1:{port} is already in use (servers still running from another "
        f"terminal?); stop what holds it or pick others, e.g. --ports {other + 10},{port + 10}\n")
    assert lab.built == [] and lab.started == []


@pytest.mark.parametrize(("value", "message"), [
    ("18001", "--ports '18001': expected two port numbers A,B, e.g. --ports 18001,18002"),
    ("18001,x", "--ports '18001,x': expected two port numbers A,B, e.g. --ports 18001,18002"),
    ("18001,70000", "--ports '18001,70000': a port is a whole number from 1 to 65535, e.g. --ports 18001,18002"),
    ("18001,18001", "--ports '18001,18001': the two servers need different ports, e.g. --ports 18001,18002"),
])
def test_ports_that_cannot_serve_two_servers_are_refused(lab, capsys, value, message):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["servers", "--ports", value])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith(message)
    assert lab.built == []
