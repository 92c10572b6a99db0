"""`demo` with its vLLM servers replaced by stand-ins: the three runs, and each way a step can fail."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from fake_http import FakeModelServer

from routing import __main__ as cli
from routing.lab import demo, vllm_server
from routing.lab.vllm_server import VllmStartError
from routing.picker.prefix import EstimateTokenizer


@dataclass
class StandIn:
    """What the demo uses of a started VllmServer."""

    name: str
    url: str


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    """Two stand-in servers where the demo would start vLLM; records which servers it stopped."""
    servers = [FakeModelServer("vllm-a", dev_mode=True).start(), FakeModelServer("vllm-b", dev_mode=True).start()]
    stopped: list[list[str]] = []
    monkeypatch.setattr(demo, "resolve_vllm_python", lambda explicit: "/usr/bin/python3")
    monkeypatch.setattr(vllm_server, "build_model", lambda out_dir, python, **options: out_dir)
    monkeypatch.setattr(vllm_server, "start_servers",
                        lambda count, *args: [StandIn(s.name, s.url) for s in servers[:count]])
    monkeypatch.setattr(vllm_server, "stop_servers", lambda started: stopped.append([s.name for s in started]))
    monkeypatch.setattr(vllm_server, "ServerTokenizer", lambda url, model: EstimateTokenizer())
    yield servers, stopped
    for server in servers:
        server.stop()


def run_demo(tmp_path, capsys) -> tuple[int, str, str]:
    code = cli.main(["demo", "--work-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_three_runs_each_on_emptied_caches_with_settled_picks(fakes, tmp_path, capsys):
    servers, stopped = fakes
    code, out, err = run_demo(tmp_path, capsys)
    assert code == 0, out + err
    assert [s.resets for s in servers] == [3, 3]
    assert out.count("PASS") == 6  # each run's verdict and its summary line
    assert "note: requests" not in out  # every pick waited for both stand-ins to be scraped idle
    assert stopped == [["vllm-a", "vllm-b"]]


def test_a_failing_prefix_cache_reset_says_what_and_how_to_fix_and_stops_the_servers(fakes, tmp_path, capsys):
    servers, stopped = fakes
    servers[1].stop()
    servers[1] = FakeModelServer("vllm-b", dev_mode=False).start()  # no /reset_prefix_cache: vLLM answers 404
    code, out, err = run_demo(tmp_path, capsys)
    assert code == 1
    assert err.startswith(f"demo: emptying vllm-b's prefix cache (POST {servers[1].url}/reset_prefix_cache) failed: "
                          "HTTP Error 404")
    assert "demo: fix: the vLLM servers must still be up" in err and "VLLM_SERVER_DEV_MODE=1" in err
    assert "Traceback" not in err
    assert stopped == [["vllm-a", "vllm-b"]]


def test_serve_failing_to_start_says_what_and_how_to_fix_and_stops_the_servers(fakes, monkeypatch, tmp_path,
                                                                                capsys):
    _, stopped = fakes

    def no_fresh_backend(*args, **kwargs):
        raise RuntimeError("backends without a good /metrics scrape after 10s: {'vllm-b': 'no scrape yet'}")

    monkeypatch.setattr(demo, "start_gateway", no_fresh_backend)
    code, out, err = run_demo(tmp_path, capsys)
    assert code == 1
    assert err.startswith("demo: starting serve in front of vllm-a, vllm-b failed: backends without a good /metrics "
                          "scrape after 10s")
    assert "demo: fix: every server must answer GET /metrics" in err and "Traceback" not in err
    assert stopped == [["vllm-a", "vllm-b"]]


def test_servers_that_never_start_say_where_the_log_is(fakes, monkeypatch, tmp_path, capsys):
    _, stopped = fakes

    def exits(*args, **kwargs):
        raise VllmStartError("vLLM server vllm-a exited with code 1 before becoming healthy")

    monkeypatch.setattr(vllm_server, "start_servers", exits)
    code, _, err = run_demo(tmp_path, capsys)
    assert code == 1
    assert err.startswith("demo: starting two vLLM servers failed: vLLM server vllm-a exited with code 1")
    assert f"demo: fix: read the server log shown above (in {tmp_path / 'logs'})" in err
    assert stopped == []  # start_servers stops what it started when it fails
