"""What `routing.prefixIndex: precise` needs of a model, checked before anything is declared.

The picker's precise-prefix-cache-producer (llm-d router v0.10.0, Beta) cuts each request's prompt,
in vLLM's own tokens, into block keys and looks them up in an index it builds from the KV-cache
events every vLLM pod publishes over ZMQ. The two sides must agree, or every prefix score is 0 and
nothing says why (docs/configuration.md, "Precise prefix-cache routing"):
- the block size: vLLM's --block-size and the producer's blockSizeTokens;
- the event socket: each pod binds tcp://*:5557 and the picker dials tcp://<pod IP>:5557 for every
  pod it learns of (kvEventsConfig.podDiscoveryConfig.socketPort);
- the topic: kv@<pod IP>@<model>, starting with the picker's subscription filter `kv@` and ending in
  the model name requests carry, which seeds every block key (three `@`-separated parts exactly);
- the tokens: the producer asks vLLM's /v1/completions/render and /v1/chat/completions/render, which
  vLLM 0.32 serves only with --enable-scale-out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .endpoints import KV_EVENTS_PORT
from .picker_config import PRECISE_PRODUCER, load_endpoint_picker_config, precise_block_tokens

# vLLM 0.32's attention backends take a block size that is a multiple of their kernel's: CPU
# attention MultipleOf(32) (v1/attention/backends/cpu_attn.py), FlashAttention, Triton and
# FlexAttention MultipleOf(16), FlashInfer 16, 32 or 64, a larger multiple split into kernel blocks
# (AttentionBackend.supports_block_size, v1/worker/utils.py select_common_block_size). A multiple
# of 32 runs on the stack's GPUs and on the CPU build the end-to-end tests run.
BLOCK_MULTIPLE = 32
# The flags the stack sets on vLLM for the precise index, as vLLM's parser reads them.
PRECISE_VLLM_FLAGS = ("--block-size", "--kv-events-config", "--enable-scale-out", "--no-enable-scale-out")
# The picker's default subscription filter (kvEventsConfig.topicFilter, pool.go@v0.10.0): the
# stack's topic starts with it.
TOPIC_PREFIX = "kv@"


def block_size_message(value: int) -> str | None:
    if value > 0 and value % BLOCK_MULTIPLE == 0:
        return None
    return (f"must be a positive multiple of {BLOCK_MULTIPLE}: vLLM 0.32's CPU attention takes only multiples of 32 "
            "and its GPU backends multiples of 16 (16 is refused on CPU); 64, the default, runs on both.")


def vllm_flag(arg: str) -> str:
    """The flag `arg` sets as vLLM's parser reads it: `--block_size=64` sets --block-size, and
    `--kv-events-config.topic` sets --kv-events-config."""
    name = arg.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-").split(".", 1)[0] if name.startswith("--") else name


def precise_flags(extra_args: tuple[str, ...]) -> list[str]:
    """The extraArgs entries that set a flag the stack sets itself for the precise index."""
    return [arg for arg in extra_args if vllm_flag(arg) in PRECISE_VLLM_FLAGS]


def model_name_message(model: str) -> str | None:
    if "@" in model:
        return ("contains '@', which splits vLLM's event topic kv@<pod>@<model>: the picker reads a topic of more "
                "than three parts as no model, so no event would match a request. Keep routing.prefixIndex "
                "approximate for this model.")
    return None


def file_producer(text: str) -> tuple[Mapping[str, Any] | None, list[str]]:
    """The decoded parameters of the one precise-prefix-cache-producer a picker file declares, and
    what in the file the stack's vLLM pods cannot feed (each a line naming the place and the fix)."""
    producers = [spec for spec in load_endpoint_picker_config(text).plugins if spec.type == PRECISE_PRODUCER]
    if not producers:
        return None, [f"declares no {PRECISE_PRODUCER}, and routing.prefixIndex precise has the picker index the "
                      "pods' KV-cache events: the file configures the picker, the stack only vLLM's side. Add the "
                      "producer (and point the prefix scorer at it), or keep routing.prefixIndex approximate."]
    if len(producers) > 1:
        return None, [f"declares {len(producers)} {PRECISE_PRODUCER}s ({', '.join(s.name for s in producers)}); the "
                      "stack configures one block size and one event socket on vLLM. Keep one."]
    (spec,) = producers
    where = f"{spec.origin}.parameters"
    events = spec.parameters["kvEventsConfig"] or {}
    discovery = events.get("podDiscoveryConfig") or {}
    problems = []
    if events.get("zmqEndpoint"):
        problems.append(f"{where}.kvEventsConfig.zmqEndpoint {events['zmqEndpoint']!r} has the picker bind one socket "
                        "for every engine to connect to; the stack's pods bind and the picker dials each. Remove it.")
    if events.get("discoverPods") is False:
        problems.append(f"{where}.kvEventsConfig.discoverPods false subscribes to no pod. Remove it.")
    if discovery.get("socketPort", KV_EVENTS_PORT) != KV_EVENTS_PORT:
        problems.append(f"{where}.kvEventsConfig.podDiscoveryConfig.socketPort {discovery['socketPort']}: the "
                        f"stack's pods publish on {KV_EVENTS_PORT}. Remove it or set {KV_EVENTS_PORT}.")
    if discovery.get("replaySocketPort", 0) > 0:
        problems.append(f"{where}.kvEventsConfig.podDiscoveryConfig.replaySocketPort {discovery['replaySocketPort']}: "
                        "the stack turns on no replay socket on vLLM (a replay from sequence 0 fails once a pod has "
                        "published more batches than vLLM keeps, and the picker then indexes nothing of it). "
                        "Remove it.")
    if not TOPIC_PREFIX.startswith(events.get("topicFilter", TOPIC_PREFIX)):
        problems.append(f"{where}.kvEventsConfig.topicFilter {events['topicFilter']!r} matches no topic of the "
                        f"stack's pods, which publish on {TOPIC_PREFIX}<pod IP>@<model>. Remove it.")
    if events.get("engineType", "") not in ("", "vllm"):
        problems.append(f"{where}.kvEventsConfig.engineType {events['engineType']!r}: the stack's pods run vLLM. "
                        "Remove it.")
    block = precise_block_tokens(spec.parameters)
    if (message := block_size_message(block)) is not None:
        problems.append(f"{where}.tokenProcessorConfig.blockSizeTokens {block} is vLLM's --block-size here, and "
                        + message.replace("must be", "it must be", 1))
    return spec.parameters, problems


def declares_precise_producer(text: str | None) -> bool:
    return text is not None and any(spec.type == PRECISE_PRODUCER for spec in load_endpoint_picker_config(text).plugins)
