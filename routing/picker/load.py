"""The picker's view of load it has sent: "sticky until saturated" and the scorers that read it.

llm-d router v0.10.0 (LDR) plugins, formula by formula:

- `inflight-load-producer` (dataproducer/inflightload/{producer,token_estimator}.go): per pod,
  the requests this picker replica has sent that have not ended, and their tokens: a request's
  uncached input tokens (and, with addEstimatedOutputTokens, an estimate of its output), added
  when it is sent (PreRequest), its tokens released at the first chunk of the response
  (StartOfStream) without output tokens, else at its end (EndOfStream), when the request
  itself is released. A request the picker is given no key for (upstream: no request ID) is
  not tracked.
- `prefix-cache-affinity-filter` (filter/prefixcacheaffinity/plugin.go): keep the pods holding
  at least affinityThreshold of the request's prefix blocks, unless an exploration draw skips
  the filter or the best of them would take more than maxTTFTPenaltyMs longer (estimated TTFT
  = in-flight tokens / peakPrefillThroughput) than the best of the others.
- `token-load-scorer` (scorer/tokenload/token_load.go) and `active-request-scorer`
  (scorer/activerequest/active_request.go): scores from the producer's counts.

The counts are this replica's own: v0.10.0 shares them across replicas only through a
dataLayer.crossReplicaSyncerPluginRef, and registers no plugin that can be one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Hashable, Mapping, Protocol, Sequence

__all__ = ["FILTER_OUTCOMES", "FilterOutcome", "AffinityFilter", "InFlightLoad", "uncached_input_tokens",
           "estimate_output", "token_load_score", "active_request_scores"]

# What the filter did, by the branch of plugin.go Filter@v0.10.0 it returned from.
FILTER_OUTCOMES: Mapping[str, str] = MappingProxyType({
    "one-candidate": "one candidate, nothing to filter",
    "off": "affinityThreshold <= 0 turns the filter off",
    "explored": "the exploration draw skipped the filter",
    "no-sticky": "no pod holds enough of the prefix",
    "gate-broken": "the load gate broke stickiness",
    "sticky": "kept the sticky pods",
})
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class _Draws(Protocol):
    def random(self) -> float: ...


@dataclass(frozen=True)
class FilterOutcome:
    """What a prefix-cache-affinity filter did with one pick's candidates, and why.

    `prefix_scores` are the candidates' matched / total prefix blocks (empty when the filter
    returned before reading them); `in_flight_tokens` and `ttft_ms` each candidate's in-flight
    tokens and the TTFT they estimate, when the load gate ran; `best_sticky` / `best_other` the
    sticky and the other pod with the lowest estimate; `draw` the exploration draw, when taken.
    """

    filter: str
    outcome: str  # a key of FILTER_OUTCOMES
    candidates: tuple[str, ...]
    kept: tuple[str, ...]
    affinity_threshold: float
    max_ttft_penalty_ms: float
    exploration_probability: float
    prefix_scores: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    in_flight_tokens: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    ttft_ms: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    best_sticky: str | None = None
    best_other: str | None = None
    draw: float | None = None

    @property
    def penalty_ms(self) -> float | None:
        """How much longer the best sticky pod's estimated TTFT is than the best other's (None:
        the gate did not run)."""
        if self.best_sticky is None or self.best_other is None:
            return None
        return self.ttft_ms[self.best_sticky] - self.ttft_ms[self.best_other]

    def describe(self) -> str:
        """One line: what the filter did and the figures it decided on."""
        text = f"{self.filter}: {FILTER_OUTCOMES[self.outcome]}"
        if self.outcome == "explored":
            text += f" (draw {self.draw:.3f} < explorationProbability {self.exploration_probability:g})"
        elif self.outcome in ("no-sticky", "gate-broken", "sticky"):
            text += f" (sticky: prefix score >= {self.affinity_threshold:g})"
        if self.penalty_ms is not None:
            relation = ">" if self.outcome == "gate-broken" else "<="
            text += (f"; best sticky {self.best_sticky} {self.ttft_ms[self.best_sticky]:.0f} ms vs best other "
                     f"{self.best_other} {self.ttft_ms[self.best_other]:.0f} ms estimated TTFT: "
                     f"{self.penalty_ms:.0f} ms {relation} maxTTFTPenaltyMs {self.max_ttft_penalty_ms:g}")
        elif self.outcome == "sticky" and self.max_ttft_penalty_ms <= 0:
            text += "; maxTTFTPenaltyMs 0: always sticks"
        elif self.outcome == "sticky":
            text += "; every candidate sticky, no load gate to run"
        return text + f"; kept {', '.join(self.kept)}"

    def as_dict(self) -> dict[str, Any]:
        return {"filter": self.filter, "outcome": self.outcome, "why": self.describe(),
                "candidates": list(self.candidates), "kept": list(self.kept),
                "affinityThreshold": self.affinity_threshold, "maxTTFTPenaltyMs": self.max_ttft_penalty_ms,
                "prefixScores": dict(self.prefix_scores), "inFlightTokens": dict(self.in_flight_tokens),
                "ttftMs": dict(self.ttft_ms), "bestSticky": self.best_sticky, "bestOther": self.best_other,
                "penaltyMs": self.penalty_ms, "draw": self.draw}


class AffinityFilter:
    """A prefix-cache-affinity-filter built from its decoded parameters (ttftSource
    prefillThroughput: the picker model refuses the latency predictor)."""

    def __init__(self, name: str, parameters: Mapping[str, Any]):
        self.name = name
        self.affinity_threshold: float = parameters["affinityThreshold"]
        self.exploration_probability: float = parameters["explorationProbability"]
        self.max_ttft_penalty_ms: float = parameters["maxTTFTPenaltyMs"]
        self.peak_prefill_throughput: float = parameters["peakPrefillThroughput"]

    def run(self, candidates: Sequence[str], prefix_scores: Mapping[str, float],
            in_flight_tokens: Mapping[str, int], rng: _Draws) -> FilterOutcome:
        """plugin.go Filter@v0.10.0 on `candidates` (pod names, in order) with each one's prefix
        score and in-flight tokens (absent: 0). Past its first check it takes one draw from `rng`
        (upstream: rand.Float64()), whatever explorationProbability is."""
        outcome = dict(filter=self.name, candidates=tuple(candidates), affinity_threshold=self.affinity_threshold,
                       max_ttft_penalty_ms=self.max_ttft_penalty_ms,
                       exploration_probability=self.exploration_probability)
        if len(candidates) <= 1 or self.affinity_threshold <= 0:
            return FilterOutcome(outcome="one-candidate" if len(candidates) <= 1 else "off", kept=tuple(candidates),
                                 **outcome)
        draw = rng.random()
        if draw < self.exploration_probability:
            return FilterOutcome(outcome="explored", kept=tuple(candidates), draw=draw, **outcome)
        scores = {pod: prefix_scores.get(pod, 0.0) for pod in candidates}
        sticky = tuple(pod for pod in candidates if scores[pod] >= self.affinity_threshold)
        others = tuple(pod for pod in candidates if scores[pod] < self.affinity_threshold)
        outcome.update(prefix_scores=MappingProxyType(scores), draw=draw)
        if not sticky:
            return FilterOutcome(outcome="no-sticky", kept=tuple(candidates), **outcome)
        if self.max_ttft_penalty_ms > 0 and others:
            tokens = {pod: in_flight_tokens.get(pod, 0) for pod in candidates}
            # endpointTTFT: in-flight tokens / peak prefill tokens per second, in ms.
            ttft = {pod: tokens[pod] / self.peak_prefill_throughput * 1000 for pod in candidates}
            best_sticky, best_other = _lowest(sticky, ttft), _lowest(others, ttft)
            outcome.update(in_flight_tokens=MappingProxyType(tokens), ttft_ms=MappingProxyType(ttft),
                           best_sticky=best_sticky, best_other=best_other)
            if ttft[best_sticky] - ttft[best_other] > self.max_ttft_penalty_ms:
                return FilterOutcome(outcome="gate-broken", kept=tuple(candidates), **outcome)
        return FilterOutcome(outcome="sticky", kept=sticky, **outcome)


def _lowest(pods: Sequence[str], ttft: Mapping[str, float]) -> str:
    # bestTTFT: the first pod with the lowest estimate.
    best = pods[0]
    for pod in pods[1:]:
        if ttft[pod] < ttft[best]:
            best = pod
    return best


def uncached_input_tokens(input_tokens: int, match: tuple[int, int, int] | None) -> int:
    """producer.go uncachedInputTokens@v0.10.0: the prompt tokens a pod must compute. With the
    prefix producer's (matched blocks, total blocks, block size): the indexed blocks it does
    not hold, plus the tokens beyond the indexed ones (a prefix capped by
    maxPrefixTokensToMatch, a partial last block); without, all `input_tokens`."""
    if match is None or match[2] <= 0:
        return max(0, input_tokens)
    matched, total, block = match
    return max(0, (total - matched) * block) + max(0, input_tokens - total * block)


def _go_round(value: float) -> int:
    # Go's math.Round: halves away from zero (Python's round() takes halves to even).
    whole = math.trunc(value)
    if abs(value - whole) >= 0.5:
        whole += math.copysign(1.0, value)
    return int(whole)


def estimate_output(input_tokens: int, output_ratio: float, client_cap: int | None,
                    operator_cap: int | None) -> int:
    """token_estimator.go EstimateOutput@v0.10.0: round(input x outputRatio), at most the client's
    cap (max_tokens and the like) and maxEstimatedOutputTokens, each when set and >= 0."""
    if input_tokens <= 0:
        return 0
    estimate = _go_round(input_tokens * output_ratio)
    for cap in (client_cap, operator_cap):
        if cap is not None and 0 <= cap < estimate:
            estimate = cap
    return estimate


class InFlightLoad:
    """An inflight-load-producer: one picker replica's in-flight requests and tokens per pod.

    `produce` computes, for the request being picked, the tokens it would add to each candidate
    (upstream's UncachedRequestTokens, which the token-load scorer reads); `send` adds them to
    the chosen pod under the request's key; `first_chunk` and `finished` release them as the
    response arrives.
    """

    def __init__(self, name: str, parameters: Mapping[str, Any], prefix_producer: str | None):
        self.name = name
        self.add_estimated_output_tokens: bool = parameters["addEstimatedOutputTokens"]
        self.output_ratio: float = parameters["outputRatio"]
        self.max_estimated_output_tokens: int | None = parameters["maxEstimatedOutputTokens"]
        # The approximate prefix producer whose match info discounts cached tokens (None: none
        # runs, so every request counts all its input tokens).
        self.prefix_producer = prefix_producer
        self.tokens: dict[str, int] = {}
        self.requests: dict[str, int] = {}
        # The tokens the request being picked would add to each candidate.
        self.request_tokens: dict[str, int] = {}
        self._held: dict[Hashable, list] = {}  # request key -> [pod, tokens held, requests held]

    def produce(self, candidates: Sequence[str], input_tokens: int, client_cap: int | None,
                match: tuple[Mapping[str, int], int, int] | None) -> None:
        """Produce + estimateRequestTokens@v0.10.0: each candidate's uncached input tokens,
        plus (with addEstimatedOutputTokens) the output estimated from the whole input.
        `match`: the prefix producer's blocks matched per candidate, the request's blocks and
        the block size (None: no prefix producer runs)."""
        output = (estimate_output(input_tokens, self.output_ratio, client_cap, self.max_estimated_output_tokens)
                  if self.add_estimated_output_tokens else 0)
        if match is None:
            self.request_tokens = dict.fromkeys(candidates, max(0, input_tokens) + output)
            return
        matched, total, block = match
        self.request_tokens = {pod: uncached_input_tokens(input_tokens, (matched[pod], total, block)) + output
                               for pod in candidates}

    def send(self, key: Hashable | None, pod: str) -> None:
        """PreRequest: `pod` has one more request in flight, with the tokens `produce` computed for
        it. A request without a key is not tracked (upstream: none without a request ID)."""
        if key is None:
            return
        if key in self._held:
            raise ValueError(f"request key {key!r} is already in flight; give each request its own key")
        tokens = self.request_tokens[pod]
        self.requests[pod] = self.requests.get(pod, 0) + 1
        self.tokens[pod] = self.tokens.get(pod, 0) + tokens
        self._held[key] = [pod, tokens, 1]

    def first_chunk(self, key: Hashable) -> None:
        """ResponseBody with StartOfStream: prefill is done. Without output tokens the request's
        tokens are released (its count stays until it ends); with them nothing is released here
        in a single-profile picker (upstream frees the `prefill` profile's entry only)."""
        held = self._held.get(key)
        if held is not None and not self.add_estimated_output_tokens:
            self._release(held, tokens=True, requests=False)

    def finished(self, key: Hashable) -> None:
        """ResponseBody with EndOfStream (or the request's end on an error or abort): whatever it
        still holds is released."""
        held = self._held.pop(key, None)
        if held is not None:
            self._release(held, tokens=True, requests=True)

    def _release(self, held: list, *, tokens: bool, requests: bool) -> None:
        # decrementClamped: counters never go below 0.
        pod = held[0]
        if tokens and held[1]:
            self.tokens[pod] = max(0, self.tokens[pod] - held[1])
            held[1] = 0
        if requests and held[2]:
            self.requests[pod] = max(0, self.requests[pod] - held[2])
            held[2] = 0


def token_load_score(tokens: int, queue_threshold_tokens: float) -> float:
    """token_load.go Score@v0.10.0: 1 - min(tokens, threshold) / threshold, 1 with no load.
    `tokens`: the pod's in-flight tokens plus what the request would add there."""
    if tokens <= 0:
        return 1.0
    return 1.0 - (min(float(tokens), queue_threshold_tokens) / queue_threshold_tokens)


def active_request_scores(counts: Mapping[str, int], idle_threshold: int, max_busy_score: float) -> dict[str, float]:
    """active_request.go Score@v0.10.0: 1 for a pod with at most idleThreshold requests in
    flight; otherwise (max - count) / max x maxBusyScore, max the busiest candidate's count."""
    most = max(0, *counts.values()) if counts else 0
    return {pod: 1.0 if count <= idle_threshold else (most - count) / most * max_busy_score
            for pod, count in counts.items()}
