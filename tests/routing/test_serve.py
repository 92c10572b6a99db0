"""`serve` against stand-in model servers: proxying, streaming, scraped metrics, staleness."""

from __future__ import annotations

import io
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fake_http import FakeModelServer

from routing import __main__ as cli
from routing.lab import vllm_server
from routing.live.serve import (CACHED_TOKENS_HINT, DECISION_HEADER, EXPLAIN_HEADER, ROUTED_HEADER, STALENESS, Backend,
                                Scrape, start_gateway)
from routing.metrics import ZERO
from routing.workloads import seed_shared, seed_unique
from settings.picker_config import load_endpoint_picker_config


@pytest.fixture
def backends():
    servers = [FakeModelServer("a").start(), FakeModelServer("b").start()]
    yield servers
    for server in servers:
        server.stop()


def post(url: str, body: dict, timeout: float = 10, headers: dict | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def backend_map(servers) -> dict[str, str]:
    return {s.name: s.url for s in servers}


def test_proxies_completions_and_names_the_chosen_backend(backends):
    body = {"model": "m", "prompt": "hello", "max_tokens": 4}
    with start_gateway(backend_map(backends), seed=1) as gateway:
        status, headers, raw = post(gateway.url + "/v1/completions", body)
    assert status == 200
    served_by = json.loads(raw)["served_by"]
    assert headers[ROUTED_HEADER] == served_by
    chosen = next(s for s in backends if s.name == served_by)
    assert chosen.bodies == [body]


def test_chat_completions_and_models_are_proxied(backends):
    with start_gateway(backend_map(backends), seed=1) as gateway:
        status, headers, raw = post(gateway.url + "/v1/chat/completions",
                                    {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and headers[ROUTED_HEADER] in ("a", "b")
        status, raw = get(gateway.url + "/v1/models")
        assert status == 200 and json.loads(raw)["data"][0]["id"] == "m"


def test_streaming_reaches_the_client_chunk_by_chunk(backends):
    # The backends send the rest of a stream only once the client has read its first chunk: a
    # gateway that waited for the whole reply would time the client out instead.
    read_first = threading.Event()
    for server in backends:
        server.hold_after_first_chunk = read_first
    body = {"model": "m", "prompt": "hello", "stream": True}
    with start_gateway(backend_map(backends), seed=1) as gateway:
        request = urllib.request.Request(gateway.url + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            first_line = response.readline()
            read_first.set()
            rest = response.read()
    assert first_line.startswith(b"data: {")
    assert rest.count(b"data: {") == 2 and rest.endswith(b"data: [DONE]\n\n")


def test_health_reports_each_backend(backends):
    with start_gateway(backend_map(backends), seed=1) as gateway:
        status, raw = get(gateway.url + "/health")
    report = json.loads(raw)
    assert status == 200
    assert set(report["backends"]) == {"a", "b"}
    assert all(b["fresh"] for b in report["backends"].values())


def test_scraped_queue_depth_steers_the_pick(backends):
    a, b = backends
    b.waiting = 5
    with start_gateway(backend_map(backends), {"prefix": 0, "kvCache": 0, "queue": 1}, seed=1) as gateway:
        time.sleep(0.2)  # a few scrapes
        routed = [post(gateway.url + "/v1/completions", {"model": "m", "prompt": f"p{i}"})[1][ROUTED_HEADER]
                  for i in range(6)]
    assert routed == ["a"] * 6


def test_shared_prefix_concentrates_and_unique_spreads_with_default_weights(backends):
    with start_gateway(backend_map(backends), seed=3) as gateway:
        shared = [post(gateway.url + "/v1/completions", body)[1][ROUTED_HEADER] for body in seed_shared("m")]
    with start_gateway(backend_map(backends), seed=3) as gateway:
        unique = [post(gateway.url + "/v1/completions", body)[1][ROUTED_HEADER] for body in seed_unique("m")]
    assert len(set(shared)) == 1
    assert set(unique) == {"a", "b"}


def test_round_robin_alternates(backends):
    with start_gateway(backend_map(backends), round_robin=True) as gateway:
        routed = [post(gateway.url + "/v1/completions", {"model": "m", "prompt": "same"})[1][ROUTED_HEADER]
                  for _ in range(4)]
    assert routed in (["a", "b", "a", "b"], ["b", "a", "b", "a"])


def wait_until(condition, what: str, timeout: float = 10.0) -> None:
    """Poll until `condition()` holds; the timeout is a hang guard, far above what is awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def test_a_backend_whose_scrapes_fail_is_picked_on_its_last_metrics_until_they_are_stale(backends):
    a, b = backends
    # 30 s: no pause of a loaded machine between b's first failed scrape and the requests reaches it.
    with start_gateway(backend_map(backends), round_robin=True, staleness=30) as gateway:
        b.metrics_status = 500
        wait_until(lambda: "500" in gateway.gateway.backends["b"].last_error, "a failed scrape of b")
        within = [post(gateway.url + "/v1/completions", {"model": "m", "prompt": "x"}) for _ in range(4)]
    assert sorted(r[1][ROUTED_HEADER] for r in within) == ["a", "a", "b", "b"]
    b.metrics_status = 200
    # 1 s: twenty of a's 50 ms scrapes, so a, scraped throughout, stays a candidate while b goes stale.
    with start_gateway(backend_map(backends), round_robin=True, staleness=1.0) as gateway:
        b.metrics_status = 500
        wait_until(lambda: "b" not in {backend.name for backend in gateway.gateway.fresh_backends()}, "b stale")
        past = [post(gateway.url + "/v1/completions", {"model": "m", "prompt": "x"}) for _ in range(4)]
        status, raw = get(gateway.url + "/health")
    assert [(r[0], r[1][ROUTED_HEADER]) for r in past] == [(200, "a")] * 4
    health = json.loads(raw)["backends"]["b"]
    assert status == 200 and not health["fresh"] and "500" in health["lastError"]


def test_no_fresh_backend_is_a_503_that_says_why(backends):
    with start_gateway(backend_map(backends), staleness=0.3) as gateway:
        for server in backends:
            server.metrics_status = 503
        time.sleep(0.6)
        status, _, raw = post(gateway.url + "/v1/completions", {"model": "m", "prompt": "x"})
        health_status, _ = get(gateway.url + "/health")
    assert status == 503 and health_status == 503
    assert "no backend has had a good /metrics scrape" in json.loads(raw)["error"]["message"]


def test_backend_that_refuses_connections_is_a_502_naming_it(backends):
    a, b = backends
    with start_gateway({"a": a.url}, staleness=30) as gateway:
        a.stop()
        status, headers, raw = post(gateway.url + "/v1/completions", {"model": "m", "prompt": "x"})
    assert status == 502 and headers[ROUTED_HEADER] == "a"
    assert "backend a" in json.loads(raw)["error"]["message"]


def test_unroutable_body_is_a_400(backends):
    with start_gateway(backend_map(backends)) as gateway:
        status, _, raw = post(gateway.url + "/v1/completions", {"prompt": "no model"})
    assert status == 400 and "model" in json.loads(raw)["error"]["message"]


def test_unroutable_lone_surrogate_is_a_400_naming_it(backends):
    with start_gateway(backend_map(backends)) as gateway:
        status, _, raw = post(gateway.url + "/v1/completions", {"model": "m", "prompt": "a\ud800"})
    assert status == 400
    assert "`prompt` holds a lone surrogate \\ud800" in json.loads(raw)["error"]["message"]
    assert all(server.bodies == [] for server in backends)


def test_a_backend_is_fresh_until_its_last_good_scrape_is_more_than_the_staleness_threshold_old():
    # Upstream's --metrics-staleness-threshold (2 s): metrics are stale once older than it,
    # so a backend scraped exactly 2 s ago is still a candidate and one scraped longer ago is not.
    assert STALENESS == 2.0
    backend = Backend("a", "http://127.0.0.1:1")
    assert not backend.is_fresh(100.0, STALENESS)  # never scraped
    backend.scrape = Scrape.of("a", 99.5, 100.0, ZERO)
    assert backend.is_fresh(100.0 + STALENESS, STALENESS)
    assert not backend.is_fresh(100.0 + STALENESS + 1e-9, STALENESS)


def test_wait_idle_needs_a_scrape_after_the_given_time_showing_every_backend_idle(backends):
    a, b = backends
    with start_gateway(backend_map(backends), seed=1) as gateway:
        routing = gateway.gateway
        now = time.monotonic()
        assert gateway.wait_idle(now, timeout=2.0)
        scrapes = routing.scrapes()
        assert all(s.started > now and s.idle for s in scrapes.values())
        # Busy, by each measure the picker reads: not idle until the backend says so.
        for field, busy in (("running", 1), ("waiting", 2), ("kv_usage", 8 / 8192)):
            setattr(b, field, busy)
            assert not gateway.wait_idle(time.monotonic(), timeout=0.3)
            assert not routing.scrapes()["b"].idle and routing.scrapes()["a"].idle
            setattr(b, field, 0)
            assert gateway.wait_idle(time.monotonic(), timeout=2.0)
        # A scrape older than the given time does not count, however idle it looked.
        b.metrics_status = 500
        time.sleep(0.1)
        assert not gateway.wait_idle(time.monotonic(), timeout=0.3)
        status, raw = get(gateway.url + "/health")
    last = json.loads(raw)["backends"]["a"]["lastScrape"]
    assert status == 200
    assert set(last) == {"startedAt", "finishedAt", "running", "waiting", "kvUsage", "idle"}
    assert last["idle"] and last["startedAt"] <= last["finishedAt"] <= json.loads(raw)["now"]


@pytest.mark.parametrize("argv, message", [
    (["serve", "--backend", "nourl"], "--backend 'nourl': expected NAME=URL"),
    (["serve", "--backend", "a=ftp://127.0.0.1:1"],
     "--backend 'a=ftp://127.0.0.1:1': expected NAME=URL with an http://"),
    (["serve", "--backend", "a=http://x", "--weights", "prefx=1"], "prefx"),
    (["serve", "--backend", "a=http://x", "--weights", "queue=-1"], "queue"),
    (["serve", "--backend", "a=http://x", "--weights", ""], "--weights = '': names no weight"),
    (["serve", "--backend", "a=http://x", "--weights", "prefix=0,"], "--weights = '': write each weight as name=value"),
    (["serve", "--backend", "a=http://x", "--staleness", "0"], "--staleness: '0' must be a positive number of seconds"),
    (["serve", "--backend", "a=http://x", "--scrape-interval", "-1"],
     "--scrape-interval: '-1' must be a positive number of seconds"),
    (["serve", "--backend", "a=http://x", "--port", "0"], "--port '0': a port is a whole number from 1 to 65535"),
    (["serve", "--backend", "a=http://x", "--port", "65536"], "--port '65536': a port is a whole number"),
])
def test_bad_options_name_the_option_and_the_value(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--stack", "dev"], "--model: stack 'dev' has 2 models (qwen, qwen-small); name one, e.g. --model qwen"),
    (["--model", "qwen-small"], "--model qwen-small: needs --stack"),
    (["--stacks-dir", "stacks"], "--stacks-dir stacks: needs --stack"),
    (["--stack", "dev", "--model", "qwen-big"],
     "--model qwen-big: stack 'dev' has no model named 'qwen-big'; its models are: qwen, qwen-small"),
    (["--stack", "a/dev", "--model", "qwen-small"], "--stack 'a/dev': give the stack's short name"),
    (["--backend", "a=http://127.0.0.1:2"], "--backend names must be unique, got a, a"),
    (["--stack", "dev", "--model", "qwen-small", "--stacks-dir", "/nonexistent"], "has no file /nonexistent"),
])
def test_stack_options_follow_the_same_rules_as_predict_and_verify(argv, message, capsys):
    assert cli.main(["serve", "--backend", "a=http://127.0.0.1:1", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("serve: ") and message in err


def test_a_stack_whose_model_has_a_custom_picker_config_is_refused(tmp_path, capsys):
    dev = (Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.dev.yaml").read_text()
    marker = "      model: Qwen/Qwen2.5-0.5B-Instruct\n"
    (tmp_path / "Pulumi.custom.yaml").write_text(dev.replace(marker, marker + "      pickerConfigMap:\n"
                                                                              "        name: my-picker\n"))
    assert cli.main(["serve", "--backend", "a=http://127.0.0.1:1", "--stack", "custom", "--model", "qwen-small",
                     "--stacks-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "picker ConfigMap my-picker" in err and "already in the cluster" in err and "Pass --weights" in err


def test_serve_routes_with_the_picker_config_a_stack_gives_its_model(tmp_path, backends, capsys):
    from routing.live import serve

    dev = (Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.dev.yaml").read_text()
    marker = "      model: Qwen/Qwen2.5-0.5B-Instruct\n"
    picker_file = tmp_path / "picker.yaml"
    picker_file.write_text("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                           "- {type: running-requests-size-scorer, name: busy}\nschedulingProfiles:\n"
                           "- name: p\n  plugins: [{pluginRef: busy, weight: 5}]\n")
    (tmp_path / "Pulumi.custom.yaml").write_text(dev.replace(marker, marker + "      pickerConfigMap:\n"
                                                                              "        name: my-picker\n"
                                                             f"        file: {picker_file}\n"))
    started = {}

    def capture(app, **_kwargs):
        started["app"] = app
    original, serve.web.run_app = serve.web.run_app, capture
    try:
        assert cli.main(["serve", "--backend", f"a={backends[0].url}", "--stack", "custom", "--model", "qwen-small",
                         "--stacks-dir", str(tmp_path)]) == 0
    finally:
        serve.web.run_app = original
    started["app"].close()  # the application it would have served, never started
    assert "serve: endpoint picker, config busy=5,max-score-picker, picker v0.10;" in capsys.readouterr().out


def test_help_says_it_is_not_a_production_gateway(capsys):
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    assert "Not a production gateway" in " ".join(capsys.readouterr().out.split())


def test_every_request_form_upstream_routes_is_routed_by_its_path(backends):
    forms = [("/v1/completions", {"model": "m", "prompt": ["first", "second"]}),
             ("/v1/completions", {"model": "m", "prompt": [11, 12, 13]}),
             ("/v1/completions", {"model": "m", "prompt": "salted", "cache_salt": "tenant-a"}),
             ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": [
                 {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                 {"type": "something-new"}]}]}),
             ("/v1/embeddings", {"model": "m", "input": ["embed me", "and me"]}),
             ("/v1/completions/render", {"model": "m", "prompt": "render me"}),
             ("/v1/chat/completions/render", {"model": "m", "messages": [{"role": "user", "content": "r"}]}),
             ("/v1/responses", {"model": "m", "input": "respond", "instructions": "briefly"}),
             ("/v1/messages", {"model": "m", "max_tokens": 2, "system": "sys",
                               "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
             ("/v1/messages/count_tokens", {"model": "m", "messages": [{"role": "user", "content": "count"}]}),
             ("/inference/v1/generate", {"token_ids": [5, 6, 7], "sampling_params": {"max_tokens": 1}})]
    with start_gateway(backend_map(backends), seed=1) as gateway:
        for path, body in forms:
            status, headers, raw = post(gateway.url + path, body)
            assert status == 200 and headers[ROUTED_HEADER] == json.loads(raw)["served_by"], (path, body)
        assert len(gateway.gateway.history) == len(forms)


@pytest.mark.parametrize("path, body, message", [
    ("/v1/completions", {"model": "m", "prompt": ""}, "`prompt` is empty"),
    ("/v1/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}]}, "`prompt` is empty"),
    ("/v1/chat/completions", {"model": "m", "messages": []}, "`messages` must be a non-empty list"),
    ("/v1/embeddings", {"model": "m", "input": []}, "`input` is empty"),
])
def test_what_upstream_refuses_is_a_400_saying_why(backends, path, body, message):
    with start_gateway(backend_map(backends), seed=1) as gateway:
        status, _, raw = post(gateway.url + path, body)
    assert status == 400 and message in json.loads(raw)["error"]["message"]
    assert all(not server.bodies for server in backends)


def test_paths_serve_does_not_route_pass_through_to_a_backend(backends):
    with start_gateway(backend_map(backends), seed=1) as gateway:
        status, headers, raw = post(gateway.url + "/tokenize?add_special_tokens=true", {"model": "m", "prompt": "ab"})
        assert status == 200 and json.loads(raw) == {"tokens": [97, 98], "served_by": "a",
                                                     "query": "add_special_tokens=true"}
        status, raw = get(gateway.url + "/metrics")
        assert status == 200 and b"vllm:num_requests_waiting" in raw
        status, raw = get(gateway.url + "/v1/models")
        assert status == 200 and json.loads(raw)["data"][0]["id"] == "m"
        assert get(gateway.url + "/no/such/path")[0] == 404  # the backend's answer, passed back
        assert not gateway.gateway.history  # none of these was a pick


def test_the_breakdown_comes_back_in_a_header_when_asked(backends):
    a, b = backends
    b.waiting = 4
    with start_gateway(backend_map(backends), {"queue": 2, "kvCache": 0, "prefix": 0}, seed=1) as gateway:
        time.sleep(0.2)
        _, plain, _ = post(gateway.url + "/v1/completions", {"model": "m", "prompt": "x"})
        _, explained, _ = post(gateway.url + "/v1/completions", {"model": "m", "prompt": "x"},
                               headers={EXPLAIN_HEADER: "true"})
    assert DECISION_HEADER not in {key.lower() for key in plain}
    decision = json.loads(explained[DECISION_HEADER])
    assert decision["chosen"] == "a" and decision["runnerUp"] == "b" and decision["margin"] == 2.0
    assert decision["pods"][0]["scorers"] == [{"scorer": "queue-scorer", "raw": 1.0, "weight": 2.0, "weighted": 2.0}]
    assert all(EXPLAIN_HEADER not in {key.lower() for key in body} for body in a.bodies)


def test_serve_builds_its_picker_from_an_endpoint_picker_config(backends):
    a, b = backends
    a.running = 3
    config = load_endpoint_picker_config({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "running-requests-size-scorer", "name": "busy"}],
        "schedulingProfiles": [{"name": "p", "plugins": [{"pluginRef": "busy", "weight": 7}]}]})
    with start_gateway(backend_map(backends), config=config, seed=1) as gateway:
        time.sleep(0.2)
        _, headers, _ = post(gateway.url + "/v1/completions", {"model": "m", "prompt": "x"},
                             headers={EXPLAIN_HEADER: "1"})
    decision = json.loads(headers[DECISION_HEADER])
    assert decision["chosen"] == "b" and decision["pods"][0]["scorers"][0]["scorer"] == "busy"
    assert decision["pods"][0]["total"] == 7.0


def test_serve_refuses_a_bad_picker_config_file(tmp_path, capsys):
    config = tmp_path / "picker.yaml"
    config.write_text("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefix-cache-scorer\n"
                      "  parameters: {blockSizeTokens: 64}\n")
    assert cli.main(["serve", "--backend", "a=http://127.0.0.1:9", "--picker-config", str(config)]) == 2
    error = capsys.readouterr().err
    assert f"--picker-config {config}: plugins[0].parameters.blockSizeTokens" in error
    assert "approx-prefix-cache-producer" in error


def test_a_port_in_use_is_one_line_naming_the_option_the_port_and_the_fix(capsys):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert cli.main(["serve", "--backend", "a=http://127.0.0.1:1", "--port", str(port)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"serve: --port {port}: 127.0.0.1:{port} is already in use (another serve, a vLLM server, "
                            "a port-forward?); pick a free port, e.g. --port 8080, or stop what holds it\n")
    assert "listening" not in captured.out


@pytest.mark.parametrize("name, make, problem", [
    ("missing.yaml", lambda path: None, "No such file or directory"),
    ("folder", lambda path: path.mkdir(), "Is a directory"),
    ("latin1.yaml", lambda path: path.write_bytes(b"kind: EndpointPickerConfig # caf\xe9\n"), "can't decode byte 0xe9"),
])
def test_an_unreadable_picker_config_is_one_line_naming_the_option_and_the_file(tmp_path, capsys, name, make, problem):
    path = tmp_path / name
    make(path)
    assert cli.main(["serve", "--backend", "a=http://127.0.0.1:1", "--picker-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"serve: --picker-config {path}: cannot read it (") and problem in err
    assert err.endswith("pass the path of an EndpointPickerConfig YAML file\n") and err.count("\n") == 1


LOG_LINE = re.compile(r"^serve: \d\d:\d\d:\d\d (?P<method>[A-Z]+) (?P<path>\S+) -> (?P<where>[^:]+): (?P<status>\d+|no "
                      r"reply) in (?P<seconds>\d+\.\d{3})s(?P<rest>.*)$")


def logged(log: io.StringIO) -> list[dict]:
    """The request lines serve wrote to `log`, parsed (the hint on cached tokens left out)."""
    lines = [line for line in log.getvalue().splitlines() if line != CACHED_TOKENS_HINT]
    assert all(LOG_LINE.match(line) for line in lines), lines
    return [LOG_LINE.match(line).groupdict() for line in lines]


def test_each_request_is_one_line_naming_the_pod_the_status_and_the_time(backends):
    log = io.StringIO()
    with start_gateway(backend_map(backends), seed=1, staleness=30, request_log=log) as gateway:
        _, headers, _ = post(gateway.url + "/v1/completions", {"model": "m", "prompt": "hello"})
        post(gateway.url + "/v1/completions", {"prompt": "no model"})
        get(gateway.url + "/v1/models")
        get(gateway.url + "/health")  # serve's own page: no pod, no line
        for server in backends:
            server.metrics_status = 503
        gateway.gateway.staleness = 0.2  # 30 s until now, so that no pause of the machine made them stale
        wait_until(lambda: not gateway.gateway.fresh_backends(), "no fresh backend")
        post(gateway.url + "/v1/completions", {"model": "m", "prompt": "hello"})
    lines = logged(log)
    assert [(line["method"], line["path"], line["where"], line["status"]) for line in lines] == [
        ("POST", "/v1/completions", headers[ROUTED_HEADER], "200"),
        ("POST", "/v1/completions", "no pod", "400"),
        ("GET", "/v1/models", "a (passed through)", "200"),
        ("POST", "/v1/completions", "no pod", "503")]
    assert all(float(line["seconds"]) < 30 for line in lines)


def test_a_stream_is_logged_once_it_has_ended(backends):
    read_first = threading.Event()
    for server in backends:
        server.hold_after_first_chunk = read_first
    log = io.StringIO()
    with start_gateway(backend_map(backends), seed=1, request_log=log) as gateway:
        request = urllib.request.Request(gateway.url + "/v1/completions", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"model": "m", "prompt": "hello", "stream": True}).encode())
        with urllib.request.urlopen(request, timeout=10) as response:
            response.readline()
            assert log.getvalue() == ""  # the reply is still coming
            read_first.set()
            response.read()
        wait_until(lambda: log.getvalue(), "the stream's line")
    (line,) = logged(log)
    assert (line["status"], line["where"]) == ("200", response.headers[ROUTED_HEADER])


def test_a_client_that_goes_away_mid_stream_is_logged_as_such_not_as_a_failing_backend(backends):
    read_first = threading.Event()
    for server in backends:
        server.hold_after_first_chunk, server.chunks, server.chunk_delay = read_first, 5, 0.2
    log = io.StringIO()
    with start_gateway(backend_map(backends), seed=1, request_log=log) as gateway:
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as client:
            body = json.dumps({"model": "m", "prompt": "hello", "stream": True})
            client.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
            received = b""
            while b"data: {" not in received:  # the headers may come alone first
                received += client.recv(65536)
        read_first.set()  # the backend sends the rest to a client that is gone
        wait_until(lambda: log.getvalue(), "the stream's line")
    (line,) = logged(log)
    assert line["status"] == "200" and line["rest"] == ", cut short: the client went away"


def test_serve_prints_a_line_per_request_unless_quiet(backends):
    lines = []
    for quiet in ((), ("--quiet",)):
        port = vllm_server.free_port()
        command = [sys.executable, "-m", "routing", "serve", "--backend", f"a={backends[0].url}", "--port", str(port),
                   *quiet]
        root = Path(__file__).resolve().parents[2]
        with subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, text=True) as serve:
            try:
                assert "listening on" in serve.stdout.readline() + serve.stdout.readline()
                wait_until(lambda: get(f"http://127.0.0.1:{port}/health")[0] == 200, "serve up")
                post(f"http://127.0.0.1:{port}/v1/completions", {"model": "m", "prompt": "hello"})
            finally:
                serve.terminate()
            lines.append(serve.stdout.read().splitlines())
    shown, quiet = lines
    assert [LOG_LINE.match(line)["where"] for line in shown if LOG_LINE.match(line)] == ["a"]
    assert not any(LOG_LINE.match(line) for line in quiet)


def test_a_backends_file_adds_and_removes_backends_while_serve_runs(backends, tmp_path):
    # As a pool's endpoints follow its pods: the file's backend is picked once scraped, and no more
    # once the file drops it; the --backend ones stay.
    listed = tmp_path / "backends.json"
    listed.write_text("{}")
    third = FakeModelServer("c").start()
    try:
        with start_gateway({"a": backends[0].url}, round_robin=True, backends_file=listed) as gateway:
            listed.write_text(json.dumps({"c": third.url}))
            wait_until(lambda: {b.name for b in gateway.gateway.fresh_backends()} == {"a", "c"}, "c is scraped")
            routed = {post(gateway.url + "/v1/completions", {"model": "m", "prompt": "x"})[1][ROUTED_HEADER]
                      for _ in range(4)}
            assert routed == {"a", "c"}
            listed.write_text("{}")
            wait_until(lambda: "c" not in gateway.gateway.backends, "c is dropped")
            routed = {post(gateway.url + "/v1/completions", {"model": "m", "prompt": "x"})[1][ROUTED_HEADER]
                      for _ in range(4)}
            assert routed == {"a"}
    finally:
        third.stop()


def test_a_backends_file_that_is_not_names_and_urls_changes_nothing(backends, tmp_path, capsys):
    listed = tmp_path / "backends.json"
    listed.write_text(json.dumps({"c": backends[1].url}))
    with start_gateway({"a": backends[0].url}, backends_file=listed) as gateway:
        wait_until(lambda: "c" in gateway.gateway.backends, "c is added")
        listed.write_text('["not", "an", "object"]')
        wait_until(lambda: "backends unchanged" in capsys.readouterr().err, "the bad file is reported")
        assert set(gateway.gateway.backends) == {"a", "c"}
