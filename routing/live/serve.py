"""`serve`: a local OpenAI-compatible gateway that routes with the endpoint-picker model.

It stands where Envoy plus the endpoint picker stand in the cluster, so the seed page's
experiments can run against real vLLM servers on one machine. Like the real picker it
scrapes every backend's /metrics every 50 ms (upstream's --refresh-metrics-interval) and
routes, by path, what upstream's default parsers route and vLLM serves: /v1/completions,
/v1/chat/completions (and their /render), /v1/embeddings, /v1/responses, /v1/messages and
/inference/v1/generate (estimate.API_PATHS). Every other path (/tokenize, /metrics,
/v1/models, ...) is passed through, unrouted, to the first backend with a fresh scrape.

Dropping stale backends is serve's own safety rule, not upstream's: a backend whose last good
scrape is older than --staleness (2 s) is not a candidate here, so requests stop going to a
server that has died. The real picker never filters candidates by the age of their metrics
(endpoint-picker-upstream.md section 9: its 2 s --metrics-staleness-threshold only feeds a
metrics logger); a dead pod leaves its pool when Kubernetes marks it unready, and until then
it is scored on its last metrics.

A client that sends `x-routing-explain: true` gets the pick's score breakdown (each
candidate's raw score, weight and weighted value per scorer, its total, and the runner-up
margin; with a filter, which pods it kept and why; `Decision.breakdown()`) as JSON in the
`x-routing-decision` response header. The picker is told when each routed request's first
chunk comes back and when it ends (or fails), for the in-flight load the sticky recipe reads.

Each request gets one line on stdout (`--quiet` turns them off): the pod it went to, the HTTP
status, the time taken to the end of the reply, and the prompt tokens vLLM found cached when it
reports them (`usage.prompt_tokens_details.cached_tokens`, in a reply or in a stream's final usage
chunk; vLLM reports them when started with --enable-prompt-tokens-details). A stream passes
through as it comes: only its last bytes are kept, by reference, to read the usage from.

With `--prefix-index precise` the picker routes on what each server holds: serve subscribes to
every backend's KV-cache events (routing/live/kv_events.py), keys each request from the tokens
vLLM renders for it, and the explanation and /health show the index's view (blocks held per
backend, events received and dropped, how long events took to arrive).

GET /health shows each backend's last good scrape (when it was sent, and the queue, running
and KV-usage figures the picker read). In-process, `RunningGateway.wait_idle` waits until
every backend has been scraped idle since a given moment: serial experiments call it before
each request (verify.measure's `settle` hook) so that each pick sees what `predict` assumes.

Not a production gateway: no TLS, no auth, no retries, no flow control, one process.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import itertools
import json
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Self, TextIO

import aiohttp
from aiohttp import web

from routing.metrics import MetricsError, VllmMetrics, parse_metrics
from routing.options import (OptionError, add_model_options, load_stack_model, named_url, port_number, positive_seconds,
                             routing_option, unique_named_urls, weights_option)
from routing.live.kv_events import EventSubscriber, KvEventsError, rendered_token_ids, subscribe
from routing.picker.endpoint_picker import (DEFAULT_PICKER_VERSION, PICKER_VERSIONS, EndpointPicker, Hashed, Picker,
                                            PickerConfigError, PodMetrics, PrecisePlan, Request, RoundRobinPicker,
                                            with_default_weights)
from routing.picker.precise import block_keys
from routing.picker.estimate import API_PATHS
from routing.simulation.latency import LatencyProfile, ProfileError
from settings.picker_config import (EndpointPickerConfig, PreciseIndex, load_endpoint_picker_config,
                                    render_endpoint_picker_config, render_sticky_picker_config)

SCRAPE_INTERVAL = 0.05
STALENESS = 2.0
# How often `--backends-file` is looked at for a change.
BACKENDS_FILE_POLL = 0.5
# How long `RunningGateway.wait_idle` waits, at most, for an idle scrape of every backend.
SETTLE_TIMEOUT = 2.0
ROUTED_HEADER = "x-routed-to"
EXPLAIN_HEADER = "x-routing-explain"
DECISION_HEADER = "x-routing-decision"
HISTORY_LIMIT = 100_000
# The paths upstream's default parsers route that vLLM serves, and the API each body is read as.
INFERENCE_PATHS = API_PATHS
# Not forwarded either way: they describe one connection, or framing aiohttp redoes.
HOP_BY_HOP = frozenset(h.lower() for h in (
    "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
    "Transfer-Encoding", "Upgrade", "Content-Length", "Host"))
# How many of a reply's last bytes serve keeps to read vLLM's usage from: a stream's final usage
# chunk is a few hundred bytes; a JSON reply longer than this is not read.
USAGE_TAIL_BYTES = 64 * 1024
# The APIs whose replies carry usage.prompt_tokens_details.cached_tokens when vLLM reports them.
CACHED_TOKENS_PATHS = ("/v1/completions", "/v1/chat/completions")
CACHED_TOKENS_HINT = ("serve: vLLM reports the cached prompt tokens only when started with "
                      "--enable-prompt-tokens-details (`python -m routing servers` starts it so), and in a stream only "
                      'when the client asks for usage (stream_options: {"include_usage": true})')
# The APIs vLLM renders tokens for (the llm-d router's vllm token backend asks these), by path.
RENDER_PATHS = {"/v1/completions": "/v1/completions/render", "/v1/chat/completions": "/v1/chat/completions/render",
                "/v1/messages": "/v1/messages/render"}
# upstream's token producer gives a render 5 s (tokenizer/vllm_http.go@v0.10.0).
RENDER_TIMEOUT = 5.0
NOT_PRODUCTION = ("Not a production gateway: no TLS, no auth, no retries, no flow control; it listens on "
                  "127.0.0.1 only and exists to reproduce the endpoint picker's routing on one machine.")


@dataclass(frozen=True)
class Scrape:
    """One good /metrics scrape of one backend: what the picker sees until the next one."""

    started: float  # time.monotonic() when the GET was sent: the page describes a moment after this
    finished: float  # time.monotonic() when the page had been read and parsed
    metrics: VllmMetrics
    pod: PodMetrics  # what the picker reads of `metrics`

    @classmethod
    def of(cls, backend: str, started: float, finished: float, metrics: VllmMetrics) -> Scrape:
        pod = PodMetrics(name=backend, waiting=int(metrics.waiting), running=int(metrics.running),
                         kv_usage=metrics.kv_usage, running_loras=frozenset(metrics.running_loras),
                         waiting_loras=frozenset(metrics.waiting_loras), max_lora=metrics.max_lora,
                         block_size=metrics.block_size, num_gpu_blocks=metrics.num_gpu_blocks)
        return cls(started, finished, metrics, pod)

    @property
    def idle(self) -> bool:
        """Nothing waiting, nothing running, no KV block in use: the pod as `predict` models it
        between two serial requests (simulate.SimulatedServer.metrics).

        KV usage must be 0 too, not only the queues: a finished request's blocks stay cached
        but count as free (vLLM frees them before it computes the gauges it publishes with
        that step), so a page read after the response shows 0, while a page read during the
        request shows its blocks in use (e.g. 8/8192), which changes the kvCache score and so
        which pods tie.
        """
        m = self.metrics
        return m.running == 0 and m.waiting == 0 and m.kv_usage == 0

    def to_json(self) -> dict:
        m = self.metrics
        return {"startedAt": self.started, "finishedAt": self.finished, "running": m.running, "waiting": m.waiting,
                "kvUsage": m.kv_usage, "idle": self.idle}


@dataclass
class Backend:
    """One model server and the picker's latest view of it."""

    name: str
    url: str
    # Replaced whole by each good scrape, so another thread never sees half of one.
    scrape: Scrape | None = None
    last_error: str = ""
    routed: int = 0

    @property
    def last_good_scrape(self) -> float | None:
        """time.monotonic() at the end of the last good scrape: the staleness clock starts here."""
        return None if self.scrape is None else self.scrape.finished

    def age(self, now: float) -> float | None:
        return None if self.last_good_scrape is None else now - self.last_good_scrape

    def is_fresh(self, now: float, staleness: float) -> bool:
        age = self.age(now)
        return age is not None and age <= staleness


@dataclass(frozen=True)
class RoutedRequest:
    """One pick, for tests and the demo: when it was made and where it went."""

    at: float  # time.monotonic()
    backend: str
    candidates: tuple[str, ...]
    # The picker's weighted total per candidate (empty for round-robin): why it chose `backend`.
    totals: Mapping[str, float]


@dataclass(frozen=True)
class PromptUsage:
    """What vLLM says of a reply's prompt: its tokens, and how many of them were cached."""

    prompt_tokens: int | None
    cached_tokens: int | None


class ReplyTail:
    """The last bytes of a reply, kept by reference as its chunks pass (none is copied on the way),
    to read vLLM's usage from once the reply has ended."""

    def __init__(self, limit: int = USAGE_TAIL_BYTES):
        self.limit = limit
        self.chunks: deque[bytes] = deque()
        self.kept = 0
        self.whole = True  # nothing dropped yet

    def feed(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.kept += len(chunk)
        while len(self.chunks) > 1 and self.kept - len(self.chunks[0]) >= self.limit:
            self.kept -= len(self.chunks.popleft())
            self.whole = False

    def usage(self, content_type: str) -> PromptUsage | None:
        """The usage of a JSON reply kept whole, or of a stream's last event that has one."""
        text = b"".join(self.chunks)
        if content_type.startswith("text/event-stream"):
            # Server-sent events, the newest last; the first one kept may be cut.
            for event in reversed(text.split(b"\n\n")):
                for line in event.splitlines():
                    if line.startswith(b"data:") and (usage := _usage(line[len(b"data:"):])) is not None:
                        return usage
            return None
        return _usage(text) if self.whole and content_type.startswith("application/json") else None


def _usage(document: bytes) -> PromptUsage | None:
    try:
        reply = json.loads(document)
    except ValueError:
        return None
    usage = reply.get("usage") if isinstance(reply, dict) else None
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt = usage.get("prompt_tokens")
    return PromptUsage(prompt if isinstance(prompt, int) else None, cached if isinstance(cached, int) else None)


# What serve leaves on a request for its log line: the reply once its headers are sent, the
# usage read from its end, and why it was cut short.
REPLY = web.RequestKey("serve.reply", web.StreamResponse)
USAGE = web.RequestKey("serve.usage", PromptUsage)
CUT_SHORT = web.RequestKey("serve.cut_short", str)


class RoutingGateway:
    """The aiohttp application: scrapes backends, picks one per inference request, proxies."""

    def __init__(self, backends: Mapping[str, str], picker: Picker, *, scrape_interval: float = SCRAPE_INTERVAL,
                 staleness: float = STALENESS, label: str = "", request_log: TextIO | None = None,
                 kv_events: EventSubscriber | None = None, backends_file: Path | None = None):
        if not backends:
            raise ValueError("at least one backend is needed: pass --backend NAME=URL")
        self.backends = {name: Backend(name, url.rstrip("/")) for name, url in backends.items()}
        # More backends, read again whenever the file changes: as a pool's endpoints follow its pods.
        self.backends_file = backends_file
        self._from_file: dict[str, str] = {}
        self._file_stamp: tuple[int, int] | None = None
        self.picker = picker
        self.scrape_interval = scrape_interval
        self.staleness = staleness
        self.label = label
        # Where each request's line goes; None logs nothing (serve --quiet, and in-process use).
        self.request_log = request_log
        self._hinted_cached_tokens = False
        # Bounded, so a long-running `serve` does not grow without end.
        self.history: deque[RoutedRequest] = deque(maxlen=HISTORY_LIMIT)
        # Each routed request's key for the picker's lifecycle calls (first chunk, end).
        self._request_keys = itertools.count()
        self._session: aiohttp.ClientSession | None = None
        self._scrapers: dict[str, asyncio.Task] = {}
        # The precise index's events, when the picker routes on them (it reads them at each pick).
        self.kv_events = kv_events
        if kv_events is not None:
            picker.attach(kv_events.log)

    async def make_app(self) -> web.Application:
        """The application, created inside the event loop that will run it (aiohttp binds it there)."""
        app = web.Application(client_max_size=64 * 1024 * 1024,
                              middlewares=[self._log_request] if self.request_log is not None else [])
        app.router.add_get("/health", self.health)
        for path in INFERENCE_PATHS:
            app.router.add_post(path, self.inference)
        app.router.add_route("*", "/{path:.*}", self.pass_through)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, _app: web.Application) -> None:
        # No total timeout: a streamed completion may legitimately run for minutes.
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        self._scrapers = {b.name: asyncio.create_task(self._scrape_forever(b)) for b in self.backends.values()}
        if self.backends_file is not None:
            self._watcher = asyncio.create_task(self._watch_backends_file())

    async def _stop(self, _app: web.Application) -> None:
        tasks = [*self._scrapers.values(), *([self._watcher] if self.backends_file is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        if self.kv_events is not None:
            self.kv_events.stop()

    async def _watch_backends_file(self) -> None:
        while True:
            self.read_backends_file()
            await asyncio.sleep(BACKENDS_FILE_POLL)

    def read_backends_file(self) -> None:
        """Backends the file adds start being scraped, and are picked once a scrape succeeds; those it
        no longer lists are no longer picked (their replies under way finish). A file that cannot be
        read, or is not {name: url}, changes nothing and is logged once."""
        try:
            stat = self.backends_file.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._file_stamp:
                return
            self._file_stamp = stamp
            listed = json.loads(self.backends_file.read_text(encoding="utf-8"))
            if not isinstance(listed, dict) or not all(isinstance(v, str) for v in listed.values()):
                raise ValueError("not a JSON object of backend names and URLs")
        except (OSError, ValueError) as error:
            if self._file_stamp is not None or not isinstance(error, FileNotFoundError):
                print(f"serve: --backends-file {self.backends_file}: {error}; backends unchanged", file=sys.stderr)
            return
        for name in [n for n in self._from_file if n not in listed]:
            self._scrapers.pop(name).cancel()
            del self.backends[name], self._from_file[name]
            self._note(f"backend {name} removed")
        for name, url in listed.items():
            if name in self.backends:
                continue
            self.backends[name] = backend = Backend(name, url.rstrip("/"))
            self._from_file[name] = url
            self._scrapers[name] = asyncio.create_task(self._scrape_forever(backend))
            self._note(f"backend {name}={url} added")

    def _note(self, text: str) -> None:
        if self.request_log is not None:
            print(f"serve: {text}", file=self.request_log, flush=True)

    async def _scrape_forever(self, backend: Backend) -> None:
        timeout = aiohttp.ClientTimeout(total=max(1.0, self.scrape_interval * 10))
        while True:
            started = time.monotonic()
            try:
                async with self._session.get(backend.url + "/metrics", timeout=timeout) as response:
                    text = await response.text()
                    if response.status != 200:
                        raise MetricsError(f"/metrics answered HTTP {response.status}")
                backend.scrape = Scrape.of(backend.name, started, time.monotonic(), parse_metrics(text))
                backend.last_error = ""
            # ValueError: a page that is not vLLM's (MetricsError) or that the parser cannot read.
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError) as error:
                backend.last_error = f"{type(error).__name__}: {error}"
            await asyncio.sleep(max(0.0, self.scrape_interval - (time.monotonic() - started)))

    @web.middleware
    async def _log_request(self, request: web.Request, handler) -> web.StreamResponse:
        """The aiohttp middleware that writes each request's line once its reply has ended."""
        started = time.monotonic()
        response = None
        try:
            response = await handler(request)
            return response
        finally:
            if request.path != "/health":
                self._log(request, response, time.monotonic() - started)

    def _log(self, request: web.Request, response: web.StreamResponse | None, seconds: float) -> None:
        reply = response if response is not None else request.get(REPLY)
        routed = request.method == "POST" and request.path in INFERENCE_PATHS
        pod = reply.headers.get(ROUTED_HEADER) if reply is not None else None
        where = "no pod" if pod is None else pod if routed else f"{pod} (passed through)"
        line = (f"serve: {time.strftime('%H:%M:%S')} {request.method} {request.path} -> {where}: "
                f"{reply.status if reply is not None else 'no reply'} in {seconds:.3f}s")
        usage: PromptUsage | None = request.get(USAGE)
        if usage is not None and usage.cached_tokens is not None:
            of = f" of {usage.prompt_tokens}" if usage.prompt_tokens is not None else ""
            line += f", {usage.cached_tokens}{of} prompt tokens cached"
        cut = request.get(CUT_SHORT) or (None if response is not None else "the client went away or serve failed")
        if cut:
            line += f", cut short: {cut}"
        print(line, file=self.request_log, flush=True)
        if (not self._hinted_cached_tokens and routed and request.path in CACHED_TOKENS_PATHS and reply is not None
                and 200 <= reply.status < 300 and (usage is None or usage.cached_tokens is None)):
            self._hinted_cached_tokens = True
            print(CACHED_TOKENS_HINT, file=self.request_log, flush=True)

    def fresh_backends(self) -> list[Backend]:
        now = time.monotonic()
        # A copy: --backends-file may change the backends while another thread asks.
        return [b for b in list(self.backends.values()) if b.is_fresh(now, self.staleness)]

    def scrapes(self) -> dict[str, Scrape | None]:
        """Each backend's last good scrape (when it was taken, and what it read), None before the first."""
        return {name: backend.scrape for name, backend in list(self.backends.items())}

    def all_idle_since(self, after: float) -> bool:
        """Whether every backend's last good scrape was sent after `after` (time.monotonic()) and
        shows it idle (`Scrape.idle`): the next pick then sees what `predict` assumes."""
        return all(s is not None and s.started > after and s.idle for s in self.scrapes().values())

    def index_view(self) -> dict[str, Any]:
        """The precise index as the picker holds it: blocks per backend (by its events), the
        BlockStored events dropped for an unknown parent, and each subscription's counts."""
        index = self.picker.prefix_index
        return {"prefixIndex": "precise", "blocksHeld": {name: index.blocks_held(name) for name in self.backends},
                "droppedEvents": index.dropped_events, **self.kv_events.status()}

    def status(self) -> dict:
        now = time.monotonic()
        index = {"kvEvents": self.index_view()} if self.kv_events is not None else {}
        return {**index,
            "status": "ok" if self.fresh_backends() else "no fresh backend",
            "picker": self.label,
            # The clock of the scrape times below (seconds, time.monotonic() of this process).
            "now": now,
            "backends": {b.name: {"url": b.url, "fresh": b.is_fresh(now, self.staleness),
                                  "secondsSinceGoodScrape": None if b.age(now) is None else round(b.age(now), 3),
                                  "lastScrape": None if b.scrape is None else b.scrape.to_json(),
                                  "lastError": b.last_error, "routed": b.routed}
                         for b in self.backends.values()},
        }

    async def health(self, _request: web.Request) -> web.Response:
        status = self.status()
        return web.json_response(status, status=200 if status["status"] == "ok" else 503)

    def _no_backend(self) -> web.Response:
        return _error(503, f"no backend has had a good /metrics scrape in the last {self.staleness:g}s; "
                           "see GET /health for each backend's last error")

    async def pass_through(self, request: web.Request) -> web.StreamResponse:
        """Any path serve does not route goes, as it is, to the first backend with a fresh scrape."""
        fresh = self.fresh_backends()
        if not fresh:
            return self._no_backend()
        return await self._proxy(request, fresh[0], await request.read())

    async def inference(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            picker_request = Request.from_openai_body(body, INFERENCE_PATHS[request.path])
        except ValueError as error:
            return _error(400, f"cannot route this request: {error}")
        fresh = self.fresh_backends()
        if not fresh:
            return self._no_backend()
        key = next(self._request_keys)
        if self.kv_events is not None:
            hashed = await self._engine_keys(body, request.path, fresh[0])
            self.picker.advance(time.monotonic())
            decision = self.picker.pick(picker_request, [b.scrape.pod for b in fresh], key=key, hashed=hashed)
        else:
            decision = self.picker.pick(picker_request, [b.scrape.pod for b in fresh], key=key)
        try:
            chosen = self.backends[decision.pod]
            chosen.routed += 1
            self.history.append(RoutedRequest(time.monotonic(), chosen.name, tuple(b.name for b in fresh),
                                              decision.totals))
            explained = None
            if request.headers.get(EXPLAIN_HEADER, "").strip().lower() in ("1", "true", "yes"):
                breakdown = decision.breakdown().as_dict()
                if self.kv_events is not None:
                    view = self.index_view()
                    breakdown["index"] = {"prefixIndex": "precise", "requestBlocks": decision.total_blocks,
                                          "matchedBlocks": dict(decision.match_blocks),
                                          "blocksHeld": view["blocksHeld"], "droppedEvents": view["droppedEvents"]}
                explained = json.dumps(breakdown, separators=(",", ":"))
            return await self._proxy(request, chosen, raw, explained, key)
        finally:
            # EndOfStream, or the request failed or the client went away: the picker's in-flight
            # load lets go of whatever the request still holds.
            self.picker.finished(key)

    async def _engine_keys(self, body: Mapping[str, Any], path: str, backend: Backend) -> Hashed:
        """The request's block keys as the precise producer computes them: the tokens vLLM renders
        for it (the token producer's vllm backend asks a model server's /render), cut into full
        blocks and chained from the model's seed. A request vLLM cannot render gets no keys and
        every pod a prefix score of 0, as upstream goes on without a tokenized prompt."""
        block_size = self.kv_events.block_size
        plan = PrecisePlan(block_size)
        render = RENDER_PATHS.get(path)
        if render is None:
            return plan, ((), 0)
        try:
            async with self._session.post(backend.url + render, json=dict(body),
                                          timeout=aiohttp.ClientTimeout(total=RENDER_TIMEOUT)) as response:
                if response.status != 200:
                    return plan, ((), 0)
                prompts = rendered_token_ids(await response.json())
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
            return plan, ((), 0)
        model = str(body.get("model", ""))
        return plan, ([block_keys(tokens, model, block_size) for tokens in prompts], sum(map(len, prompts)))

    async def _proxy(self, request: web.Request, backend: Backend, raw: bytes,
                     explained: str | None = None, request_key: int | None = None) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in HOP_BY_HOP and k.lower() != EXPLAIN_HEADER}
        response: web.StreamResponse | None = None
        try:
            async with self._session.request(request.method, backend.url + request.rel_url.path_qs, data=raw or None,
                                             headers=headers, auto_decompress=False) as upstream:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for key, value in upstream.headers.items():
                    if key.lower() not in HOP_BY_HOP:
                        response.headers.add(key, value)
                response.headers[ROUTED_HEADER] = backend.name
                if explained is not None:
                    response.headers[DECISION_HEADER] = explained
                await response.prepare(request)
                request[REPLY] = response
                first = request_key is not None
                tail = ReplyTail()
                async for chunk in upstream.content.iter_any():
                    if first:
                        # StartOfStream: the first chunk of the body (a reply that is not streamed
                        # arrives whole, so this is its end).
                        self.picker.first_chunk(request_key)
                        first = False
                    tail.feed(chunk)
                    try:
                        await response.write(chunk)
                    except ConnectionResetError:  # aiohttp's ClientConnectionResetError: the client's side
                        request[CUT_SHORT] = "the client went away"
                        return response
                if "Content-Encoding" not in upstream.headers:
                    request[USAGE] = tail.usage(upstream.headers.get("Content-Type", ""))
                try:
                    await response.write_eof()
                except ConnectionResetError:
                    pass  # the client read the whole reply and closed before the end of the chunked body
                return response
        except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as error:
            if response is not None and response.prepared:
                # The backend died mid-response: cut the client off too, so it cannot mistake
                # a truncated body for a whole one.
                if request.transport is not None:
                    request.transport.close()
                request[CUT_SHORT] = f"backend {backend.name} failed mid-reply ({type(error).__name__})"
                return response
            # Like Envoy without a retry policy: the pick stands, the client sees the failure.
            return _error(502, f"backend {backend.name} ({backend.url}) failed: {type(error).__name__}: {error}",
                          routed_to=backend.name)


def _error(status: int, message: str, routed_to: str | None = None) -> web.Response:
    response = web.json_response({"error": {"message": message, "code": status}}, status=status)
    if routed_to:
        response.headers[ROUTED_HEADER] = routed_to
    return response


class ThreadedApp:
    """The aiohttp application `make_app()` builds, served on 127.0.0.1 (`port` 0: a free one)
    from a background thread with its own event loop, so synchronous code can talk to it."""

    def __init__(self, make_app: Callable[[], Awaitable[web.Application]], port: int = 0):
        self.make_app = make_app
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        """Serve; raises what the application raised while starting."""
        ready = threading.Event()
        failure: list[BaseException] = []

        async def serve() -> None:
            self._runner = web.AppRunner(await self.make_app(), access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", self.port)
            await site.start()
            self.port = self._runner.addresses[0][1]

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(serve())
            except BaseException as error:  # reported to the starting thread, which re-raises it
                failure.append(error)
                self._loop.close()
                self._loop = None
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=type(self).__name__, daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()
        self._loop = None

    def __enter__(self) -> Self:
        return self if self._loop is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class RunningGateway(ThreadedApp):
    """A RoutingGateway served by a ThreadedApp."""

    def __init__(self, gateway: RoutingGateway, port: int = 0):
        super().__init__(gateway.make_app, port)
        self.gateway = gateway

    def start(self, fresh_timeout: float = 10.0) -> Self:
        """Serve, then wait until every backend has had a good scrape (so the first pick sees them all)."""
        super().start()
        deadline = time.monotonic() + fresh_timeout
        while len(self.gateway.fresh_backends()) < len(self.gateway.backends):
            if time.monotonic() > deadline:
                stale = {b.name: b.last_error or "no scrape yet" for b in self.gateway.backends.values()
                         if b not in self.gateway.fresh_backends()}
                self.stop()
                raise RuntimeError(f"backends without a good /metrics scrape after {fresh_timeout:g}s: {stale}")
            time.sleep(0.05)
        return self

    def wait_idle(self, after: float, timeout: float = SETTLE_TIMEOUT) -> bool:
        """Wait (at most `timeout` seconds) until the picker's view of every backend comes from a
        scrape sent after `after` (time.monotonic(), e.g. when the previous response ended)
        that shows it idle. True when it does; False on timeout (the next pick then sees
        whatever was scraped last). `verify.measure(..., settle=gateway.wait_idle)` calls this
        before each serial request."""
        deadline = time.monotonic() + timeout
        while not self.gateway.all_idle_since(after):
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.01, self.gateway.scrape_interval / 5))
        return True


def make_picker(weights: Mapping[str, int] | None, *, round_robin: bool = False, seed: int | None = None,
                config: EndpointPickerConfig | None = None, picker_version: str = DEFAULT_PICKER_VERSION,
                precise: PreciseIndex | None = None) -> tuple[Picker, str]:
    """RoundRobinPicker, an EndpointPicker built from `config`, or one with `weights` laid over
    the default profile (on the precise prefix index with `precise`); and the picker's label for
    /health and the log."""
    if round_robin:
        return RoundRobinPicker(), "round-robin"
    version = f", picker {picker_version}"
    if config is None and precise is not None:
        config = load_endpoint_picker_config(render_endpoint_picker_config(with_default_weights(weights), precise))
    if config is not None:
        profile = config.scheduling_profiles[0]
        # Every plugin of the profile, in order (filters and the picker too), a scorer with its weight.
        picker = EndpointPicker(config, seed=seed, picker_version=picker_version)
        index = ", precise prefix index" if picker.reads_kv_events else ""
        return picker, "endpoint picker, config " + ",".join(
            entry.plugin_ref if entry.weight is None else f"{entry.plugin_ref}={entry.weight:g}"
            for entry in profile.plugins) + index + version
    weights = with_default_weights(weights)
    return EndpointPicker(weights, seed=seed, picker_version=picker_version), "endpoint picker, weights " + ",".join(
        f"{name}={value}" for name, value in weights.items()) + version


def start_gateway(backends: Mapping[str, str], weights: Mapping[str, int] | None = None, *, round_robin: bool = False,
                  seed: int | None = None, port: int = 0, scrape_interval: float = SCRAPE_INTERVAL,
                  staleness: float = STALENESS, config: EndpointPickerConfig | None = None,
                  picker_version: str = DEFAULT_PICKER_VERSION, request_log: TextIO | None = None,
                  prefix_index: str = "approximate", speculative: bool = False,
                  backends_file: Path | None = None) -> RunningGateway:
    """Start `serve` in this process (background thread); `.url`, `.gateway.history`, `.stop()`.
    Each request's line goes to `request_log`, if given. `prefix_index` precise: weights route
    on the backends' KV-cache events (a `config` reading them subscribes too)."""
    kv_events = subscribe(backends) if prefix_index == "precise" and not round_robin else None
    try:
        picker, label = make_picker(weights, round_robin=round_robin, seed=seed, config=config,
                                    picker_version=picker_version,
                                    precise=precise_index(kv_events, backends, speculative) if kv_events else None)
        kv_events = _events_for(picker, backends, kv_events)
    except BaseException:
        if kv_events is not None:
            kv_events.stop()
        raise
    gateway = RoutingGateway(backends, picker, scrape_interval=scrape_interval, staleness=staleness, label=label,
                             request_log=request_log, kv_events=kv_events, backends_file=backends_file)
    return RunningGateway(gateway, port).start()


def precise_index(kv_events: EventSubscriber, backends: Mapping[str, str], speculative: bool) -> PreciseIndex:
    """The precise index the backends' events key: their block size and model, the token
    producer's vLLM the first backend."""
    return PreciseIndex(kv_events.block_size, kv_events.model, next(iter(backends.values())), speculative)


def _events_for(picker: Picker, backends: Mapping[str, str],
                kv_events: EventSubscriber | None) -> EventSubscriber | None:
    """The subscription a picker that reads KV-cache events needs (a config file's or a stack's
    precise producer subscribes here), its block size checked against the backends'."""
    if not getattr(picker, "reads_kv_events", False):
        return kv_events
    kv_events = kv_events or subscribe(backends)
    producer_blocks = picker.hash_plan(kv_events.block_size).block_tokens
    if producer_blocks != kv_events.block_size:
        kv_events.stop()
        raise KvEventsError(f"the picker's precise producer keys blocks of {producer_blocks} tokens "
                            f"(tokenProcessorConfig.blockSizeTokens) and the backends cache blocks of "
                            f"{kv_events.block_size}: no key would ever match; set them equal")
    return kv_events


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "serve", help="local OpenAI-compatible gateway that routes with the endpoint-picker model (not for production)",
        description="Route completions, chat completions, embeddings, responses, Anthropic messages and vLLM "
                    "generate requests (streaming too) across --backend servers with the endpoint-picker model, scraping each backend's /metrics every "
                    "50 ms (the real picker's tick); pass every other path through to a backend. As a safety rule "
                    "of its own (the real picker has none), serve skips backends whose last good scrape is over "
                    f"--staleness old. The chosen backend is named in the {ROUTED_HEADER!r} response header; send "
                    f"'{EXPLAIN_HEADER}: true' to get the score breakdown in {DECISION_HEADER!r}. " + NOT_PRODUCTION,
    )
    parser.add_argument("--backend", action="append", type=named_url("--backend"), required=True, metavar="NAME=URL",
                        help="a model server (repeatable), e.g. pod-a=http://127.0.0.1:18001")
    parser.add_argument("--backends-file", type=Path, metavar="FILE",
                        help="more backends, a JSON object {NAME: URL}, read again whenever it changes: one added is "
                             "picked once its first scrape succeeds, one removed is no longer picked (as a pool's "
                             "endpoints follow its pods)")
    parser.add_argument("--port", type=port_number("--port"), default=8080,
                        help="port on 127.0.0.1 to listen on (default 8080)")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--weights", type=weights_option, metavar="NAME=N,...",
                        help="scorer weights laid over the defaults queue=2,kvCache=2,prefix=3, e.g. prefix=0,queue=3")
    choice.add_argument("--stack", help="route with the picker configuration a stack gives --model (rendered from its "
                                        "weights, or its pickerConfigMap file), e.g. --stack dev --model qwen-small")
    choice.add_argument("--round-robin", action="store_true", help="pick backends in turn, like a plain Service")
    choice.add_argument("--routing", type=routing_option, metavar="RECIPE[,NAME=VALUE,...]",
                        help="route with a recipe as a stack's models[].routing sets it: weights, or sticky with its "
                             "filter's parameters, e.g. sticky,maxTTFTPenaltyMs=5000")
    parser.add_argument("--latency-profile", metavar="FILE",
                        help="with --routing sticky: take peakPrefillThroughput from this calibrate profile when "
                             "--routing does not set it")
    choice.add_argument("--picker-config", metavar="FILE",
                        help="an EndpointPickerConfig (llm-d.ai/v1alpha1) to build the picker from, plugin by plugin, "
                             "e.g. the one the stack deploys or your pickerConfigMap's")
    parser.add_argument("--picker-version", choices=tuple(PICKER_VERSIONS), default=DEFAULT_PICKER_VERSION,
                        help=f"llm-d router release to model (default {DEFAULT_PICKER_VERSION}); before v0.9 the "
                             "prefix producer hashes characters instead of 4-byte pseudo-tokens")
    add_model_options(parser)
    parser.add_argument("--prefix-index", choices=("approximate", "precise"), default="approximate",
                        help="where the picker learns which backends hold a prompt's prefix: approximate, its record "
                             "of where it sent each one (the default), or precise, the KV-cache events each vLLM "
                             "server publishes (started with --kv-events-config, as `python -m routing servers` "
                             "starts them)")
    parser.add_argument("--speculative-indexing", action="store_true",
                        help="with --prefix-index precise: each pick also enters the request's blocks for the chosen "
                             "backend for 2 s, until its events arrive (upstream's speculativeIndexing)")
    parser.add_argument("--seed", type=int, help="seed for the picker's random tie-breaks (default: random)")
    parser.add_argument("--scrape-interval", type=positive_seconds, default=SCRAPE_INTERVAL,
                        help=f"seconds between /metrics scrapes (default {SCRAPE_INTERVAL:g}, the picker's)")
    parser.add_argument("--staleness", type=positive_seconds, default=STALENESS,
                        help=f"seconds after its last good scrape at which serve stops picking a backend (default "
                             f"{STALENESS:g}); serve's own safety rule: the real picker keeps scoring a pod on its "
                             "last metrics until Kubernetes removes it from the pool")
    parser.add_argument("--quiet", action="store_true",
                        help="no line per request (by default each names the pod, the status, the time taken and, "
                             "when vLLM reports them, the cached prompt tokens)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    weights, source, document = args.weights, "--weights", None
    try:
        if args.latency_profile and (args.routing is None or args.routing[0] != "sticky"):
            raise OptionError(f"--latency-profile {args.latency_profile}: only --routing sticky reads it (its "
                              "peakPrefillThroughput); drop it")
        if args.speculative_indexing and args.prefix_index != "precise":
            raise OptionError("--speculative-indexing: speculative entries belong to the precise index; add "
                              "--prefix-index precise")
        if args.backends_file and args.prefix_index == "precise":
            raise OptionError(f"--backends-file {args.backends_file}: the precise index subscribes to the backends' "
                              "KV-cache events once, at the start; give every backend with --backend, or drop "
                              "--prefix-index precise")
        if args.prefix_index == "precise" and (args.round_robin or args.stack or args.picker_config):
            what = "--round-robin reads no index" if args.round_robin else (
                "the picker configuration given decides its prefix producer (a precise-prefix-cache-producer in it "
                "subscribes to the backends' events by itself)")
            raise OptionError(f"--prefix-index precise: {what}; drop one of the two")
        if args.routing is not None:
            source = f"--routing {','.join([args.routing[0], *(f'{k}={v}' for k, v in args.routing[1].items())])}"
        backends = unique_named_urls("--backend", args.backend)
        found = load_stack_model(args.stack, args.model, args.stacks_dir)
        if found is not None:
            # The EndpointPickerConfig the stack runs for the model: the picker is built from it.
            document = found.picker_config("Pass --weights or --picker-config FILE to choose the picker here instead.")
            source = f"--stack {found.stack} --model {found.model.name}"
    except (OptionError, ProfileError) as error:
        print(f"serve: {error}", file=sys.stderr)
        return 2
    config = kv_events = None
    try:
        if args.prefix_index == "precise":
            kv_events = subscribe(backends)
        precise = precise_index(kv_events, backends, args.speculative_indexing) if kv_events else None
        if args.routing is not None and args.routing[0] == "sticky":
            document = sticky_config(args.routing[1], args.latency_profile, precise)
        if args.picker_config:
            source = f"--picker-config {args.picker_config}"
            document = _read_text(args.picker_config)
        if document is not None:
            config = load_endpoint_picker_config(document)
            for warning in config.warnings:
                print(f"serve: {source}: warning: {warning}", file=sys.stderr)
        picker, label = make_picker(weights, round_robin=args.round_robin, seed=args.seed, config=config,
                                    picker_version=args.picker_version, precise=precise)
        kv_events = _events_for(picker, backends, kv_events)
    except (PickerConfigError, OptionError, ProfileError, KvEventsError) as error:
        if kv_events is not None:
            kv_events.stop()
        print(f"serve: {source}: {error}", file=sys.stderr)
        return 2
    try:
        listener = _listen(args.port)
    except OptionError as error:
        if kv_events is not None:
            kv_events.stop()
        print(f"serve: {error}", file=sys.stderr)
        return 2
    gateway = RoutingGateway(backends, picker, scrape_interval=args.scrape_interval, staleness=args.staleness,
                             label=label, request_log=None if args.quiet else sys.stdout, kv_events=kv_events,
                             backends_file=args.backends_file)
    print(f"serve: {label}; backends {', '.join(f'{n}={u}' for n, u in backends.items())}", flush=True)
    if kv_events is not None:
        print("serve: precise prefix index: subscribed to " + ", ".join(
            f"{source.backend} {source.endpoint} ({source.topic})" for source in kv_events.sources)
              + f"; blocks of {kv_events.block_size} tokens; GET /health shows what it holds", flush=True)
    print(f"serve: listening on http://127.0.0.1:{args.port} (Ctrl-C to stop). {NOT_PRODUCTION}", flush=True)
    web.run_app(gateway.make_app(), sock=listener, print=None, access_log=None)
    return 0


def sticky_config(parameters: dict[str, int | float], profile_path: str | None,
                  precise: PreciseIndex | None = None) -> dict:
    """The sticky recipe's EndpointPickerConfig, peakPrefillThroughput from the profile when unset
    (on the precise index with `precise`)."""
    if profile_path and "peakPrefillThroughput" not in parameters:
        peak = LatencyProfile.load(profile_path).peak_prefill
        if peak is None:
            raise OptionError(f"--latency-profile {profile_path}: records no peak prefill throughput (calibrate "
                              "measures it since the sticky recipe came); calibrate again, or set "
                              "--routing sticky,peakPrefillThroughput=N")
        parameters = {**parameters, "peakPrefillThroughput": round(peak.tokens_per_s)}
    return render_sticky_picker_config(parameters, precise)


def _listen(port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:`port`, bound before anything starts, so that a port in use
    is one line naming --port rather than aiohttp's traceback."""
    try:
        return socket.create_server(("127.0.0.1", port))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            why = "is already in use (another serve, a vLLM server, a port-forward?)"
        elif error.errno == errno.EACCES:
            why = "may not be listened on by this user (ports below 1024 need root)"
        else:
            why = f"cannot be listened on ({error.strerror or error})"
        free = 8081 if port == 8080 else 8080
        raise OptionError(f"--port {port}: 127.0.0.1:{port} {why}; pick a free port, e.g. --port {free}, or stop what "
                          "holds it") from None


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise OptionError(f"cannot read it ({error}); pass the path of an EndpointPickerConfig YAML file") from None
