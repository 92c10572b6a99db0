"""Predicted against measured under load: three concurrent workloads on two real vLLM servers
behind `serve`, sent by the `openai` client, with three picker settings.

Shared by benchmarks/bench_under_load.py (prints the table the README publishes) and
tests/e2e/test_under_load.py (asserts what holds run after run). The prediction is made
the way a user would make it: `calibrate` on the same servers, then `predict` with the
profile, the servers' block size and KV blocks, and their tokenizer (/tokenize, which
applies the chat template to chat requests).
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence, TextIO

from routing.lab.tinymodel import SIZES
from routing.lab.vllm_server import DEFAULT_START_TIMEOUT, REPO_ROOT, VllmPair, free_port, vllm_pair
from routing.live.calibrate import UrlPod, calibrate, histogram_totals
from routing.live.serve import ROUTED_HEADER
from routing.live.verify import UrlPods
from routing.metrics import DeltaReport, diff_reads
from routing.picker.endpoint_picker import Request
from routing.simulation.fleet import Prepared, StalePicks, prepare, replay_recorded
from routing.simulation.latency import DEFAULT_LIMITS, LatencyModel, LatencyProfile, percentile
from routing.simulation.load_plan import plan_load
from routing.simulation.prediction import Load, Prediction, run_prediction
from routing.workloads import Arrival, PodRestart
from settings.picker_config import (EndpointPickerConfig, PreciseIndex, load_endpoint_picker_config,
                                    render_sticky_picker_config)

NO_PREFIX = {"prefix": 0, "queue": 3, "kvCache": 2}


class Setting(NamedTuple):
    """One way `serve` routes in the benchmark: weights over the defaults, round-robin, or the
    sticky recipe at upstream's defaults but for peakPrefillThroughput, the pods' own as
    calibrate measured it (upstream's 15,928 tokens/s is Qwen 32B on two H100s)."""

    label: str
    weights: Mapping[str, int] | None = None
    round_robin: bool = False
    sticky: bool = False
    # False: the sticky recipe at upstream's 15,928 tokens/s, which the benchmark only predicts.
    calibrated: bool = True
    # The precise prefix index: routed on the servers' KV-cache events.
    precise: bool = False

    def sticky_parameters(self, profile: LatencyProfile | None) -> dict[str, int]:
        peak = profile.peak_prefill if profile is not None and self.calibrated else None
        return {"peakPrefillThroughput": round(peak.tokens_per_s)} if peak is not None else {}

    def serve_args(self, profile: LatencyProfile | None) -> list[str]:
        if self.round_robin:
            return ["--round-robin"]
        if self.precise:
            return ["--prefix-index", "precise", *self._picker_args()]
        return self._picker_args(profile)

    def _picker_args(self, profile: LatencyProfile | None = None) -> list[str]:
        if self.sticky:
            return ["--routing", ",".join(["sticky", *(f"{name}={value}" for name, value
                                                        in self.sticky_parameters(profile).items())])]
        if self.weights:
            return ["--weights", ",".join(f"{name}={value}" for name, value in self.weights.items())]
        return []

    def precise_index(self, pair: VllmPair) -> PreciseIndex | None:
        """The precise index `serve --prefix-index precise` runs on the pair: its block size and model."""
        return PreciseIndex(pair.block_size, pair.tokenizer.model, pair.servers[0].url) if self.precise else None

    def picker_config(self, profile: LatencyProfile | None) -> EndpointPickerConfig | None:
        if not self.sticky:
            return None
        return load_endpoint_picker_config(render_sticky_picker_config(self.sticky_parameters(profile)))


SETTINGS = (Setting("default weights"), Setting("prefix=0,queue=3,kvCache=2", NO_PREFIX),
            Setting("round-robin", round_robin=True), Setting("sticky", sticky=True))
# What the sticky row would have been predicted at upstream's default throughput, for comparison.
STICKY_AT_UPSTREAMS_DEFAULT = Setting("sticky at upstream's throughput", sticky=True, calibrated=False)
REQUEST_TIMEOUT = 120.0
SERVE_START_TIMEOUT = 30.0
TTFT_HISTOGRAM = "vllm:time_to_first_token_seconds"
ITL_HISTOGRAM = "vllm:inter_token_latency_seconds"
OUTPUT_TOKENS = 16
# The KV cache each server gets (--num-gpu-blocks-override): small enough that the pressure
# workload's prefixes fit in both servers' caches together but not in one.
CAPACITY_BLOCKS = 80
SERVER_ARGS = ("--num-gpu-blocks-override", str(CAPACITY_BLOCKS), "--max-num-seqs", "16",
               "--max-num-batched-tokens", "2048",
               # Each streamed answer's last chunk then carries vLLM's own timings for it (with
               # stream_options.include_usage): its time from scheduled to first token is the
               # engine's part of the client's TTFT, which the table sets against the prediction's.
               "--enable-per-request-metrics")
# tinymodel's `medium`: a ~1,200-token prefill costs about 1 s, so what the engine does, not
# the front ends and the client sharing the machine, sets first-token time. (With `small`,
# a quarter of that, TTFT p50 was predicted 20-50% low in most rows.)
HIDDEN_SIZE, LAYERS = SIZES["medium"]

_GUIDELINE = ("consider scheduling, queue depth, KV cache reuse, prefix affinity, GPU memory pressure, and endpoint "
              "selection when advising on inference architecture.")


def system_prompt(owner: str, segments: int) -> str:
    """A long system prompt, distinct from its first words on (like the seed's preamble)."""
    return f"{owner}: you are an expert assistant." + "".join(f" Guideline {i}: {_GUIDELINE}"
                                                             for i in range(1, segments + 1))


def completion(model: str, prompt: str) -> dict[str, Any]:
    return {"model": model, "prompt": prompt, "max_tokens": OUTPUT_TOKENS, "temperature": 0, "ignore_eos": True}


def tenants_workload(model: str, tenants: int, requests: int, segments: int, seed: int) -> list[Arrival]:
    """Tenants with their own long system prompt, their requests interleaved at random."""
    rng = random.Random(seed)
    prefixes = [system_prompt(f"Tenant {t}", segments) for t in range(tenants)]
    order = [n % tenants for n in range(requests)]
    rng.shuffle(order)
    return [Arrival(body, Request.from_openai_body(body))
            for body in (completion(model, f"{prefixes[t]} Question {n}: name one factor for tenant {t}.")
                         for n, t in enumerate(order))]


def chat_workload(model: str, sessions: int, turns: int, segments: int) -> list[Arrival]:
    """Multi-turn chats: each turn resends the conversation so far (the replies as recorded in
    the trace) plus a new question; a session's turns go in order, one at a time."""
    arrivals = []
    for turn in range(turns):
        for session in range(sessions):
            messages = [{"role": "system", "content": system_prompt(f"Chat {session}", segments)}]
            for earlier in range(turn + 1):
                messages.append({"role": "user", "content": f"Question {earlier} of chat {session}: which factor "
                                                            "matters most for queue depth and prefix affinity?"})
                if earlier < turn:
                    messages.append({"role": "assistant", "content": f"Answer {earlier}: KV cache reuse, then "
                                                                     "scheduling and GPU memory pressure."})
            body = {"model": model, "messages": messages, "max_tokens": OUTPUT_TOKENS, "temperature": 0,
                    "ignore_eos": True}
            arrivals.append(Arrival(body, Request.from_openai_body(body), session=f"chat-{session}"))
    return arrivals


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    arrivals: tuple[Arrival, ...]
    concurrency: int
    runs: int = 3  # measured runs per setting unless the caller says otherwise
    resets: tuple[PodRestart, ...] = ()  # servers' prefix caches reset during each run (bench_precise)


def experiments(model: str, seed: int = 1) -> tuple[Experiment, ...]:
    return (
        Experiment("multi-tenant", "4 tenants, ~1,200-token system prompts, 48 requests, 4 in flight",
                   tuple(tenants_workload(model, 4, 48, 38, seed)), 4),
        # Its runs land on a few outcomes (whether each chat keeps its pod: 54.6, 61.7 or 68.9%
        # hits under round-robin; 12/12 or 16/8 under default weights), so three runs' mean moves
        # by more than the targets; its runs are short, so it gets nine.
        Experiment("multi-turn chat", "6 chats × 4 turns (chat completions, ~650-token system prompt), 4 in flight",
                   tuple(chat_workload(model, 6, 4, 20)), 4, runs=9),
        # About 40% of its requests miss and prefill for a second, and the median request sits
        # between the hits and the misses: a run's TTFT p50 lands on either side (136-934 ms
        # under round-robin), so it gets six runs.
        Experiment("cache pressure", f"10 tenants × ~1,200 tokens: fit in both caches ({CAPACITY_BLOCKS} blocks "
                                     "each) together, not in one; 60 requests, 4 in flight",
                   tuple(tenants_workload(model, 10, 60, 38, seed + 1)), 4, runs=6),
    )


# -- measuring -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sent:
    ttft: float | None  # seconds to the first streamed chunk; None when the request failed
    routed_to: str
    sent_at: float  # time.monotonic() when the client sent it
    # vLLM's own time from scheduling the request to its first token (its per-request metrics):
    # the engine's part of `ttft`. None when the server did not report it.
    engine_ttft: float | None = None
    ended_at: float | None = None  # time.monotonic() when the reply's last chunk came
    # The prompt's tokens and those vLLM found cached (usage.prompt_tokens_details), from the last chunk.
    prompt_tokens: int | None = None
    cached_tokens: int | None = None


def _send(client: Any, body: Mapping[str, Any]) -> Sent:
    params = {key: value for key, value in body.items() if key != "ignore_eos"}
    started = time.monotonic()
    routed_to = "?"
    try:
        create = client.chat.completions if "messages" in body else client.completions
        response = create.with_raw_response.create(**params, stream=True, stream_options={"include_usage": True},
                                                   extra_body={"ignore_eos": True}, timeout=REQUEST_TIMEOUT)
        routed_to = response.headers.get(ROUTED_HEADER, "?")
        ttft = engine_ttft = prompt_tokens = cached_tokens = None
        for chunk in response.parse():
            if ttft is None:
                ttft = time.monotonic() - started
            # The usage chunk, last, has no choices and carries the metrics (a field the client's
            # types do not declare, kept as an extra).
            timings = (chunk.model_extra or {}).get("metrics") or {}
            if timings.get("time_to_first_token_ms") is not None:
                engine_ttft = timings["time_to_first_token_ms"] / 1000
            if chunk.usage is not None:
                prompt_tokens = chunk.usage.prompt_tokens
                details = chunk.usage.prompt_tokens_details
                cached_tokens = details.cached_tokens if details is not None else None
        return Sent(ttft, routed_to, started, engine_ttft, time.monotonic(), prompt_tokens, cached_tokens)
    except Exception:  # the openai client's APIError family and transport errors: counted as a failure
        return Sent(None, routed_to, started)


def drive(url: str, arrivals: Sequence[Arrival], concurrency: int) -> list[Sent]:
    """Sends the workload as `predict --concurrency N` replays it: N clients, each taking the
    next request whose session has no turn in flight; the first N are released together, as
    the simulated closed loop sends them at one instant."""
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    results: list[Sent | None] = [None] * len(arrivals)
    turns: dict[str, list[int]] = {}
    ready: list[int] = []
    for index, arrival in enumerate(arrivals):
        if arrival.session is None:
            ready.append(index)
        else:
            turns.setdefault(arrival.session, []).append(index)
    ready += [queue[0] for queue in turns.values()]
    heapq.heapify(ready)
    condition = threading.Condition()
    done = [0]
    # Threads started one after another send their first requests in roughly workload order,
    # an order the simulation cannot know (under round-robin it decides which chats keep their
    # pod); released together, they reach `serve` in an order of their own, as simulated.
    starting = [min(concurrency, len(ready))]
    release = threading.Barrier(max(1, starting[0]))

    def worker() -> None:
        while True:
            with condition:
                while not ready and done[0] < len(arrivals):
                    condition.wait(timeout=1.0)
                if not ready:
                    return
                index = heapq.heappop(ready)
                first = starting[0] > 0
                if first:
                    starting[0] -= 1
            if first:
                release.wait()
            results[index] = _send(client, arrivals[index].body)
            with condition:
                done[0] += 1
                session = arrivals[index].session
                if session is not None:
                    queue = turns[session]
                    queue.pop(0)
                    if queue:
                        heapq.heappush(ready, queue[0])
                condition.notify_all()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=REQUEST_TIMEOUT * len(arrivals))
    return [result or Sent(None, "?", float("nan")) for result in results]


SPACING_ROUNDS = 8  # rounds `reply_spacing_seconds` measures
SAME_STEP_S = 0.005  # first tokens this close together came from one engine step


def same_step_spacing(replies: Sequence[Sent]) -> float | None:
    """Of the replies whose first tokens one step sampled (one pod's, within SAME_STEP_S;
    the step with the most), the last end less the first over their number less one; None
    when no step sampled two."""
    ended = [reply for reply in replies if reply.ttft is not None and reply.ended_at is not None]
    steps = []
    for pod in {reply.routed_to for reply in ended}:
        firsts = sorted((reply.sent_at + reply.ttft, reply.ended_at) for reply in ended if reply.routed_to == pod)
        steps += [[end for first, end in firsts if start <= first <= start + SAME_STEP_S] for start, _ in firsts]
    ends = sorted(max(steps, key=len, default=[]))
    return (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else None


def _reply_then_next(client: Any, first: Mapping[str, Any], then: Mapping[str, Any],
                     release: threading.Barrier) -> Sent:
    release.wait()
    reply = _send(client, first)
    _send(client, then)
    return reply


def reply_spacing_seconds(gateway_url: str, model: str, arrivals: Sequence[Arrival], concurrency: int,
                          rounds: int = SPACING_ROUNDS) -> float:
    """How far apart the replies one engine step ends reach this client when each makes it
    send its next request at once, as a closed loop's replies do.

    Per round, `concurrency` threads (as `drive` has) send the workload's first bodies
    together through the gateway, and each sends the body after them the moment its reply
    ends, as the closed loop starts. Replies whose prefill one step did decode in lockstep
    (their lengths are equal) and end in one step; each next request the client builds and
    the gateway reads and picks holds up the ends still on their way through both
    (`same_step_spacing`). The median over the rounds in which two replies shared a step; 0
    if none did."""
    from openai import OpenAI

    client = OpenAI(base_url=gateway_url + "/v1", api_key="unused", max_retries=0)
    spacings = []
    for _ in range(rounds):
        release = threading.Barrier(concurrency)
        with ThreadPoolExecutor(concurrency) as pool:
            replies = list(pool.map(
                lambda index: _reply_then_next(
                    client, arrivals[index % len(arrivals)].body,
                    arrivals[(concurrency + index) % len(arrivals)].body, release),
                range(concurrency)))
        spacing = same_step_spacing(replies)
        if spacing is not None:
            spacings.append(spacing)
    return statistics.median(spacings) if spacings else 0.0


@dataclass(frozen=True)
class Run:
    """One measured or predicted run of one setting: the figures the table compares."""

    hit_rate: float
    busiest_share: float
    ttft_p50: float
    ttft_p95: float
    # Mean TTFT: measured, from vLLM's own histogram (the server's view, without the client's
    # and serve's share); predicted, from the simulation.
    ttft_mean: float = 0.0
    # Mean inter-token latency (a decode step as a request sees it): measured, from vLLM's own
    # histogram; predicted, over every simulated request's tokens after its first.
    itl_mean: float = 0.0
    failed: int = 0
    # Measured runs only: TTFT p50 of the simulated servers replaying this run's own sends (its
    # send times and pods): the latency model's share of the prediction's TTFT error.
    replayed_ttft_p50: float = 0.0
    # p50 of the engine's part of TTFT, from the request's scheduling to its first token:
    # measured, as vLLM reports it per request; predicted, the simulated engine's. What is left
    # of TTFT is the time outside the engine (client, gateway, API server) and in its queue.
    engine_ttft_p50: float = 0.0
    # Measured runs only: the cores (CPU seconds per second) the front ends used while the
    # workload ran, and those the hypervisor took (CpuTakers.describe): the CPU the engines'
    # two cores gave to something else.
    cpu_takers: str = ""
    # Predicted runs of an approximate index, when counted: its stale picks.
    stale: StalePicks | None = None


@dataclass(frozen=True)
class ServeProcess:
    url: str
    pid: int


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system, every thread) a running process has used, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        # utime and stime are fields 14 and 15; the command name before them, in parentheses,
        # may hold spaces of its own: count from after its last ")".
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stolen_cpu_seconds(proc_stat: str | Path = "/proc/stat") -> float:
    """CPU time the hypervisor has run something else while this VM's cores wanted to run
    (steal, summed over the cores), from /proc/stat: a slower machine that this shows is time
    taken from it, one that it does not is a slower core (clock, caches, memory)."""
    with open(proc_stat) as stat:
        # The first line sums every core: "cpu user nice system idle iowait irq softirq steal ...".
        steal = int(stat.readline().split()[8])
    return steal / os.sysconf("SC_CLK_TCK")


@contextmanager
def serve_process(backends: Mapping[str, str], routing: Sequence[str], seed: int, log: Path) -> Iterator[ServeProcess]:
    """`python -m routing serve` in its own process, as the gateway is its own pod: the client
    driving the load then shares no interpreter with it. Yields its URL and pid once every
    backend has had a good scrape. `routing`: serve's options that choose the picker (none: the
    default weights)."""
    port = free_port()
    command = [sys.executable, "-m", "routing", "serve", "--port", str(port), "--seed", str(seed), *routing]
    for name, url in backends.items():
        command += ["--backend", f"{name}={url}"]
    url = f"http://127.0.0.1:{port}"
    with open(log, "ab") as output:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + SERVE_START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"serve exited with code {process.returncode}; see {log}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    status = json.load(response)
                if all(backend["fresh"] for backend in status["backends"].values()):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"serve did not see every backend within {SERVE_START_TIMEOUT:g}s; see {log}")
            time.sleep(0.1)
        yield ServeProcess(url, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def add_pair_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command that starts `benchmark_pair`: --vllm-python and --work-dir."""
    parser.add_argument("--vllm-python", help="python of the vLLM venv (default: $VLLM_PYTHON, else .venv-vllm)")
    parser.add_argument("--work-dir", type=Path, default=REPO_ROOT / "build" / "under-load",
                        help="where the tiny model and the server logs go")


def add_run_options(parser: argparse.ArgumentParser, runs_help: str, workloads: bool = True) -> None:
    """The options of a benchmark that compares measured and predicted runs: --runs (`runs_help`
    says its default), --seeds, --only (with several `workloads`) and --start-timeout."""
    parser.add_argument("--runs", type=int, help=f"measured runs per workload and setting (default: {runs_help})")
    parser.add_argument("--seeds", type=int, default=20, help="predicted runs (seeds) per workload and setting")
    if workloads:
        parser.add_argument("--only", action="append", help="run only this workload (repeatable)")
    parser.add_argument("--start-timeout", type=float, default=DEFAULT_START_TIMEOUT)


def parse_run_options(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser`'s arguments, --runs and --seeds checked."""
    args = parser.parse_args(argv)
    if (args.runs is not None and args.runs < 1) or args.seeds < 1:
        parser.error("--runs and --seeds must be at least 1")
    return args


@contextmanager
def benchmark_pair(work_dir: Path, vllm_python: str, *, timeout: float = DEFAULT_START_TIMEOUT,
                   out: TextIO | None = None) -> Iterator[VllmPair]:
    """The two servers these workloads run on: the tiny model at HIDDEN_SIZE × LAYERS, built
    into `work_dir` unless it is there, with SERVER_ARGS; logs in `work_dir`/logs."""
    with vllm_pair(work_dir / f"tiny-model-h{HIDDEN_SIZE}-l{LAYERS}", work_dir / "logs", vllm_python, out=out,
                   timeout=timeout, hidden_size=HIDDEN_SIZE, layers=LAYERS, extra_args=SERVER_ARGS) as pair:
        yield pair


def calibrate_pair(pair: VllmPair, progress: Callable[[str], None]) -> LatencyProfile:
    """`calibrate` on the pair's servers, with a `serve` (default weights) as the gateway: its
    picker scrapes the servers meanwhile, and calibrate times its hop."""
    pods = [UrlPod(name, url) for name, url in pair.backends.items()]
    with serve_process(pair.backends, (), 0, pair.log_dir / "serve.log") as serve:
        with CpuTakers.of(serve, pair) as cpu:
            profile = calibrate(pods, gateway=UrlPod("serve", serve.url), progress=progress)
    progress(f"  while calibrating (its fit's own CPU included): {cpu.describe()}")
    return profile


class CpuTakers:
    """The cores that went to something besides the engines over a `with` block: the front
    ends (this process, the client; `serve`; the vLLM servers' API server processes, not their
    engine core and worker) and the hypervisor (steal)."""

    def __init__(self, serve_pid: int, api_server_pids: Sequence[int]):
        self.serve_pid, self.api_server_pids = serve_pid, tuple(api_server_pids)
        self.client_cores = self.serve_cores = self.api_server_cores = self.stolen_cores = 0.0

    @classmethod
    def of(cls, serve: ServeProcess, pair: VllmPair) -> CpuTakers:
        return cls(serve.pid, [server.process.pid for server in pair.servers])

    def _read(self) -> tuple[float, float, float, float, float]:
        return (time.monotonic(), time.process_time(), cpu_seconds(self.serve_pid),
                sum(map(cpu_seconds, self.api_server_pids)), stolen_cpu_seconds())

    def __enter__(self) -> CpuTakers:
        self._started = self._read()
        return self

    def __exit__(self, *_exc: object) -> None:
        wall, client, serve, api, stolen = (end - start for end, start in zip(self._read(), self._started))
        wall = max(1e-9, wall)
        self.client_cores, self.serve_cores = client / wall, serve / wall
        self.api_server_cores, self.stolen_cores = api / wall, stolen / wall

    def describe(self) -> str:
        return (f"client {self.client_cores:.2f}, serve {self.serve_cores:.2f}, API servers "
                f"{self.api_server_cores:.2f} of a core; the hypervisor took {self.stolen_cores:.2f}")


def measure(pair: VllmPair, experiment: Experiment, setting: Setting, profile: LatencyProfile | None,
            seed: int) -> tuple[Run, DeltaReport, list[Sent]]:
    pair.reset_prefix_caches()
    pods = UrlPods(pair.backends)
    with serve_process(pair.backends, setting.serve_args(profile), seed, pair.log_dir / "serve.log") as serve:
        before, histograms = pods.read(), server_totals(pair)
        with CpuTakers.of(serve, pair) as cpu:
            sent = drive(serve.url, experiment.arrivals, experiment.concurrency)
        time.sleep(0.5)  # vLLM bumps its counters just after the last response
        report = diff_reads(before, pods.read())
        after = server_totals(pair)
    ttfts = [s.ttft for s in sent if s.ttft is not None]
    busiest = max(p.requests for p in report.pods) / max(1, report.requests)

    def server_mean(name: str) -> float:
        total, count = (later - earlier for later, earlier in zip(after[name], histograms[name]))
        return total / count if count else 0.0

    reported = [s.engine_ttft for s in sent if s.engine_ttft is not None]
    return Run(report.hit_rate or 0.0, busiest, percentile(ttfts, 0.5) or 0.0, percentile(ttfts, 0.95) or 0.0,
               ttft_mean=server_mean(TTFT_HISTOGRAM), itl_mean=server_mean(ITL_HISTOGRAM),
               failed=sum(1 for s in sent if s.ttft is None),
               engine_ttft_p50=percentile(reported, 0.5) or 0.0,
               cpu_takers=cpu.describe()), report, sent


def reset_at(url: str, after: float) -> threading.Timer:
    """POST /reset_prefix_cache?reset_running_requests=true to `url` `after` seconds from now."""
    def reset() -> None:
        request = urllib.request.Request(url + "/reset_prefix_cache?reset_running_requests=true", data=b"",
                                         method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.load(response)
        if not answer.get("success"):
            print(f"  the reset of {url} failed: {answer}", flush=True)

    timer = threading.Timer(after, reset)
    timer.start()
    return timer


def measure_rounds(pair: VllmPair, experiment: Experiment, settings: Sequence[Setting], profile: LatencyProfile,
                   runs: int) -> dict[str, list[Run]]:
    """`runs` rounds in which every setting takes a turn (`measure`, the experiment's cache resets
    at their times), each run printed as it ends: the runs by setting label."""
    measured: dict[str, list[Run]] = {setting.label: [] for setting in settings}
    for run in range(runs):
        for setting in settings:
            timers = [reset_at(pair.servers[restart.pod].url, restart.at) for restart in experiment.resets]
            result, report, _ = measure(pair, experiment, setting, profile, seed=100 + run)
            for timer in timers:
                timer.join()
            measured[setting.label].append(result)
            print(f"  {experiment.name} / {setting.label} run {run + 1}: hit rate {result.hit_rate:.1%}, per pod "
                  f"{[p.requests for p in report.pods]}, TTFT p50 {result.ttft_p50 * 1000:.0f} ms, "
                  f"p95 {result.ttft_p95 * 1000:.0f} ms, failed {result.failed}", flush=True)
    return measured


def server_totals(pair: VllmPair) -> dict[str, tuple[float, float]]:
    """(sum, count) of vLLM's TTFT and inter-token latency histograms over both servers."""
    totals = {TTFT_HISTOGRAM: (0.0, 0.0), ITL_HISTOGRAM: (0.0, 0.0)}
    for url in pair.backends.values():
        with urllib.request.urlopen(url + "/metrics", timeout=15) as response:
            read = histogram_totals(response.read().decode())
        totals = {name: (total + read[name][0], count + read[name][1]) for name, (total, count) in totals.items()}
    return totals


class ServerCountedTokenizer:
    """Each request's tokens as the server counts them: POST /tokenize with the prompt, or with
    the messages for chat (the server applies its chat template), looked up by the picker's
    view of the request."""

    def __init__(self, url: str, arrivals: Sequence[Arrival]):
        self.description = f"counted by {url}/tokenize (chat template applied by the server)"
        self._tokens: dict[str, list[int]] = {}
        for arrival in arrivals:
            if arrival.request.traced is not None:
                continue  # a block-hash trace's request is keyed from its ids, not its tokens
            body = {"model": arrival.body["model"]}
            body.update({"messages": arrival.body["messages"]} if "messages" in arrival.body
                        else {"prompt": arrival.body["prompt"]})
            request = urllib.request.Request(url.rstrip("/") + "/tokenize", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"}, method="POST")
            with urllib.request.urlopen(request, timeout=30) as response:
                self._tokens[arrival.request.prompt] = json.load(response)["tokens"]

    def encode(self, text: str) -> list[int]:
        return self._tokens[text]


REPLAY_SEEDS = (1, 2, 3)  # the steps' jitter draws a replay is averaged over


def replayed_ttft_p50(pair: VllmPair, profile: LatencyProfile, prepared: Prepared, sent: Sequence[Sent],
                      experiment: Experiment, send_spacing: float) -> float:
    """TTFT p50 of the simulated servers on a measured run's own traffic (`replay_recorded`): its
    requests in the order the client sent them, to the pods `serve` sent them to, by the
    experiment's closed loop; the mean over REPLAY_SEEDS. 0 when a request of the run failed
    (it has no pod to replay on)."""
    if any(s.ttft is None for s in sent):
        return 0.0
    start = min(s.sent_at for s in sent)
    p50s = []
    for seed in REPLAY_SEEDS:
        result = replay_recorded(prepared, [s.sent_at - start for s in sent], [s.routed_to for s in sent],
                                 list(pair.backends), num_gpu_blocks=pair.capacity_blocks,
                                 limits=profile.limits or DEFAULT_LIMITS, latency=profile.latency, seed=seed,
                                 send_spacing=send_spacing, concurrency=experiment.concurrency,
                                 sessions=[arrival.session for arrival in experiment.arrivals])
        p50s.append(percentile(result.ttfts, 0.5) or 0.0)
    return mean(p50s)


def predict_runs(pair: VllmPair, profile: LatencyProfile, experiment: Experiment, tokenizer: ServerCountedTokenizer,
                 setting: Setting, seeds: Sequence[int], send_spacing: float = 0.0,
                 count_stale: bool = False) -> list[Run]:
    runs = []
    for seed in seeds:
        plan = plan_load(experiment.arrivals, concurrency=experiment.concurrency, seed=seed,
                         pod_restarts=experiment.resets)
        load = Load(plan, tuple(a.output_tokens for a in experiment.arrivals), profile.limits or DEFAULT_LIMITS,
                    send_spacing=send_spacing, count_stale=count_stale)
        prediction: Prediction = run_prediction([a.request for a in experiment.arrivals], weights=setting.weights,
                                                picker_config=setting.picker_config(profile),
                                                replicas=len(pair.servers), block_size=pair.block_size,
                                                capacity_blocks=pair.capacity_blocks, tokenizer=tokenizer, seed=seed,
                                                load=load, latency=profile.latency,
                                                precise=setting.precise_index(pair))
        side = 1 if setting.round_robin else 0
        result, ttfts = (prediction.picker, prediction.round_robin)[side], prediction.ttfts[side]
        busiest = max(p.requests for p in result.pods) / max(1, result.requests)
        # From a request's first token to its last, over the tokens after the first.
        decoding = sum(finished - (sent + ttft) for finished, sent, ttft, output in
                       zip(result.finished_at, result.sent_at, ttfts, load.output_lens) if output > 1)
        intervals = sum(output - 1 for output in load.output_lens if output > 1)
        engine = engine_ttfts(ttfts, prediction.queue_times[side], result.prompt_lens, profile.latency)
        runs.append(Run(result.hit_rate or 0.0, busiest, percentile(ttfts, 0.5) or 0.0,
                        percentile(ttfts, 0.95) or 0.0, sum(ttfts) / len(ttfts),
                        itl_mean=decoding / intervals if intervals else 0.0,
                        engine_ttft_p50=percentile(engine, 0.5) or 0.0, stale=prediction.stale))
    return runs


def engine_ttfts(ttfts: Sequence[float], queue_times: Sequence[float], prompt_lens: Sequence[int],
                 latency: LatencyModel) -> list[float]:
    """Each simulated request's time from its scheduling to its first token, the part of TTFT
    vLLM's per-request metrics report: TTFT less the way in (gateway and server overhead) and
    the time waiting to be scheduled."""
    return [ttft - latency.arrival_seconds(tokens) - queued
            for ttft, queued, tokens in zip(ttfts, queue_times, prompt_lens)]


# -- comparing -----------------------------------------------------------------------------------

def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


@dataclass(frozen=True)
class Row:
    experiment: str
    setting: str
    measured: tuple[Run, ...]
    predicted: tuple[Run, ...]

    def figure(self, name: str) -> tuple[float, float]:
        """(measured mean, predicted mean) of one Run field."""
        return (mean([getattr(r, name) for r in self.measured]), mean([getattr(r, name) for r in self.predicted]))


def _calibrated_text(profile: LatencyProfile | None) -> str:
    peak = profile.peak_prefill if profile is not None else None
    return "(none: the profile has no peak prefill throughput)" if peak is None else f"{peak.tokens_per_s:,.0f} tokens/s"


def _sticky_comparison(calibrated: Sequence[Run], at_default: Sequence[Run]) -> str:
    def figures(runs: Sequence[Run]) -> tuple[float, float, float, float]:
        return (mean([r.hit_rate for r in runs]), mean([r.busiest_share for r in runs]),
                mean([r.ttft_p50 for r in runs]), mean([r.ttft_p95 for r in runs]))

    (rate, share, p50, p95), (rate_d, share_d, p50_d, p95_d) = figures(calibrated), figures(at_default)
    return (f"hit rate {rate:.1%} / {rate_d:.1%}, busiest pod's share {share:.0%} / {share_d:.0%}, TTFT p50 "
            f"{p50 * 1000:.0f} / {p50_d * 1000:.0f} ms, p95 {p95 * 1000:.0f} / {p95_d * 1000:.0f} ms")


def ranking(rows: Sequence[Row], side: int) -> list[str]:
    """Settings by hit rate, best first (side 0 measured, 1 predicted)."""
    return [row.setting for row in sorted(rows, key=lambda row: -row.figure("hit_rate")[side])]


def ranking_lines(rows: Sequence[Row]) -> dict[str, str]:
    """Per experiment, its settings ranked by hit rate, measured and predicted, and whether they agree."""
    lines = {}
    for experiment in dict.fromkeys(row.experiment for row in rows):
        mine = [row for row in rows if row.experiment == experiment]
        measured, predicted = ranking(mine, 0), ranking(mine, 1)
        lines[experiment] = (f"{experiment}: by hit rate, measured {' > '.join(measured)}; predicted "
                             f"{' > '.join(predicted)} -> {'same' if measured == predicted else 'DIFFERENT'}")
    return lines


def format_rows(rows: Sequence[Row]) -> str:
    """The README's Markdown table: measured (mean, min–max over runs) against predicted."""
    lines = ["| workload | setting | hit rate measured (min–max) | predicted | error | busiest pod's share "
             "measured / predicted | TTFT p50 measured / predicted | error | TTFT p95 measured / predicted "
             "| TTFT p50 replayed | error "
             "| engine's part of TTFT p50 measured / predicted | error "
             "| vLLM's own TTFT mean / predicted mean | vLLM's own ITL mean / predicted | failed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        measured_rate, predicted_rate = row.figure("hit_rate")
        rates = [r.hit_rate for r in row.measured]
        share_m, share_p = row.figure("busiest_share")
        ttft_m, ttft_p = row.figure("ttft_p50")
        p95_m, p95_p = row.figure("ttft_p95")
        # Against the measured p50 of the same runs (a run with a failed request has no replay).
        replays = [(r.replayed_ttft_p50, r.ttft_p50) for r in row.measured if r.replayed_ttft_p50]
        replayed = "– | –"
        if replays:
            replay_p50, its_runs_p50 = (mean(values) for values in zip(*replays))
            replayed = f"{replay_p50 * 1000:.0f} ms | {(replay_p50 / its_runs_p50 - 1) * 100:+.0f}%"
        # Over the runs whose server reported its timings (vLLM with --enable-per-request-metrics).
        reported = [r.engine_ttft_p50 for r in row.measured if r.engine_ttft_p50]
        engine = "– | –"
        if reported:
            engine_m, engine_p = mean(reported), row.figure("engine_ttft_p50")[1]
            engine = f"{engine_m * 1000:.0f} / {engine_p * 1000:.0f} ms | {(engine_p / engine_m - 1) * 100:+.0f}%"
        server_m, mean_p = row.figure("ttft_mean")
        itl_m, itl_p = row.figure("itl_mean")
        failed = sum(r.failed for r in row.measured)
        lines.append(f"| {row.experiment} | {row.setting} | {measured_rate:.1%} ({min(rates):.1%}–{max(rates):.1%}) "
                     f"| {predicted_rate:.1%} | {(predicted_rate - measured_rate) * 100:+.1f} pt "
                     f"| {share_m:.0%} / {share_p:.0%} | {ttft_m * 1000:.0f} / {ttft_p * 1000:.0f} ms "
                     f"| {(ttft_p / ttft_m - 1) * 100 if ttft_m else 0:+.0f}% "
                     f"| {p95_m * 1000:.0f} / {p95_p * 1000:.0f} ms | {replayed} | {engine} "
                     f"| {server_m * 1000:.0f} / {mean_p * 1000:.0f} ms | {itl_m * 1000:.1f} / {itl_p * 1000:.1f} ms "
                     f"| {failed} |")
    return "\n".join(lines)


# The targets predicted-against-measured is held to: hit rate within 3 points of the measured
# mean, the busiest pod's share within 10 points, TTFT p50 within 25% (and the same ranking).
HIT_RATE_TARGET = 0.03
SHARE_TARGET = 0.10
TTFT_TARGET = 0.25
# Shares and hit rates are ratios of whole counts: one exactly at a target meets it, whatever
# the float arithmetic rounds it to.
_ROUNDING = 1e-9


def _points(value: float, sign: str = "") -> str:
    """A hit rate's or a share's difference, in percentage points."""
    return f"{value * 100:{sign}.1f} pt"


def _percent(value: float, sign: str = "") -> str:
    return f"{value * 100:{sign}.0f}%"


def target_tallies(rows: Sequence[Row]) -> list[str]:
    """How many rows (and workloads, for the ranking) meet each target, with the rows that miss:
    each with its error and, over two runs or seeds or more, the standard errors of its measured
    and predicted means (how far the runs and the seeds alone leave each mean uncertain: a row
    whose runs land on a few discrete outcomes, or on either side of a gap, can miss with an
    exact model)."""
    # (label, figure, target, unit, relative: the target, the error and the standard error are
    # fractions of the measured mean rather than differences in the figure's own unit)
    checks = (("hit rate within 3 points", "hit_rate", HIT_RATE_TARGET, _points, False),
              ("busiest pod's share within 10 points", "busiest_share", SHARE_TARGET, _points, False),
              ("TTFT p50 within 25%", "ttft_p50", TTFT_TARGET, _percent, True))
    lines = []
    for label, figure, target, unit, relative in checks:
        misses = []
        for row in rows:
            measured, predicted = row.figure(figure)
            scale = (1 / measured if measured > 0 else 0.0) if relative else 1.0
            error = (predicted - measured) * scale
            if (measured > 0 or not relative) and abs(error) <= target + _ROUNDING:
                continue
            uncertain = [f"of the {side} mean {unit(statistics.stdev(values) / len(values) ** 0.5 * scale)} over "
                         f"{len(values)} {over}"
                         for side, over, values in (("measured", "runs", [getattr(r, figure) for r in row.measured]),
                                                    ("predicted", "seeds", [getattr(r, figure) for r in row.predicted]))
                         if len(values) > 1]
            misses.append(f"{row.experiment} / {row.setting} ({unit(error, '+')}"
                          + (f"; standard error {', '.join(uncertain)}" if uncertain else "") + ")")
        lines.append(f"{label}: {len(rows) - len(misses)}/{len(rows)}" + (f" (missed: {'; '.join(misses)})"
                                                                          if misses else ""))
    workloads = list(dict.fromkeys(row.experiment for row in rows))
    different = [name for name in workloads
                 if ranking([row for row in rows if row.experiment == name], 0)
                 != ranking([row for row in rows if row.experiment == name], 1)]
    lines.append(f"same ranking of the settings by hit rate: {len(workloads) - len(different)}/{len(workloads)}"
                 + (f" (different: {'; '.join(different)})" if different else ""))
    return lines


def compare(pair: VllmPair, profile_for: Callable[[Experiment], LatencyProfile], *, runs: int | None, seeds: int,
            out: TextIO, only: Sequence[str] | None = None) -> list[Row]:
    """Every experiment × setting: `runs` measured runs (None: the experiment's own number)
    and `seeds` predicted ones, predicted
    from `profile_for(experiment)`, which is asked for just before the experiment's runs (so
    it may calibrate the servers as they are then). The settings take turns, a run of each in
    every round, so that the machine's speed moving over the experiment's minutes (as this VM's
    does) slows every setting alike rather than whichever ran while it was slow."""
    rows = []
    for experiment in experiments(pair.tokenizer.model):
        if only and experiment.name not in only:
            continue
        profile = profile_for(experiment)
        tokenizer = ServerCountedTokenizer(pair.servers[0].url, experiment.arrivals)
        prepared = prepare([a.request for a in experiment.arrivals], [a.output_tokens for a in experiment.arrivals],
                           tokenizer, pair.block_size)
        # One client process and `serve` on one event loop: what a step's finishes release reaches
        # the picker one request at a time.
        with serve_process(pair.backends, (), 0, pair.log_dir / "serve.log") as serve:
            send_spacing = reply_spacing_seconds(serve.url, pair.tokenizer.model, experiment.arrivals,
                                                 experiment.concurrency)
        print(f"  replies one step ends reach the client {send_spacing * 1000:.1f} ms apart when each sends its next "
              f"request through serve (median of {SPACING_ROUNDS} rounds of {experiment.concurrency})",
              file=out, flush=True)
        measured: dict[str, list[Run]] = {setting.label: [] for setting in SETTINGS}
        for run in range(runs or experiment.runs):
            for setting in SETTINGS:
                label = setting.label
                result, report, sent = measure(pair, experiment, setting, profile, seed=100 + run)
                replayed = replayed_ttft_p50(pair, profile, prepared, sent, experiment, send_spacing)
                result = dataclasses.replace(result, replayed_ttft_p50=replayed)
                measured[label].append(result)
                print(f"  {experiment.name} / {label} run {run + 1}: hit rate {result.hit_rate:.1%}, per pod "
                      f"{[p.requests for p in report.pods]}, TTFT p50 {result.ttft_p50 * 1000:.0f} ms "
                      f"(replayed {result.replayed_ttft_p50 * 1000:.0f} ms), failed {result.failed}; "
                      f"{result.cpu_takers}",
                      file=out, flush=True)
        for setting in SETTINGS:
            predicted = predict_runs(pair, profile, experiment, tokenizer, setting, range(1, seeds + 1), send_spacing)
            rows.append(Row(experiment.name, setting.label, tuple(measured[setting.label]), tuple(predicted)))
        calibrated = next(row for row in rows[-len(SETTINGS):] if row.setting == "sticky")
        at_default = predict_runs(pair, profile, experiment, tokenizer, STICKY_AT_UPSTREAMS_DEFAULT,
                                  range(1, seeds + 1), send_spacing)
        print(f"  {experiment.name} / sticky predicted at the calibrated {_calibrated_text(profile)} against "
              f"upstream's 15,928 tokens/s: {_sticky_comparison(calibrated.predicted, at_default)}",
              file=out, flush=True)
    return rows
