"""A scale-out on the local vLLM CPU servers, run as the stack runs one, for bench_scale_out and its
end-to-end test.

- Debian's Prometheus scrapes the servers with the scrape job the Prometheus operator makes of the
  stack's PodMonitor, its targets from a file (file_sd: as the operator's pod discovery follows pods);
- the scaler (routing/simulation/scaling.py's HorizontalScaler, the HPA the stack's ScaledObject
  drives) asks Prometheus the stack's own scaler query every sync; when it asks for a replica, a
  third server starts (here the lead time is the server's start) and, once healthy, joins
  Prometheus's targets and `serve --backends-file`, as a Ready pod joins the pool;
- the workload is sent at its own times (an open loop), each request's TTFT, pod and cached tokens kept.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from benchmarks.underload import Sent, _send
from routing.lab.vllm_server import VllmServer, cpu_for, free_port, wait_until_healthy
from routing.simulation.latency import percentile
from routing.simulation.scaling import HorizontalScaler, ScalingPolicy
from routing.workloads import Arrival

PROMETHEUS_START_TIMEOUT = 30.0
LAB_STACK, LAB_MODEL = "eks-karpenter", "qwen-small"
MAX_SENDERS = 2048


@dataclass(frozen=True)
class LabStack:
    """What the stack deploys for the lab's model, as `pulumi up` would declare it (the program run
    under dryrun's mocks): its PodMonitor, its ScaledObject's query, and the scaler's policy."""

    monitor: dict
    query: str
    policy: ScalingPolicy


def lab_stack(minimum: int, maximum: int, metric: str, target: float) -> LabStack:
    """The eks-karpenter stack with its qwen-small scaling from `minimum` to `maximum` on `metric`."""
    from dryrun.runner import run_program, stack_config
    from settings import parse_settings

    config, secrets = stack_config(LAB_STACK)
    key = "inference-gateway:models"
    models = json.loads(config[key])
    entry = next(m for m in models if m["name"] == LAB_MODEL)
    entry["autoscaling"] = {"minReplicas": minimum, "maxReplicas": maximum, "metric": metric, "target": target}
    config = {**config, key: json.dumps(models)}
    run = run_program(config, stack=LAB_STACK, secret_keys=secrets)
    raw = {k.removeprefix("inference-gateway:"): json.loads(v) if v[:1] in "[{" else v
           for k, v in config.items() if k.startswith("inference-gateway:")}
    settings = parse_settings(raw, stack=LAB_STACK)
    model = settings.model_named(LAB_MODEL)
    scaled = run.kubernetes_object("ScaledObject", model.deployment)
    policy = ScalingPolicy(min_replicas=minimum, max_replicas=maximum, metric=metric, target=target,
                           scale_down_window=float(model.autoscaling.scale_down_seconds),
                           scrape_interval=settings.observability.scrape_interval_seconds)
    return LabStack(run.kubernetes_object("PodMonitor", model.deployment),
                    scaled["spec"]["triggers"][0]["metadata"]["query"], policy)


def pod_monitor_job(monitor: Mapping, targets_file: Path) -> dict:
    """The scrape job the Prometheus operator makes of a PodMonitor (its path, interval and job
    name), its pods read from `targets_file` (file_sd), each with the labels the operator puts on
    a pod's series (TargetsFile writes them)."""
    namespace, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    return {"job_name": f"podMonitor/{namespace}/{name}/0", "scrape_interval": endpoint["interval"],
            "scrape_timeout": endpoint["interval"], "metrics_path": endpoint["path"],
            "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}]}


@dataclass
class TargetsFile:
    """The pods Prometheus scrapes, rewritten whole (file_sd reads it again on every change)."""

    path: Path
    monitor: Mapping
    pods: dict[str, str] = field(default_factory=dict)  # pod name: host:port

    def write(self, pods: Mapping[str, str]) -> None:
        self.pods = dict(pods)
        namespace, name = self.monitor["metadata"]["namespace"], self.monitor["metadata"]["name"]
        (endpoint,) = self.monitor["spec"]["podMetricsEndpoints"]
        selected = self.monitor["spec"]["selector"]["matchLabels"]
        kept = {label: selected[label] for label in self.monitor["spec"]["podTargetLabels"]}
        groups = [{"targets": [address], "labels": {"job": f"{namespace}/{name}", "namespace": namespace, "pod": pod,
                                                    "container": "vllm", "endpoint": endpoint["port"], **kept}}
                  for pod, address in self.pods.items()]
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps(groups))
        scratch.replace(self.path)


class LabPrometheus:
    """Debian's Prometheus on 127.0.0.1, on an empty database, scraping one job."""

    def __init__(self, binary: str, work_dir: Path, job: Mapping, scrape_interval: str):
        self.work_dir = work_dir
        config = work_dir / "prometheus.yaml"
        config.write_text(json.dumps({"global": {"scrape_interval": scrape_interval,
                                                 "evaluation_interval": scrape_interval},
                                      "scrape_configs": [dict(job)]}))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = work_dir / "prometheus.log"
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={work_dir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + PROMETHEUS_START_TIMEOUT
        while True:
            try:
                self.query("up")
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"Prometheus did not start; see {self.log}") from None
                time.sleep(0.2)

    def query(self, expr: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            answer = json.loads(reply.read())
        if answer["status"] != "success":
            raise RuntimeError(f"Prometheus refused {expr!r}: {answer}")
        return answer["data"]["result"]

    def value(self, expr: str) -> float:
        """The query's single value; 0 when it has none (no pod scraped yet), as KEDA reads an empty result."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else 0.0

    def scraped(self, pods: Sequence[str]) -> bool:
        up = {r["metric"].get("pod"): float(r["value"][1]) for r in self.query("up")}
        return all(up.get(pod) == 1.0 for pod in pods)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


@dataclass(frozen=True)
class LabStep:
    at: float  # seconds from the start of the workload
    metric: float
    desired: int
    ready: int


class LabScaler:
    """The HPA against real parts: every `policy.sync_interval` it reads `query` from Prometheus and
    decides as the HPA does; each replica it adds is `launch(index)`, a server started and waited
    for, then `join(server)`. Scale-in is not run here (the window outlasts the lab's workload)."""

    def __init__(self, prometheus: LabPrometheus, query: str, policy: ScalingPolicy, replicas: int,
                 launch: Callable[[int], VllmServer], join: Callable[[VllmServer], None]):
        self.prometheus, self.query, self.policy = prometheus, query, policy
        self.scaler = HorizontalScaler(policy, replicas)
        self.launch, self.join = launch, join
        self.ready = replicas
        self.steps: list[LabStep] = []
        self.started: list[VllmServer] = []
        self.start_seconds: list[float] = []  # each added server's start, asked to healthy
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.origin = 0.0

    def start(self, origin: float) -> None:
        """Syncs from `origin` (time.monotonic() of the workload's start), half a period in, as predict's."""
        self.origin = origin
        self._thread = threading.Thread(target=self._run, name="lab-scaler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_sync = self.origin + self.policy.sync_interval / 2
        while not self._stop.wait(max(0.0, next_sync - time.monotonic())):
            try:
                metric = self.prometheus.value(self.query)
                before = self.scaler.replicas
                desired = self.scaler.decide(time.monotonic() - self.origin, metric)
                for index in range(before, desired):
                    threading.Thread(target=self._add, args=(index,), daemon=True).start()
                self.steps.append(LabStep(time.monotonic() - self.origin, metric, desired, self.ready))
            except BaseException as error:  # reported by stop(), so the run fails loudly, not silently
                self.errors.append(error)
                return
            next_sync += self.policy.sync_interval

    def _add(self, index: int) -> None:
        asked = time.monotonic()
        try:
            server = self.launch(index)
            self.started.append(server)
            self.join(server)
        except BaseException as error:
            self.errors.append(error)
            return
        self.start_seconds.append(time.monotonic() - asked)
        self.ready += 1
        self.steps.append(LabStep(time.monotonic() - self.origin, self.steps[-1].metric if self.steps else 0.0,
                                  self.scaler.replicas, self.ready))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self.errors:
            raise RuntimeError(f"the lab's scaler failed: {self.errors[0]!r}") from self.errors[0]


def added_server(template: VllmServer, index: int, log_dir: Path) -> VllmServer:
    """Another replica like `template` (same model, arguments), named and pinned as start_servers would."""
    name = f"vllm-{chr(ord('a') + index)}"
    return VllmServer(name=name, model_dir=template.model_dir, served_model_name=template.served_model_name,
                      vllm_python=template.vllm_python, log_path=log_dir / f"{name}.log", cpu_bind=cpu_for(index),
                      max_model_len=template.max_model_len, extra_args=template.extra_args)


def start_and_wait(server: VllmServer, timeout: float, out) -> VllmServer:
    server.start()
    wait_until_healthy([server], timeout, out)
    return server


def send_timed(url: str, arrivals: Sequence[Arrival], origin: float) -> list[Sent]:
    """Each request sent at its "at" (seconds after `origin`, time.monotonic()), each on its own
    worker, so a slow reply never delays the next send: the open loop predict replays."""
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)

    def send(arrival: Arrival) -> Sent:
        time.sleep(max(0.0, origin + (arrival.at or 0.0) - time.monotonic()))
        return _send(client, arrival.body)

    # A worker per request (up to a bound no run here nears): a pool smaller than what is in flight
    # at once would hold sends back, and turn the open loop into a closed one.
    with ThreadPoolExecutor(max_workers=min(len(arrivals), MAX_SENDERS) or 1) as pool:
        return list(pool.map(send, arrivals))


@dataclass(frozen=True)
class MeasuredWindow:
    start: float
    end: float
    ready: tuple[int, int]
    requests: int
    hit_rate: float | None
    ttft_p95: float | None


def measured_windows(sent: Sequence[Sent], steps: Sequence[LabStep], origin: float, width: float,
                     initial: int) -> list[MeasuredWindow]:
    """As scaling.windows, from the lab's requests (cached tokens as vLLM reported them) and steps."""
    end = max(s.sent_at for s in sent) - origin
    windows = []
    for number in range(max(1, int(end // width) + 1)):
        low, high = number * width, (number + 1) * width
        mine = [s for s in sent if low <= s.sent_at - origin < high]
        queries = sum(s.prompt_tokens or 0 for s in mine)
        hits = sum(s.cached_tokens or 0 for s in mine)
        before = next((step.ready for step in reversed(steps) if step.at <= low), initial)
        ready = [before, *(step.ready for step in steps if low < step.at <= high)]
        ttfts = [s.ttft for s in mine if s.ttft is not None]
        windows.append(MeasuredWindow(low, high, (min(ready), max(ready)), len(mine),
                                      hits / queries if queries else None,
                                      percentile(ttfts, 0.95) if ttfts else None))
    return windows


@dataclass(frozen=True)
class LabRun:
    sent: list[Sent]
    steps: list[LabStep]
    origin: float
    start_seconds: list[float]  # each added server's start: the lead time here
    routed: dict[str, int]  # requests per server, as serve named them


def run_scale_out(pair, arrivals: Sequence[Arrival], stack: LabStack, prometheus_binary: str, work_dir: Path, out, *,
                  serve_options: Sequence[str] = (), seed: int = 1, start_timeout: float = 300.0) -> LabRun:
    """The workload through `serve` onto the pair, the lab's scaler adding replicas up to
    policy.max_replicas; every server it added is stopped on the way out."""
    from benchmarks.underload import serve_process

    policy, monitor = stack.policy, stack.monitor
    targets = TargetsFile(work_dir / "targets.json", monitor)
    targets.write({server.name: server.url.removeprefix("http://") for server in pair.servers})
    backends_file = work_dir / "backends.json"
    backends_file.write_text("{}")
    prometheus = LabPrometheus(prometheus_binary, work_dir, pod_monitor_job(monitor, targets.path),
                               f"{policy.scrape_interval:g}s")
    added: dict[str, str] = {}

    def launch(index: int) -> VllmServer:
        print(f"scale-out: starting replica {index + 1} ...", file=out, flush=True)
        return start_and_wait(added_server(pair.servers[0], index, pair.log_dir), start_timeout, out)

    def join(server: VllmServer) -> None:
        targets.write({**targets.pods, server.name: server.url.removeprefix("http://")})
        added[server.name] = server.url
        backends_file.write_text(json.dumps(added))
        print(f"scale-out: {server.name} Ready ({server.url}), in Prometheus's targets and serve's backends",
              file=out, flush=True)

    scaler = LabScaler(prometheus, stack.query, policy, len(pair.servers), launch, join)
    try:
        deadline = time.monotonic() + PROMETHEUS_START_TIMEOUT
        while not prometheus.scraped(list(targets.pods)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Prometheus scraped no server within {PROMETHEUS_START_TIMEOUT:g} s; see "
                                   f"{prometheus.log}")
            time.sleep(0.5)
        with serve_process(pair.backends, ["--backends-file", str(backends_file), *serve_options], seed,
                           pair.log_dir / "serve-scale-out.log") as serve:
            origin = time.monotonic() + 1.0
            scaler.start(origin)
            sent = send_timed(serve.url, arrivals, origin)
            scaler.stop()
    finally:
        scaler._stop.set()
        for server in scaler.started:
            server.stop()
        prometheus.stop()
    routed: dict[str, int] = {}
    for reply in sent:
        routed[reply.routed_to] = routed.get(reply.routed_to, 0) + 1
    return LabRun(sent, scaler.steps, origin, scaler.start_seconds, routed)
