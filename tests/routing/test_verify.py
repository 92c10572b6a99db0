"""`verify` against a stand-in gateway and stand-in pods, directly and through a fake API server."""

from __future__ import annotations

import argparse
import io
import itertools
import json
import socket
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from fake_http import FakeModelServer

from routing import __main__ as cli
from routing.live.serve import ThreadedApp
from routing.live.verify import KubeGateway, UrlGateway, UrlPods, measure, resolve_target
from routing.workloads import seed_unique
from settings import GATEWAY_OWNER_LABEL as GATEWAY_LABEL, GATEWAY_SYSTEM_NAMESPACE as GATEWAY_NAMESPACE
from settings.endpoints import Location


class FakeGateway:
    """Stands in for the gateway: forwards each request to the pod `choose(n)` names."""

    def __init__(self, pods: dict[str, FakeModelServer], choose, fail_every: int = 0):
        self.pods = pods
        self.choose = choose
        self.fail_every = fail_every
        self.count = itertools.count(1)
        self.server = ThreadedApp(self.make_app)

    async def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.forward)
        app.router.add_post("/v1/chat/completions", self.forward)
        return app

    async def forward(self, request: web.Request) -> web.Response:
        number = next(self.count)
        if self.fail_every and number % self.fail_every == 0:
            return web.json_response({"error": "no healthy upstream"}, status=503)
        pod = self.pods[self.choose(number)]
        async with aiohttp.ClientSession() as session:
            async with session.post(pod.url + request.path, data=await request.read(),
                                    headers={"Content-Type": "application/json"}) as upstream:
                return web.Response(status=upstream.status, body=await upstream.read(),
                                    content_type="application/json")

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture
def pods():
    servers = {"pod-a": FakeModelServer("pod-a", hits_per_request=100).start(),
               "pod-b": FakeModelServer("pod-b", hits_per_request=100).start()}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def gateway_factory():
    started = []

    def start(pods, choose, fail_every=0):
        gateway = FakeGateway(pods, choose, fail_every)
        gateway.server.start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.server.stop()


def verify_args(pods, gateway, *extra) -> list[str]:
    argv = ["verify", "--model-id", "m", "--gateway-url", gateway.url]
    for name, pod in pods.items():
        argv += ["--pod-url", f"{name}={pod.url}"]
    return argv + list(extra)


def test_concentrated_batch_passes_concentrate_and_shows_the_deltas(pods, gateway_factory, capsys):
    gateway = gateway_factory(pods, lambda n: "pod-a")
    pods["pod-a"].requests = 40  # earlier traffic: only the delta counts
    code = cli.main(verify_args(pods, gateway, "--expect", "concentrate"))
    out = capsys.readouterr().out
    assert code == 0
    assert "200 " * 12 in out  # the page's progress line
    assert "PASS: concentrate: all requests on one pod (pod-a 12)" in out
    row = next(line for line in out.splitlines() if line.startswith("pod-a"))
    assert row.split()[:3] == ["pod-a", "12", "1200"]
    assert pods["pod-a"].bodies[0]["model"] == "m" and pods["pod-b"].bodies == []


def test_concentrated_batch_fails_spread_and_says_why(pods, gateway_factory, capsys):
    gateway = gateway_factory(pods, lambda n: "pod-a")
    code = cli.main(verify_args(pods, gateway, "--expect", "spread"))
    assert code == 1
    assert "FAIL: spread expected more than one pod, but only pod-a 12 served requests" in capsys.readouterr().out


def test_alternating_gateway_passes_spread_and_fails_concentrate(pods, gateway_factory, capsys):
    gateway = gateway_factory(pods, lambda n: "pod-a" if n % 2 else "pod-b")
    assert cli.main(verify_args(pods, gateway, "--workload", "seed-unique", "--expect", "spread")) == 0
    assert "PASS: spread: 2 pods served requests (pod-a 6, pod-b 6)" in capsys.readouterr().out
    assert cli.main(verify_args(pods, gateway, "--expect", "concentrate")) == 1
    assert "concentrate expected one pod, but 2 pods served requests" in capsys.readouterr().out


def test_json_output_has_predicts_shape(pods, gateway_factory, capsys):
    gateway = gateway_factory(pods, lambda n: "pod-b")
    assert cli.main(verify_args(pods, gateway, "--json")) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    # The stand-ins hit on every request, the first too: a cache warm before the run, as verify reads it.
    assert set(report) == {"pods", "hitRate", "alreadyCached"}
    cached = report["alreadyCached"]
    assert (cached["pod"], cached["requests"], cached["hits"]) == ("pod-b", 1, 100)
    by_pod = {p["pod"]: p for p in report["pods"]}
    assert set(by_pod["pod-b"]) == {"pod", "requests", "hits", "queries", "hitRate"}
    assert by_pod["pod-b"]["requests"] == 12 and by_pod["pod-a"]["requests"] == 0
    assert by_pod["pod-b"]["hitRate"] == pytest.approx(1200 / by_pod["pod-b"]["queries"])
    assert "200 200" in captured.err  # progress stays off stdout


def test_a_first_request_that_hits_means_the_pods_held_the_workloads_prefixes_before_the_run(pods, gateway_factory,
                                                                                             capsys):
    gateway = gateway_factory(pods, lambda n: "pod-a")
    assert cli.main(verify_args(pods, gateway)) == 0
    out = capsys.readouterr().out
    assert ("note: the run's first request found 100 of its " in out
            and " prompt tokens already in pod-a's prefix cache: the pods held this workload's prefixes before the run, "
                "so its hit rate comes out above `predict`'s, which starts from empty caches. Run again with "
                "--reset-caches to start from empty caches." in out)


@pytest.mark.parametrize("warm_before", [
    lambda pod: setattr(pod, "hits_per_request", 0),  # the first request (and every other) misses: cold
    lambda pod: setattr(pod, "before_metrics", lambda server: setattr(server, "requests", server.requests + 1)),
], ids=["the first request misses", "other traffic reaches the pods"])
def test_no_warm_cache_is_claimed_when_the_first_request_missed_or_was_not_alone(pods, gateway_factory, capsys,
                                                                                 warm_before):
    for pod in pods.values():
        warm_before(pod)
    gateway = gateway_factory(pods, lambda n: "pod-a")
    assert cli.main(verify_args(pods, gateway, "--json")) == 0
    captured = capsys.readouterr()
    assert "alreadyCached" not in json.loads(captured.out) and "already in" not in captured.err


def test_failed_requests_fail_the_run_whatever_was_expected(pods, gateway_factory, capsys):
    gateway = gateway_factory(pods, lambda n: "pod-a", fail_every=4)
    assert cli.main(verify_args(pods, gateway, "--expect", "concentrate")) == 1
    out = capsys.readouterr().out
    assert "503" in out and "3 of 12 requests failed" in out


def test_pod_restarted_during_the_batch_is_marked(pods, gateway_factory, capsys):
    pods["pod-a"].requests, pods["pod-a"].hits, pods["pod-a"].queries = 500, 90000, 100000
    gateway = gateway_factory(pods, lambda n: "pod-b")
    reads = itertools.count()

    def restart_after_first_read(pod: FakeModelServer) -> None:
        if next(reads) >= 1:
            pod.requests, pod.hits, pod.queries = 0, 0, 0

    pods["pod-a"].before_metrics = restart_after_first_read
    assert cli.main(verify_args(pods, gateway)) == 0
    out = capsys.readouterr().out
    assert "(restarted)" in out and "restarted: requests 500 → 0" in out


def test_pod_without_prefix_metric_is_marked(pods, gateway_factory, capsys):
    pods["pod-b"].prefix_metric = None
    gateway = gateway_factory(pods, lambda n: "pod-a" if n % 2 else "pod-b")
    assert cli.main(verify_args(pods, gateway)) == 0
    out = capsys.readouterr().out
    assert "(no prefix-cache metric)" in out
    overall = next(line for line in out.splitlines() if line.startswith("overall"))
    assert overall.split()[1:3] == ["12", "600"]  # pod-b's requests counted, its hits unknown


def test_old_gpu_metric_names_are_read(pods, gateway_factory, capsys):
    for pod in pods.values():
        pod.prefix_metric = "vllm:gpu_prefix_cache"
    gateway = gateway_factory(pods, lambda n: "pod-a")
    assert cli.main(verify_args(pods, gateway, "--expect", "concentrate")) == 0
    assert "no prefix-cache metric" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["verify", "--model-id", "m", "--gateway-url", "http://127.0.0.1:1"], "no pods to read: pass --pod-url"),
    (["verify", "--model-id", "m", "--pod-url", "a=http://127.0.0.1:1"], "no gateway: pass --gateway-url"),
    (["verify", "--pod-url", "a=http://127.0.0.1:1", "--gateway-url", "http://127.0.0.1:1"],
     "--workload seed-shared needs a served model name: pass --model-id"),
    (["verify", "--model-id", "m", "--pod-url", "a=http://127.0.0.1:1", "--gateway-url", "http://127.0.0.1:1"],
     "--pod-url a=http://127.0.0.1:1: cannot read http://127.0.0.1:1/metrics"),
    (["verify", "--stack", "dev"], "--model: stack 'dev' has 2 models (qwen, qwen-small); name one"),
    (["verify", "--model", "qwen-small"], "--model qwen-small: needs --stack"),
    (["verify", "--stack", "org/inference-gateway/dev", "--model", "qwen-small"],
     "--stack 'org/inference-gateway/dev': give the stack's short name"),
    (["verify", "--stack", "../stacks/dev", "--model", "qwen-small"],
     "--stack '../stacks/dev': give the stack's short"),
    (["verify", "--stack", "dev", "--model", "qwen-small", "--stacks-dir", "/nonexistent"], "has no file /nonexistent"),
    (["verify", "--model-id", "m", "--pod-url", "a=http://x", "--gateway-url", "http://y", "--gateway-scheme", "https"],
     "--gateway-scheme https applies to the API server's service proxy only"),
    (["verify", "--model-id", "m", "--workload", "missing.jsonl", "--pod-url", "a=http://x"], "missing.jsonl: no such"),
    (["verify", "--model-id", "m", "--pod-url", "a=http://x", "--pod-url", "a=http://y", "--gateway-url", "http://y"],
     "verify: --pod-url names must be unique, got a, a"),
    (["verify", "--stack", "dev", "--model", "qwen-small", "--kubeconfig", "/nonexistent"],
     "verify: cannot load --kubeconfig /nonexistent (the current context): "),
    (["verify", "--model-id", "m", "--prometheus", "http://127.0.0.1:1", "--namespace", "inference", "--label",
      "vllm-qwen-small", "--gateway-url", "http://127.0.0.1:1", "--reset-caches"],
     "verify: --reset-caches needs --pod-url: it empties each vLLM server's prefix cache with POST "
     "/reset_prefix_cache, which vLLM serves only when started with VLLM_SERVER_DEV_MODE=1"),
])
def test_unusable_options_exit_2_with_the_fix(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_malformed_pod_url_names_the_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["verify", "--pod-url", "just-a-url"])
    assert "--pod-url 'just-a-url': expected NAME=URL" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--gateway-url", "ftp://127.0.0.1:8080"],
     "--gateway-url 'ftp://127.0.0.1:8080': scheme 'ftp'; the gateway and vLLM speak http:// or https://, "
     "e.g. --gateway-url http://127.0.0.1:8080"),
    (["--gateway-url", "127.0.0.1:8080"], "--gateway-url '127.0.0.1:8080': no scheme"),
    (["--gateway-url", "http://"], "--gateway-url 'http://': no host in the URL"),
    (["--gateway-url", "http://127.0.0.1:99999"], "--gateway-url 'http://127.0.0.1:99999': not a valid URL"),
    (["--pod-url", "a=ftp://127.0.0.1:1"], "--pod-url 'a=ftp://127.0.0.1:1': expected NAME=URL with an http://"),
    (["--port", "0"], "--port '0': a port is a whole number from 1 to 65535, e.g. --port 8000"),
    (["--port", "65536"], "--port '65536': a port is a whole number from 1 to 65535"),
    (["--port", "http"], "--port 'http': a port is a whole number from 1 to 65535"),
    (["--gateway-scheme", "ftp"], "--gateway-scheme: invalid choice: 'ftp' (choose from 'http', 'https')"),
])
def test_bad_values_exit_2_naming_the_option_the_value_and_the_fix(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["verify", "--model-id", "m", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def target_args(**options) -> argparse.Namespace:
    defaults = dict(stack=None, model=None, stacks_dir=None, model_id=None, namespace=None, label=None, port=None,
                    gateway_name=None, gateway_scheme=None)
    return argparse.Namespace(**{**defaults, **options})


def test_stack_fills_namespace_label_model_and_gateway():
    target = resolve_target(target_args(stack="dev", model="qwen-small"))
    assert (target.model_id, target.namespace, target.label, target.port, target.gateway_scheme) == (
        "Qwen/Qwen2.5-0.5B-Instruct", "inference", "vllm-qwen-small", 8000, "https")
    assert target.gateway == Location(GATEWAY_NAMESPACE, f"{GATEWAY_LABEL}=inference-gateway")
    assert target.pickers == Location("inference", "app=qwen-small-epp")


def test_on_the_llm_d_stack_the_gateway_is_istios_service_and_the_pickers_the_routers(pods, gateway_factory,
                                                                                     tmp_path, capsys):
    target = resolve_target(target_args(stack="eks", model="qwen-small"))
    assert target.gateway == Location("inference", "gateway.networking.k8s.io/gateway-name=inference-gateway")
    # gateway.tls auto: the Gateway's pods terminate TLS, so the API server speaks https to them.
    assert target.gateway_scheme == "https" and target.pickers.selector == "llm-d-router-gateway=qwen-small-epp"
    api = FakeApiServer(pods, gateway_factory(pods, lambda n: "pod-b"), "inference", "vllm-qwen-small")
    api.services = {("inference", "gateway.networking.k8s.io/gateway-name=inference-gateway"): "inference-gateway-istio"}
    # The ports Istio gives a Gateway's Service: its status port, then one per listener, with the
    # listener's protocol as appProtocol.
    api.ports = [{"name": "status-port", "port": 15021, "appProtocol": "tcp"},
                 {"name": "https", "port": 443, "appProtocol": "https"}]
    api.pickers = {"llm-d-router-gateway=qwen-small-epp": ["qwen-small-epp-7d9f"]}
    code = run_against(api, tmp_path, ["verify", "--stack", "eks", "--model", "qwen-small", "--workload",
                                       "seed-shared", "--expect", "concentrate"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "pickers (llm-d-router-gateway=qwen-small-epp): qwen-small-epp-7d9f (ready, started 2026-12-01T08:00:00" in out
    assert set(api.proxy_targets) == {"https:inference-gateway-istio:443"}


def _stack_with_tls(tmp_path, tls: str) -> Path:
    dev = (Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.dev.yaml").read_text()
    marker = "    name: inference-gateway\n"
    assert marker in dev
    (tmp_path / "Pulumi.tls.yaml").write_text(dev.replace(marker, marker + f"    tls: {tls}\n"))
    return tmp_path


@pytest.mark.parametrize("tls", ["auto", "arn:aws:acm:us-west-2:123456789012:certificate/abc"])
def test_a_stack_whose_gateway_has_tls_is_reached_over_https(tmp_path, tls):
    stacks = _stack_with_tls(tmp_path, tls)
    target = resolve_target(target_args(stack="tls", model="qwen-small", stacks_dir=stacks))
    assert target.gateway_scheme == "https"
    override = resolve_target(target_args(stack="tls", model="qwen-small", stacks_dir=stacks, gateway_scheme="http"))
    assert override.gateway_scheme == "http"
    assert resolve_target(target_args(gateway_scheme="https")).gateway_scheme == "https"


def test_service_proxy_path_names_the_scheme_only_for_https():
    http = KubeGateway(None, "envoy-inference-gw-1a2b", GATEWAY_NAMESPACE, 80, {})
    assert http.proxy_path("/v1/completions") == \
        f"/api/v1/namespaces/{GATEWAY_NAMESPACE}/services/envoy-inference-gw-1a2b:80/proxy/v1/completions"
    https = KubeGateway(None, "envoy-inference-gw-1a2b", GATEWAY_NAMESPACE, 443, {}, scheme="https")
    assert https.proxy_path("/v1/completions") == \
        f"/api/v1/namespaces/{GATEWAY_NAMESPACE}/services/https:envoy-inference-gw-1a2b:443/proxy/v1/completions"


class FakeApiServer:
    """The few Kubernetes API paths verify uses: list pods and services, pod and service proxies."""

    TOKEN = "test-token"

    def __init__(self, pods: dict[str, FakeModelServer], gateway: FakeGateway, namespace: str, label: str):
        self.pods, self.gateway, self.namespace, self.label = pods, gateway, namespace, label
        self.selectors: list[str] = []
        self.proxy_targets: list[str] = []
        # Each gateway Service the fake knows, by where verify should look for it.
        self.services = {(GATEWAY_NAMESPACE, f"{GATEWAY_LABEL}=my-gateway"): "envoy-inference-my-gateway-1a2b"}
        self.pickers: dict[str, list[str]] = {}
        self.ports = [{"name": "http", "port": 80, "protocol": "TCP"}]
        self.server = ThreadedApp(self.make_app)

    async def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth])
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self.list_pods)
        app.router.add_get("/api/v1/namespaces/{ns}/pods/{target}/proxy/metrics", self.pod_metrics)
        app.router.add_get("/api/v1/namespaces/{ns}/services", self.list_services)
        app.router.add_post("/api/v1/namespaces/{ns}/services/{target}/proxy/{path:.*}", self.service_proxy)
        return app

    @web.middleware
    async def auth(self, request, handler):
        if request.headers.get("Authorization") != f"Bearer {self.TOKEN}":
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return await handler(request)

    async def list_pods(self, request):
        self.selectors.append(request.query.get("labelSelector", ""))
        ready = request.match_info["ns"] == self.namespace and request.query.get("labelSelector") == f"app={self.label}"
        items = [{"metadata": {"name": name, "namespace": self.namespace, "labels": {"app": self.label}},
                  "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
                 for name in self.pods] if ready else []
        items.append({"metadata": {"name": "starting-pod"}, "status": {"phase": "Pending"}})
        for name in self.pickers.get(request.query.get("labelSelector", ""), []):
            items = [{"metadata": {"name": name}, "status": {"phase": "Running", "startTime": "2026-12-01T08:00:00Z",
                                                              "conditions": [{"type": "Ready", "status": "True"}]}}]
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})

    async def pod_metrics(self, request):
        name, _, port = request.match_info["target"].partition(":")
        assert port == "8000"
        return web.Response(text=self.pods[name].metrics_text())

    async def list_services(self, request):
        self.selectors.append(request.query.get("labelSelector", ""))
        items = []
        name = self.services.get((request.match_info["ns"], request.query.get("labelSelector")))
        if name is not None:
            items = [{"metadata": {"name": name, "namespace": request.match_info["ns"]}, "spec": {"ports": self.ports}}]
        return web.json_response({"kind": "ServiceList", "apiVersion": "v1", "metadata": {}, "items": items})

    async def service_proxy(self, request):
        self.proxy_targets.append(request.match_info["target"])
        assert request.match_info["target"].removeprefix("https:").rsplit(":", 1)[0] in self.services.values()
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{self.gateway.url}/{request.match_info['path']}", data=await request.read(),
                                    headers={"Content-Type": "application/json"}) as upstream:
                return web.Response(status=upstream.status, body=await upstream.read())


def write_kubeconfig(path: Path, server: str, token: str = FakeApiServer.TOKEN) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": {"token": token}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
    }))
    return path


KUBE_PODS = ["verify", "--model-id", "m", "--namespace", "inference", "--label", "vllm-qwen-small", "--expect",
             "concentrate"]
def run_against(api: "FakeApiServer", tmp_path: Path, args: list[str], token: str = FakeApiServer.TOKEN) -> int:
    """`args` run by the CLI against the fake API server, with a kubeconfig for it."""
    api.server.start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.server.url, token=token)
    try:
        return cli.main([*args, "--kubeconfig", str(kubeconfig)])
    finally:
        api.server.stop()


KUBE_ARGS = [*KUBE_PODS, "--gateway-name", "my-gateway"]
LISTING_PODS = "listing pods in namespace inference (label app=vllm-qwen-small)"
LISTING_SERVICES = f"listing services in namespace {GATEWAY_NAMESPACE} (label {GATEWAY_LABEL}=my-gateway)"


@pytest.mark.parametrize("scheme", [None, "https"])
def test_kubernetes_discovery_and_proxies(pods, gateway_factory, tmp_path, capsys, scheme):
    gateway = gateway_factory(pods, lambda n: "pod-b")
    api = FakeApiServer(pods, gateway, "inference", "vllm-qwen-small")
    code = run_against(api, tmp_path, [*KUBE_ARGS, *(["--gateway-scheme", scheme] if scheme else [])])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS: concentrate: all requests on one pod (pod-b 12)" in out
    assert "starting-pod" not in out  # not ready: not read
    assert "app=vllm-qwen-small" in api.selectors and f"{GATEWAY_LABEL}=my-gateway" in api.selectors
    expected = "envoy-inference-my-gateway-1a2b:80" if scheme is None else "https:envoy-inference-my-gateway-1a2b:80"
    assert api.proxy_targets == [expected] * 12


# With --gateway-url only the pods are listed; with --gateway-name the gateway's Service is found first.
@pytest.mark.parametrize("gateway, listing", [(["--gateway-url", "http://127.0.0.1:1"], LISTING_PODS),
                                              (["--gateway-name", "my-gateway"], LISTING_SERVICES)])
def test_unreachable_api_server_is_an_error_with_the_fix(tmp_path, capsys, gateway, listing):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    assert cli.main([*KUBE_PODS, *gateway, "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"verify: {listing} through the API server http://127.0.0.1:{port} failed: ")
    assert "Is the cluster up and reachable from here" in err and "--pod-url and --gateway-url" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("gateway, listing", [(["--gateway-url", "http://127.0.0.1:1"], LISTING_PODS),
                                              (["--gateway-name", "my-gateway"], LISTING_SERVICES)])
def test_api_server_refusing_the_credentials_is_an_error_with_the_fix(pods, gateway_factory, tmp_path, capsys,
                                                                      gateway, listing):
    api = FakeApiServer(pods, gateway_factory(pods, lambda n: "pod-a"), "inference", "vllm-qwen-small")
    code = run_against(api, tmp_path, [*KUBE_PODS, *gateway], token="wrong")
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"verify: {listing} through the API server {api.server.url}: the API server answered "
                          "HTTP 401")
    assert "credentials are refused or lack permission" in err and "Traceback" not in err


def test_api_server_failing_while_listing_services_is_an_error_too(pods, gateway_factory, tmp_path, capsys):
    gateway = gateway_factory(pods, lambda n: "pod-a")
    api = FakeApiServer(pods, gateway, "inference", "vllm-qwen-small")

    async def broken(request):
        return web.json_response({"kind": "Status", "code": 500, "message": "etcd unavailable"}, status=500)

    api.list_services = broken
    code = run_against(api, tmp_path, [*KUBE_ARGS])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"verify: {LISTING_SERVICES}")
    assert "answered HTTP 500" in err and "Traceback" not in err


def test_measure_settles_before_each_request_and_reports_the_ones_it_could_not(pods, gateway_factory):
    gateway = gateway_factory(pods, lambda n: "pod-a" if n % 2 else "pod-b")
    calls: list[tuple[float, int]] = []

    def settle(after: float) -> bool:
        calls.append((after, sum(len(p.bodies) for p in pods.values())))
        return len(calls) not in (2, 5)  # gives up before the 2nd and 5th request

    out = io.StringIO()
    measurement = measure(UrlPods({n: p.url for n, p in pods.items()}), UrlGateway(gateway.url, {}),
                          seed_unique("m"), out, settle=settle)
    # Called once before each request, after the previous one was answered, with that moment.
    assert [answered for _, answered in calls] == list(range(12))
    assert all(earlier < later for (earlier, _), (later, _) in zip(calls, calls[1:]))
    assert measurement.unsettled == (1, 4)
    assert measurement.statuses == (200,) * 12 and measurement.report.requests == 12
    assert "note: requests 2, 5 were sent before the gateway's view of every pod had settled" in out.getvalue()


TRACE = Path(__file__).resolve().parents[2] / "examples" / "trace.jsonl"


def test_the_example_trace_is_sent_in_file_order_without_its_times(pods, gateway_factory, capsys):
    gateway = gateway_factory(pods, lambda n: "pod-a")
    code = cli.main(verify_args(pods, gateway, "--workload", str(TRACE)))
    out = capsys.readouterr().out
    assert code == 0, out
    lines = [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]
    assert pods["pod-a"].bodies == [{**line["body"], "model": "m"} for line in lines]
    assert (f'the workload has "at" times (0.098s to 6.564s) and 2 session(s): its {len(lines)} requests go out one '
            "at a time in file order, each once the previous one is answered, so a session's turns keep their "
            "order; the times are not kept: verify measures where requests go, not timing") in out
    assert f"{len(lines)} of {len(lines)} succeeded" in out


def test_a_block_hash_trace_is_sent_as_token_prompts_with_its_blocks(pods, gateway_factory, tmp_path, capsys):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(jsonl({"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [7, 8]},
                           {"timestamp": 5, "input_length": 70, "output_length": 2, "hash_ids": [7, 9]}))
    gateway = gateway_factory(pods, lambda n: "pod-a")
    code = cli.main(verify_args(pods, gateway, "--workload", str(trace), "--trace-block-tokens", "64"))
    assert code == 0, capsys.readouterr().out
    first, second = pods["pod-a"].bodies
    assert (len(first["prompt"]), first["max_tokens"], len(second["prompt"]), second["max_tokens"]) == (100, 3, 70, 2)
    assert first["prompt"][:64] == second["prompt"][:64] and first["prompt"][64:70] != second["prompt"][64:70]


def test_help_says_what_verify_does_with_a_workloads_times(capsys):
    with pytest.raises(SystemExit):
        cli.main(["verify", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert '{"at": seconds, "session": id, "body": {...}} lines, as predict reads' in help_text
    assert 'the "at" times are not kept: verify measures where requests go, not timing' in help_text


def test_weight_changes_are_refused_by_line_before_anything_is_sent(pods, gateway_factory, tmp_path, capsys):
    workload = tmp_path / "change.jsonl"
    workload.write_text('{"at": 0, "body": {"prompt": "a"}}\n{"at": 1.5, "weights": {"prefix": 0}}\n'
                        '{"at": 2, "body": {"prompt": "b"}}\n')
    gateway = gateway_factory(pods, lambda n: "pod-a")
    assert cli.main(verify_args(pods, gateway, "--workload", str(workload))) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'verify: workload {workload}: {{"at", "weights"}} and {{"at", "restart"}} lines change or '
                          "restart the pickers (line 2 at 1.5s), which verify cannot do to a live gateway mid-run")
    assert pods["pod-a"].bodies == [] and pods["pod-b"].bodies == []


def test_pod_restarts_are_refused_by_line_before_anything_is_sent(pods, gateway_factory, tmp_path, capsys):
    workload = tmp_path / "restart.jsonl"
    workload.write_text('{"at": 0, "body": {"prompt": "a"}}\n{"at": 1, "restart": "pod", "pod": 0}\n')
    gateway = gateway_factory(pods, lambda n: "pod-a")
    assert cli.main(verify_args(pods, gateway, "--workload", str(workload))) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'verify: workload {workload}: {{"at", "restart": "pod"}} and {{"at", "reset": '
                          '"prefix-cache"} lines restart pods or empty their caches (line 2 at 1s)')
    assert pods["pod-a"].bodies == [] and pods["pod-b"].bodies == []


def jsonl(*lines: dict) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


FIRST, SECOND = {"model": "m", "prompt": "a"}, {"model": "m", "messages": [{"role": "user", "content": "b"}]}
WORKLOADS = {
    "bare bodies": jsonl(FIRST, SECOND),
    "timed lines": jsonl({"at": 0, "session": "s", "body": FIRST}, {"at": 1, "session": "s", "body": SECOND}),
    "sessions without times": jsonl({"session": 1, "body": FIRST}, {"session": 1, "body": SECOND}),
    "some lines without times": jsonl({"at": 0, "body": FIRST}, {"body": SECOND}),
    "the example trace": TRACE.read_text(),
    "a bare body among timed lines": jsonl({"at": 0, "body": FIRST}, SECOND),
    "a timed line with another key": jsonl({"at": 0, "body": FIRST, "note": "x"}),
    "a body without a prompt": jsonl({"at": 0, "body": {"model": "m", "input": 1}}),
    "a negative time": jsonl({"at": -1, "body": FIRST}),
    "a block-hash trace": jsonl({"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [7, 8]}),
    "a trace whose id follows two parents": jsonl({"input_length": 600, "output_length": 4, "hash_ids": [7, 8]},
                                                   {"input_length": 600, "output_length": 4, "hash_ids": [9, 8]}),
    "not JSON": '{"model": "m", "prompt": "a"\n',
    "no requests": "\n",
}


@pytest.mark.parametrize("name", WORKLOADS)
def test_predict_and_verify_accept_and_refuse_the_same_workloads(tmp_path, capsys, name):
    workload = tmp_path / "w.jsonl"
    workload.write_text(WORKLOADS[name])
    # --concurrency: predict then needs no times (verify uses none), so only the file's form decides.
    predicted = cli.main(["predict", "--pods", "2", "--seed", "1", "--concurrency", "1", "--workload", str(workload)])
    predict_err = capsys.readouterr().err
    # The pods are read only once the workload is: their error means verify took the workload.
    verified = cli.main(["verify", "--model-id", "m", "--workload", str(workload), "--pod-url", "a=http://127.0.0.1:1",
                         "--gateway-url", "http://127.0.0.1:1"])
    verify_err = capsys.readouterr().err
    if predicted == 0:
        assert verify_err.startswith("verify: --pod-url a=http://127.0.0.1:1: cannot read"), verify_err
    else:
        assert predicted == verified == 2
        assert verify_err.removeprefix("verify: ") == predict_err.removeprefix("predict: ")


def test_a_gateway_url_nothing_listens_on_is_one_line_before_any_request(pods, capsys):
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    code = cli.main(["verify", "--model-id", "m", "--pod-url", f"pod-a={pods['pod-a'].url}",
                     "--gateway-url", f"http://127.0.0.1:{port}"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith(f"verify: --gateway-url http://127.0.0.1:{port}: cannot connect to 127.0.0.1:{port} "
                                   "(") and "Is the gateway up" in captured.err
    assert "sending" not in captured.out and pods["pod-a"].bodies == []


# -- a gateway with TLS and a JWT (gateway.tls, gateway.jwt) ------------------------------------

TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJpbmZlcmVuY2UtYXBpIn0.c2lnbmF0dXJl"


@pytest.fixture
def tls_gateway(tmp_path, pods):
    """An https gateway whose certificate the test's CA signed, admitting only TOKEN."""
    from fake_tls import CertificateAuthority, TlsGateway

    authority = CertificateAuthority(tmp_path)
    gateway = TlsGateway(authority, pods, lambda n: "pod-a", TOKEN).start()
    yield gateway, authority
    gateway.stop()


def pod_urls(pods) -> list[str]:
    return [argument for name, pod in pods.items() for argument in ("--pod-url", f"{name}={pod.url}")]


def test_the_token_and_the_ca_reach_an_https_gateway(pods, tls_gateway, capsys):
    gateway, authority = tls_gateway
    code = cli.main(["verify", "--model-id", "m", "--gateway-url", gateway.url, "--token", TOKEN,
                     "--ca-file", str(authority.ca_file), "--expect", "concentrate", *pod_urls(pods)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS: concentrate: all requests on one pod (pod-a 12)" in out
    assert gateway.authorizations == [f"Bearer {TOKEN}"] * 12


def test_the_token_may_come_from_the_environment(pods, tls_gateway, capsys, monkeypatch):
    gateway, authority = tls_gateway
    monkeypatch.setenv("INFERENCE_GATEWAY_TOKEN", TOKEN)
    code = cli.main(["verify", "--model-id", "m", "--gateway-url", gateway.url, "--ca-file", str(authority.ca_file),
                     *pod_urls(pods)])
    assert code == 0, capsys.readouterr().out
    assert gateway.authorizations == [f"Bearer {TOKEN}"] * 12


def test_without_the_token_the_gateway_refuses_every_request_and_verify_says_so(pods, tls_gateway, capsys):
    gateway, authority = tls_gateway
    code = cli.main(["verify", "--model-id", "m", "--gateway-url", gateway.url, "--ca-file", str(authority.ca_file),
                     *pod_urls(pods)])
    assert code == 1
    assert "12 of 12 requests failed (statuses [401])" in capsys.readouterr().out
    assert gateway.authorizations == [None] * 12 and pods["pod-a"].bodies == []


def test_a_certificate_the_trusted_cas_do_not_sign_is_one_line_before_any_request(pods, tls_gateway, tmp_path, capsys):
    from fake_tls import CertificateAuthority

    gateway, _ = tls_gateway
    other = CertificateAuthority(tmp_path, name="another CA")
    for trust, named in (([], "the system's trusted CAs"), (["--ca-file", str(other.ca_file)],
                                                            f"the CA in --ca-file {other.ca_file}")):
        code = cli.main(["verify", "--model-id", "m", "--gateway-url", gateway.url, "--token", TOKEN, *trust,
                         *pod_urls(pods)])
        err = capsys.readouterr().err
        assert code == 2
        assert err.startswith(f"verify: --gateway-url {gateway.url}: its certificate does not verify against {named} "
                              "(") and "gatewayCaCommand" in err
    assert gateway.authorizations == [] and pods["pod-a"].bodies == []


def test_an_unreadable_ca_file_names_the_option(pods, tls_gateway, tmp_path, capsys):
    gateway, _ = tls_gateway
    missing = tmp_path / "missing.pem"
    assert cli.main(["verify", "--model-id", "m", "--gateway-url", gateway.url, "--ca-file", str(missing),
                     "--token", TOKEN, *pod_urls(pods)]) == 2
    assert capsys.readouterr().err.startswith(f"verify: --ca-file {missing}: cannot load it as PEM CA certificates")


@pytest.mark.parametrize("credential", [["--token", TOKEN], ["--header", f"Authorization: Bearer {TOKEN}"]])
def test_a_token_cannot_travel_through_the_api_servers_service_proxy(pods, gateway_factory, tmp_path, capsys,
                                                                     credential):
    api = FakeApiServer(pods, gateway_factory(pods, lambda n: "pod-a"), "inference", "vllm-qwen-small")
    code = run_against(api, tmp_path, [*KUBE_ARGS, *credential])
    err = capsys.readouterr().err
    assert code == 2 and api.proxy_targets == [] and api.selectors == []
    assert err.startswith("verify: --token (or $INFERENCE_GATEWAY_TOKEN, or an Authorization --header) needs "
                          "--gateway-url: the API server's service proxy takes the Authorization header")


def test_a_stack_whose_gateway_requires_a_jwt_asks_for_the_token_first(tmp_path, capsys):
    dev = (Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.dev.yaml").read_text()
    marker = "    name: inference-gateway\n"
    jwt = ("    jwt:\n      issuer: https://idp.example.com\n      jwksUri: https://idp.example.com/keys\n"
           "      audiences: [inference-api]\n")
    (tmp_path / "Pulumi.jwt.yaml").write_text(dev.replace(marker, marker + jwt))
    code = cli.main(["verify", "--stack", "jwt", "--model", "qwen-small", "--stacks-dir", str(tmp_path),
                     "--kubeconfig", str(tmp_path / "never-read")])
    assert code == 2
    assert capsys.readouterr().err.startswith("verify: the stack's gateway requires a JWT from https://idp.example.com "
                                              "(gateway.jwt): pass --token TOKEN (or set $INFERENCE_GATEWAY_TOKEN)")


def test_a_ca_file_is_for_an_https_gateway_url_only(capsys):
    assert cli.main(["verify", "--model-id", "m", "--pod-url", "a=http://127.0.0.1:1", "--gateway-url",
                     "http://127.0.0.1:1", "--ca-file", "ca.pem"]) == 2
    assert "--ca-file ca.pem applies to an https --gateway-url only" in capsys.readouterr().err


def test_a_pod_proxy_the_network_policies_refuse_says_what_to_change(pods, gateway_factory, tmp_path, capsys):
    api = FakeApiServer(pods, gateway_factory(pods, lambda n: "pod-a"), "inference", "vllm-qwen-small")

    async def unreachable(request):
        # What the API server answers when its dial to the pod is dropped.
        return web.json_response({"kind": "Status", "code": 503, "message": "error trying to reach service: dial tcp "
                                  "10.0.12.34:8000: i/o timeout"}, status=503)

    api.pod_metrics = unreachable
    code = run_against(api, tmp_path, [*KUBE_ARGS])
    err = capsys.readouterr().err
    assert code == 2 and "HTTP 503" in err
    assert "the model pods admit the API server's pod proxy only from gateway.networkPolicy.apiServerCidrs" in err
