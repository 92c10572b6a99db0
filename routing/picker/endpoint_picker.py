"""A model of the gateway's endpoint picker: which pod a request goes to, and why.

It follows llm-d router v0.10.0 (LDR), the picker the HyperPod `llm-d` scheduler runs, built
plugin by plugin from an EndpointPickerConfig (settings/picker_config.py; HyperPod-style weights are
rendered into one first). Citations name the
upstream file each formula comes from (shared/reference/endpoint-picker-upstream.md
section 3). The picker sees only what it scrapes from each pod's /metrics (`PodMetrics`), the
request body and what it has sent itself (its in-flight load, routing/picker/load.py); it never
sees the servers' real prefix caches, only its own guess of them.
"""

from __future__ import annotations

import random
import sys
from array import array
from collections import OrderedDict, abc
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Hashable, Iterable, Iterator, Mapping, NamedTuple, Protocol, Sequence

from routing.picker.estimate import (DEFAULT_ESTIMATES, SURROGATE_FIX, MediaEstimates, MediaRun, ServerPrompt,
                                     lone_surrogate, parse_body, with_estimates)
from routing.picker.load import (AffinityFilter, FilterOutcome, InFlightLoad, active_request_scores,
                                 token_load_score)
from routing.picker.precise import KvBlockIndex
from routing.picker.traced import TracedPrompt
from routing.picker.prefix import (PSEUDO_TOKEN_BYTES, character_block_hashes, picker_block_hashes, picker_block_size,
                                   pseudo_token_bytes, server_block_keys)
from settings import DEFAULT_WEIGHTS, WEIGHT_NAMES
from settings.picker_config import (ACTIVE_REQUEST, AFFINITY_FILTER, INFLIGHT_PRODUCER, KV_CACHE, LATENCY_PREDICTOR,
                                    LORA_AFFINITY, MAX_SCORE_PICKER, NO_HIT_LRU, PREFIX, PREFIX_MATCH_PRODUCERS,
                                    PRECISE_PRODUCER, PREFIX_PRODUCER, QUEUE, RUNNING_REQUESTS, SINGLE_PROFILE_HANDLER,
                                    TOKEN_LOAD, precise_block_tokens, speculative_ttl_seconds,
                                    TOKEN_PRODUCER, EndpointPickerConfig, PickerConfigError, PluginSpec,
                                    SchedulingProfile, load_endpoint_picker_config, render_endpoint_picker_config,
                                    token_backend)

__all__ = [
    "WEIGHT_NAMES", "PodMetrics", "Request", "Decision", "ScoreBreakdown", "PodScore", "ScorerContribution", "Picker", "EndpointPicker", "RoundRobinPicker",
    "PickerConfigError", "with_default_weights", "ServerPrompt", "SURROGATE_FIX", "lone_surrogate", "FilterOutcome",
]

# llm-d router releases and how their approximate prefix producer reads a request: v0.9 and
# later hash 4-byte pseudo-tokens (LDR prefixhash/hashing.go); up to v0.8 the router ran GIE's
# producer (v1.3-v1.5), which hashes characters. HyperPod's `llm-d` image version is not
# published; the default is the newest release, the one the open-source path deploys.
PICKER_VERSIONS: Mapping[str, str] = MappingProxyType({
    "v0.10": "tokens", "v0.9": "tokens", "v0.8": "characters", "v0.7": "characters", "v0.6": "characters",
    "v0.5": "characters"})
DEFAULT_PICKER_VERSION = "v0.10"
# GIE approximateprefix/types.go@v1.5.0 defaultMaxPrefixBlocks.
LEGACY_MAX_PREFIX_BLOCKS = 256
# The fallbacks upstream uses for a non-positive lruCapacityPerServer / lruSize
# (approximateprefix/plugin.go makeserver, nohitlru/no_hit_lru.go NewNoHitLRU@v0.10.0).
DEFAULT_LRU_CAPACITY_PER_SERVER = 31250
DEFAULT_LRU_SIZE = 1024

@dataclass(frozen=True)
class PodMetrics:
    """What the picker knows about one pod, from its /metrics scrape."""

    name: str
    waiting: int = 0  # vllm:num_requests_waiting
    running: int = 0  # vllm:num_requests_running
    kv_usage: float = 0.0  # vllm:kv_cache_usage_perc, 0..1
    # vllm:lora_requests_info labels running_lora_adapters, waiting_lora_adapters, max_lora
    running_loras: frozenset[str] = frozenset()
    waiting_loras: frozenset[str] = frozenset()
    max_lora: int = 0
    # vllm:cache_config_info labels block_size, num_gpu_blocks (what autoTune reads)
    block_size: int | None = None
    num_gpu_blocks: int | None = None


@dataclass(frozen=True)
class Request:
    """One request as the picker sees it (and, in `server_prompts`, as the model server does).

    `prompt` is the request's text as one string (for chat, the estimate backend's flattening
    of roles and texts). `picker_prompts` are the estimate backend's token streams, one per
    prompt it hashes (default: `prompt` as pseudo-tokens); `server_prompts` what vLLM turns into
    tokens (default: `prompt` as a completion). `cache_salt` isolates prefix caches: it goes
    into every stream's first block hash. `lora` names the adapter a request targets; the
    picker's target model (LoRA affinity, and the first block's hash) is then the adapter, as
    it is when an OpenAI body's `model` names an adapter. `media`: where `picker_prompts[0]`
    holds image and video placeholder runs, which a picker whose token producer estimates media
    otherwise recounts (`streams_under`). `max_output_tokens`: the client's cap on the reply
    (max_tokens and the like), which an in-flight-load producer's output estimate respects.
    `traced`: a block-hash trace's request, known by its blocks and length alone (`prompt` is
    then empty): every index keys it from its block ids, and its tokens are the trace's.
    """

    model: str
    prompt: str
    lora: str | None = None
    cache_salt: str = ""
    picker_prompts: tuple[bytes, ...] | None = None
    server_prompts: tuple[ServerPrompt, ...] | None = None
    # What pickers before v0.9 hash (default: `prompt`'s UTF-8): see estimate.py.
    character_input: bytes | None = None
    media: tuple[MediaRun, ...] = ()
    max_output_tokens: int | None = None
    traced: TracedPrompt | None = None

    @property
    def target_model(self) -> str:
        return self.lora or self.model

    @property
    def token_streams(self) -> tuple[bytes, ...]:
        """What the picker hashes: little-endian uint32 token bytes, one entry per prompt."""
        return self.picker_prompts if self.picker_prompts is not None else (pseudo_token_bytes(self.prompt),)

    def streams_under(self, estimates: MediaEstimates) -> tuple[bytes, ...]:
        """The token streams a token producer with these media `estimates` makes of the request:
        `token_streams` with each image and video run recounted."""
        if not self.media:
            return self.token_streams
        return (with_estimates(self.token_streams[0], self.media, estimates),)

    @property
    def characters(self) -> bytes:
        return self.character_input if self.character_input is not None else self.prompt.encode("utf-8")

    @property
    def server_inputs(self) -> tuple[ServerPrompt, ...]:
        return self.server_prompts or (ServerPrompt(text=self.prompt),)

    @classmethod
    def from_openai_body(cls, body: Mapping[str, Any], api: str | None = None) -> Request:
        """A /v1/completions, /v1/chat/completions or /v1/embeddings body (`api`, inferred from its
        fields when None), as the estimate backend reads it (routing/picker/estimate.py). Raises
        ValueError for what upstream refuses, or what is not text."""
        parsed = parse_body(body, api)
        return cls(model=parsed.model, prompt=parsed.text, cache_salt=parsed.cache_salt,
                   picker_prompts=parsed.picker_prompts, server_prompts=parsed.server_prompts,
                   character_input=parsed.character_input, media=parsed.media,
                   max_output_tokens=parsed.max_output_tokens)


_NO_WEIGHTS: Mapping[str, float] = MappingProxyType({})
_NO_MATCHES: Mapping[str, int] = MappingProxyType({})


class _ByPod(abc.Mapping):
    """A read-only {pod: value} over the pods' positions and their values in that order: a pick
    makes its evidence this way at no cost, and a reader who looks pays for what is read."""

    __slots__ = ("_position", "_values")

    def __init__(self, position: Mapping[str, int], values: Sequence):
        self._position = position
        self._values = values

    def __getitem__(self, pod: str):
        return self._values[self._position[pod]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._position)

    def __len__(self) -> int:
        return len(self._position)

    def __repr__(self) -> str:
        return repr(dict(self))


@dataclass(frozen=True)
class ScorerContribution:
    """One scorer's part in one pod's total: weighted = weight × clamp(raw, 0, 1)."""

    scorer: str
    raw: float
    weight: float
    weighted: float


@dataclass(frozen=True)
class PodScore:
    """One candidate's total and the scorers that made it, in the profile's scorer order."""

    pod: str
    total: float
    contributions: tuple[ScorerContribution, ...]


@dataclass(frozen=True)
class ScoreBreakdown:
    """Why a pick went where it did: every candidate, best total first.

    `margin` is the chosen pod's total minus the runner-up's: 0 when a tie was broken at
    random, None with a single candidate (or for a picker that does not score). `pods` are the
    candidates the filters kept; `filters` say, filter by filter, which and why.
    """

    chosen: str
    pods: tuple[PodScore, ...]
    runner_up: str | None
    margin: float | None
    filters: tuple[FilterOutcome, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (for `serve`'s response header and `--json` reports)."""
        shown = {
            "chosen": self.chosen, "runnerUp": self.runner_up, "margin": self.margin,
            "pods": [{"pod": pod.pod, "total": pod.total,
                      "scorers": [{"scorer": part.scorer, "raw": part.raw, "weight": part.weight,
                                   "weighted": part.weighted} for part in pod.contributions]}
                     for pod in self.pods],
        }
        if self.filters:
            shown["filters"] = [outcome.as_dict() for outcome in self.filters]
        return shown


@dataclass(frozen=True)
class Decision:
    """One pick, with the evidence.

    `scores` holds each weighted scorer's raw score per pod (before clamping), `weights` its
    weight; `totals` the weighted sum the picker maximised; `match_blocks`/`total_blocks` the
    prefix index's view of the request (empty/0 when no plugin needs it). `filters`: what each
    filter of the profile did, in order (`FilterOutcome`); scores and totals cover only the pods
    they kept. `breakdown()` lays these out per pod; it is computed on demand, so picking pays
    nothing for it.
    """

    pod: str
    totals: Mapping[str, float]
    scores: Mapping[str, Mapping[str, float]]
    match_blocks: Mapping[str, int]
    total_blocks: int
    weights: Mapping[str, float] = field(default_factory=lambda: _NO_WEIGHTS)
    filters: tuple[FilterOutcome, ...] = ()

    def breakdown(self) -> ScoreBreakdown:
        pods = []
        for pod, total in self.totals.items():
            contributions = tuple(
                ScorerContribution(scorer, self.scores[scorer][pod], weight, weight * _clamp(self.scores[scorer][pod]))
                for scorer, weight in self.weights.items())
            pods.append(PodScore(pod, total, contributions))
        # The chosen pod first, then the others by total (ties in candidate order): with equal
        # totals the picker's random tie-break, not the order here, chose among them.
        pods.sort(key=lambda score: (score.pod != self.pod, -score.total))
        if len(pods) < 2:
            return ScoreBreakdown(self.pod, tuple(pods), None, None, self.filters)
        return ScoreBreakdown(self.pod, tuple(pods), pods[1].pod, pods[0].total - pods[1].total, self.filters)


def _clamp(score: float) -> float:
    # LDR scheduling/scheduler_profile.go@v0.10.0 enforceScoreRange: scores count within [0, 1].
    return 0.0 if score < 0.0 else 1.0 if score > 1.0 else score


class Picker(Protocol):
    # `key` names the request for the lifecycle calls below (upstream: its request ID); a pick
    # without one is not tracked as in flight, as upstream tracks no request without an ID.
    def pick(self, request: Request, pods: Sequence[PodMetrics], *, key: Hashable | None = None) -> Decision: ...

    # The pod `pick` would choose, with the same effect on the picker's state, without the
    # Decision: simulated fleets need only the pod, and building a Decision is a tenth of a
    # pick. `hashed`: the request's prefix hashes computed beforehand, with their HashPlan.
    def choose(self, request: Request, pods: Sequence[PodMetrics],
               hashed: Hashed | None = None, *, key: Hashable | None = None) -> str: ...

    # How the picker would hash requests for pods of this block size (None: it does not).
    def hash_plan(self, reported_block_size: int | None) -> HashPlan | None: ...

    # The first chunk of the response to request `key` reached the picker (StartOfStream; for
    # a response that is not streamed, when it arrives whole).
    def first_chunk(self, key: Hashable) -> None: ...

    # The response to request `key` ended, or the request failed or was aborted (EndOfStream).
    def finished(self, key: Hashable) -> None: ...


def with_default_weights(overrides: Mapping[str, int] | None) -> dict[str, int]:
    """`overrides` laid over the controller's default profile (queue 2, kvCache 2, prefix 3): the
    weights a picker configured with only `overrides` runs with."""
    return {**DEFAULT_WEIGHTS, **(overrides or {})}


def _min_max_scores(values: Sequence[int]) -> list[float]:
    # LDR scorer/queuedepth/queue.go and scorer/runningrequests/runningrequest.go@v0.10.0:
    # (max - v) / (max - min); all equal is neutral, 1.0.
    low, high = min(values), max(values)
    if low == high:
        return [1.0] * len(values)
    span = high - low
    return [(high - value) / span for value in values]


def _lora_score(pod: PodMetrics, target: str) -> float:
    # LDR scorer/loraaffinity/lora_affinity.go@v0.10.0. The capacity test counts the running
    # and the waiting adapter sets separately, as upstream adds the two map sizes.
    if target in pod.running_loras:
        return 1.0
    if len(pod.running_loras) + len(pod.waiting_loras) < pod.max_lora:
        return 0.8
    if target in pod.waiting_loras:
        return 0.6
    return 0.0


class PrefixIndex:
    """The approximate prefix-cache producer's guess of which pod holds which block.

    LDR dataproducer/approximateprefix/indexer.go@v0.10.0: a hash→pods map plus one LRU of
    block hashes per pod. A pod's LRU capacity is fixed when its LRU is first created.
    """

    def __init__(self) -> None:
        self._pods_by_hash: dict[int, set[str]] = {}
        self._lru_by_pod: dict[str, OrderedDict[int, None]] = {}
        self._capacity_by_pod: dict[str, int] = {}

    def match(self, hashes: Sequence[int], position: Mapping[str, int], matched: list[int]) -> None:
        """Adds the blocks matched per candidate to `matched` (by the candidate's `position`):
        walk from block 0, stop at the first block no pod holds, and credit every pod holding
        each block on the way (approximateprefix/plugin.go matchLongestPrefix). A pod need not
        hold an unbroken run to be credited; pods that are not candidates are skipped."""
        pods_by_hash = self._pods_by_hash
        for block_hash in hashes:
            pods = pods_by_hash.get(block_hash)
            if not pods:
                break
            for pod in pods:
                index = position.get(pod)
                if index is not None:
                    matched[index] += 1

    def add(self, hashes: Sequence[int], pod: str, capacity: int) -> None:
        """Records that `pod` now holds `hashes` (PreRequest, before the response exists).

        Mirrors upstream's two passes: every hash goes into the pod's LRU first (evicting, and
        dropping the evicted hash's pod from the map), then every hash goes into the map. So a
        request with more blocks than the capacity leaves map entries its LRU no longer holds,
        exactly as upstream does.
        """
        lru = self._lru_by_pod.get(pod)
        if lru is None:
            lru = self._lru_by_pod[pod] = OrderedDict()
            self._capacity_by_pod[pod] = capacity
        limit = self._capacity_by_pod[pod]
        for block_hash in hashes:
            if block_hash in lru:
                lru.move_to_end(block_hash)
                continue
            lru[block_hash] = None
            if len(lru) > limit:
                evicted, _ = lru.popitem(last=False)
                holders = self._pods_by_hash.get(evicted)
                if holders is not None:
                    holders.discard(pod)
                    if not holders:
                        del self._pods_by_hash[evicted]
        for block_hash in hashes:
            self._pods_by_hash.setdefault(block_hash, set()).add(pod)

    def capacity(self, pod: str) -> int | None:
        """The LRU capacity fixed for `pod`, or None before its first request."""
        return self._capacity_by_pod.get(pod)

    def blocks_held(self, pod: str) -> int:
        return len(self._lru_by_pod.get(pod, ()))


try:  # the same index in C (prefix_index.pyx) when the simulator's core is compiled (routing/compiled.py)
    from routing.picker.prefix_index import PrefixIndex as _INDEX
except ImportError:
    _INDEX = PrefixIndex


class HashPlan(NamedTuple):
    """How a prefix producer cuts a request into hashed blocks: its characters (pickers before
    v0.9) or its pseudo-tokens, in blocks of `block_tokens`, at most `max_blocks` of them, with
    images and videos counted by the token producer's `estimates` (None: upstream's defaults,
    which parsing a body already applied)."""

    characters: bool
    block_tokens: int
    max_blocks: int
    estimates: MediaEstimates | None = None

    def hashes(self, request: Request) -> list[list[int]]:
        """The request's block hashes, one chain per prompt that has any."""
        characters, block_tokens, max_blocks, estimates = self
        if request.traced is not None:
            # A trace's token stands for a pseudo-token; characters drop the partial block, tokens keep it.
            hashes = request.traced.keys(block_tokens, partial=not characters, max_blocks=max_blocks)
            return [hashes] if hashes else []
        model, salt = request.target_model, request.cache_salt
        if characters:
            hashes = character_block_hashes(model, request.characters, block_tokens, max_blocks, salt)
            return [hashes] if hashes else []
        streams = [picker_block_hashes(model, stream, block_tokens, max_blocks, salt)
                   for stream in (request.token_streams if estimates is None else request.streams_under(estimates))]
        return [hashes for hashes in streams if hashes]


class PrecisePlan(NamedTuple):
    """How a precise prefix producer keys a request: full blocks of `block_tokens` of the engine's
    own tokens. A request keyed beforehand by this plan comes as (its block keys per prompt, its
    token count)."""

    block_tokens: int


# A request's block hashes computed beforehand, with the plan they were computed by: a HashPlan's
# chains, one per prompt; a PrecisePlan's (keys per prompt, token count).
Hashed = tuple[HashPlan | PrecisePlan, Any]


class KvEvent(NamedTuple):
    """One KV-cache event of a pod, as the picker receives it: `kind` stored, removed or cleared,
    the block keys it names (none for cleared) and, for stored blocks, the key of the block
    before the first (None: they start the prompt)."""

    pod: str
    kind: str
    keys: Sequence[int] = ()
    parent: int | None = None


class KvEventFeed(Protocol):
    """Where a picker's precise producers read the pods' KV-cache events: each reader has a
    cursor, made at the feed's present (a picker started later sees only later events)."""

    def cursor(self) -> Any: ...

    # The events after `cursor` up to time `until`, in the order they were published; the cursor moves past them.
    def drain(self, cursor: Any, until: float) -> Iterable[KvEvent]: ...


class _MatchInfo:
    """One prefix producer's view of one request (LDR attribute/prefix PrefixCacheMatchInfo):
    block hashes per prompt, blocks matched per candidate (in the candidates' order) summed
    over the prompts, and the request's blocks in all."""

    __slots__ = ("hashes", "match_blocks", "block_tokens", "total_blocks", "tokens")

    def __init__(self, hashes: Sequence[Sequence[int]], match_blocks: list[int], block_tokens: int,
                 total_blocks: int, tokens: int = 0):
        self.hashes = hashes
        self.match_blocks = match_blocks
        self.block_tokens = block_tokens
        self.total_blocks = total_blocks
        self.tokens = tokens  # the engine's tokens the blocks were cut from (a precise producer's; else 0)

    @property
    def cold(self) -> bool:
        return not any(self.match_blocks)

    def restricted(self, kept: Sequence[int]) -> _MatchInfo:
        """The same request's view with only the candidates at positions `kept` (those the filters kept)."""
        matched = self.match_blocks
        return _MatchInfo(self.hashes, [matched[index] for index in kept], self.block_tokens, self.total_blocks,
                          self.tokens)


class _PrefixProducer:
    """An approx-prefix-cache-producer: its tuning and its index.

    LDR dataproducer/approximateprefix/plugin.go@v0.10.0: the block size is the first
    candidate's vLLM block size under autoTune (else blockSizeTokens), never below 64; the
    prefix is capped by maxPrefixTokensToMatch, else maxPrefixBlocksToMatch, else not at all;
    each prompt of a request is its own hash chain, and matches are summed over them.

    With `characters` (picker versions before v0.9, built on GIE v1.5's producer,
    approximateprefix/{hashing,plugin}.go@GIE v1.5.0): one stream of the request's characters
    in blocks of blockSizeTokens x 4 bytes, no 64-token floor, the trailing partial block
    dropped, at most 256 blocks unless configured, and the constant 31,250 as the capacity
    without autoTune. `estimates`: the token producer's media estimates when not the defaults.
    """

    def __init__(self, spec: PluginSpec, *, characters: bool = False, estimates: MediaEstimates | None = None):
        parameters = spec.parameters
        self.auto_tune: bool = parameters["autoTune"]
        self.block_size_tokens: int = parameters["blockSizeTokens"]
        self.max_prefix_tokens: int = parameters["maxPrefixTokensToMatch"]
        self.max_prefix_blocks: int = parameters["maxPrefixBlocksToMatch"]
        self.lru_capacity_per_server: int = parameters["lruCapacityPerServer"]
        self.characters = characters
        self.estimates = estimates
        if characters:
            # GIE v1.5 defaults, where the config left them: no token cap, 256 blocks.
            if "maxPrefixTokensToMatch" not in spec.written:
                self.max_prefix_tokens = 0
            if "maxPrefixBlocksToMatch" not in spec.written:
                self.max_prefix_blocks = LEGACY_MAX_PREFIX_BLOCKS
        self.index = _INDEX()
        self._plans: dict[int | None, HashPlan] = {}  # by reported block size: every pick asks

    def hash_plan(self, reported_block_size: int | None) -> HashPlan:
        """How this producer hashes requests when the first candidate reports `reported_block_size`.

        Upstream hashes a request once, with the block size of the *first* candidate
        (GetBlockSize: endpoints[0]); pods reporting another block size are matched with that
        one too. Pods of one Deployment agree anyway.
        """
        plan = self._plans.get(reported_block_size)
        if plan is None:
            plan = self._plans[reported_block_size] = self._plan(reported_block_size)
        return plan

    def _plan(self, reported_block_size: int | None) -> HashPlan:
        if self.characters:
            block_tokens = self.block_size_tokens
            if self.auto_tune and reported_block_size is not None and reported_block_size > 0:
                block_tokens = reported_block_size
        else:
            block_tokens = picker_block_size(self.block_size_tokens, reported_block_size, self.auto_tune)
        return HashPlan(self.characters, block_tokens, self._max_blocks(block_tokens), self.estimates)

    def match(self, request: Request, pods: Sequence[PodMetrics], position: Mapping[str, int],
              hashed: Hashed | None = None) -> _MatchInfo:
        """`position`: each candidate's place among `pods`; `hashed`, the request's hashes computed
        beforehand and the plan they were computed with (used only if it is this pick's)."""
        plan = self.hash_plan(pods[0].block_size)
        streams = hashed[1] if hashed is not None and (hashed[0] is plan or hashed[0] == plan) else plan.hashes(request)
        match_blocks = [0] * len(pods)
        total = 0
        for hashes in streams:
            self.index.match(hashes, position, match_blocks)
            total += len(hashes)
        return _MatchInfo(streams, match_blocks, plan.block_tokens, total)

    def _max_blocks(self, block_tokens: int) -> int:
        # resolveMaxBlocks.
        if self.max_prefix_tokens > 0 and block_tokens > 0:
            return self.max_prefix_tokens // block_tokens
        return self.max_prefix_blocks or sys.maxsize

    def record(self, match: _MatchInfo, pod: PodMetrics) -> None:
        """PreRequest: the chosen pod now (presumably) holds the request's blocks."""
        for hashes in match.hashes:
            self.index.add(hashes, pod.name, self._lru_capacity(pod))

    def _lru_capacity(self, pod: PodMetrics) -> int:
        # makeserver: num_gpu_blocks under autoTune when reported, else lruCapacityPerServer when
        # positive (not read before v0.9), else the default. num_gpu_blocks counts vLLM blocks
        # (16 tokens on GPUs) while the index holds blocks of at least 64 tokens, so upstream's
        # index can remember up to 4x what the pod really caches.
        if self.auto_tune and pod.num_gpu_blocks is not None and pod.num_gpu_blocks > 0:
            return pod.num_gpu_blocks
        if self.lru_capacity_per_server > 0 and not self.characters:
            return self.lru_capacity_per_server
        return DEFAULT_LRU_CAPACITY_PER_SERVER


class _PrecisePrefixProducer:
    """A precise-prefix-cache-producer: its block size, speculative TTL and index (precise.py).

    LDR dataproducer/preciseprefixcache@v0.10.0: the request's keys are full blocks of the
    engine's own tokens (the token producer's vllm backend), a pod's match the run of blocks from
    the first it holds by its events (and speculative entries); PreRequest enters the request's
    blocks for the chosen pod when speculative indexing is on. `engine_tokens` gives a request's
    tokens when a caller has not keyed it beforehand; `keys_line_up` is False when the token
    producer counts something else than vLLM's tokens, so no key ever matches an event's."""

    def __init__(self, spec: PluginSpec, engine_tokens: Callable[[Request], Sequence[Sequence[int]]] | None,
                 keys_line_up: bool):
        self.block_tokens: int = precise_block_tokens(spec.parameters)
        self.speculative_ttl: float | None = speculative_ttl_seconds(spec.parameters)
        self.engine_tokens = engine_tokens
        self.keys_line_up = keys_line_up
        self.plan = PrecisePlan(self.block_tokens)
        self.index = KvBlockIndex()
        self.cursor: Any = None  # where this producer has read its feed to
        self.now = 0.0  # the picker's clock: speculative entries last from and expire against it

    def hash_plan(self, reported_block_size: int | None) -> PrecisePlan:
        return self.plan

    def match(self, request: Request, pods: Sequence[PodMetrics], position: Mapping[str, int],
              hashed: Hashed | None = None) -> _MatchInfo:
        if hashed is not None and hashed[0] == self.plan:
            streams, tokens = hashed[1]
        elif request.traced is not None:
            streams, tokens = [request.traced.keys(self.block_tokens)], request.traced.length
        elif self.engine_tokens is not None:
            sequences = self.engine_tokens(request)
            streams = [server_block_keys(sequence, self.block_tokens) for sequence in sequences]
            tokens = sum(map(len, sequences))
        else:
            raise PickerConfigError(f"{PRECISE_PRODUCER} keys the engine's own tokens, and this pick was given none: "
                                    "predict and serve give them; a caller of the picker passes `engine_tokens` or "
                                    "keys each request beforehand by its PrecisePlan")
        match_blocks = [0] * len(pods)
        if self.keys_line_up:
            # producer.go@v0.10.0: one lookup per prompt, the prompts' scores and blocks summed.
            for keys in streams:
                self.index.match(keys, position, match_blocks, self.now)
        return _MatchInfo(streams, match_blocks, self.block_tokens, sum(map(len, streams)), tokens)

    def record(self, match: _MatchInfo, pod: PodMetrics) -> None:
        """PreRequest: with speculative indexing, the chosen pod holds the request's blocks for a TTL."""
        if self.speculative_ttl is not None and self.keys_line_up:
            for keys in match.hashes:
                self.index.speculate(pod.name, keys, self.now + self.speculative_ttl, self.now)

    def receive(self, events: Iterable[KvEvent]) -> None:
        index = self.index
        for event in events:
            if event.kind == "stored":
                index.stored(event.pod, event.keys, event.parent)
            elif event.kind == "removed":
                index.removed(event.pod, event.keys)
            else:
                index.cleared(event.pod)


class _Scorer:
    """One scorer plugin, built from its decoded parameters. `producer` names the prefix producer
    whose match info it reads (None: it reads none)."""

    # Scores from the pods' metrics alone (not the request, not what was picked before).
    reads_only_pods = False
    # Whether `pre_request` remembers something of a pick (most scorers remember nothing).
    remembers_picks = False

    def __init__(self, parameters: Mapping[str, Any]):
        """Scorers without parameters take none (upstream's factories ignore them)."""
        self.producer: str | None = None

    def score(self, request: Request, pods: Sequence[PodMetrics], match: _MatchInfo | None) -> list[float]:
        """Each pod's raw score, in the pods' order."""
        raise NotImplementedError

    def pre_request(self, chosen: str, match: _MatchInfo | None) -> None:
        """What the scorer remembers of a pick (most remember nothing)."""


class _QueueScorer(_Scorer):
    # LDR scorer/queuedepth/queue.go@v0.10.0.
    reads_only_pods = True

    def score(self, request, pods, match):
        return _min_max_scores([pod.waiting for pod in pods])


class _RunningRequestsScorer(_Scorer):
    # LDR scorer/runningrequests/runningrequest.go@v0.10.0.
    reads_only_pods = True

    def score(self, request, pods, match):
        return _min_max_scores([pod.running for pod in pods])


class _KvCacheScorer(_Scorer):
    # LDR scorer/kvcacheutilization/kvcache_utilization.go@v0.10.0: not normalised.
    reads_only_pods = True

    def score(self, request, pods, match):
        return [1.0 - pod.kv_usage for pod in pods]


class _LoraAffinityScorer(_Scorer):
    def score(self, request, pods, match):
        target = request.target_model
        return [_lora_score(pod, target) for pod in pods]


class _PrefixScorer(_Scorer):
    """LDR scorer/prefix/plugin.go@v0.10.0: matched / total blocks, blended with
    matchLengthWeight · min(1, matched·blockTokens / matchLengthScaleTokens)² when that weight is > 0."""

    def __init__(self, parameters: Mapping[str, Any]):
        super().__init__(parameters)
        self.producer = parameters["prefixMatchInfoProducerName"] or PREFIX_PRODUCER
        self.match_length_weight: float = parameters["matchLengthWeight"]
        self.match_length_scale_tokens: int = parameters["matchLengthScaleTokens"]

    def score(self, request, pods, match):
        total = match.total_blocks
        # match_blocks holds every candidate, in candidate order.
        if not total:
            return [0.0] * len(match.match_blocks)
        weight = self.match_length_weight
        if weight <= 0.0:
            return [matched / total for matched in match.match_blocks]
        scores = []
        for matched in match.match_blocks:
            length = min(1.0, matched * match.block_tokens / self.match_length_scale_tokens)
            scores.append(weight * length * length + (1.0 - weight) * (matched / total))
        return scores


class _NoHitLruScorer(_Scorer):
    """LDR scorer/nohitlru/no_hit_lru.go@v0.10.0. Warm requests (some pod matched a block) are
    neutral. Cold ones favour pods that never took a cold request (in candidate order), then the
    least recently used; rank = never-used count + position in the whole LRU (which may hold pods
    that are no longer candidates), clamped at 0. PreRequest moves the pod of a cold pick."""

    remembers_picks = True

    def __init__(self, parameters: Mapping[str, Any]):
        super().__init__(parameters)
        self.producer = parameters["prefixMatchInfoProducerName"] or PREFIX_PRODUCER
        self.lru_size: int = parameters["lruSize"] if parameters["lruSize"] > 0 else DEFAULT_LRU_SIZE
        self._lru: OrderedDict[str, None] = OrderedDict()  # pod names, least recently used first

    def score(self, request, pods, match):
        if not match.cold:
            return [0.5] * len(pods)
        if len(pods) == 1:
            return [1.0]
        position = {name: index for index, name in enumerate(self._lru)}
        never_used = [pod.name for pod in pods if pod.name not in position]
        scores = {name: 1.0 - rank / (len(pods) - 1) for rank, name in enumerate(never_used)}
        for pod in pods:
            if pod.name in position:
                rank = len(never_used) + position[pod.name]
                scores[pod.name] = max(0.0, 1.0 - rank / (len(pods) - 1))
        return [scores[pod.name] for pod in pods]

    def pre_request(self, chosen, match):
        if match.cold:
            self._lru.pop(chosen, None)
            self._lru[chosen] = None
            if len(self._lru) > self.lru_size:
                self._lru.popitem(last=False)


class _LoadScorer(_Scorer):
    """A scorer of the in-flight load an inflight-load-producer counts: `load_producer` names
    it; `load` is that producer, bound when the picker is built."""

    def __init__(self, parameters: Mapping[str, Any]):
        super().__init__(parameters)
        self.load_producer: str = parameters["inFlightLoadProducerName"] or INFLIGHT_PRODUCER
        self.load: InFlightLoad | None = None


class _TokenLoadScorer(_LoadScorer):
    # LDR scorer/tokenload/token_load.go@v0.10.0: a pod's in-flight tokens plus what this
    # request would add there (its UncachedRequestTokens), against queueThresholdTokens.
    def __init__(self, parameters: Mapping[str, Any]):
        super().__init__(parameters)
        self.queue_threshold_tokens = float(parameters["queueThresholdTokens"])

    def score(self, request, pods, match):
        tokens, adding, threshold = self.load.tokens, self.load.request_tokens, self.queue_threshold_tokens
        return [token_load_score(tokens.get(pod.name, 0) + adding[pod.name], threshold) for pod in pods]


class _ActiveRequestScorer(_LoadScorer):
    # LDR scorer/activerequest/active_request.go@v0.10.0.
    def __init__(self, parameters: Mapping[str, Any]):
        super().__init__(parameters)
        self.idle_threshold: int = parameters["idleThreshold"]
        self.max_busy_score: float = parameters["maxBusyScore"]

    def score(self, request, pods, match):
        requests = self.load.requests
        scores = active_request_scores({pod.name: requests.get(pod.name, 0) for pod in pods}, self.idle_threshold,
                                       self.max_busy_score)
        return [scores[pod.name] for pod in pods]


_SCORERS = {QUEUE: _QueueScorer, RUNNING_REQUESTS: _RunningRequestsScorer, KV_CACHE: _KvCacheScorer,
            LORA_AFFINITY: _LoraAffinityScorer, PREFIX: _PrefixScorer, NO_HIT_LRU: _NoHitLruScorer,
            TOKEN_LOAD: _TokenLoadScorer, ACTIVE_REQUEST: _ActiveRequestScorer}
# The llm-d router release that brought the filter, the load scorers and the in-flight-load
# producer (modelled as v0.10.0 has them).
_LOAD_PLUGINS_SINCE = "v0.9"
# Roles that never change which pod a request goes to; such plugins are left out of the model.
_ROLES_OUTSIDE_THE_PICK = ("data-layer", "flow-control", "request-control", "parser")


class EndpointPicker:
    """The llm-d picker as an EndpointPickerConfig configures it: filter, score every pod left, take the best, remember.

    Built plugin by plugin from the config's one scheduling profile: its filters in order, its
    scorers with their weights and parameters, the approximate prefix producers and in-flight-
    load producers they read, the max-score picker. Each `pick` runs what the picker does per
    request: every producer in use hashes the request and matches it against its index (and the
    in-flight-load producers work out what it would add to each pod), the filters narrow the
    candidates, the weighted scorers score the rest, the picker picks, then PreRequest (each
    prefix producer records the request's blocks for the chosen pod; the no-hit LRU moves the
    pod when the request was cold; each in-flight-load producer counts the request on the
    chosen pod until `first_chunk` / `finished` release it). Requests are assumed to arrive one
    at a time, each pick seeing the index updates of all earlier ones. One instance is one
    picker replica: its in-flight counts are its own.

    `config` is a loaded EndpointPickerConfig, or HyperPod-style weights (queue, kvCache, ...),
    which are rendered into the config the stack deploys and loaded from it, so both paths
    build the same plugins. A precise prefix producer reads the pods' events from the feed
    `attach` gives it, up to the time `advance` sets; `engine_tokens` gives a request's tokens
    as the engine counts them, for picks not keyed beforehand.
    """

    def __init__(self, config: EndpointPickerConfig | Mapping[str, Any], *, seed: int | None = None,
                 picker_version: str = DEFAULT_PICKER_VERSION,
                 engine_tokens: Callable[[Request], Sequence[Sequence[int]]] | None = None):
        if not isinstance(config, EndpointPickerConfig):
            config = load_endpoint_picker_config(render_endpoint_picker_config(config))
        if picker_version not in PICKER_VERSIONS:
            raise PickerConfigError(f"picker version {picker_version!r}: not one of {', '.join(PICKER_VERSIONS)}; "
                                    f"use {DEFAULT_PICKER_VERSION} (the default) or a version before v0.9 for "
                                    "character-based prefix hashing")
        self.config = config
        self.picker_version = picker_version
        self.hashes_characters = PICKER_VERSIONS[picker_version] == "characters"
        self._rng = random.Random(seed)
        profile = _single_profile(config)
        self._scorers: dict[str, _Scorer] = {}
        self._filters: list[tuple[AffinityFilter, str, str | None]] = []  # (filter, prefix producer, load producer)
        weights: dict[str, float] = {}
        for entry in profile.plugins:
            spec = config.plugin(entry.plugin_ref)
            where = f"profile {profile.name!r}: {spec.name} ({spec.type})"
            if spec.type in (AFFINITY_FILTER, TOKEN_LOAD, ACTIVE_REQUEST) and self.hashes_characters:
                raise PickerConfigError(f"{where}: the llm-d router has it since {_LOAD_PLUGINS_SINCE}; picker version "
                                        f"{picker_version} has no such plugin. Model {DEFAULT_PICKER_VERSION} (the "
                                        "default) to predict with it.")
            if spec.role == "scorer":
                if spec.type not in _SCORERS:
                    raise PickerConfigError(f"{where} is a scorer this model does not reproduce; the modelled scorers "
                                            f"are {', '.join(_SCORERS)}. Remove it to predict with the others.")
                if spec.name not in self._scorers:
                    self._scorers[spec.name] = _SCORERS[spec.type](spec.parameters)
                # Listed twice, upstream adds the scorer twice: the same as one entry with both weights.
                weights[spec.name] = weights.get(spec.name, 0.0) + entry.weight
            elif spec.role == "picker":
                if spec.type != MAX_SCORE_PICKER:
                    raise PickerConfigError(f"{where} is not modelled; only {MAX_SCORE_PICKER} is. Use it to predict.")
            elif spec.role == "filter":
                self._filters.append(_affinity_filter(spec, where))
        self.weights: Mapping[str, float] = MappingProxyType(weights)
        self._scorer_entries = tuple((name, scorer, scorer.reads_only_pods) for name, scorer in self._scorers.items())
        self._remembering_scorers = tuple(scorer for scorer in self._scorers.values() if scorer.remembers_picks)
        # Picks that see the same metrics (every pick between two scrapes) share the scores of the
        # scorers that read only them, and the partial totals of the leading run of such scorers
        # (totals add up scorer by scorer, in profile order, so only a leading run can be shared).
        weight_items = tuple(weights.items())
        shared = 0
        while shared < len(weight_items) and self._scorers[weight_items[shared][0]].reads_only_pods:
            shared += 1
        self._metrics_weights = weight_items[:shared]
        self._request_weights = weight_items[shared:]
        self._scored_pods: tuple[PodMetrics, ...] = ()
        self._names: list[str] = []
        self._position: dict[str, int] = {}
        self._metrics_scores: dict[str, list[float]] = {}
        self._metrics_totals: list[float] = []
        # The in-flight-load producers the filters' load gates and the load scorers read.
        load_readers = [(name, f"filter {f.name}") for f, _, name in self._filters if name is not None]
        load_readers += [(scorer.load_producer, f"scorer {name}") for name, scorer in self._scorers.items()
                         if isinstance(scorer, _LoadScorer)]
        load_specs = {name: _load_producer(config, name, reader) for name, reader in load_readers}
        # The prefix producers whose match info the scorers, the filters and (to discount cached
        # tokens, when it is declared) the in-flight-load producers read, in that order.
        prefix_readers = [(scorer.producer, "a scorer") for scorer in self._scorers.values()
                          if scorer.producer is not None]
        prefix_readers += [(producer, "a filter") for _, producer, _ in self._filters]
        discounts = {name: spec.parameters["prefixMatchInfoProducerName"] or PREFIX_PRODUCER
                     for name, spec in load_specs.items()}
        prefix_readers += [(producer, f"an {INFLIGHT_PRODUCER}") for producer in discounts.values()
                           if _declared_prefix_producer(config, producer)]
        reads_tokens = not self.hashes_characters and bool(prefix_readers or load_specs)
        self._estimates = _media_estimates(config) if reads_tokens else None
        self._producers: dict[str, _PrefixProducer | _PrecisePrefixProducer] = {}
        engine_tokens_backend = _engine_tokens_backend(config)
        for producer, reader in prefix_readers:
            if producer not in self._producers:
                spec = config.plugin(producer)
                if spec.type == PRECISE_PRODUCER:
                    self._producers[producer] = _PrecisePrefixProducer(spec, engine_tokens, engine_tokens_backend)
                elif spec.type == PREFIX_PRODUCER:
                    self._producers[producer] = _PrefixProducer(spec, characters=self.hashes_characters,
                                                                estimates=self._estimates)
                else:
                    raise PickerConfigError(f"plugin {spec.name} ({spec.type}) produces the prefix match info "
                                            f"{reader} reads; only {PREFIX_PRODUCER} and {PRECISE_PRODUCER} are "
                                            "modelled. Point prefixMatchInfoProducerName at one.")
        self._precise = [producer for producer in self._producers.values()
                         if isinstance(producer, _PrecisePrefixProducer)]
        _refuse_real_tokenizers(config, self._precise, self._producers)
        self._loads: dict[str, InFlightLoad] = {
            name: InFlightLoad(name, spec.parameters, discounts[name] if discounts[name] in self._producers else None)
            for name, spec in load_specs.items()}
        for scorer in self._scorers.values():
            if isinstance(scorer, _LoadScorer):
                scorer.load = self._loads[scorer.load_producer]
        # Whether a pick has filters to run or in-flight load to work out (weights alone: neither).
        self._produces_or_filters = bool(self._filters or self._loads)
        self._feed: KvEventFeed | None = None
        self._last_scored: Mapping[str, _MatchInfo] = {}
        # Plugins that take no part in this profile's picks (data layer, flow control, parsers,
        # producers nothing here reads), for reports that say what the model leaves out.
        self.ignored_plugins = tuple(
            spec.name for spec in config.plugins
            if spec.role in _ROLES_OUTSIDE_THE_PICK or (spec.role == "producer" and spec.name not in self._producers
                                                        and spec.name not in self._loads
                                                        and spec.type != TOKEN_PRODUCER))

    @classmethod
    def from_config(cls, config: EndpointPickerConfig, *, seed: int | None = None,
                    picker_version: str = DEFAULT_PICKER_VERSION) -> EndpointPicker:
        return cls(config, seed=seed, picker_version=picker_version)

    @property
    def prefix_index(self) -> PrefixIndex | KvBlockIndex | None:
        """The index of the (first) prefix producer in use; None when no plugin reads one."""
        producer = next(iter(self._producers.values()), None)
        return None if producer is None else producer.index

    def last_credits(self) -> tuple[dict[str, int], int]:
        """The last pick's prefix match by the (first) prefix producer: the blocks it credited each
        candidate the filters kept with, and the request's blocks in all (({}, 0) without one)."""
        match = next(iter(self._last_scored.values()), None)
        return ({}, 0) if match is None else (dict(zip(self._names, match.match_blocks)), match.total_blocks)

    @property
    def reads_kv_events(self) -> bool:
        """Whether a precise prefix producer runs, reading the pods' KV-cache events."""
        return bool(self._precise)

    def attach(self, feed: KvEventFeed) -> None:
        """Its precise producers read the pods' events from `feed`, from now on (a picker that
        starts, or restarts, knows nothing the pods published before: upstream asks no replay
        unless a replay port is configured, which this stack does not)."""
        self._feed = feed
        for producer in self._precise:
            producer.cursor = feed.cursor()

    def advance(self, now: float, received_until: float | None = None) -> None:
        """The picker's clock is `now`: its precise producers take the events the feed delivered by
        `received_until` (default: `now`), and speculative entries expire against `now`."""
        for producer in self._precise:
            producer.now = now
            if self._feed is not None:
                producer.receive(self._feed.drain(producer.cursor, now if received_until is None else received_until))

    def in_flight(self) -> dict[str, dict[str, tuple[int, int]]]:
        """Per in-flight-load producer, each pod's (requests, tokens) in flight from this replica."""
        return {name: {pod: (load.requests.get(pod, 0), load.tokens.get(pod, 0))
                       for pod in sorted(load.requests.keys() | load.tokens.keys())}
                for name, load in self._loads.items()}

    def pick(self, request: Request, pods: Sequence[PodMetrics], *, key: Hashable | None = None,
             hashed: Hashed | None = None) -> Decision:
        return self._pick(request, pods, hashed, key, True)

    def choose(self, request: Request, pods: Sequence[PodMetrics],
               hashed: Hashed | None = None, *, key: Hashable | None = None) -> str:
        return self._pick(request, pods, hashed, key, False)

    def first_chunk(self, key: Hashable) -> None:
        for load in self._loads.values():
            load.first_chunk(key)

    def finished(self, key: Hashable) -> None:
        for load in self._loads.values():
            load.finished(key)

    def hash_plan(self, reported_block_size: int | None) -> HashPlan | None:
        """How the (first) prefix producer hashes requests for pods reporting this block size;
        None when no plugin reads prefix matches."""
        producer = next(iter(self._producers.values()), None)
        return None if producer is None else producer.hash_plan(reported_block_size)

    def _see(self, request: Request, pods: Sequence[PodMetrics]) -> None:
        """What picks that see these very pods share: their names and positions, and the scores and
        partial totals of the scorers that read only the pods' metrics."""
        # Callers pass pods with distinct names (a gateway's backends by name, a simulated fleet).
        # The same objects or pods with equal metrics give the same scores either way. Compared
        # pod by pod, not as a new tuple: most picks see the very pods the last one saw.
        scored = self._scored_pods
        if len(pods) == len(scored):
            for index in range(len(pods)):
                pod = pods[index]
                if pod is not scored[index] and pod != scored[index]:
                    break
            else:
                return
        self._scored_pods = tuple(pods)
        names = [pod.name for pod in pods]
        if names != self._names:  # a scrape changes metrics far more often than the candidates
            self._names = names
            self._position = {name: index for index, name in enumerate(names)}
        self._metrics_scores = {name: scorer.score(request, pods, None)
                                for name, scorer in self._scorers.items() if scorer.reads_only_pods}
        self._metrics_totals = _add_weighted([0.0] * len(pods), self._metrics_weights, self._metrics_scores)

    def _pick(self, request: Request, pods: Sequence[PodMetrics], hashed: Hashed | None, key: Hashable | None,
              decide: bool) -> str | Decision:
        """The chosen pod's name or, with `decide`, the Decision with what it was made from.
        `hashed`: the request's block hashes and the plan they were computed with, which any
        producer hashing by that plan uses instead. `key`: the request's, for the in-flight-load
        producers."""
        if not pods:
            raise ValueError("no candidate pods: the pool's selector matches no ready pod")
        filters: tuple[FilterOutcome, ...] = ()
        if self._produces_or_filters:
            candidates, matches, pods, filters = self._produce_and_filter(request, pods, hashed)
            self._see(request, pods)
            names = self._names
            candidate_position = self._position
            if len(names) < len(candidates):
                candidate_position = {name: index for index, name in enumerate(candidates)}
                kept = [candidates.index(name) for name in names]
                scored = {name: match.restricted(kept) for name, match in matches.items()}
            else:
                scored = matches
        else:
            self._see(request, pods)
            candidate_position = self._position
            matches = scored = {name: producer.match(request, pods, candidate_position, hashed)
                                for name, producer in self._producers.items()}
        metrics_scores = self._metrics_scores
        scores = {name: metrics_scores[name] if reads_only_pods else scorer.score(request, pods, scored.get(scorer.producer))
                  for name, scorer, reads_only_pods in self._scorer_entries}
        totals = _add_weighted(self._metrics_totals, self._request_weights, scores)

        # LDR picker/maxscore/picker.go@v0.10.0: shuffle, then stable sort by score, highest
        # first, so equal totals are broken uniformly at random. With maxNumOfEndpoints > 1 the
        # request still goes to the first. Done here as random.shuffle does it, draw for draw
        # (so a seed gives the same picks), then the first highest total in that order: the
        # stable sort's first element, without sorting. The filters' draws come before these.
        best = max(totals)
        if totals.count(best) == 1:
            # No tie: the order does not matter, but its draws are taken all the same, so that
            # later picks see the same random stream.
            _draw_as_shuffle(len(pods), self._rng)
            chosen_index = totals.index(best)
        else:
            order = list(range(len(pods)))
            _shuffle(order, self._rng)
            chosen_index = -1
            for chosen_index in order:
                if totals[chosen_index] == best:
                    break
        chosen_pod = pods[chosen_index]
        chosen = chosen_pod.name
        self._last_scored = scored

        for name, producer in self._producers.items():
            producer.record(scored[name], chosen_pod)
        for scorer in self._remembering_scorers:
            scorer.pre_request(chosen, scored.get(scorer.producer))
        for load in self._loads.values():
            load.send(key, chosen)
        if not decide:
            return chosen
        position = self._position
        first = next(iter(matches.values()), None)
        return Decision(pod=chosen, totals=_ByPod(position, totals),
                        scores=MappingProxyType({name: _ByPod(position, values) for name, values in scores.items()}),
                        match_blocks=_ByPod(candidate_position, first.match_blocks) if first else _NO_MATCHES,
                        total_blocks=first.total_blocks if first else 0, weights=self.weights, filters=filters)

    def _produce_and_filter(self, request: Request, pods: Sequence[PodMetrics], hashed: Hashed | None
                            ) -> tuple[list[str], dict[str, _MatchInfo], Sequence[PodMetrics],
                                       tuple[FilterOutcome, ...]]:
        """The data producers' work on every candidate, then the filters in profile order
        (scheduler_profile.go runFilterPlugins@v0.10.0): the candidates' names, each producer's
        match info over them, the pods the filters kept and what each filter did.

        Upstream runs the in-flight-load producer and the prefix producer in an order its data
        graph leaves open (the former reads the latter's match info as an optional input, which
        the graph does not order by), so the tokens the token-load scorer adds for the request
        itself are discounted by the cached prefix on some picker starts and not on others; the
        model takes the order the producer documents, prefix first. The count PreRequest adds is
        discounted either way. When filters leave no pod upstream fails the request; the one
        modelled filter keeps at least one of the pods it is given."""
        candidates = names = [pod.name for pod in pods]
        position = {name: index for index, name in enumerate(names)}
        matches = {name: producer.match(request, pods, position, hashed) for name, producer in self._producers.items()}
        if self._loads:
            if self._precise:
                # TokenizedPrompt.TokenCount: the engine's tokens, as the vllm backend the precise producer keys.
                input_tokens = matches[next(name for name, producer in self._producers.items()
                                            if isinstance(producer, _PrecisePrefixProducer))].tokens
            elif request.traced is not None:
                input_tokens = request.traced.length
            else:
                streams = (request.streams_under(self._estimates) if self._estimates is not None
                           else request.token_streams)
                # TokenizedPrompt.TokenCount: the estimate backend's tokens, over every prompt.
                input_tokens = sum(map(len, streams)) // PSEUDO_TOKEN_BYTES
            for load in self._loads.values():
                match = matches.get(load.prefix_producer)
                load.produce(names, input_tokens, request.max_output_tokens,
                             None if match is None else (dict(zip(names, match.match_blocks)), match.total_blocks,
                                                         match.block_tokens))
        outcomes = []
        for affinity_filter, producer, load_producer in self._filters:
            match = matches[producer]
            total = match.total_blocks
            matched = match.match_blocks
            # prefixCacheScore: matched / total blocks, 0 without blocks.
            prefix_scores = {name: matched[position[name]] / total if total else 0.0 for name in names}
            in_flight = self._loads[load_producer].tokens if load_producer is not None else {}
            # The filter's exploration draw (rand.Float64()) is taken from the picker's seeded
            # generator, before the max-score picker's tie-break draws of the same pick.
            outcome = affinity_filter.run(names, prefix_scores, in_flight, self._rng)
            outcomes.append(outcome)
            if len(outcome.kept) < len(names):
                kept = set(outcome.kept)
                pods = [pod for pod in pods if pod.name in kept]
                names = [pod.name for pod in pods]
        return candidates, matches, pods, tuple(outcomes)

def _affinity_filter(spec: PluginSpec, where: str) -> tuple[AffinityFilter, str, str | None]:
    """A prefix-cache-affinity-filter, the prefix producer it reads and (with its load gate on)
    the in-flight-load producer."""
    if spec.type != AFFINITY_FILTER:
        raise PickerConfigError(f"{where}: filters are not modelled, except {AFFINITY_FILTER}. Remove it to predict "
                                "as if it let every pod through.")
    parameters = spec.parameters
    gated = parameters["maxTTFTPenaltyMs"] > 0
    if gated and parameters["ttftSource"] == LATENCY_PREDICTOR:
        raise PickerConfigError(f"{where}: ttftSource {LATENCY_PREDICTOR} reads each pod's TTFT from the latency "
                                "predictor's sidecars, which this model does not have; set ttftSource: "
                                "prefillThroughput with the pods' peakPrefillThroughput (`calibrate` measures it), or "
                                "maxTTFTPenaltyMs: 0 to predict without the load gate.")
    load_producer = (parameters["inFlightLoadProducerName"] or INFLIGHT_PRODUCER) if gated else None
    return (AffinityFilter(spec.name, parameters), parameters["prefixMatchInfoProducerName"] or PREFIX_PRODUCER,
            load_producer)


def _load_producer(config: EndpointPickerConfig, name: str, reader: str) -> PluginSpec:
    # The loader made sure a plugin of this name exists (declared or created as upstream does).
    spec = config.plugin(name)
    if spec.type != INFLIGHT_PRODUCER:
        raise PickerConfigError(f"plugin {spec.name} ({spec.type}) is where {reader} reads in-flight load; only "
                                f"{INFLIGHT_PRODUCER} makes it. Point inFlightLoadProducerName at one.")
    return spec


def _declared_prefix_producer(config: EndpointPickerConfig, name: str) -> bool:
    """Whether a plugin named `name` makes prefix match info (an in-flight-load producer reads it
    when it is there, and counts every input token when it is not)."""
    try:
        spec = config.plugin(name)
    except KeyError:
        return False
    return spec.type in PREFIX_MATCH_PRODUCERS


def _add_weighted(totals: list[float], weights: Sequence[tuple[str, float]],
                  scores: Mapping[str, Sequence[float]]) -> list[float]:
    """LDR scheduling/scheduler_profile.go@v0.10.0 runScorerPlugins: total = Σ weight·clamp(score),
    no normalising, accumulated scorer by scorer onto `totals` (a new list, in the pods' order;
    `totals` is kept)."""
    for scorer, weight in weights:
        # _clamp, inlined: this runs scorers × pods times per pick.
        totals = [total + weight * (0.0 if score < 0.0 else 1.0 if score > 1.0 else score)
                  for total, score in zip(totals, scores[scorer])]
    return totals


def _shuffle(items: list, rng: random.Random) -> None:
    """`rng.shuffle(items)`, draw for draw: CPython's shuffle swaps, for i from the end, items i
    and j = getrandbits(bit_length(i + 1)), drawn again until j <= i (`_shuffle_draws`)."""
    for i, j in zip(range(len(items) - 1, 0, -1), _shuffle_draws(len(items), rng)):
        items[i], items[j] = items[j], items[i]


def _draw_as_shuffle(count: int, rng: random.Random) -> None:
    """Takes from `rng` exactly what `_shuffle` of `count` items takes, without permuting."""
    _shuffle_draws(count, rng)


# Per item count: (i + 1, 32 - bit_length(i + 1)) for i from the end: each draw's bound, and
# the shift that takes a 32-bit word to a draw of bit_length(i + 1) bits.
_SHUFFLE_PLANS: dict[int, tuple[tuple[int, int], ...]] = {}
_WORD_BYTES = 4


def _shuffle_draws(count: int, rng: random.Random) -> list[int]:
    """The j a shuffle of `count` items draws for each i from the end, taking from `rng` exactly
    the 32-bit words that shuffle takes, in fewer calls.

    getrandbits(k) for k <= 32 is the generator's next word shifted right by 32 - k, and
    getrandbits(32 n) is its next n words, the first the least significant. Each draw takes at
    least one word, so the words for every draw not yet made are all taken: a word the draw
    rejects passes its place to the next word, and what rejections leave undrawn is fetched
    after. No word is taken that shuffle would not take."""
    plan = _SHUFFLE_PLANS.get(count)
    if plan is None:
        plan = _SHUFFLE_PLANS[count] = tuple([(i + 1, 32 - (i + 1).bit_length()) for i in range(count - 1, 0, -1)])
    draws: list[int] = []
    made = 0
    while made < len(plan):
        needed = len(plan) - made
        words = array("I", rng.getrandbits(32 * needed).to_bytes(_WORD_BYTES * needed, "little"))
        if sys.byteorder == "big":
            words.byteswap()
        for word in words:
            bound, shift = plan[made]
            drawn = word >> shift
            if drawn < bound:
                draws.append(drawn)
                made += 1
    return draws


def _single_profile(config: EndpointPickerConfig) -> SchedulingProfile:
    handler = next(spec for spec in config.plugins if spec.role == "profile-handler")
    if handler.type != SINGLE_PROFILE_HANDLER:
        raise PickerConfigError(f"plugin {handler.name} ({handler.type}): only {SINGLE_PROFILE_HANDLER} is "
                                "modelled (one profile picks every request); disaggregated and multi-profile "
                                "scheduling are not")
    return config.scheduling_profiles[0]


def _engine_tokens_backend(config: EndpointPickerConfig) -> bool:
    """Whether the token producer the prefix producers read counts the engine's own tokens (its
    vllm backend), as a precise producer needs to key what the pods' events key."""
    return any(spec.type == TOKEN_PRODUCER and spec.name == TOKEN_PRODUCER and token_backend(spec.parameters) == "vllm"
               for spec in config.plugins)


def _refuse_real_tokenizers(config: EndpointPickerConfig, precise: Sequence[_PrecisePrefixProducer],
                            producers: Mapping[str, Any]) -> None:
    """The approximate producer is modelled on the estimate backend's pseudo-tokens, a precise one on
    the engine's tokens (the vllm backend's): a real tokenizer is refused unless only precise
    producers read its tokens."""
    approximate = any(isinstance(producer, _PrefixProducer) for producer in producers.values())
    for spec in config.plugins:
        if spec.type == "tokenizer" or (spec.type == TOKEN_PRODUCER and token_backend(spec.parameters) == "udsTokenizerConfig"):
            raise PickerConfigError(f"plugin {spec.name} ({spec.type}) tokenizes with a backend this model does not "
                                    "reproduce; use the estimate backend, or with a precise prefix producer the vllm "
                                    "backend, to predict.")
        if spec.type == TOKEN_PRODUCER and token_backend(spec.parameters) == "vllm" and (approximate or not precise):
            raise PickerConfigError(f"plugin {spec.name} ({spec.type}) tokenizes with the model's tokenizer; this "
                                    "model hashes the estimate backend's 4-byte pseudo-tokens for the approximate "
                                    "prefix producer, and reads the engine's tokens only for a precise one. Drop the "
                                    "tokenizer backend (or use `estimate: {}`), or route on the precise index, to "
                                    "predict.")


def _media_estimates(config: EndpointPickerConfig) -> MediaEstimates | None:
    """The media estimates of the token stream the prefix producer hashes; None when they are
    upstream's defaults (what parsing a body already counted with).

    The prefix producer reads the tokens of the producer named token-producer, which upstream
    creates with default parameters when no plugin has that name (data_graph.go
    CreateMissingDataProducers@v0.10.0). Every token producer runs before it, and the first to
    run fills the request's tokens for all, in an order upstream leaves to Go's map iteration:
    token producers that count media differently make the hashes unpredictable, so they are refused.
    """
    estimates = {spec.name: (spec, MediaEstimates.from_config(spec.parameters["estimate"],
                                                              f"{spec.origin}.parameters.estimate"))
                 for spec in config.plugins if spec.type == TOKEN_PRODUCER}
    if not any(spec.name == TOKEN_PRODUCER for spec in config.plugins):
        estimates[TOKEN_PRODUCER] = (None, DEFAULT_ESTIMATES)
    distinct = {media: name for name, (_, media) in estimates.items()}
    if len(distinct) > 1:
        named = [f"{name} ({estimates[name][0].origin if estimates[name][0] else 'auto-created, default estimates'}: "
                 f"{media.describe()})" for media, name in distinct.items()]
        raise PickerConfigError(f"token producers {' and '.join(named)} count images and videos differently; "
                                f"upstream runs every one and the prefix producer hashes the tokens of whichever runs "
                                f"first, in an order it does not fix. Keep one token-producer and leave its name out "
                                f"(it then is {TOKEN_PRODUCER}, the one the prefix producer reads)")
    media = next(iter(distinct))
    return None if media == DEFAULT_ESTIMATES else media


class RoundRobinPicker:
    """The Kubernetes Service baseline the seed page compares against: pods in turn.

    (kube-proxy's iptables mode actually picks uniformly at random; round-robin is the
    page's description and the even split both converge to.)
    """

    def __init__(self) -> None:
        self._next = 0

    def pick(self, request: Request, pods: Sequence[PodMetrics], *, key: Hashable | None = None) -> Decision:
        empty = MappingProxyType({})
        return Decision(pod=self.choose(request, pods), totals=empty, scores=empty, match_blocks=empty, total_blocks=0)

    def hash_plan(self, reported_block_size: int | None) -> None:
        return None

    def first_chunk(self, key: Hashable) -> None:
        """Nothing to release: round-robin keeps no load."""

    def finished(self, key: Hashable) -> None:
        """Nothing to release: round-robin keeps no load."""

    def choose(self, request: Request, pods: Sequence[PodMetrics],
               hashed: Hashed | None = None, *, key: Hashable | None = None) -> str:
        if not pods:
            raise ValueError("no candidate pods: the Service has no ready endpoints")
        chosen = pods[self._next % len(pods)].name
        self._next += 1
        return chosen
