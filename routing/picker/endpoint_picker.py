"""A model of the gateway's endpoint picker: which pod a request goes to, and why.

It follows llm-d router v0.10.0 (LDR), the picker the HyperPod `llm-d` scheduler runs, built
plugin by plugin from an EndpointPickerConfig (settings/picker_config.py; HyperPod-style weights are
rendered into one first). Citations name the
upstream file each formula comes from (shared/reference/endpoint-picker-upstream.md
section 3). The picker sees only what it scrapes from each pod's /metrics (`PodMetrics`) and
the request body; it never sees the servers' real prefix caches, only its own guess of them.
"""

from __future__ import annotations

import random
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, NamedTuple, Protocol, Sequence

from routing.picker.estimate import (DEFAULT_ESTIMATES, SURROGATE_FIX, MediaEstimates, MediaRun, ServerPrompt,
                                     lone_surrogate, parse_body, with_estimates)
from routing.picker.prefix import character_block_hashes, picker_block_hashes, picker_block_size, pseudo_token_bytes
from settings import DEFAULT_WEIGHTS, WEIGHT_NAMES
from settings.picker_config import (KV_CACHE, LORA_AFFINITY, MAX_SCORE_PICKER, NO_HIT_LRU, PREFIX, PREFIX_PRODUCER,
                                    QUEUE, RUNNING_REQUESTS, SINGLE_PROFILE_HANDLER, TOKEN_PRODUCER,
                                    EndpointPickerConfig, PickerConfigError, PluginSpec, SchedulingProfile,
                                    load_endpoint_picker_config, render_endpoint_picker_config, token_backend)

__all__ = [
    "WEIGHT_NAMES", "PodMetrics", "Request", "Decision", "ScoreBreakdown", "PodScore", "ScorerContribution", "Picker", "EndpointPicker", "RoundRobinPicker",
    "PickerConfigError", "with_default_weights", "ServerPrompt", "SURROGATE_FIX", "lone_surrogate",
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
    otherwise recounts (`streams_under`).
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
                   character_input=parsed.character_input, media=parsed.media)


_NO_WEIGHTS: Mapping[str, float] = MappingProxyType({})


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
    random, None with a single candidate (or for a picker that does not score).
    """

    chosen: str
    pods: tuple[PodScore, ...]
    runner_up: str | None
    margin: float | None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (for `serve`'s response header and `--json` reports)."""
        return {
            "chosen": self.chosen, "runnerUp": self.runner_up, "margin": self.margin,
            "pods": [{"pod": pod.pod, "total": pod.total,
                      "scorers": [{"scorer": part.scorer, "raw": part.raw, "weight": part.weight,
                                   "weighted": part.weighted} for part in pod.contributions]}
                     for pod in self.pods],
        }


@dataclass(frozen=True)
class Decision:
    """One pick, with the evidence.

    `scores` holds each weighted scorer's raw score per pod (before clamping), `weights` its
    weight; `totals` the weighted sum the picker maximised; `match_blocks`/`total_blocks` the
    prefix index's view of the request (empty/0 when no scorer needs it). `breakdown()`
    lays these out per pod; it is computed on demand, so picking pays nothing for it.
    """

    pod: str
    totals: Mapping[str, float]
    scores: Mapping[str, Mapping[str, float]]
    match_blocks: Mapping[str, int]
    total_blocks: int
    weights: Mapping[str, float] = field(default_factory=lambda: _NO_WEIGHTS)

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
            return ScoreBreakdown(self.pod, tuple(pods), None, None)
        return ScoreBreakdown(self.pod, tuple(pods), pods[1].pod, pods[0].total - pods[1].total)


def _clamp(score: float) -> float:
    # LDR scheduling/scheduler_profile.go@v0.10.0 enforceScoreRange: scores count within [0, 1].
    return 0.0 if score < 0.0 else 1.0 if score > 1.0 else score


class Picker(Protocol):
    def pick(self, request: Request, pods: Sequence[PodMetrics]) -> Decision: ...

    # The pod `pick` would choose, with the same effect on the picker's state, without the
    # Decision: simulated fleets need only the pod, and building a Decision is a tenth of a
    # pick. `hashed`: the request's prefix hashes computed beforehand, with their HashPlan.
    def choose(self, request: Request, pods: Sequence[PodMetrics],
               hashed: Hashed | None = None) -> str: ...

    # How the picker would hash requests for pods of this block size (None: it does not).
    def hash_plan(self, reported_block_size: int | None) -> HashPlan | None: ...


def with_default_weights(overrides: Mapping[str, int] | None) -> dict[str, int]:
    """`overrides` laid over the controller's default profile (queue 2, kvCache 2, prefix 3): the
    weights a picker configured with only `overrides` runs with."""
    return {**DEFAULT_WEIGHTS, **(overrides or {})}


def _min_max_scores(values: Mapping[str, int]) -> dict[str, float]:
    # LDR scorer/queuedepth/queue.go and scorer/runningrequests/runningrequest.go@v0.10.0:
    # (max - v) / (max - min); all equal is neutral, 1.0.
    low, high = min(values.values()), max(values.values())
    if low == high:
        return dict.fromkeys(values, 1.0)
    span = high - low
    return {name: (high - value) / span for name, value in values.items()}


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

    def match(self, hashes: Sequence[int]) -> dict[str, int]:
        """Blocks matched per pod: walk from block 0, stop at the first block no pod holds, and
        credit every pod holding each block on the way (approximateprefix/plugin.go
        matchLongestPrefix). A pod need not hold an unbroken run to be credited."""
        matched: dict[str, int] = {}
        for block_hash in hashes:
            pods = self._pods_by_hash.get(block_hash)
            if not pods:
                break
            for pod in pods:
                matched[pod] = matched.get(pod, 0) + 1
        return matched

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
        model, salt = request.target_model, request.cache_salt
        if characters:
            hashes = character_block_hashes(model, request.characters, block_tokens, max_blocks, salt)
            return [hashes] if hashes else []
        streams = [picker_block_hashes(model, stream, block_tokens, max_blocks, salt)
                   for stream in (request.token_streams if estimates is None else request.streams_under(estimates))]
        return [hashes for hashes in streams if hashes]


# A request's block hashes computed beforehand, with the plan they were computed by.
Hashed = tuple[HashPlan, Sequence[Sequence[int]]]


@dataclass(frozen=True)
class _MatchInfo:
    """One prefix producer's view of one request (LDR attribute/prefix PrefixCacheMatchInfo):
    block hashes per prompt, blocks matched per pod summed over the prompts, and the request's
    blocks in all."""

    hashes: Sequence[Sequence[int]]
    match_blocks: dict[str, int]
    block_tokens: int
    total_blocks: int

    @property
    def cold(self) -> bool:
        return not any(self.match_blocks.values())


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
        self.index = PrefixIndex()

    def hash_plan(self, reported_block_size: int | None) -> HashPlan:
        """How this producer hashes requests when the first candidate reports `reported_block_size`.

        Upstream hashes a request once, with the block size of the *first* candidate
        (GetBlockSize: endpoints[0]); pods reporting another block size are matched with that
        one too. Pods of one Deployment agree anyway.
        """
        if self.characters:
            block_tokens = self.block_size_tokens
            if self.auto_tune and reported_block_size is not None and reported_block_size > 0:
                block_tokens = reported_block_size
        else:
            block_tokens = picker_block_size(self.block_size_tokens, reported_block_size, self.auto_tune)
        return HashPlan(self.characters, block_tokens, self._max_blocks(block_tokens), self.estimates)

    def match(self, request: Request, pods: Sequence[PodMetrics], names: Sequence[str],
              hashed: Hashed | None = None) -> _MatchInfo:
        """`names` are the pods' names, in order; `hashed`, the request's hashes computed
        beforehand and the plan they were computed with (used only if it is this pick's)."""
        plan = self.hash_plan(pods[0].block_size)
        streams = hashed[1] if hashed is not None and hashed[0] == plan else plan.hashes(request)
        match_blocks = dict.fromkeys(names, 0)
        for hashes in streams:
            for pod, blocks in self.index.match(hashes).items():
                if pod in match_blocks:
                    match_blocks[pod] += blocks
        return _MatchInfo(streams, match_blocks, plan.block_tokens, sum(map(len, streams)))

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


class _Scorer:
    """One scorer plugin, built from its decoded parameters. `producer` names the prefix producer
    whose match info it reads."""

    producer: str | None = None
    # Scores from the pods' metrics alone (not the request, not what was picked before).
    reads_only_pods = False

    def __init__(self, parameters: Mapping[str, Any]):
        """Scorers without parameters take none (upstream's factories ignore them)."""

    def score(self, request: Request, pods: Sequence[PodMetrics], match: _MatchInfo | None) -> dict[str, float]:
        raise NotImplementedError

    def pre_request(self, chosen: str, match: _MatchInfo | None) -> None:
        """What the scorer remembers of a pick (most remember nothing)."""


class _QueueScorer(_Scorer):
    # LDR scorer/queuedepth/queue.go@v0.10.0.
    reads_only_pods = True

    def score(self, request, pods, match):
        return _min_max_scores({pod.name: pod.waiting for pod in pods})


class _RunningRequestsScorer(_Scorer):
    # LDR scorer/runningrequests/runningrequest.go@v0.10.0.
    reads_only_pods = True

    def score(self, request, pods, match):
        return _min_max_scores({pod.name: pod.running for pod in pods})


class _KvCacheScorer(_Scorer):
    # LDR scorer/kvcacheutilization/kvcache_utilization.go@v0.10.0: not normalised.
    reads_only_pods = True

    def score(self, request, pods, match):
        return {pod.name: 1.0 - pod.kv_usage for pod in pods}


class _LoraAffinityScorer(_Scorer):
    def score(self, request, pods, match):
        return {pod.name: _lora_score(pod, request.target_model) for pod in pods}


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
            return dict.fromkeys(match.match_blocks, 0.0)
        weight = self.match_length_weight
        if weight <= 0.0:
            return {pod: matched / total for pod, matched in match.match_blocks.items()}
        scores = {}
        for pod in pods:
            matched = match.match_blocks[pod.name]
            length = min(1.0, matched * match.block_tokens / self.match_length_scale_tokens)
            scores[pod.name] = weight * length * length + (1.0 - weight) * (matched / total)
        return scores


class _NoHitLruScorer(_Scorer):
    """LDR scorer/nohitlru/no_hit_lru.go@v0.10.0. Warm requests (some pod matched a block) are
    neutral. Cold ones favour pods that never took a cold request (in candidate order), then the
    least recently used; rank = never-used count + position in the whole LRU (which may hold pods
    that are no longer candidates), clamped at 0. PreRequest moves the pod of a cold pick."""

    def __init__(self, parameters: Mapping[str, Any]):
        super().__init__(parameters)
        self.producer = parameters["prefixMatchInfoProducerName"] or PREFIX_PRODUCER
        self.lru_size: int = parameters["lruSize"] if parameters["lruSize"] > 0 else DEFAULT_LRU_SIZE
        self._lru: OrderedDict[str, None] = OrderedDict()  # pod names, least recently used first

    def score(self, request, pods, match):
        if not match.cold:
            return {pod.name: 0.5 for pod in pods}
        if len(pods) == 1:
            return {pods[0].name: 1.0}
        position = {name: index for index, name in enumerate(self._lru)}
        never_used = [pod.name for pod in pods if pod.name not in position]
        scores = {name: 1.0 - rank / (len(pods) - 1) for rank, name in enumerate(never_used)}
        for pod in pods:
            if pod.name in position:
                rank = len(never_used) + position[pod.name]
                scores[pod.name] = max(0.0, 1.0 - rank / (len(pods) - 1))
        return scores

    def pre_request(self, chosen, match):
        if match.cold:
            self._lru.pop(chosen, None)
            self._lru[chosen] = None
            if len(self._lru) > self.lru_size:
                self._lru.popitem(last=False)


_SCORERS = {QUEUE: _QueueScorer, RUNNING_REQUESTS: _RunningRequestsScorer, KV_CACHE: _KvCacheScorer,
            LORA_AFFINITY: _LoraAffinityScorer, PREFIX: _PrefixScorer, NO_HIT_LRU: _NoHitLruScorer}
# Roles that never change which pod a request goes to; such plugins are left out of the model.
_ROLES_OUTSIDE_THE_PICK = ("data-layer", "flow-control", "request-control", "parser")


class EndpointPicker:
    """The llm-d picker as an EndpointPickerConfig configures it: score every pod, take the best, remember.

    Built plugin by plugin from the config's one scheduling profile: its scorers with their
    weights and parameters, the approximate prefix producers they read, the max-score picker.
    Each `pick` runs what the picker does per request: every producer in use hashes the request
    and matches it against its index, the weighted scorers score, the picker picks, then
    PreRequest (each producer records the request's blocks for the chosen pod; the no-hit LRU
    moves the pod when the request was cold). Requests are assumed to arrive one at a time,
    each pick seeing the index updates of all earlier ones.

    `config` is a loaded EndpointPickerConfig, or HyperPod-style weights (queue, kvCache, ...),
    which are rendered into the config the stack deploys and loaded from it, so both paths
    build the same plugins.
    """

    def __init__(self, config: EndpointPickerConfig | Mapping[str, Any], *, seed: int | None = None,
                 picker_version: str = DEFAULT_PICKER_VERSION):
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
        _refuse_real_tokenizers(config)
        self._scorers: dict[str, _Scorer] = {}
        weights: dict[str, float] = {}
        for entry in profile.plugins:
            spec = config.plugin(entry.plugin_ref)
            where = f"profile {profile.name!r}: {spec.name} ({spec.type})"
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
                raise PickerConfigError(f"{where}: filters are not modelled (the model scores every ready pod). "
                                        "Remove it to predict as if it let every pod through.")
        self.weights: Mapping[str, float] = MappingProxyType(weights)
        # Picks that see the same metrics (every pick between two scrapes) share the scores of the
        # scorers that read only them, and the partial totals of the leading run of such scorers
        # (totals add up scorer by scorer, in profile order, so only a leading run can be shared).
        weight_items = tuple(weights.items())
        shared = 0
        while shared < len(weight_items) and self._scorers[weight_items[shared][0]].reads_only_pods:
            shared += 1
        self._metrics_weights = weight_items[:shared]
        self._request_weights = weight_items[shared:]
        self._scored_pods: tuple[PodMetrics, ...] | None = None
        self._names: list[str] = []
        self._metrics_scores: dict[str, dict[str, float]] = {}
        self._metrics_totals: dict[str, float] = {}
        self._producers: dict[str, _PrefixProducer] = {}
        reads_tokens = not self.hashes_characters and any(s.producer is not None for s in self._scorers.values())
        estimates = _media_estimates(config) if reads_tokens else None
        for scorer in self._scorers.values():
            if scorer.producer is not None and scorer.producer not in self._producers:
                spec = config.plugin(scorer.producer)
                if spec.type != PREFIX_PRODUCER:
                    raise PickerConfigError(f"plugin {spec.name} ({spec.type}) produces the prefix match info a "
                                            f"scorer reads; only {PREFIX_PRODUCER} is modelled. Point "
                                            "prefixMatchInfoProducerName at one.")
                self._producers[scorer.producer] = _PrefixProducer(spec, characters=self.hashes_characters,
                                                                   estimates=estimates)
        # Plugins that take no part in this profile's picks (data layer, flow control, parsers,
        # producers nothing here reads), for reports that say what the model leaves out.
        self.ignored_plugins = tuple(
            spec.name for spec in config.plugins
            if spec.role in _ROLES_OUTSIDE_THE_PICK or (spec.role == "producer" and spec.name not in self._producers
                                                        and spec.type != TOKEN_PRODUCER))

    @classmethod
    def from_config(cls, config: EndpointPickerConfig, *, seed: int | None = None,
                    picker_version: str = DEFAULT_PICKER_VERSION) -> EndpointPicker:
        return cls(config, seed=seed, picker_version=picker_version)

    @property
    def prefix_index(self) -> PrefixIndex | None:
        """The index of the (first) prefix producer in use; None when no scorer reads one."""
        producer = next(iter(self._producers.values()), None)
        return None if producer is None else producer.index

    def pick(self, request: Request, pods: Sequence[PodMetrics]) -> Decision:
        chosen, totals, scores, matches = self._pick(request, pods)
        first = next(iter(matches.values()), None)
        return Decision(pod=chosen, totals=MappingProxyType(totals),
                        scores=MappingProxyType({k: MappingProxyType(v) for k, v in scores.items()}),
                        match_blocks=MappingProxyType(first.match_blocks if first else {}),
                        total_blocks=first.total_blocks if first else 0, weights=self.weights)

    def choose(self, request: Request, pods: Sequence[PodMetrics],
               hashed: Hashed | None = None) -> str:
        return self._pick(request, pods, hashed)[0]

    def hash_plan(self, reported_block_size: int | None) -> HashPlan | None:
        """How the (first) prefix producer hashes requests for pods reporting this block size;
        None when no scorer reads prefix matches."""
        producer = next(iter(self._producers.values()), None)
        return None if producer is None else producer.hash_plan(reported_block_size)

    def _pick(self, request: Request, pods: Sequence[PodMetrics],
              hashed: Hashed | None = None
              ) -> tuple[str, dict[str, float], dict[str, dict[str, float]], dict[str, _MatchInfo]]:
        """The pick and what it was made from: the chosen pod, totals, scores per scorer and
        each producer's match info. `hashed`: the request's block hashes and the plan they
        were computed with, which any producer hashing by that plan uses instead."""
        if not pods:
            raise ValueError("no candidate pods: the pool's selector matches no ready pod")
        # Callers pass pods with distinct names (a gateway's backends by name, a simulated fleet).
        # Equal tuples hold the same objects or pods with equal metrics: the same scores either way.
        seen = tuple(pods)
        if seen != self._scored_pods:
            self._scored_pods = seen
            self._names = [pod.name for pod in pods]
            self._metrics_scores = {name: scorer.score(request, pods, None)
                                    for name, scorer in self._scorers.items() if scorer.reads_only_pods}
            self._metrics_totals = _add_weighted(dict.fromkeys(self._names, 0.0), self._metrics_weights,
                                                 self._metrics_scores)
        names = self._names
        matches = {name: producer.match(request, pods, names, hashed) for name, producer in self._producers.items()}
        metrics_scores = self._metrics_scores
        scores = {name: metrics_scores[name] if scorer.reads_only_pods
                  else scorer.score(request, pods, matches.get(scorer.producer))
                  for name, scorer in self._scorers.items()}
        totals = _add_weighted(self._metrics_totals, self._request_weights, scores)

        # LDR picker/maxscore/picker.go@v0.10.0: shuffle, then stable sort by score, highest
        # first, so equal totals are broken uniformly at random. With maxNumOfEndpoints > 1 the
        # request still goes to the first. Done here as random.shuffle does it, draw for draw
        # (so a seed gives the same picks), then the first highest total in that order: the
        # stable sort's first element, without sorting.
        best = max(totals.values())
        values = list(totals.values())
        if values.count(best) == 1:
            # No tie: the order does not matter, but its draws are taken all the same, so that
            # later picks see the same random stream.
            _draw_as_shuffle(len(pods), self._rng)
            chosen = list(totals)[values.index(best)]
        else:
            order = list(range(len(pods)))
            _shuffle(order, self._rng)
            chosen = names[next(position for position in order if totals[names[position]] == best)]
        chosen_pod = pods[names.index(chosen)]

        for name, producer in self._producers.items():
            producer.record(matches[name], chosen_pod)
        for scorer in self._scorers.values():
            scorer.pre_request(chosen, matches.get(scorer.producer))
        return chosen, totals, scores, matches


def _add_weighted(totals: dict[str, float], weights: Sequence[tuple[str, float]],
                  scores: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """LDR scheduling/scheduler_profile.go@v0.10.0 runScorerPlugins: total = Σ weight·clamp(score),
    no normalising, accumulated scorer by scorer onto `totals` (a new dict; `totals` is kept)."""
    for scorer, weight in weights:
        # _clamp, inlined: this runs scorers × pods times per pick.
        totals = {pod: totals[pod] + weight * (0.0 if score < 0.0 else 1.0 if score > 1.0 else score)
                  for pod, score in scores[scorer].items()}
    return totals


def _shuffle(items: list, rng: random.Random) -> None:
    """`rng.shuffle(items)`, draw for draw, in half the time: CPython's shuffle takes, for i from
    the end, j = getrandbits(bit_length(i + 1)) until j <= i, through two method calls a draw
    (`_draw_as_shuffle` takes the same draws)."""
    getrandbits = rng.getrandbits
    for i in range(len(items) - 1, 0, -1):
        bound = i + 1
        bits = bound.bit_length()
        j = getrandbits(bits)
        while j >= bound:
            j = getrandbits(bits)
        items[i], items[j] = items[j], items[i]


# Per item count: (i + 1, bit_length(i + 1)) for i from the end, the draws a shuffle asks for.
_SHUFFLE_DRAWS: dict[int, tuple[tuple[int, int], ...]] = {}


def _draw_as_shuffle(count: int, rng: random.Random) -> None:
    """Takes from `rng` exactly what `_shuffle` of `count` items takes, without permuting."""
    plan = _SHUFFLE_DRAWS.get(count)
    if plan is None:
        plan = _SHUFFLE_DRAWS[count] = tuple((i + 1, (i + 1).bit_length()) for i in range(count - 1, 0, -1))
    getrandbits = rng.getrandbits
    for bound, bits in plan:
        while getrandbits(bits) >= bound:
            pass


def _single_profile(config: EndpointPickerConfig) -> SchedulingProfile:
    handler = next(spec for spec in config.plugins if spec.role == "profile-handler")
    if handler.type != SINGLE_PROFILE_HANDLER:
        raise PickerConfigError(f"plugin {handler.name} ({handler.type}): only {SINGLE_PROFILE_HANDLER} is "
                                "modelled (one profile picks every request); disaggregated and multi-profile "
                                "scheduling are not")
    return config.scheduling_profiles[0]


def _refuse_real_tokenizers(config: EndpointPickerConfig) -> None:
    # The model hashes the estimate backend's pseudo-tokens; a real tokenizer gives other blocks.
    for spec in config.plugins:
        real_backend = spec.type == "tokenizer" or (
            spec.type == TOKEN_PRODUCER and token_backend(spec.parameters) != "estimate")
        if real_backend:
            raise PickerConfigError(f"plugin {spec.name} ({spec.type}) tokenizes with the model's tokenizer; this "
                                    "model hashes the estimate backend's 4-byte pseudo-tokens only. Drop the "
                                    "tokenizer backend (or use `estimate: {}`) to predict.")


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

    def pick(self, request: Request, pods: Sequence[PodMetrics]) -> Decision:
        empty = MappingProxyType({})
        return Decision(pod=self.choose(request, pods), totals=empty, scores=empty, match_blocks=empty, total_blocks=0)

    def hash_plan(self, reported_block_size: int | None) -> None:
        return None

    def choose(self, request: Request, pods: Sequence[PodMetrics],
               hashed: Hashed | None = None) -> str:
        if not pods:
            raise ValueError("no candidate pods: the Service has no ready endpoints")
        chosen = pods[self._next % len(pods)].name
        self._next += 1
        return chosen
