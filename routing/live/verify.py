"""`verify`: the seed page's steps 2-5 as one command against a live gateway.

Reads every pod's vLLM counters, sends a workload through the gateway one request at a
time (printing each status as the page's curl loop does), reads the counters again and
prints per-pod deltas: requests, prefix-cache hits and queries (tokens), hit rate. With
`--expect concentrate|spread` the exit status says whether routing did what was expected.

The workload (--workload) is a built-in batch or a JSON Lines file in the format `predict`
reads: bare request bodies, or {"at": seconds, "session": id, "body": {...}} lines. Either
way verify sends the bodies one at a time in file order, each once the previous one is
answered, so a session's turns keep their order; the "at" times are not kept: verify
measures where requests go, not timing (`predict --rate/--concurrency` models that). A
line {"at", "weights"} (a weight change) is refused: verify cannot change the weights of a
live gateway mid-run.

Pods are found by their `app` label through the Kubernetes API and read through the API
server's pod proxy, or their counters are read from Prometheus (--prometheus URL, e.g. the stack's
through what `pulumi stack output prometheusCommand` prints): the same deltas, from the samples
Prometheus scraped, so a pod that restarts or is replaced during the run still counts what it
served; the gateway's Service is reached through the service proxy (over https
when the gateway's pods terminate TLS; --gateway-scheme overrides). Both use your kubeconfig
(exec auth such as `aws eks get-token` included). Or point at them directly with --pod-url
and --gateway-url.

Warm caches. `predict` starts from empty caches; pods that served the workload's prefixes before
(an earlier run of it, other traffic) hit more. verify says so when the run's first request finds
prompt tokens already cached (vLLM's prefix-cache hits counted between the reads before and after
it, when it was the only request counted): nothing this run sent before it could have put them
there. --reset-caches empties each --pod-url server's cache first (POST /reset_prefix_cache, which
vLLM serves only when started with VLLM_SERVER_DEV_MODE=1, as `python -m routing servers` starts
them). On a cluster, compare where the requests went, which the picker decides from its own prefix
index and the pods' load, not from their caches; for the hit rate, restart the model's pods first.

A gateway that requires a JWT (gateway.jwt) takes it from --token or $INFERENCE_GATEWAY_TOKEN,
sent as `Authorization: Bearer <token>`, and only at --gateway-url: the API server keeps that
header for itself. --ca-file names the CA that --gateway-url https:// must chain to, e.g. the
stack's own on gateway.tls auto (`pulumi stack output gatewayCaCommand` prints it).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, TextIO

from routing.metrics import PREFIX_SPELLINGS, REQUESTS, DeltaReport, PodDelta, VllmMetrics, diff_reads, parse_metrics
from routing.options import (URL_SCHEMES, OptionError, add_model_options, http_url, load_stack_model, named_url,
                             port_number, positive_int, unique_named_urls)
from routing.tables import format_pod_table
from routing.traces import MOONCAKE_BLOCK_TOKENS
from routing.workloads import (BUILTIN_WORKLOADS, Arrival, WorkloadError, load_arrivals, load_pod_restarts,
                               load_weight_changes)
from settings import GATEWAY_OWNER_LABEL, GATEWAY_SYSTEM_NAMESPACE, VLLM_PORT
from settings.endpoints import Location, gateway_service, picker_pods, service_scheme
from settings.observability import POD_LABEL

# The page's curl loop uses -m 60 per request and -m 15 per metrics read.
REQUEST_TIMEOUT = 60.0
METRICS_TIMEOUT = 15.0
# vLLM bumps its counters right after it answers; give them this long to catch up.
SETTLE_TIMEOUT = 10.0
EXPECTATIONS = ("concentrate", "spread")
TOKEN_ENV = "INFERENCE_GATEWAY_TOKEN"
# What verify says when the API server cannot reach a model pod: on a stack the pods' own
# NetworkPolicies are the likely reason (README, Security).
POD_PROXY_HINT = ("If the stack's NetworkPolicies are on (the default), the model pods admit the API server's pod "
                  "proxy only from gateway.networkPolicy.apiServerCidrs: admit the subnets of your cluster's "
                  "control-plane network interfaces there, or read the pods through `kubectl port-forward` and "
                  "--pod-url.")

# Called before each serial request with the time.monotonic() the previous response ended
# (for the first, the batch's start); waits until the gateway's view of the pods has caught
# up and returns whether it did. RunningGateway.wait_idle is one.
Settle = Callable[[float], bool]


class VerifyError(RuntimeError):
    """Something verify cannot work around, with the fix."""


class PodReader(Protocol):
    def read(self) -> dict[str, VllmMetrics]: ...


class GatewayClient(Protocol):
    description: str
    # Why the latest request got no HTTP answer at all (status 0), for the report.
    last_error: str

    def reach(self) -> None:
        """VerifyError, with the fix, when the gateway cannot be reached at all (nothing is sent)."""

    def post(self, path: str, body: Mapping[str, Any]) -> int: ...


def inference_path(body: Mapping[str, Any]) -> str:
    return "/v1/chat/completions" if "messages" in body else "/v1/completions"


# -- direct URLs ------------------------------------------------------------------------------

def _base_url(url: str) -> str:
    url = url.rstrip("/")
    return url[:-len("/metrics")] if url.endswith("/metrics") else url


def _metrics_url(url: str) -> str:
    return _base_url(url) + "/metrics"


def reset_prefix_cache(url: str, attempts: int = 20) -> None:
    """Empty a vLLM server's prefix cache (POST /reset_prefix_cache, served with VLLM_SERVER_DEV_MODE=1).

    vLLM refuses while blocks are held by running requests; it is retried for a few seconds.
    The counters are not reset, only the cache: deltas stay meaningful. An HTTP refusal is raised
    as urllib's HTTPError.
    """
    for _ in range(attempts):
        request = urllib.request.Request(url.rstrip("/") + "/reset_prefix_cache", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = response.read().decode()
        # vLLM 0.32 answers {"success": bool}; older releases answered 200 with an empty body.
        if '"success":false' not in answer.replace(" ", ""):
            return
        time.sleep(0.25)
    raise VerifyError(f"{url}: /reset_prefix_cache kept answering success=false (requests still running?)")


def reset_caches(urls: Mapping[str, str]) -> None:
    """--reset-caches: empty every --pod-url server's prefix cache, or say in one line why one refused."""
    for name, url in urls.items():
        base = _base_url(url)
        try:
            reset_prefix_cache(base)
        except urllib.error.HTTPError as error:
            raise VerifyError(f"--reset-caches: {name} ({base}) answered HTTP {error.code} to POST "
                              "/reset_prefix_cache, which vLLM serves only when started with VLLM_SERVER_DEV_MODE=1 "
                              "(`python -m routing servers` starts its servers so; a stack's pods run without it): "
                              "start it so, or drop --reset-caches and read the run as one on warm pods "
                              "(`python -m routing verify --help`)") from None
        except (urllib.error.URLError, OSError) as error:
            raise VerifyError(f"--reset-caches: cannot reach {name} ({base}): {error}. Is the server up, and is the "
                              "URL its base address, e.g. http://127.0.0.1:8000?") from None


@dataclass
class UrlPods:
    """Pods given as NAME=URL (their vLLM base URL, or the /metrics URL itself)."""

    urls: Mapping[str, str]
    timeout: float = METRICS_TIMEOUT

    def read(self) -> dict[str, VllmMetrics]:
        reads = {}
        for name, url in self.urls.items():
            try:
                with urllib.request.urlopen(_metrics_url(url), timeout=self.timeout) as response:
                    text = response.read().decode("utf-8", errors="replace")
            except (urllib.error.URLError, OSError) as error:
                raise VerifyError(f"--pod-url {name}={url}: cannot read {_metrics_url(url)} ({error}). Is the "
                                  "server up, and is the URL its base address, e.g. http://127.0.0.1:8000?") from None
            try:
                reads[name] = parse_metrics(text)
            except ValueError as error:  # MetricsError included
                raise VerifyError(f"--pod-url {name}={url}: {error}") from None
        return reads


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Certificates checked against `ca_file` (PEM) if given, else the system's trusted CAs."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        raise VerifyError(f"--ca-file {ca_file}: cannot load it as PEM CA certificates ({error}). Write the "
                          "stack's CA with `eval \"$(pulumi stack output gatewayCaCommand)\" > gateway-ca.pem`.") from None


@dataclass
class UrlGateway:
    url: str
    headers: Mapping[str, str]
    timeout: float = REQUEST_TIMEOUT
    last_error: str = ""
    # The CA an https URL's certificate must chain to; None trusts the system's CAs.
    ca_file: str | None = None

    @property
    def description(self) -> str:
        return self.url

    @property
    def https(self) -> bool:
        return urllib.parse.urlsplit(self.url).scheme.lower() == "https"

    def reach(self) -> None:
        """A TCP connection to the URL's host and port (and the TLS handshake for https), no request:
        a wrong --gateway-url or an untrusted certificate is one line before the batch, not a row
        of 000s (or of 60-second timeouts) after it."""
        parts = urllib.parse.urlsplit(self.url)
        port = parts.port or (443 if self.https else 80)
        context = tls_context(self.ca_file) if self.https else None
        try:
            with socket.create_connection((parts.hostname, port), timeout=METRICS_TIMEOUT) as connection:
                if context is not None:
                    context.wrap_socket(connection, server_hostname=parts.hostname).close()
        except ssl.SSLCertVerificationError as error:
            trusted = f"the CA in --ca-file {self.ca_file}" if self.ca_file else "the system's trusted CAs"
            raise VerifyError(f"--gateway-url {self.url}: its certificate does not verify against {trusted} "
                              f"({error.verify_message}). On gateway.tls auto the stack's own CA signs it: pass "
                              "--ca-file with what `pulumi stack output gatewayCaCommand` prints; with an ACM "
                              "certificate use the name it was issued for.") from None
        except OSError as error:  # ssl.SSLError included: e.g. https to a plain-HTTP port
            raise VerifyError(f"--gateway-url {self.url}: cannot connect to {parts.hostname}:{port} ({error}). Is "
                              "the gateway up (e.g. `python -m routing serve`, or a `kubectl port-forward` to its "
                              "Service), the URL its base address and its scheme the gateway's?") from None

    def post(self, path: str, body: Mapping[str, Any]) -> int:
        request = urllib.request.Request(self.url.rstrip("/") + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json", **self.headers})
        context = tls_context(self.ca_file) if self.https else None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                response.read()
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except (urllib.error.URLError, OSError) as error:
            self.last_error = f"{self.url}: {error}"
            return 0  # like curl's 000: no HTTP answer at all


# -- from Prometheus ---------------------------------------------------------------------------

# What Prometheus's samples must reach back to: the stack scrapes every 15 s by default.
PROMETHEUS_LOOKBACK = 120.0
# How long the reads after a batch wait for Prometheus to scrape every pod again: a few of the
# stack's scrape intervals (observability.scrapeInterval, 15 s unless set).
PROMETHEUS_SETTLE_SCRAPES = 4
PROMETHEUS_COUNTERS = {"requests": REQUESTS, "prefix_hits": PREFIX_SPELLINGS[0][0],
                       "prefix_queries": PREFIX_SPELLINGS[0][1]}


def counted_since(samples: Sequence[tuple[float, float]], after: float | None) -> float:
    """What a counter counted after time `after` (None: everything since it started), from its
    samples in time order; a sample lower than the one before means the counter restarted from zero."""
    total, previous = 0.0, None
    for at, value in samples:
        if after is not None and at <= after:
            previous = value
            continue
        total += value - previous if previous is not None and value >= previous else value
        previous = value
    return total


@dataclass
class PrometheusPods:
    """A model's pods as Prometheus scraped them (`{namespace, app}`, the stack's PodMonitor labels).

    Each read returns what every pod counted since the first read's baseline: the newest sample
    of each series at that first read, which waits for a scrape newer than its own start. A
    series that appears later (a new or replaced pod) counts from zero, and a counter that went
    down was restarted. So the deltas `measure` takes between reads are exact, restarts included.
    """

    url: str
    selector: str
    timeout: float = METRICS_TIMEOUT
    fresh_timeout: float = 60.0
    started: float | None = None
    baseline: dict[tuple[str, tuple], float] | None = None

    def query(self, expr: str, at: float) -> list[dict]:
        address = f"{self.url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
        try:
            with urllib.request.urlopen(address, timeout=self.timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise VerifyError(f"--prometheus {self.url}: the query {expr!r} answered HTTP {error.code} "
                              f"({error.read().decode(errors='replace')[:200]}). Is it a Prometheus?") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise VerifyError(f"--prometheus {self.url}: cannot query it ({error}). Forward the stack's: run what "
                              "`pulumi stack output prometheusCommand` prints in another terminal, then pass "
                              "--prometheus http://127.0.0.1:9090.") from None
        return answer.get("data", {}).get("result", [])

    def samples(self, metric: str, now: float) -> dict[tuple[str, tuple], list[tuple[float, float]]]:
        window = max(1, int(now - (self.started or now) + PROMETHEUS_LOOKBACK))
        series = {}
        for result in self.query(f"{metric}{{{self.selector}}}[{window}s]", now):
            labels = result.get("metric", {})
            key = (metric, tuple(sorted(labels.items())))
            series[key] = [(float(at), float(value)) for at, value in result.get("values", [])]
        return series

    def read(self) -> dict[str, VllmMetrics]:
        now = time.time()
        if self.baseline is None:
            return self._first_read(now)
        return self._counted(now)

    def _first_read(self, now: float) -> dict[str, VllmMetrics]:
        self.started = now
        deadline = now + self.fresh_timeout
        while True:
            series = {key: values for metric in PROMETHEUS_COUNTERS.values()
                      for key, values in self.samples(metric, time.time()).items()}
            if not series:
                raise VerifyError(f"--prometheus {self.url}: no series {REQUESTS}{{{self.selector}}}. Does the stack's "
                                  "PodMonitor select the model's pods (observability), and are --namespace and --label "
                                  "the model's?")
            if all(values and values[-1][0] >= now for values in series.values()):
                break
            if time.time() > deadline:
                raise VerifyError(f"--prometheus {self.url}: no scrape of every pod of {{{self.selector}}} within "
                                  f"{self.fresh_timeout:g}s; check its targets (Status > Targets).")
            time.sleep(0.5)
        self.baseline = {key: values[-1][0] for key, values in series.items()}
        return self._counted(time.time())

    def _counted(self, now: float) -> dict[str, VllmMetrics]:
        totals: dict[str, dict[str, float]] = {}
        for field_name, metric in PROMETHEUS_COUNTERS.items():
            for key, values in self.samples(metric, now).items():
                pod = dict(key[1]).get("pod", "?")
                counted = counted_since(values, self.baseline.get(key))
                pod_totals = totals.setdefault(pod, dict.fromkeys(PROMETHEUS_COUNTERS, 0.0))
                pod_totals[field_name] += counted
        return {pod: VllmMetrics(requests=t["requests"], prefix_hits=t["prefix_hits"],
                                 prefix_queries=t["prefix_queries"], waiting=0.0, running=0.0, kv_usage=0.0)
                for pod, t in sorted(totals.items())}


# -- through the Kubernetes API server ---------------------------------------------------------

class KubeApi:
    """Raw GET/POST through the API server's proxy subresources with the user's kubeconfig."""

    def __init__(self, context: str | None, kubeconfig: str | None = None):
        try:
            from kubernetes import client, config
        except ImportError:
            raise VerifyError("the kubernetes package is not installed: `pip install kubernetes`, or pass "
                              "--pod-url and --gateway-url to skip the Kubernetes API") from None
        try:
            config.load_kube_config(config_file=kubeconfig, context=context)
        except Exception as error:  # the loader raises ConfigException, FileNotFoundError, TypeError...
            where = f"context {context!r}" if context else "the current context"
            source = f"--kubeconfig {kubeconfig}" if kubeconfig else "the kubeconfig ($KUBECONFIG, else ~/.kube/config)"
            raise VerifyError(f"cannot load {source} ({where}): {str(error).rstrip('.')}. Run `aws eks "
                              "update-kubeconfig --name <cluster>` or pass --context, or use --pod-url/--gateway-url."
                              ) from None
        self.api_client = client.ApiClient()
        self.core = client.CoreV1Api(self.api_client)

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None,
             headers: Mapping[str, str] | None = None, timeout: float = REQUEST_TIMEOUT) -> tuple[int, bytes]:
        header_params = {"Accept": "*/*", **(headers or {})}
        if body is not None:
            header_params["Content-Type"] = "application/json"
        # The path is already complete, so param_serialize only adds the host and auth; the
        # client JSON-encodes `body` itself.
        params = self.api_client.param_serialize(method=method, resource_path=path, header_params=header_params,
                                                 body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*params, _request_timeout=timeout)
        response.read()
        return response.status, response.data

    @property
    def server(self) -> str:
        return self.api_client.configuration.host

    def list_pods(self, namespace: str, selector: str) -> list:
        return self._list("pods", namespace, selector, self.core.list_namespaced_pod)

    def list_services(self, namespace: str, selector: str) -> list:
        return self._list("services", namespace, selector, self.core.list_namespaced_service)

    def _list(self, kind: str, namespace: str, selector: str, list_call) -> list:
        what = f"listing {kind} in namespace {namespace} (label {selector}) through the API server {self.server}"
        try:
            return list_call(namespace, label_selector=selector, _request_timeout=METRICS_TIMEOUT).items
        except Exception as error:  # ApiException, urllib3 connection errors, exec-auth failures
            raise VerifyError(api_failure(what, error, f"kubectl get {kind} -n {namespace} -l {selector}")) from None


def api_failure(what: str, error: Exception, kubectl: str) -> str:
    """What failed talking to the API server, why, and what to try."""
    status = getattr(error, "status", None)
    if isinstance(status, int) and status:
        reason = getattr(error, "reason", "") or ""
        if status in (401, 403):
            fix = (f"your kubeconfig's credentials are refused or lack permission: check them with `{kubectl}` "
                   "(for EKS, `aws eks update-kubeconfig --name <cluster>` and an access entry)")
        else:
            fix = f"check with `{kubectl}`"
        return f"{what}: the API server answered HTTP {status} {reason}".rstrip() + f"; {fix}."
    detail = " ".join(str(error).split())
    if len(detail) > 300:
        detail = detail[:299] + "…"
    return (f"{what} failed: {type(error).__name__}: {detail}. Is the cluster up and reachable from here, and "
            f"the kubeconfig's server address right? Check with `{kubectl}`, pick another --context or "
            "--kubeconfig, or skip the API server with --pod-url and --gateway-url.")


def _pod_ready(pod) -> bool:
    conditions = pod.status.conditions or []
    return pod.status.phase == "Running" and any(c.type == "Ready" and c.status == "True" for c in conditions)


@dataclass
class KubePods:
    """The model's ready pods, read through /api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/metrics."""

    api: KubeApi
    namespace: str
    label: str
    port: int

    def names(self) -> list[str]:
        pods = self.api.list_pods(self.namespace, f"app={self.label}")
        ready = sorted(p.metadata.name for p in pods if _pod_ready(p))
        if not ready:
            raise VerifyError(f"no ready pod with label app={self.label} in namespace {self.namespace} "
                              f"({len(pods)} found, none ready). Check --namespace/--label, or "
                              f"`kubectl get pods -n {self.namespace} -l app={self.label}`.")
        return ready

    def read(self) -> dict[str, VllmMetrics]:
        reads = {}
        for name in self.names():
            path = f"/api/v1/namespaces/{self.namespace}/pods/{name}:{self.port}/proxy/metrics"
            try:
                status, data = self.api.call("GET", path, timeout=METRICS_TIMEOUT)
            except Exception as error:  # ApiException, urllib3 errors, exec-auth failures
                message = api_failure(f"pod {name}: reading {path}", error, f"kubectl get --raw {path}")
                if getattr(error, "status", None) not in (401, 403):
                    message += " " + POD_PROXY_HINT
                raise VerifyError(message) from None
            if status != 200:
                hint = f" {POD_PROXY_HINT}" if status in (502, 503, 504) else ""
                raise VerifyError(f"pod {name}: {path} answered HTTP {status}. Is --port {self.port} vLLM's port?{hint}")
            try:
                reads[name] = parse_metrics(data.decode("utf-8", errors="replace"))
            except ValueError as error:  # MetricsError included
                raise VerifyError(f"pod {name}: {error}") from None
        return reads


@dataclass
class KubeGateway:
    """The gateway's Envoy Service, reached through the API server's service proxy.

    `scheme` is how the API server talks to the Service: "http", or "https" when the gateway
    terminates TLS itself (the service-proxy form `https:<service>:<port>`).
    """

    api: KubeApi
    service: str
    namespace: str
    port: int
    headers: Mapping[str, str]
    scheme: str = "http"
    last_error: str = ""

    @property
    def description(self) -> str:
        return (f"service {self.namespace}/{self.service}:{self.port} over {self.scheme} "
                "(through the API server's service proxy)")

    def proxy_path(self, path: str) -> str:
        """The API server path that forwards `path` to the Service: `<svc>:<port>` is plain HTTP,
        `https:<svc>:<port>` makes the API server speak TLS to it."""
        target = f"{self.service}:{self.port}" if self.scheme == "http" else f"{self.scheme}:{self.service}:{self.port}"
        return f"/api/v1/namespaces/{self.namespace}/services/{target}/proxy{path}"

    def reach(self) -> None:
        """Nothing to do: finding the Service went through the same API server."""

    @classmethod
    def find(cls, api: KubeApi, where: Location, headers: Mapping[str, str], scheme: str = "http") -> KubeGateway:
        services = api.list_services(where.namespace, where.selector)
        if not services:
            raise VerifyError(f"no Service labelled {where.selector} in namespace {where.namespace}: is the gateway's "
                              "name right and the gateway ready? Or pass --gateway-url.")
        service = sorted(services, key=lambda s: s.metadata.name)[0]
        ports = service.spec.ports or []
        if not ports:
            raise VerifyError(f"Service {where.namespace}/{service.metadata.name} has no port; pass --gateway-url.")
        return cls(api, service.metadata.name, where.namespace, _port_for(ports, scheme).port, headers, scheme)

    def post(self, path: str, body: Mapping[str, Any]) -> int:
        try:
            status, _ = self.api.call("POST", self.proxy_path(path), body, self.headers)
            return status
        except Exception as error:  # ApiException, urllib3 errors, exec-auth failures
            status = getattr(error, "status", None)
            if isinstance(status, int) and status:
                return status
            self.last_error = f"{type(error).__name__}: {error}"
            return 0


def _port_for(ports: Sequence, scheme: str):
    """The Service port for `scheme`: the one whose appProtocol is the scheme (Istio puts its
    listener's protocol there), else one named after it, else one on its well-known number, else
    the first."""
    number = 443 if scheme == "https" else 80
    for matches in (lambda port: (getattr(port, "app_protocol", None) or "").lower() == scheme,
                    lambda port: (port.name or "").lower() == scheme, lambda port: port.port == number):
        for port in ports:
            if matches(port):
                return port
    return ports[0]


# -- measuring --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measurement:
    """One batch: per-pod counter deltas and each request's HTTP status, in order."""

    report: DeltaReport
    statuses: tuple[int, ...]
    seconds: float
    gateway_error: str = ""
    # With a settle hook: the requests (0-based) sent although the hook gave up waiting.
    unsettled: tuple[int, ...] = ()
    # The pod whose cache held prompt tokens of the run's first request before the run (see
    # `cached_before_the_run`), with its hits and queries for that request.
    already_cached: PodDelta | None = None

    @property
    def failed(self) -> int:
        return sum(1 for s in self.statuses if not 200 <= s < 300)

    def to_json(self) -> dict:
        cached = self.already_cached
        return {**self.report.to_json(), **({"alreadyCached": cached.to_json()} if cached is not None else {})}


def send_batch(gateway: GatewayClient, bodies: Sequence[Mapping[str, Any]], out: TextIO,
               settle: Settle | None = None, after_first: Callable[[], None] | None = None
               ) -> tuple[list[int], list[int]]:
    """Serially, like the page's loop: each request's status printed as it comes back.

    With `settle`, it is called before each request with the time the previous response
    ended (the batch's start for the first). `after_first` runs once the first request has
    succeeded, before the second goes out. Returns the statuses and the indexes of the
    requests sent although `settle` gave up.
    """
    statuses: list[int] = []
    unsettled: list[int] = []
    previous_done = time.monotonic()
    for index, body in enumerate(bodies):
        if settle is not None and not settle(previous_done):
            unsettled.append(index)
        status = gateway.post(inference_path(body), body)
        previous_done = time.monotonic()
        statuses.append(status)
        print(f"{status:03d}", end=" ", file=out, flush=True)
        if index == 0 and after_first is not None and 200 <= status < 300:
            after_first()
    print(file=out, flush=True)
    return statuses, unsettled


def read_until_counted(pods: PodReader, before: dict[str, VllmMetrics], requests: int, timeout: float) -> DeltaReport:
    """The deltas since `before`, read again until they count `requests` requests or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        report = diff_reads(before, pods.read())
        if report.requests >= requests or time.monotonic() > deadline:
            return report
        time.sleep(0.2)


def cached_before_the_run(first: DeltaReport) -> PodDelta | None:
    """The pod whose prefix cache held prompt tokens of the run's first request before the run: the
    pod that served it, when it alone was counted and it hit. Nothing the run had sent could have
    put them there."""
    used = first.pods_used
    if first.requests == 1 and len(used) == 1 and used[0].hits:
        return used[0]
    return None


def measure(pods: PodReader, gateway: GatewayClient, bodies: Sequence[Mapping[str, Any]], out: TextIO,
            settle_timeout: float = SETTLE_TIMEOUT, settle: Settle | None = None, warm_advice: str = "") -> Measurement:
    """Read counters, send the batch, read again until the counters account for it.

    `settle` (optional) runs before each request; see `send_batch`. Without it each request
    goes out as soon as the previous one is answered, as the page's curl loop does. The
    counters are also read after the first request, to tell whether the pods' caches held the
    workload's prefixes before the run (`cached_before_the_run`); the note that says so ends with
    `warm_advice`.
    """
    before = pods.read()
    print(f"counters read from {len(before)} pod(s): {', '.join(before)}", file=out, flush=True)
    gateway.reach()
    print(f"sending {len(bodies)} request(s) to {gateway.description}:", file=out, flush=True)
    first: list[DeltaReport] = []
    started = time.monotonic()
    statuses, unsettled = send_batch(gateway, bodies, out, settle, after_first=lambda: first.append(
        read_until_counted(pods, before, 1, settle_timeout)))
    seconds = time.monotonic() - started
    succeeded = sum(1 for s in statuses if 200 <= s < 300)
    print(f"{succeeded} of {len(statuses)} succeeded in {seconds:.1f}s; reading counters again", file=out, flush=True)
    if unsettled:
        print(f"note: requests {', '.join(str(i + 1) for i in unsettled)} were sent before the gateway's view of "
              "every pod had settled", file=out, flush=True)
    warm = cached_before_the_run(first[0]) if first else None
    if warm is not None:
        print(f"note: the run's first request found {warm.hits} of its {warm.queries} prompt tokens already in "
              f"{warm.pod}'s prefix cache: the pods held this workload's prefixes before the run, so its hit rate "
              f"comes out above `predict`'s, which starts from empty caches. {warm_advice}".rstrip(),
              file=out, flush=True)
    report = read_until_counted(pods, before, succeeded, settle_timeout)
    return Measurement(report, tuple(statuses), seconds, gateway.last_error, tuple(unsettled), warm)


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str


def judge(measurement: Measurement, expect: str | None) -> Verdict:
    report = measurement.report
    used = report.pods_used
    where = ", ".join(f"{p.pod} {p.requests}" for p in used) or "no pod"
    if measurement.failed:
        unanswered = f"; no answer: {measurement.gateway_error}" if 0 in measurement.statuses else ""
        return Verdict(False, f"{measurement.failed} of {len(measurement.statuses)} requests failed "
                              f"(statuses {sorted(set(measurement.statuses))}{unanswered}); routing cannot be judged")
    sent = len(measurement.statuses)
    if report.requests != sent:
        extra = (f"note: the pods counted {report.requests} requests but {sent} were sent: other traffic reached "
                 "them, or the gateway sent some to pods outside this set")
    else:
        extra = ""
    if expect is None:
        return Verdict(True, f"requests per pod: {where}" + (f"; {extra}" if extra else ""))
    if expect == "concentrate":
        passed = len(used) == 1
        reason = (f"concentrate: all requests on one pod ({where})" if passed
                  else f"concentrate expected one pod, but {len(used)} pods served requests ({where})")
    else:
        passed = len(used) > 1
        reason = (f"spread: {len(used)} pods served requests ({where})" if passed
                  else f"spread expected more than one pod, but only {where} served requests")
    return Verdict(passed, reason + (f"; {extra}" if extra else ""))


# -- command line -----------------------------------------------------------------------------

def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"--header {text!r}: expected 'Name: value', e.g. "
                                         "--header 'Authorization: Bearer TOKEN'")
    return name.strip(), value.strip()


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "verify", help="send a workload through a live gateway and show, from vLLM's counters, where it went",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", help="stack whose settings fill the defaults below (stacks/Pulumi.<stack>.yaml)")
    add_model_options(parser)
    parser.add_argument("--workload", default="seed-shared",
                        help=f"{', '.join(BUILTIN_WORKLOADS)}, or a .jsonl file of OpenAI request bodies or of "
                             '{"at": seconds, "session": id, "body": {...}} lines, as predict reads (default: '
                             'seed-shared), or a block-hash trace, each request a token-ID prompt synthesized with '
                             'its blocks; sent one at a time in file order, without the "at" times')
    parser.add_argument("--trace-block-tokens", type=positive_int, default=MOONCAKE_BLOCK_TOKENS, metavar="TOKENS",
                        help=f"a block-hash trace's tokens per hash id (default {MOONCAKE_BLOCK_TOKENS}, Mooncake's)")
    parser.add_argument("--model-id", help="served model name to put in each body (default: the stack model's)")
    parser.add_argument("--expect", choices=EXPECTATIONS,
                        help="exit 1 unless all requests land on one pod (concentrate) or on several (spread)")
    parser.add_argument("--json", action="store_true",
                        help='print {"pods": [{"pod","requests","hits","queries","hitRate"}], "hitRate"} '
                             'on stdout, and "alreadyCached" (the first request\'s pod, as in "pods") when the pods '
                             "held the workload's prefixes before the run (progress goes to stderr)")
    parser.add_argument("--reset-caches", action="store_true",
                        help="with --pod-url: empty each server's prefix cache before sending, so the run starts "
                             "cold as predict does (POST /reset_prefix_cache: vLLM serves it only when started with "
                             "VLLM_SERVER_DEV_MODE=1, as `python -m routing servers` starts them)")
    pods = parser.add_argument_group("pods (one of)")
    pods.add_argument("--pod-url", action="append", type=named_url("--pod-url"), metavar="NAME=URL",
                      help="a vLLM server's base URL (repeatable); skips the Kubernetes API for pods")
    pods.add_argument("--prometheus", type=http_url("--prometheus"), metavar="URL",
                      help="read the pods' counters from this Prometheus instead (the stack's: run what `pulumi "
                           "stack output prometheusCommand` prints, then http://127.0.0.1:9090); the pods are "
                           "{namespace, app=<label>}")
    pods.add_argument("--namespace", help="the model's namespace (default: the stack's)")
    pods.add_argument("--label", help="the pods' app label (default: the stack model's deployment name)")
    pods.add_argument("--port", type=port_number("--port"),
                      help=f"vLLM's port in the pod (default: the stack model's, else {VLLM_PORT})")
    gateway = parser.add_argument_group("gateway (one of)")
    gateway.add_argument("--gateway-url", type=http_url("--gateway-url"),
                         help="the gateway's base URL, e.g. http://127.0.0.1:8080")
    gateway.add_argument("--gateway-name", help="the Gateway's name, to find its Envoy Service in "
                                                f"{GATEWAY_SYSTEM_NAMESPACE} (default: the stack's)")
    gateway.add_argument("--gateway-scheme", choices=URL_SCHEMES,
                         help="with --gateway-name or --stack: how the API server's service proxy talks to the "
                              "gateway's Service (default: https when the stack's gateway pods terminate TLS, else "
                              "http)")
    parser.add_argument("--header", action="append", type=parse_header, default=[], metavar="'NAME: VALUE'",
                        help="extra header for every request (repeatable)")
    parser.add_argument("--token", default=os.environ.get(TOKEN_ENV) or None,
                        help=f"a JWT for a gateway with gateway.jwt, sent as `Authorization: Bearer` (default: "
                             f"${TOKEN_ENV}); needs --gateway-url: the API server keeps that header for itself")
    parser.add_argument("--ca-file", help="PEM CA certificates the https --gateway-url must chain to, e.g. the stack's "
                                          "on gateway.tls auto (`pulumi stack output gatewayCaCommand` prints it); "
                                          "default: the system's trusted CAs")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.set_defaults(func=run)
    return parser


@dataclass(frozen=True)
class Target:
    model_id: str | None
    namespace: str | None
    label: str | None
    port: int
    gateway: Location | None
    gateway_scheme: str = "http"
    # The model's endpoint-picker pods, when a stack says where they are.
    pickers: Location | None = None
    # The stack's gateway.jwt issuer, when its gateway requires a token.
    jwt_issuer: str | None = None
    # How often the stack's Prometheus scrapes (observability.scrapeInterval).
    scrape_interval: float = 15.0


def resolve_target(args: argparse.Namespace) -> Target:
    model = namespace = label = gateway = pickers = issuer = None
    port, scheme, interval = VLLM_PORT, "http", 15.0
    found = load_stack_model(args.stack, args.model, args.stacks_dir)
    if found is not None:
        entry, settings = found.model, found.settings
        model, namespace, label, port = entry.model, settings.namespace, entry.deployment, entry.port
        # Each implementation puts its gateway Service and pickers somewhere else.
        gateway, scheme, pickers = gateway_service(settings), service_scheme(settings), picker_pods(settings, entry)
        issuer = settings.gateway.jwt.issuer if settings.gateway.jwt is not None else None
        interval = float(settings.observability.scrape_interval_seconds)
    if args.gateway_name:
        # By name alone: where the HyperPod add-on puts its gateways' Envoy Service.
        gateway = Location(GATEWAY_SYSTEM_NAMESPACE, f"{GATEWAY_OWNER_LABEL}={args.gateway_name}")
    return Target(model_id=args.model_id or model, namespace=args.namespace or namespace, label=args.label or label,
                  port=args.port or port, gateway=gateway, gateway_scheme=args.gateway_scheme or scheme,
                  pickers=pickers, jwt_issuer=issuer, scrape_interval=interval)


def describe_pickers(api: KubeApi, where: Location) -> str:
    """Which picker pods run and since when: after a weight change, new pods mean new prefix indexes."""
    pods = api.list_pods(where.namespace, where.selector)
    if not pods:
        return f"pickers: no pod labelled {where.selector} in namespace {where.namespace}"
    shown = [f"{p.metadata.name} ({'ready' if _pod_ready(p) else 'not ready'}, started "
             f"{p.status.start_time.isoformat() if p.status and p.status.start_time else 'not yet'})"
             for p in sorted(pods, key=lambda p: p.metadata.name)]
    return f"pickers ({where.selector}): {', '.join(shown)}"


def request_headers(args: argparse.Namespace, target: Target) -> dict[str, str]:
    """--header, and the token as `Authorization: Bearer`; what cannot carry it is refused before
    anything is sent."""
    headers = dict(args.header)
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    authorized = any(name.lower() == "authorization" for name in headers)
    if authorized and not args.gateway_url:
        raise VerifyError(f"--token (or ${TOKEN_ENV}, or an Authorization --header) needs --gateway-url: the API "
                          "server's service proxy takes the Authorization header as your credentials for the API "
                          "server and never forwards it. Pass the gateway's address as --gateway-url (`eval \"$(pulumi "
                          "stack output gatewayUrlCommand)\"` prints it), from inside the VPC or through a `kubectl "
                          "port-forward` to its Service.")
    if target.jwt_issuer is not None and not authorized:
        raise VerifyError(f"the stack's gateway requires a JWT from {target.jwt_issuer} (gateway.jwt): pass --token "
                          f"TOKEN (or set ${TOKEN_ENV}) with --gateway-url; without one every request is refused.")
    if args.ca_file and not (args.gateway_url and args.gateway_url.lower().startswith("https://")):
        raise VerifyError(f"--ca-file {args.ca_file} applies to an https --gateway-url only; through the API "
                          "server's service proxy the API server checks nothing, and an http URL has no certificate.")
    return headers


def build_clients(args: argparse.Namespace, target: Target) -> tuple[PodReader, GatewayClient]:
    headers = request_headers(args, target)
    api = None

    def kube() -> KubeApi:
        nonlocal api
        api = api or KubeApi(args.context, args.kubeconfig)
        return api

    if args.pod_url and args.prometheus:
        raise VerifyError(f"--pod-url and --prometheus {args.prometheus} both say where the counters are: pass one.")
    if args.pod_url:
        pods: PodReader = UrlPods(unique_named_urls("--pod-url", args.pod_url))
    elif args.prometheus:
        if not (target.namespace and target.label):
            raise VerifyError(f"--prometheus {args.prometheus}: which pods? Pass --stack dev --model qwen-small, or "
                              "--namespace and --label (the pods' app label)")
        pods = PrometheusPods(args.prometheus, f'namespace="{target.namespace}", {POD_LABEL}="{target.label}"',
                              fresh_timeout=PROMETHEUS_SETTLE_SCRAPES * target.scrape_interval)
    else:
        if not (target.namespace and target.label):
            raise VerifyError("no pods to read: pass --pod-url NAME=URL (repeatable), or --stack dev --model "
                              "qwen-small, or --namespace and --label")
        pods = KubePods(kube(), target.namespace, target.label, target.port)
    if args.gateway_url:
        if args.gateway_scheme:
            raise VerifyError(f"--gateway-scheme {args.gateway_scheme} applies to the API server's service proxy "
                              f"only; with --gateway-url the URL's own scheme is used ({args.gateway_url}). Drop "
                              "one of the two.")
        gateway: GatewayClient = UrlGateway(args.gateway_url, headers, ca_file=args.ca_file)
    else:
        if target.gateway is None:
            raise VerifyError("no gateway: pass --gateway-url URL, or --stack dev --model qwen-small, "
                              "or --gateway-name NAME")
        gateway = KubeGateway.find(kube(), target.gateway, headers, target.gateway_scheme)
    if target.pickers is not None and not args.pod_url and not args.prometheus:
        print(describe_pickers(kube(), target.pickers), file=sys.stderr if args.json else sys.stdout)
    return pods, gateway


def workload_arrivals(workload: str, model_id: str | None,
                      trace_block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[Arrival]:
    """The workload's requests, read as predict reads them (a block-hash trace's with synthesized
    prompts); a weight change is refused by line."""
    arrivals = load_arrivals(workload, model_id, trace_block_tokens, trace_prompts=True)
    changes = load_weight_changes(workload)
    if changes:
        lines = ", ".join(f"line {change.line} at {change.at:g}s" for change in changes)
        raise WorkloadError(f'workload {workload}: {{"at", "weights"}} and {{"at", "restart"}} lines change or restart '
                            f"the pickers ({lines}), which verify cannot do to a live gateway mid-run: it measures "
                            "the weights the gateway runs. Remove those lines, or split the file at each change and "
                            "run verify once per setting, changing the gateway's weights in between; `python -m "
                            "routing predict` replays the changes")
    restarts = load_pod_restarts(workload)
    if restarts:
        lines = ", ".join(f"line {restart.line} at {restart.at:g}s" for restart in restarts)
        raise WorkloadError(f'workload {workload}: {{"at", "restart": "pod"}} and {{"at", "reset": "prefix-cache"}} '
                            f"lines restart pods or empty their caches ({lines}), which verify does not do to a live "
                            "pool mid-run. Remove those lines; `python -m routing predict` replays them")
    return arrivals


def timing_note(arrivals: Sequence[Arrival]) -> str:
    """What verify does with a workload's "at" times and sessions, when it has any."""
    times = [arrival.at for arrival in arrivals if arrival.at is not None]
    sessions = {arrival.session for arrival in arrivals if arrival.session is not None}
    if not times and not sessions:
        return ""
    has = [f'"at" times ({min(times):g}s to {max(times):g}s)'] if times else []
    has += [f"{len(sessions)} session(s)"] if sessions else []
    return (f"the workload has {' and '.join(has)}: its {len(arrivals)} requests go out one at a time in file order, "
            "each once the previous one is answered" + (", so a session's turns keep their order" if sessions else "")
            + ("; the times are not kept: verify measures where requests go, not timing" if times else ""))


def warm_advice(args: argparse.Namespace, target: Target) -> str:
    """How to compare with `predict` when the pods' caches were warm, for the pods verify reads."""
    if args.pod_url:
        return ("Run again with --reset-caches to start from empty caches." if not args.reset_caches else
                "Other traffic reached the pods after --reset-caches emptied them.")
    restart = (f"`kubectl rollout restart deployment/{target.label} -n {target.namespace}`"
               if target.label and target.namespace else "a rollout restart of the model's Deployment")
    return ("Where the requests went still compares with `predict`: the picker routes by its own prefix index and "
            f"the pods' load, not by their caches. For the hit rate, restart the model's pods first ({restart}: a "
            "new pod starts with an empty cache).")


def run(args: argparse.Namespace) -> int:
    out = sys.stderr if args.json else sys.stdout
    try:
        target = resolve_target(args)
        if target.model_id is None and args.workload in BUILTIN_WORKLOADS:
            raise VerifyError(f"--workload {args.workload} needs a served model name: pass --model-id NAME "
                              "(e.g. Qwen/Qwen2.5-0.5B-Instruct) or --stack dev --model qwen-small")
        arrivals = workload_arrivals(args.workload, target.model_id, args.trace_block_tokens)
        pods, gateway = build_clients(args, target)
        note = timing_note(arrivals)
        if note:
            print(f"verify: {note}", file=out, flush=True)
        if args.reset_caches:
            if not isinstance(pods, UrlPods):
                raise VerifyError("--reset-caches needs --pod-url: it empties each vLLM server's prefix cache with "
                                  "POST /reset_prefix_cache, which vLLM serves only when started with "
                                  "VLLM_SERVER_DEV_MODE=1, and a stack's pods run without it. On a cluster, compare "
                                  "where the requests went, or restart the model's pods first (`python -m routing "
                                  "verify --help`, Warm caches)")
            reset_caches(pods.urls)
            print(f"prefix caches emptied: {', '.join(pods.urls)}", file=out, flush=True)
        settle = PROMETHEUS_SETTLE_SCRAPES * target.scrape_interval if args.prometheus else SETTLE_TIMEOUT
        measurement = measure(pods, gateway, [arrival.body for arrival in arrivals], out, settle_timeout=settle,
                              warm_advice=warm_advice(args, target))
    except (VerifyError, OptionError, WorkloadError) as error:
        print(f"verify: {error}", file=sys.stderr)
        return 2
    verdict = judge(measurement, args.expect)
    if args.json:
        print(json.dumps(measurement.to_json(), indent=2))
    else:
        print(format_pod_table(measurement.report))
    label = "PASS" if verdict.passed else "FAIL"
    print(f"{label}: {verdict.reason}" if args.expect or not verdict.passed else verdict.reason, file=out)
    return 0 if verdict.passed else 1
