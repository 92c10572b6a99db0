"""`serve --prefix-index precise`: each vLLM server's KV-cache events, read as the llm-d router's
precise-prefix-cache-producer reads them (v0.10.0, pkg/kvevents).

Each backend's publisher is found at its `GET /kv_event_sources` (vLLM 0.32: the resolved
`--kv-events-config` of each data-parallel rank; rank 0 is read). A ZMQ SUB socket connects to
it with the router's topic filter `kv@` and receives multipart messages [topic, sequence,
payload], the payload a msgpack `KVEventBatch` [ts, events, rank] whose events are maps tagged
`type`: BlockStored (vLLM's block hashes, the parent's hash, the token ids, ...), BlockRemoved
(hashes) and AllBlocksCleared. As upstream does, the router's own block keys are computed from
the event's token ids (routing/picker/precise.py `block_keys`, seeded with the model named in
the topic, kv@<pod>@<model>), chained from the key the parent's vLLM hash was mapped to; an
event whose parent was never mapped is dropped (pool.go@v0.10.0). Requests are keyed the same
way from the tokens vLLM renders for them (`/v1/completions/render`, as upstream's token
producer asks), so a request's keys meet the events' exactly when vLLM cached its tokens.

No replay is asked (upstream's default): a serve started after the servers knows nothing they
cached before, and learns only chains computed from their first block.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import msgspec
import zmq

from routing.metrics import parse_metrics
from routing.picker.endpoint_picker import KvEvent
from routing.picker.precise import block_keys

# The llm-d router's subscriber filter (pkg/kvevents/pool.go@v0.10.0 topicFilter default).
TOPIC_FILTER = b"kv@"
# How long the subscriber thread waits on its sockets before looking whether it should stop.
POLL_MILLISECONDS = 100
# Delivery delays kept for /health's percentiles (the last ones).
DELAY_HISTORY = 10_000


class KvEventsError(RuntimeError):
    """A backend whose KV-cache events cannot be subscribed to, with what to do."""


@dataclass(frozen=True)
class EventSource:
    """One backend's publisher: its ZMQ endpoint as serve connects to it, and the model its topic names."""

    backend: str
    endpoint: str
    topic: str

    @property
    def model(self) -> str:
        # engineadapter/common.go@v0.10.0: kv@<pod>@<model>, exactly three parts, else no model.
        parts = self.topic.split("@")
        return parts[2] if len(parts) == 3 else ""


def discover(backend: str, url: str, timeout: float = 10.0) -> EventSource:
    """The KV-event publisher of the vLLM server at `url`, from its GET /kv_event_sources."""
    fix = ("start vLLM with --kv-events-config '{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", "
           "\"endpoint\": \"tcp://*:5557\", \"topic\": \"kv@<pod>@<model>\"}' (`python -m routing servers` "
           "starts its servers so)")
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/kv_event_sources", timeout=timeout) as response:
            sources = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise KvEventsError(f"backend {backend} ({url}): GET /kv_event_sources failed ({error}); serve "
                            "--prefix-index precise needs vLLM 0.32 or later, up and reachable") from None
    config = sources.get("0") if isinstance(sources, dict) else None
    if not isinstance(config, dict) or not config.get("enable_kv_cache_events") or config.get("publisher") != "zmq":
        raise KvEventsError(f"backend {backend} ({url}) publishes no KV-cache events: {fix}")
    topic = config.get("topic") or ""
    if not topic.encode().startswith(TOPIC_FILTER):
        raise KvEventsError(f"backend {backend} ({url}) publishes its events on topic {topic!r}, which the router's "
                            f"subscription to {TOPIC_FILTER.decode()!r} never receives: set \"topic\": "
                            "\"kv@<pod>@<model>\" in its --kv-events-config")
    endpoint = config["endpoint"]
    # A publisher that binds on every interface is reached at the backend's own host.
    host = urllib.parse.urlsplit(url).hostname or "127.0.0.1"
    return EventSource(backend, endpoint.replace("*", host), topic)


class LiveEventLog:
    """The events received, in order, each with the time (time.monotonic()) it arrived: the feed
    the picker's precise producer drains (endpoint_picker.KvEventFeed). Written by the subscriber
    thread, read by the gateway's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: list[float] = []
        self._events: list[KvEvent] = []
        self.delays: list[float] = []  # per batch: its receipt less the time vLLM stamped it with

    def publish(self, at: float, events: Sequence[KvEvent], delay: float) -> None:
        with self._lock:
            self._times.extend([at] * len(events))
            self._events.extend(events)
            self.delays.append(delay)
            if len(self.delays) > DELAY_HISTORY:
                del self.delays[:len(self.delays) - DELAY_HISTORY]

    def cursor(self) -> list[int]:
        with self._lock:
            return [len(self._events)]

    def drain(self, cursor: list[int], until: float) -> list[KvEvent]:
        with self._lock:
            start = end = cursor[0]
            while end < len(self._times) and self._times[end] <= until:
                end += 1
            cursor[0] = end
            return self._events[start:end]

    def delay_figures(self) -> dict[str, float | None]:
        """Delivery delays in seconds: p50, p95 and the largest, over the batches kept."""
        with self._lock:
            delays = sorted(self.delays)
        if not delays:
            return {"batches": 0, "p50": None, "p95": None, "max": None}
        return {"batches": len(delays), "p50": statistics.median(delays),
                "p95": delays[min(len(delays) - 1, int(0.95 * len(delays)))], "max": delays[-1]}


@dataclass
class SourceState:
    """What one backend's subscription has received."""

    source: EventSource
    batches: int = 0
    stored: int = 0
    removed: int = 0
    cleared: int = 0
    dropped: int = 0  # BlockStored events whose parent was never mapped
    last_sequence: int | None = None
    gaps: int = 0  # batches missed, by the sequence numbers
    last_at: float | None = None

    def to_json(self, now: float) -> dict[str, Any]:
        return {"endpoint": self.source.endpoint, "topic": self.source.topic, "batches": self.batches,
                "blocksStored": self.stored, "blocksRemoved": self.removed, "cleared": self.cleared,
                "droppedEvents": self.dropped, "missedBatches": self.gaps,
                "secondsSinceLastBatch": None if self.last_at is None else round(now - self.last_at, 3)}


class EventTranslator:
    """vLLM's events for one picker: its block hashes mapped to the router's keys (block_keys of
    the event's tokens, chained from the parent's key), as pkg/kvevents/pool.go@v0.10.0 maps
    them. The mapping is shared by the backends: vLLM's default hash (sha256, seeded alike)
    names equal blocks alike on every server."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self._keys: dict[int, int] = {}  # vLLM's block hash -> the router's key

    def translate(self, state: SourceState, event: Mapping[str, Any]) -> KvEvent | None:
        kind = event.get("type")
        pod = state.source.backend
        if kind == "BlockStored":
            hashes, parent_hash = event["block_hashes"], event.get("parent_block_hash")
            parent = None
            if parent_hash is not None:
                parent = self._keys.get(parent_hash)
                if parent is None:
                    state.dropped += 1
                    return None
            model = event.get("lora_name") or state.source.model
            keys = block_keys(event["token_ids"], model, self.block_size, parent=parent or 0)
            # Upstream maps engine blocks onto its own by their count; with equal block sizes, one to one.
            for vllm_hash, key in zip(hashes, keys):
                self._keys[vllm_hash] = key
            state.stored += len(keys)
            return KvEvent(pod, "stored", keys, parent)
        if kind == "BlockRemoved":
            keys = [self._keys[vllm_hash] for vllm_hash in event["block_hashes"] if vllm_hash in self._keys]
            state.removed += len(keys)
            return KvEvent(pod, "removed", keys)
        if kind == "AllBlocksCleared":
            state.cleared += 1
            return KvEvent(pod, "cleared")
        return None


@dataclass
class EventSubscriber:
    """A thread that subscribes to every source and appends what they publish to `log`."""

    sources: Sequence[EventSource]
    block_size: int
    log: LiveEventLog = field(default_factory=LiveEventLog)

    def __post_init__(self) -> None:
        self.states = {source.backend: SourceState(source) for source in self.sources}
        self._translator = EventTranslator(self.block_size)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._context = zmq.Context()
        self._sockets: dict[zmq.Socket, SourceState] = {}
        for state in self.states.values():
            socket = self._context.socket(zmq.SUB)
            socket.setsockopt(zmq.SUBSCRIBE, TOPIC_FILTER)
            socket.setsockopt(zmq.LINGER, 0)
            socket.connect(state.source.endpoint)
            self._sockets[socket] = state
        self._decoder = msgspec.msgpack.Decoder()

    def start(self) -> EventSubscriber:
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for socket in self._sockets:
            socket.close(linger=0)
        self._context.term()

    def _run(self) -> None:
        poller = zmq.Poller()
        for socket in self._sockets:
            poller.register(socket, zmq.POLLIN)
        while not self._stop.is_set():
            for socket, _ in poller.poll(POLL_MILLISECONDS):
                while True:
                    try:
                        frames = socket.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._receive(self._sockets[socket], frames)

    def _receive(self, state: SourceState, frames: list[bytes]) -> None:
        arrived, wall = time.monotonic(), time.time()
        if len(frames) != 3:
            return  # not a vLLM batch: upstream's adapter skips it too
        _, sequence_bytes, payload = frames
        sequence = int.from_bytes(sequence_bytes, "big")
        if state.last_sequence is not None and sequence > state.last_sequence + 1:
            state.gaps += sequence - state.last_sequence - 1
        state.last_sequence = sequence
        try:
            stamped, raw_events, *_ = self._decoder.decode(payload)
        except (msgspec.DecodeError, ValueError, TypeError):
            return
        events = [event for event in (self._translator.translate(state, raw) for raw in raw_events
                                      if isinstance(raw, dict)) if event is not None]
        state.batches += 1
        state.last_at = arrived
        self.log.publish(arrived, events, wall - stamped)

    @property
    def model(self) -> str:
        """The served model the sources' topics name (`subscribe` checks they name one)."""
        return self.sources[0].model

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {"sources": {name: state.to_json(now) for name, state in self.states.items()},
                "deliveryDelaySeconds": self.log.delay_figures()}


def subscribe(backends: Mapping[str, str], timeout: float = 10.0) -> EventSubscriber:
    """A started subscription to every backend's KV-cache events: each one's publisher and block
    size found from the server itself, which must agree (one model, one block size)."""
    sources = [discover(name, url, timeout) for name, url in backends.items()]
    sizes = {name: vllm_block_size(name, url, timeout) for name, url in backends.items()}
    if len(set(sizes.values())) != 1:
        raise KvEventsError("the backends cache blocks of different sizes (" + ", ".join(
            f"{name} {size}" for name, size in sizes.items()) + "): one precise index keys one block size; start "
            "them with one --block-size")
    models = {source.backend: source.model for source in sources}
    if len(set(models.values())) != 1 or "" in models.values():
        raise KvEventsError("the backends' event topics name " + ", ".join(
            f"{name} {model or 'no model'}" for name, model in models.items()) + ": each must be kv@<pod>@<model> "
            "with one served model name, which seeds the block keys")
    return EventSubscriber(sources, next(iter(sizes.values()))).start()


def vllm_block_size(backend: str, url: str, timeout: float = 10.0) -> int:
    """The block size the vLLM server at `url` caches, from its vllm:cache_config_info."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout) as response:
            size = parse_metrics(response.read().decode()).block_size
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise KvEventsError(f"backend {backend} ({url}): GET /metrics failed ({error})") from None
    if size is None:
        raise KvEventsError(f"backend {backend} ({url}): /metrics has no vllm:cache_config_info block_size; the "
                            "precise index needs vLLM's block size (vLLM 0.9.2 or later publishes it)")
    return size


def rendered_token_ids(document: Any) -> list[list[int]]:
    """The token ids, one list per prompt, in what vLLM's render endpoint answered (a list of
    GenerateRequest for /v1/completions/render, one for the chat and messages ones)."""
    items = document if isinstance(document, list) else [document]
    return [list(item["token_ids"]) for item in items]
