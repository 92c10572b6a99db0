"""How long a vLLM engine step takes, and the profile file `calibrate` writes and `predict` reads.

vLLM runs one batch per engine step: every running request decodes one token, and waiting or
partly prefilled requests compute a chunk of their prompt, within the step's token budget.
The model here is linear in what a step does:

    step = step_s + prefill_token_s × prompt tokens computed + decode_seq_s × sequences decoding
           + context_token_s × tokens already in the KV cache of the sequences in the step
           + prefill_attention_s × token pairs the step's prefill chunks attend over

The context term is attention reading each sequence's cached keys and values: on a CPU it
makes a decode step over long contexts markedly slower. The last term is a prefill's
attention, which grows with the square of its length: a chunk of n tokens computed after c
tokens already in the cache (a prefix hit, or earlier chunks) attends over n × (c + n / 2)
pairs, so a long prompt costs more per token than a short one, and a short remainder after a
long hit more than its length alone says.
Real steps vary: `jitter` is the relative spread each simulated step's time is drawn with
(log-normal, mean 1), so requests that would finish in lockstep do not, as on real servers.
Cached prompt tokens are not computed, so a prefix-cache hit shortens the step that serves
it. `overhead_s + overhead_token_s × prompt tokens` is what a request spends in the server
outside the engine before its first token (HTTP, tokenizing the prompt, detokenizing): it
adds to TTFT but holds no engine time. `gateway_s` is the hop through the gateway clients send
to (`calibrate --gateway-url` measures it; 0 when it was not): a request reaches its pod that
much after it is sent.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

PROFILE_KIND = "routing-latency-profile"
PROFILE_VERSION = 1


class ProfileError(ValueError):
    """A --latency-profile file that cannot be used, with the fix."""


@dataclass(frozen=True)
class LatencyModel:
    step_s: float
    prefill_token_s: float
    decode_seq_s: float
    overhead_s: float
    overhead_token_s: float = 0.0
    context_token_s: float = 0.0
    jitter: float = 0.0
    prefill_attention_s: float = 0.0
    gateway_s: float = 0.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ProfileError(f"latency {name}={value!r}: must be a number of seconds, at least 0")

    def step_seconds(self, prefill_tokens: int, decode_seqs: int, context_tokens: int = 0,
                     prefill_pairs: float = 0.0) -> float:
        return (self.step_s + self.prefill_token_s * prefill_tokens + self.decode_seq_s * decode_seqs
                + self.context_token_s * context_tokens + self.prefill_attention_s * prefill_pairs)

    def prefill_seconds(self, computed: int, cached: int, budget: int) -> float:
        """A prompt's prefill alone on an idle server: `computed` tokens after `cached` ones hit,
        in chunks of the step's token budget."""
        steps = -(-computed // budget)
        return (steps * self.step_s + computed * self.prefill_token_s + self.context_token_s * cached
                + self.prefill_attention_s * prefill_pairs(computed, cached))

    def overhead_seconds(self, prompt_tokens: int) -> float:
        return self.overhead_s + self.overhead_token_s * prompt_tokens

    def arrival_seconds(self, prompt_tokens: int) -> float:
        """From a client's send to the request reaching the pod's engine: through the gateway,
        then the server's own overhead."""
        return self.gateway_s + self.overhead_seconds(prompt_tokens)

    def describe(self) -> str:
        """Every term in one line, in the units people read them in (calibrate and the benchmark print it)."""
        return (f"step {self.step_s * 1000:.2f} ms + {self.prefill_token_s * 1e6:.1f} µs per prompt token computed + "
                f"{self.decode_seq_s * 1000:.2f} ms per decoding sequence + {self.context_token_s * 1e6:.2f} µs per "
                f"cached context token + {self.prefill_attention_s * 1e9:.0f} ns per token pair a prefill attends "
                f"over, steps ±{self.jitter:.0%}; {self.overhead_s * 1000:.1f} ms + "
                f"{self.overhead_token_s * 1e6:.1f} µs per prompt token outside the engine before the first token; "
                + (f"{self.gateway_s * 1000:.1f} ms through the gateway" if self.gateway_s
                   # Also what a measured hop clamped at zero gives: calibrate says which it was.
                   else "no time through the gateway"))


def prefill_pairs(computed: int, cached: int) -> float:
    """Token pairs a prefill of `computed` tokens after `cached` ones attends over: each token
    attends to the tokens before it. Chunking does not change the sum."""
    return computed * (cached + computed / 2)


# Used when predict has no profile: round figures for a ~0.5B model on one data-centre GPU
# (a forward pass of a few ms, prompt tokens at ~20k/s), not measured here. Only the TTFT
# and queue columns depend on them; the README says how to replace them with `calibrate`.
DEFAULT_LATENCY = LatencyModel(step_s=0.006, prefill_token_s=0.00005, decode_seq_s=0.0001, overhead_s=0.002)
DEFAULT_LATENCY_NOTE = ("latency from the built-in default (a ~0.5B model on one GPU, not measured): TTFT and queue "
                        "times are indicative only; `python -m routing calibrate` measures your pods and writes "
                        "a profile for --latency-profile")


@dataclass(frozen=True)
class EngineLimits:
    """The vLLM scheduler limits a simulated server batches with (vLLM's flags of the same names)."""

    max_num_seqs: int
    max_num_batched_tokens: int

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ProfileError(f"{name}={value!r}: must be a whole number of at least 1")


# vLLM's defaults for its OpenAI server on a GPU (max_num_seqs 256; chunked prefill with a
# 2,048-token budget per step, vllm/engine/arg_utils.py).
DEFAULT_LIMITS = EngineLimits(max_num_seqs=256, max_num_batched_tokens=2048)


@dataclass(frozen=True)
class PeakPrefill:
    """Uncached prefill tokens per second at saturation, as the prefix-cache-affinity filter's
    peakPrefillThroughput means it (upstream measures one unloaded chunk of
    max_num_batched_tokens): the median over `samples` one-chunk prefills of `chunk_tokens`,
    and the lowest and highest."""

    tokens_per_s: float
    low: float
    high: float
    samples: int
    chunk_tokens: int

    def to_json(self) -> dict:
        return {"tokensPerSecond": self.tokens_per_s, "low": self.low, "high": self.high, "samples": self.samples,
                "chunkTokens": self.chunk_tokens}

    @classmethod
    def from_json(cls, data: Any) -> PeakPrefill:
        try:
            peak = cls(float(data["tokensPerSecond"]), float(data["low"]), float(data["high"]), int(data["samples"]),
                       int(data["chunkTokens"]))
        except (KeyError, TypeError, ValueError) as error:
            raise ProfileError(f"peakPrefillThroughput is not calibrate's record of it ({error!r})") from None
        if not 0 < peak.low <= peak.tokens_per_s <= peak.high or peak.samples < 1 or peak.chunk_tokens < 1:
            raise ProfileError(f"peakPrefillThroughput {data!r}: needs 0 < low <= tokensPerSecond <= high, at least "
                               "one sample and a chunk of at least one token")
        return peak

    def describe(self) -> str:
        return (f"{self.tokens_per_s:,.0f} tokens/s (median of {self.samples} one-chunk prefills of "
                f"{self.chunk_tokens:,} tokens; {self.low:,.0f}-{self.high:,.0f})")


@dataclass(frozen=True)
class LatencyProfile:
    """What `calibrate` measured on live pods: the latency model, and the cache and scheduler
    configuration the pods reported (None where they did not say)."""

    latency: LatencyModel
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    limits: EngineLimits | None = None
    source: str = ""
    # Phase means the fit was made from, and how far the fit is from each (for the record).
    measured: Mapping[str, Any] = field(default_factory=dict)
    # The pods' peak prefill throughput, for the sticky recipe's filter; None in older profiles.
    peak_prefill: PeakPrefill | None = None

    def to_json(self) -> dict:
        return {"kind": PROFILE_KIND, "version": PROFILE_VERSION, "source": self.source,
                "latency": asdict(self.latency), "blockSize": self.block_size, "numGpuBlocks": self.num_gpu_blocks,
                "maxNumSeqs": None if self.limits is None else self.limits.max_num_seqs,
                "maxNumBatchedTokens": None if self.limits is None else self.limits.max_num_batched_tokens,
                "peakPrefillThroughput": None if self.peak_prefill is None else self.peak_prefill.to_json(),
                "measured": dict(self.measured)}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> LatencyProfile:
        fix = "write one with `python -m routing calibrate --out FILE`"
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ProfileError(f"--latency-profile {path}: no such file; {fix}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ProfileError(f"--latency-profile {path}: not a JSON profile ({error}); {fix}") from None
        if not isinstance(data, dict) or data.get("kind") != PROFILE_KIND or data.get("version") != PROFILE_VERSION:
            raise ProfileError(f"--latency-profile {path}: not a version-{PROFILE_VERSION} {PROFILE_KIND} file; {fix}")
        for key in ("blockSize", "numGpuBlocks", "maxNumSeqs", "maxNumBatchedTokens"):
            value = data.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ProfileError(f"--latency-profile {path}: {key}={value!r} must be a whole number of at least 1 "
                                   f"(or absent, to take predict's default or option); {fix}")
        try:
            latency = LatencyModel(**data["latency"])
            seqs, tokens = data.get("maxNumSeqs"), data.get("maxNumBatchedTokens")
            limits = None if seqs is None or tokens is None else EngineLimits(seqs, tokens)
            peak = data.get("peakPrefillThroughput")
            peak = None if peak is None else PeakPrefill.from_json(peak)
        except (KeyError, TypeError) as error:
            raise ProfileError(f"--latency-profile {path}: missing or unexpected latency field ({error}); "
                               f"{fix}") from None
        except ProfileError as error:
            raise ProfileError(f"--latency-profile {path}: {error}; {fix}") from None
        return cls(latency, data.get("blockSize"), data.get("numGpuBlocks"), limits, str(data.get("source", "")),
                   data.get("measured") or {}, peak)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation between order statistics (numpy's default),
    None for no values; predicted and measured figures both go through this."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
