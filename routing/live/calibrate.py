"""`python -m routing calibrate`: measure live vLLM pods and write the latency profile `predict
--latency-profile` uses.

Sends a short calibration workload of its own to every pod at once (so the pods contend for
the machine as they do under load), each pod's requests one after another in phases that
every pod starts together:
prompts of three lengths with no shared prefix (prefill cost per token), then short
prompts with long replies, alone and several at a time (decode cost per sequence). Times
come from vLLM's own histograms, read from /metrics before and after each phase, never
from the client's clock, so the API server's proxy in between adds nothing:

- `vllm:request_prefill_time_seconds` and `vllm:request_prefill_kv_computed_tokens`: the
  prefill step's time against the prompt tokens it computed;
- `vllm:inter_token_latency_seconds`: a decode step's time at one and at N sequences;
- `vllm:time_to_first_token_seconds` less queue and prefill time: the overhead outside the
  engine.

A least-squares fit of step = step_s + prefill_token_s × tokens + decode_seq_s × sequences
+ context_token_s × cached tokens + prefill_attention_s × the pairs a prefill attends over
(routing/simulation/latency.py) gives the model. Each phase is replayed on the simulated engine to know
which steps a mean covers: with several requests in flight, a request's prefill may share
its step with others, and a decoding request's inter-token interval may hold a step that
prefills a newly sent one (`replay_phase`). `vllm:cache_config_info` gives block size and KV
blocks, and the server's /server_info (served with VLLM_SERVER_DEV_MODE=1) its max_num_seqs
and max_num_batched_tokens.

Last, every pod prefills prompts of one full chunk (max_num_batched_tokens) one at a time: the
prefill step's computed tokens over its time, request by request, is the peak prefill
throughput the sticky recipe's prefix-cache-affinity filter turns in-flight tokens into a TTFT
with (`peakPrefillThroughput`, whose upstream default of 15,928 tokens/s is Qwen 32B on two
H100s). calibrate prints the `pulumi config set` line for it and the profile carries it. With `--gateway-url`, one-token requests sent through the gateway
and straight to the pods in turn time the gateway's hop (`gateway_hop`), which predict adds
to every request's way in.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import heapq
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from routing.metrics import parse_metrics
from routing.options import (OptionError, add_model_options, http_url, load_stack_model, named_url, positive_int,
                             positive_seconds, unique_named_urls)
from routing.simulation.engine import Engine, EngineRequest
from routing.simulation.fleet import DEFAULT_BLOCK_SIZE, DEFAULT_SCRAPE_INTERVAL
from routing.simulation.latency import DEFAULT_LIMITS, EngineLimits, LatencyModel, LatencyProfile, PeakPrefill

HISTOGRAMS = ("vllm:request_prefill_time_seconds", "vllm:request_prefill_kv_computed_tokens",
              "vllm:request_queue_time_seconds", "vllm:time_to_first_token_seconds",
              "vllm:inter_token_latency_seconds", "vllm:request_prompt_tokens")
# Fractions of the server's max_model_len (capped) that the prefill phases' prompts aim at.
PREFILL_TARGETS = (0.1, 0.3, 0.5)
MAX_PREFILL_TOKENS = 3000
DECODE_TOKENS = 32
CONCURRENT_DECODES = 6
REQUESTS_PER_PHASE = 8
# One-token requests sent through the gateway, and as many straight to the pods, to time its hop:
# a few milliseconds, against a round trip that varies by as much between two requests.
GATEWAY_REQUESTS = 32
# One-chunk prefills per pod for the peak prefill throughput, each alone on its pod.
PEAK_PREFILLS = 8
# Prompts aim this far under a chunk: words are counted in tokens per word measured on another
# prompt, and a prompt a few tokens over the chunk would be prefilled in two steps.
CHUNK_FILL = 0.95
# Fits on the last fit's replayed schedule, at most (they settle in two or three).
FIT_ROUNDS = 6
REQUEST_TIMEOUT = 120.0
# vLLM updates its histograms just after a response ends: wait this long before reading them.
COUNTERS_CATCH_UP = 0.3
_WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
          "quebec romeo sierra tango uniform victor whiskey xray yankee zulu the of and to in is that for on "
          "are with as they at be this from have or by one had not but what all were when we there can").split()


class CalibrateError(RuntimeError):
    """A pod that cannot be calibrated, and why."""


class PodChannel(Protocol):
    name: str
    # How the user named it, the start of every message about it.
    where: str

    def get(self, path: str) -> bytes: ...

    def post(self, path: str, body: Mapping[str, Any]) -> bytes: ...


@dataclass
class UrlPod:
    """A pod reached at its own URL (--pod-url NAME=URL)."""

    name: str
    url: str

    @property
    def where(self) -> str:
        return f"--pod-url {self.name}={self.url}"

    def _call(self, request: urllib.request.Request) -> bytes:
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
                return response.read()
        except (urllib.error.URLError, OSError) as error:
            raise CalibrateError(f"{self.where}: {request.get_method()} {request.full_url} failed ({error}); "
                                 f"{self.fix}") from None

    @property
    def fix(self) -> str:
        return "is it a running vLLM server's base URL?"

    def get(self, path: str) -> bytes:
        return self._call(urllib.request.Request(self.url.rstrip("/") + path))

    def post(self, path: str, body: Mapping[str, Any]) -> bytes:
        return self._call(urllib.request.Request(self.url.rstrip("/") + path, data=json.dumps(body).encode(),
                                                 headers={"Content-Type": "application/json"}, method="POST"))


class UrlGateway(UrlPod):
    """The gateway clients send to (--gateway-url URL), reached as a pod is."""

    @property
    def where(self) -> str:
        return f"--gateway-url {self.url}"

    @property
    def fix(self) -> str:
        return "is the gateway up (the stack's Gateway, or `python -m routing serve`) and the URL its base address?"


@dataclass
class KubePod:
    """A pod reached through the API server's pod proxy, as `verify` reads pods."""

    name: str
    api: Any  # verify.KubeApi
    namespace: str
    port: int

    @property
    def where(self) -> str:
        return f"pod {self.name}"

    def _path(self, path: str) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}:{self.port}/proxy{path}"

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> bytes:
        from routing.live.verify import api_failure

        try:
            status, data = self.api.call(method, self._path(path), body, timeout=REQUEST_TIMEOUT)
        except Exception as error:  # ApiException, urllib3 errors, exec-auth failures
            raise CalibrateError(api_failure(f"pod {self.name}: {method} {self._path(path)}", error,
                                             f"kubectl get --raw {self._path('/metrics')}")) from None
        if status != 200:
            raise CalibrateError(f"pod {self.name}: {method} {path} answered HTTP {status}")
        return data

    def get(self, path: str) -> bytes:
        return self._call("GET", path)

    def post(self, path: str, body: Mapping[str, Any]) -> bytes:
        return self._call("POST", path, body)


def histogram_totals(text: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each histogram in HISTOGRAMS, over all its label sets."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith("_sum") or name.endswith("_count"):
            sums[name] = sums.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return {name: (sums.get(name + "_sum", 0.0), sums.get(name + "_count", 0.0)) for name in HISTOGRAMS}


def mean_delta(before: Mapping[str, tuple[float, float]], after: Mapping[str, tuple[float, float]],
               name: str) -> float | None:
    total = after[name][0] - before[name][0]
    count = after[name][1] - before[name][1]
    return total / count if count > 0 else None


def prompt(rng: random.Random, words: int) -> str:
    """A prompt no other calibration prompt shares a prefix with: a random id first."""
    return f"{rng.getrandbits(64):016x} " + " ".join(rng.choice(_WORDS) for _ in range(words))


@dataclass(frozen=True)
class Phase:
    name: str
    words: int
    max_tokens: int
    concurrent: int
    # Every prompt of the phase starts with the same `words` and adds a short unique question:
    # all but the first hit the cache, so their prefill reads a long cached context.
    shared_prefix: bool = False


def phases(max_model_len: int, tokens_per_word: float) -> list[Phase]:
    cap = min(MAX_PREFILL_TOKENS, max_model_len)
    # One output token: the client's wait for the whole answer is then its time to first token.
    prefill = [Phase(f"prefill-{round(fraction * 100)}%", max(8, int(fraction * cap / tokens_per_word)), 1, 1)
               for fraction in PREFILL_TARGETS]
    long_words = max(8, int(0.3 * cap / tokens_per_word))
    return prefill + [
        Phase("prefill-hit", long_words, 1, 1, shared_prefix=True),
        Phase("decode-1", 16, DECODE_TOKENS, 1),
        Phase(f"decode-{CONCURRENT_DECODES}", 16, DECODE_TOKENS, CONCURRENT_DECODES),
        Phase("decode-long-1", long_words, DECODE_TOKENS, 1),
        Phase(f"decode-long-{CONCURRENT_DECODES // 2}", long_words, DECODE_TOKENS, CONCURRENT_DECODES // 2)]


def run_phase(pod: PodChannel, model: str, phase: Phase, rng: random.Random) -> dict[str, float | None]:
    before = histogram_totals(pod.get("/metrics").decode())
    count = REQUESTS_PER_PHASE * phase.concurrent
    shared = prompt(rng, phase.words)
    texts = ([f"{shared} {prompt(rng, 12)}" for _ in range(count)] if phase.shared_prefix
             else [prompt(rng, phase.words) for _ in range(count)])
    # Streamed, as clients stream: the API server's work per token is then part of what is measured.
    bodies = [{"model": model, "prompt": text, "max_tokens": phase.max_tokens, "temperature": 0, "ignore_eos": True,
               "stream": True} for text in texts]
    def timed(body: Mapping[str, Any]) -> float:
        started = time.monotonic()
        pod.post("/v1/completions", body)
        return time.monotonic() - started

    with ThreadPoolExecutor(phase.concurrent) as pool:
        durations = list(pool.map(timed, bodies))
    time.sleep(COUNTERS_CATCH_UP)
    after = histogram_totals(pod.get("/metrics").decode())
    return {"prefill": mean_delta(before, after, "vllm:request_prefill_time_seconds"),
            "computed": mean_delta(before, after, "vllm:request_prefill_kv_computed_tokens"),
            "queue": mean_delta(before, after, "vllm:request_queue_time_seconds"),
            "ttft": mean_delta(before, after, "vllm:time_to_first_token_seconds"),
            "itl": mean_delta(before, after, "vllm:inter_token_latency_seconds"),
            "prompt": mean_delta(before, after, "vllm:request_prompt_tokens"),
            # How much identical requests' durations differ (seen from here: only the spread is used).
            "spread": statistics.pstdev(durations) / statistics.mean(durations) if len(durations) > 1 else None,
            "client": statistics.mean(durations)}


def chunk_tokens(limits: EngineLimits | None, max_model_len: int) -> int:
    """A full prefill chunk: the step's token budget (vLLM's default when not reported), within
    the context."""
    budget = (limits or DEFAULT_LIMITS).max_num_batched_tokens
    return max(16, min(budget, max_model_len - 8))


def peak_prefill_rates(pod: PodChannel, model: str, chunk: int, tokens_per_word: float, rng: random.Random,
                       count: int = PEAK_PREFILLS) -> list[float]:
    """Prefill tokens per second of `count` one-chunk prompts sent one at a time, each from
    vLLM's own histograms read around it (the prefill step's computed tokens over its time)."""
    rates = []
    for _ in range(count):
        before = histogram_totals(pod.get("/metrics").decode())
        pod.post("/v1/completions", {"model": model, "prompt": prompt(rng, max(8, int(CHUNK_FILL * chunk / tokens_per_word))),
                                     "max_tokens": 1, "temperature": 0, "stream": True})
        time.sleep(COUNTERS_CATCH_UP)
        after = histogram_totals(pod.get("/metrics").decode())
        seconds = after["vllm:request_prefill_time_seconds"][0] - before["vllm:request_prefill_time_seconds"][0]
        computed = (after["vllm:request_prefill_kv_computed_tokens"][0]
                    - before["vllm:request_prefill_kv_computed_tokens"][0])
        if seconds > 0 and computed > 0:
            rates.append(computed / seconds)
    return rates


def peak_prefill(rates: Sequence[float], chunk: int) -> PeakPrefill | None:
    if not rates:
        return None
    return PeakPrefill(statistics.median(rates), min(rates), max(rates), len(rates), chunk)


def gateway_hop(gateway: PodChannel, pods: Sequence[PodChannel], model: str, rng: random.Random, *,
                clock: Callable[[], float] = time.monotonic) -> float:
    """What the gateway adds to a client's round trip: one-token completions of short unique
    prompts sent in turn through `gateway` and straight to a pod (the pods in turn), the
    median of one less the median of the other, never below 0. On idle pods, so the two
    sides differ by the hop alone."""
    through, direct = [], []
    for index in range(GATEWAY_REQUESTS):
        for channel, seconds in ((gateway, through), (pods[index % len(pods)], direct)):
            # A short prompt: the less the server works, the less its time varies.
            body = {"model": model, "prompt": prompt(rng, 4), "max_tokens": 1, "temperature": 0, "stream": True}
            started = clock()
            channel.post("/v1/completions", body)
            seconds.append(clock() - started)
    return max(0.0, statistics.median(through) - statistics.median(direct))


def _served_model(pod: PodChannel) -> tuple[str, int]:
    try:
        models = json.loads(pod.get("/v1/models"))["data"]
        if models:
            return models[0]["id"], int(models[0].get("max_model_len") or 2048)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CalibrateError(f"{pod.where}: /v1/models is not vLLM's list of served models ({error!r}); "
                             "is it a vLLM server?") from None
    raise CalibrateError(f"{pod.where}: /v1/models lists no model; is it a vLLM server with a model loaded?")


def _tokens_per_word(pod: PodChannel, model: str, seed: int) -> float:
    """Words per token differ by tokenizer: measured on one short prompt."""
    try:
        probe = json.loads(pod.post("/tokenize", {"model": model, "prompt": prompt(random.Random(seed), 200)}))
        return max(0.5, len(probe["tokens"]) / 201)
    except (ValueError, KeyError, TypeError) as error:
        raise CalibrateError(f"{pod.where}: /tokenize did not answer as vLLM's does ({error!r}); is it a vLLM "
                             "server?") from None


def _scheduler_limits(pod: PodChannel) -> EngineLimits | None:
    try:
        info = json.loads(pod.get("/server_info?config_format=json"))
        scheduler = info["vllm_config"]["scheduler_config"]
        return EngineLimits(int(scheduler["max_num_seqs"]), int(scheduler["max_num_batched_tokens"]))
    except (CalibrateError, ValueError, KeyError, TypeError):
        return None  # /server_info exists only with VLLM_SERVER_DEV_MODE=1


@dataclass(frozen=True)
class PhaseShape:
    """What one phase sent one pod: `requests` prompts of `prompt_tokens`, `concurrent` at a
    time (each client sends its next when its last is answered), `output_tokens` each; with
    `shared_tokens`, every prompt starts with that many tokens of the same text."""

    prompt_tokens: int
    output_tokens: int
    concurrent: int
    requests: int
    shared_tokens: int = 0

    @classmethod
    def of(cls, sample: Mapping[str, Any]) -> PhaseShape:
        requests = int(sample["requests"])
        shared = 0
        if sample["shared_prefix"] and requests > 1:
            # The mean hit is over every request, the first of which found nothing cached.
            shared = round((sample["prompt"] - sample["computed"]) * requests / (requests - 1))
        return cls(round(sample["prompt"]), int(sample["max_tokens"]), int(sample["sequences"]), requests, shared)


def replay_phase(shape: PhaseShape, latency: LatencyModel, limits: EngineLimits,
                 block_size: int) -> tuple[list[float], list[float]]:
    """The phase run by the simulated engine under `latency`: the work of the steps inside a
    request's prefill (vLLM's request_prefill_time: scheduled to first token), averaged over the
    requests, and of the steps inside an inter-token interval, averaged over the intervals.

    Work is (steps, prompt tokens computed, decoding sequences, cached context tokens, attended
    pairs): a step's time is linear in it, so these are the fit's rows. Phases with concurrent
    requests are why a replay is needed: a decoding request's interval may hold a step that
    prefills another request too, and a request sent during a step waits for it to end.
    """
    blocks_each = -(-(shape.prompt_tokens + shape.output_tokens) // block_size)
    engine = Engine("calibration", block_size, shape.concurrent * blocks_each + 1, limits, latency)
    shared_keys = list(range(1, shape.shared_tokens // block_size + 1))
    full_blocks = shape.prompt_tokens // block_size

    def keys(index: int) -> list[int]:
        # Past the shared prefix each prompt is its own: keys no other request has (positive,
        # as the engine keys generated blocks with negative ones).
        own = [(index + 1) << 32 | position for position in range(len(shared_keys), full_blocks)]
        return shared_keys[:full_blocks] + own

    arrivals = [(latency.overhead_seconds(shape.prompt_tokens), index) for index in range(shape.concurrent)]
    heapq.heapify(arrivals)
    next_index = shape.concurrent
    first_token_at: dict[int, float] = {}
    finished_at: dict[int, float] = {}
    scheduled_at: dict[int, float] = {}

    def on_first_token(seq: EngineRequest, now: float) -> None:
        first_token_at[seq.index] = now
        scheduled_at[seq.index] = seq.scheduled_at

    def on_finish(seq: EngineRequest, now: float) -> None:
        nonlocal next_index
        finished_at[seq.index] = now
        if next_index < shape.requests:
            heapq.heappush(arrivals, (now + latency.overhead_seconds(shape.prompt_tokens), next_index))
            next_index += 1

    def arrive() -> None:
        at, index = heapq.heappop(arrivals)
        engine.add(EngineRequest(index, shape.prompt_tokens, keys(index), shape.output_tokens, at))

    starts, ends, work = [], [], [[0.0] * 5]  # work: running sums over the steps so far
    now = 0.0

    while arrivals or engine.busy:
        if not engine.busy:
            # An idle engine starts a step the moment a request reaches it, with that request
            # alone, as simulate_under_load's engines do: requests sent together reach vLLM's
            # engine core one after another, and those behind the first wait for its step.
            now = arrivals[0][0]
            arrive()
        seconds = engine.schedule(now)
        prefill_tokens, decode_seqs, context_tokens, pairs = engine.step_work
        work.append([total + part for total, part in zip(work[-1], (1, prefill_tokens, decode_seqs, context_tokens,
                                                                     pairs))])
        starts.append(now)
        now += seconds
        ends.append(now)
        engine.finish_step(now, on_first_token, on_finish)
        while arrivals and arrivals[0][0] <= now:  # reached the server during the step
            arrive()

    def between(start: float, end: float) -> list[float]:
        # The steps from the one starting at `start` to the one ending at `end`, both included.
        first, last = bisect.bisect_left(starts, start), bisect.bisect_right(ends, end)
        return [after - before for after, before in zip(work[last], work[first])]

    def mean_of(rows: list[list[float]], count: int) -> list[float]:
        return [sum(column) / count for column in zip(*rows)]

    prefill = mean_of([between(scheduled_at[i], first_token_at[i]) for i in first_token_at], len(first_token_at))
    decode: list[float] = []
    if shape.output_tokens > 1:
        decode = mean_of([between(first_token_at[i], finished_at[i]) for i in finished_at],
                         (shape.output_tokens - 1) * len(finished_at))
    return prefill, decode


def fit(samples: Sequence[Mapping[str, Any]], limits: EngineLimits, block_size: int) -> LatencyModel:
    """Least squares over every pod's phase means, each mean a linear function of the model
    (`replay_phase`): every phase's mean prefill time and the decode phases' mean inter-token
    latency. The schedule a replay follows depends a little on the model (when the next
    request arrives relative to a step), so the fit is repeated on the schedule of the last fit
    until it settles. The prefill phases' three lengths and their cache hit are what tell the
    attention term from the per-token one."""
    import numpy

    # What the client's TTFT holds besides the engine's queue and prefill (HTTP, the API server
    # tokenizing the prompt, detokenizing) grows with the prompt: a line through the
    # uncached prefill phases' (prompt tokens, overhead) means. A one-token answer's whole
    # round trip is its TTFT as the client sees it.
    points = [(s["prompt"], s["client"] - s["queue"] - s["prefill"]) for s in samples
              if s["phase"].startswith("prefill-") and s["prompt"] == s["computed"]
              and None not in (s["client"], s["queue"], s["prefill"], s["prompt"])]
    overhead = overhead_token = 0.0
    if len(points) >= 2 and len({x for x, _ in points}) >= 2:
        overhead_token, overhead = (float(v) for v in numpy.polyfit([x for x, _ in points], [y for _, y in points], 1))
        overhead_token = max(0.0, overhead_token)
    elif points:
        overhead = sum(y for _, y in points) / len(points)
    spreads = [s["spread"] for s in samples if s["spread"] is not None and s["sequences"] == 1
               and s["phase"] != "prefill-hit"]
    jitter = statistics.median(spreads) if spreads else 0.0

    usable = [s for s in samples if None not in (s["prefill"], s["computed"], s["prompt"])]
    targets = [s["prefill"] for s in usable] + [s["itl"] for s in usable if s["kind"] == "decode" and s["itl"]]
    if len(targets) < 5:
        raise CalibrateError("vLLM's histograms gave too few phase means to fit (is this vLLM 0.10 or later, with "
                             "vllm:request_prefill_time_seconds and vllm:inter_token_latency_seconds?)")
    # Relative errors: a prefill of a long prompt takes 100 times a decode step, and both
    # matter, so each phase mean weighs as much as any other.
    scale = 1 / numpy.array(targets, dtype=float)
    shapes = [PhaseShape.of(s) for s in usable]
    # The first schedule is replayed with a guess: steps of the fastest decode, prompt tokens
    # at the slowest prefill's rate.
    latency = LatencyModel(step_s=min((s["itl"] for s in usable if s["itl"]), default=0.0),
                           prefill_token_s=max(s["prefill"] / max(1.0, s["computed"]) for s in usable),
                           decode_seq_s=0.0, overhead_s=max(0.0, overhead), overhead_token_s=overhead_token)
    for _ in range(FIT_ROUNDS):
        replays = [replay_phase(shape, latency, limits, block_size) for shape in shapes]
        rows = [prefill for prefill, _ in replays] + [
            decode for sample, (_, decode) in zip(usable, replays) if sample["kind"] == "decode" and sample["itl"]]
        solution, *_ = numpy.linalg.lstsq(numpy.array(rows, dtype=float) * scale[:, None],
                                          numpy.array(targets, dtype=float) * scale, rcond=None)
        step_s, prefill_token_s, decode_seq_s, context_token_s, prefill_attention_s = (
            max(0.0, float(value)) for value in solution)
        fitted = LatencyModel(step_s=step_s, prefill_token_s=prefill_token_s, decode_seq_s=decode_seq_s,
                              overhead_s=max(0.0, overhead), overhead_token_s=overhead_token,
                              context_token_s=context_token_s, jitter=jitter, prefill_attention_s=prefill_attention_s)
        settled = fitted == latency
        latency = fitted
        if settled:
            break
    return latency


class Scraper:
    """GETs every pod's /metrics every `interval` seconds while calibrating, as the picker does
    in production: rendering the page costs a vLLM API server time its requests then wait for."""

    def __init__(self, pods: Sequence[PodChannel], interval: float):
        self.pods, self.interval = pods, interval
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(pod,), daemon=True) for pod in pods]

    def _run(self, pod: PodChannel) -> None:
        while not self._stop.wait(self.interval):
            try:
                pod.get("/metrics")
            except CalibrateError:
                pass  # the phase's own reads report a pod that stopped answering

    def __enter__(self) -> Scraper:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)


def calibrate(pods: Sequence[PodChannel], *, seed: int = 0, limits: EngineLimits | None = None,
              scrape_interval: float = DEFAULT_SCRAPE_INTERVAL, gateway: PodChannel | None = None,
              progress: Callable[[str], None] = print) -> LatencyProfile:
    """Runs the calibration workload on every pod at once, scraped as the picker scrapes them,
    and fits the profile; with `gateway`, also times the hop through it (`gateway_hop`)."""
    if not pods:
        raise CalibrateError("no pods to calibrate: pass --pod-url NAME=URL, or --stack and --model")
    model, max_model_len = _served_model(pods[0])
    try:
        cache = parse_metrics(pods[0].get("/metrics").decode())
    except ValueError as error:  # MetricsError included
        raise CalibrateError(f"{pods[0].where}: {error}") from None
    limits = limits or _scheduler_limits(pods[0])
    tokens_per_word = _tokens_per_word(pods[0], model, seed)
    plan = phases(max_model_len, tokens_per_word)
    chunk = chunk_tokens(limits, max_model_len)
    if gateway is not None:
        # One request through it now: a wrong --gateway-url fails before the phases' minutes, not after.
        gateway.post("/v1/completions", {"model": model, "prompt": prompt(random.Random(seed), 4), "max_tokens": 1})
        time.sleep(COUNTERS_CATCH_UP)  # out of the first phase's histograms

    # Every pod starts each phase together: a phase is then measured with every pod doing the
    # same work, as under load, not with whatever phase another pod happens to be in (on
    # shared hardware that alone moved the fitted prefill cost by a third between runs).
    in_step = threading.Barrier(len(pods))

    def one_pod(index_pod: tuple[int, PodChannel]) -> list[dict[str, Any]]:
        index, pod = index_pod
        rng = random.Random(seed * 1000 + index)
        samples = []
        for phase in plan:
            try:
                in_step.wait()
            except threading.BrokenBarrierError:
                return samples  # another pod failed: its error is the one reported
            try:
                means = run_phase(pod, model, phase, rng)
            except BaseException:
                in_step.abort()
                raise
            kind = "prefill" if phase.name.startswith("prefill") else "decode"
            samples.append({"pod": pod.name, "phase": phase.name, "kind": kind, "sequences": phase.concurrent,
                            "requests": REQUESTS_PER_PHASE * phase.concurrent, "max_tokens": phase.max_tokens,
                            "shared_prefix": phase.shared_prefix, **means})
            progress(f"  {pod.name} {phase.name}: " + ", ".join(
                f"{key} {value:.0f} tokens" if key in ("computed", "prompt")
                else f"{key} {value:.0%}" if key == "spread" else f"{key} {value * 1000:.1f} ms"
                for key, value in means.items() if value is not None))
        try:
            in_step.wait()
        except threading.BrokenBarrierError:
            return samples
        rates = peak_prefill_rates(pod, model, chunk, tokens_per_word, rng)
        pod_peak = peak_prefill(rates, chunk)
        progress(f"  {pod.name} peak prefill: " + (pod_peak.describe() if pod_peak else "no prefill time reported"))
        samples.append({"pod": pod.name, "phase": "prefill-peak", "kind": "peak", "rates": rates})
        return samples

    scraped = (f"scraped by {gateway.name}'s picker" if gateway is not None
               else f"scraped every {scrape_interval * 1000:g} ms")
    progress(f"calibrating {len(pods)} pod(s) serving {model} at once, {scraped}: {len(plan)} phases each, then "
             f"{PEAK_PREFILLS} one-chunk prefills of {chunk:,} tokens")
    # A gateway's own picker scrapes the pods, as it does under load: a scraper of ours beside
    # it would scrape them twice as often, and rendering /metrics costs the servers time.
    scraper = Scraper(pods, scrape_interval) if gateway is None else contextlib.nullcontext()
    with scraper, ThreadPoolExecutor(len(pods)) as pool:
        measured = [sample for pod_samples in pool.map(one_pod, enumerate(pods)) for sample in pod_samples]
    samples = [sample for sample in measured if sample["kind"] != "peak"]
    peak = peak_prefill([rate for sample in measured if sample["kind"] == "peak" for rate in sample["rates"]], chunk)
    # Unreported scheduler limits: vLLM's defaults (the profile then records none).
    latency = fit(samples, limits or DEFAULT_LIMITS, cache.block_size or DEFAULT_BLOCK_SIZE)
    if gateway is not None:
        hop = gateway_hop(gateway, pods, model, random.Random(seed))
        slower = f"{hop * 1000:.1f} ms more than" if hop else "no slower than"
        progress(f"  through {gateway.name}: {slower} straight to the pods (median of "
                 f"{GATEWAY_REQUESTS} one-token requests each way)")
        latency = dataclasses.replace(latency, gateway_s=hop)
    return LatencyProfile(latency, cache.block_size, cache.num_gpu_blocks, limits,
                          source=f"calibrated on {', '.join(p.name for p in pods)} ({model}) "
                                 f"at {time.strftime('%Y-%m-%d %H:%M:%S')}",
                          measured={"samples": samples}, peak_prefill=peak)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "calibrate", help="measure live vLLM pods and write a latency profile for predict --latency-profile",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--pod-url", action="append", type=named_url("--pod-url"), metavar="NAME=URL",
                       help="a vLLM server's base URL (repeatable)")
    where.add_argument("--stack", help="calibrate the stack's model pods, found and reached through the API server "
                                       "as `verify` does")
    add_model_options(parser)
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--out", default="latency-profile.json", metavar="FILE",
                        help="where to write the profile (default latency-profile.json)")
    parser.add_argument("--max-num-seqs", type=positive_int, metavar="N",
                        help="the pods' vLLM --max-num-seqs, when /server_info is not served (dev mode off)")
    parser.add_argument("--max-num-batched-tokens", type=positive_int, metavar="N",
                        help="the pods' vLLM --max-num-batched-tokens, likewise")
    parser.add_argument("--seed", type=int, default=0, help="seed of the calibration prompts (default 0)")
    parser.add_argument("--scrape-interval", type=positive_seconds, metavar="S",
                        help=f"scrape /metrics this often meanwhile, as the picker will (default "
                             f"{DEFAULT_SCRAPE_INTERVAL:g}); not with --gateway-url, whose picker scrapes them")
    parser.add_argument("--gateway-url", type=http_url("--gateway-url"), metavar="URL",
                        help="the gateway clients send to (the stack's Gateway, or `serve`): also time one-token "
                             "requests through it against the pods directly; predict adds the difference to every "
                             "request's way in")
    parser.set_defaults(func=run)
    return parser


def _pods(args: argparse.Namespace) -> list[PodChannel]:
    if args.pod_url:
        return [UrlPod(name, url) for name, url in unique_named_urls("--pod-url", args.pod_url).items()]
    from routing.live.verify import KubeApi, KubePods

    found = load_stack_model(args.stack, args.model, args.stacks_dir)
    api = KubeApi(args.context, args.kubeconfig)
    entry = found.model
    names = KubePods(api, found.settings.namespace, entry.deployment, entry.port).names()
    return [KubePod(name, api, found.settings.namespace, entry.port) for name in names]


def out_problem(path: Path) -> str | None:
    """Why the profile could not be written to `path`, found before calibrating rather than after."""
    folder = path.parent
    if path.is_dir():
        return f"is a folder; name the file, e.g. --out {path / 'latency-profile.json'}"
    if not folder.is_dir():
        return f"there is no folder {folder}; create it (mkdir -p {folder}) or write elsewhere"
    target = path if path.exists() else folder
    if not os.access(target, os.W_OK):
        return f"{target} is not writable by this user; write elsewhere"
    return None


def run(args: argparse.Namespace) -> int:
    limits = None
    problem = out_problem(Path(args.out))
    if problem:
        print(f"calibrate: --out {args.out}: {problem}", file=sys.stderr)
        return 2
    if (args.max_num_seqs is None) != (args.max_num_batched_tokens is None):
        print("calibrate: --max-num-seqs and --max-num-batched-tokens go together; pass both or neither",
              file=sys.stderr)
        return 2
    if args.scrape_interval is not None and args.gateway_url:
        print(f"calibrate: --scrape-interval {args.scrape_interval:g} with --gateway-url: the gateway's picker "
              "scrapes the pods then, at its own interval; drop --scrape-interval", file=sys.stderr)
        return 2
    try:
        if args.max_num_seqs is not None:
            limits = EngineLimits(args.max_num_seqs, args.max_num_batched_tokens)
        pods = _pods(args)
        gateway = UrlGateway("gateway", args.gateway_url) if args.gateway_url else None
        profile = calibrate(pods, seed=args.seed, limits=limits,
                            scrape_interval=args.scrape_interval or DEFAULT_SCRAPE_INTERVAL,
                            gateway=gateway, progress=lambda line: print(line, flush=True))
    # RuntimeError: verify.VerifyError finding the pods, as `verify` reports it.
    except (OptionError, RuntimeError, ValueError) as error:
        print(f"calibrate: {error}", file=sys.stderr)
        return 2
    try:
        profile.save(args.out)
    except OSError as error:
        print(f"calibrate: --out {args.out}: cannot write the profile ({error}); here it is instead:", file=sys.stderr)
        print(json.dumps(profile.to_json(), indent=2))
        return 2
    print(f"{profile.latency.describe()}; block size {profile.block_size}, {profile.num_gpu_blocks} KV blocks"
          + ("" if profile.limits is None else f", max_num_seqs {profile.limits.max_num_seqs}, "
                                               f"max_num_batched_tokens {profile.limits.max_num_batched_tokens}"))
    print(f"profile written to {args.out}: python -m routing predict ... --latency-profile {args.out}")
    if profile.peak_prefill is not None:
        print(f"peak prefill throughput: {profile.peak_prefill.describe()}; for the sticky recipe's filter:")
        print(f"  {peak_prefill_config_line(profile.peak_prefill, args)}")
    return 0


def peak_prefill_config_line(peak: PeakPrefill, args: argparse.Namespace) -> str:
    """The `pulumi config set` line that gives the calibrated pods' model this throughput: its own
    entry with --stack, else the stack-wide routing block."""
    where, stack = "routing", ""
    if args.stack:
        found = load_stack_model(args.stack, args.model, args.stacks_dir)
        where, stack = f"models[{found.settings.models.index(found.model)}].routing", f" --stack {args.stack}"
    return f"pulumi config set --path '{where}.peakPrefillThroughput' {round(peak.tokens_per_s)}{stack}"
