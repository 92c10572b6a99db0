"""Tokens and prefix-block hashes, on both sides of the gateway.

Two different views of one prompt live here:

- what the endpoint picker hashes: with no tokenizer configured, llm-d's `estimate` token
  backend packs the request's UTF-8 bytes into pseudo-tokens of 4 bytes each and the
  approximate prefix-cache producer hashes blocks of those (`picker_block_hashes`);
- what a model server caches: real token IDs in blocks of vLLM's block size
  (`server_block_keys`), from a `Tokenizer` — the model's own `tokenizer.json`
  (`HFTokenizerFile`) or, when none is at hand, an estimate (`EstimateTokenizer`).
"""

from __future__ import annotations

import functools
import json
import struct
import sys
from array import array
from pathlib import Path
from typing import Any, Protocol, Sequence

import xxhash

# LDR dataproducer/tokenizer/estimate.go@v0.10.0 (bytesPerToken).
PSEUDO_TOKEN_BYTES = 4
# LDR dataproducer/approximateprefix/plugin.go@v0.10.0 (minBlockSizeTokens, issue #1158):
# the picker never hashes blocks smaller than this, whatever vLLM's block size is.
MIN_PICKER_BLOCK_TOKENS = 64

_TWO_LE64 = struct.Struct("<QQ")
# Unsigned ints of 4 bytes on every platform CPython supports: token IDs and pseudo-tokens fit.
_TOKEN_TYPECODE = "I"
# Unsigned ints of 8 bytes: block hashes and keys.
_HASH_TYPECODE = "Q"
_LE64 = struct.Struct("<Q")


def pseudo_token_bytes(text: str) -> bytes:
    """The estimate backend's token stream as bytes: UTF-8, zero-padded to whole 4-byte tokens.

    LDR tokenizer/estimate.go@v0.10.0 packBytes/align. Token i is bytes [4i, 4i+4) read as a
    little-endian uint32, so these bytes are also exactly what the picker hashes per block.
    """
    raw = text.encode("utf-8")
    remainder = len(raw) % PSEUDO_TOKEN_BYTES
    if remainder:
        raw += bytes(PSEUDO_TOKEN_BYTES - remainder)
    return raw


def pseudo_token_array(text: str) -> array:
    """The estimate backend's pseudo-tokens as an array of unsigned ints (`server_block_keys`
    hashes that form), read from the padded UTF-8 bytes as little-endian uint32s."""
    tokens = array(_TOKEN_TYPECODE, pseudo_token_bytes(text))
    if sys.byteorder == "big":
        tokens.byteswap()
    return tokens


def pseudo_tokens(text: str) -> list[int]:
    """The estimate backend's pseudo-tokens: little-endian uint32s of the padded UTF-8 bytes."""
    return pseudo_token_array(text).tolist()


def picker_block_size(configured_tokens: int, reported_by_pod: int | None, auto_tune: bool) -> int:
    """Tokens per hashed block: the pod's vLLM block size under autoTune, else the configured
    blockSizeTokens, never below 64 (LDR approximateprefix/plugin.go@v0.10.0 GetBlockSize)."""
    block_size = configured_tokens
    if auto_tune and reported_by_pod is not None and reported_by_pod > 0:
        block_size = reported_by_pod
    return max(MIN_PICKER_BLOCK_TOKENS, block_size)


def picker_block_hashes(model: str, token_bytes: bytes, block_tokens: int, max_blocks: int,
                        cache_salt: str = "") -> array:
    """Chained xxhash64 of each block of pseudo-tokens (LDR prefixhash/hashing.go@v0.10.0), an
    array of 64-bit numbers ('Q', as every chain here: compact, and read without an int object
    per block by the compiled core).

    h0 = xxh64(model ‖ cache_salt); h_i = xxh64(le64(xxh64(block_i bytes)) ‖ le64(h_{i-1})).
    The final partial block is hashed too (unlike GIE ≤ v1.5, which dropped it), and at most
    `max_blocks` blocks are kept.
    """
    digest = xxhash.xxh64_intdigest
    pack = _TWO_LE64.pack
    previous = _first_hash(model, cache_salt)
    block_bytes = block_tokens * PSEUDO_TOKEN_BYTES
    end = min(len(token_bytes), max_blocks * block_bytes)
    hashes = array(_HASH_TYPECODE)
    for start in range(0, end, block_bytes):
        previous = digest(pack(digest(token_bytes[start:start + block_bytes]), previous))
        hashes.append(previous)
    return hashes


@functools.lru_cache(maxsize=256)
def _first_hash(model: str, cache_salt: str) -> int:
    """h0 = xxh64(model ‖ cache_salt): one per model and salt, so worked out once."""
    return xxhash.xxh64_intdigest(model.encode("utf-8") + cache_salt.encode("utf-8"))


def character_block_hashes(model: str, data: bytes, block_tokens: int, max_blocks: int, cache_salt: str = "") -> array:
    """Pickers before v0.9 (GIE approximateprefix/hashing.go@v1.5.0 hashPrompt): blocks of
    block_tokens x 4 bytes of the request's characters, h0 = xxh64(model ‖ cache_salt),
    h_i = xxh64(block_i bytes ‖ le64(h_{i-1})); the trailing partial block is dropped, so a
    prompt shorter than one block has no hashes."""
    block_bytes = block_tokens * PSEUDO_TOKEN_BYTES
    hashes = array(_HASH_TYPECODE)
    if block_bytes <= 0:
        return hashes
    previous = _first_hash(model, cache_salt)
    end = min(len(data), max_blocks * block_bytes) // block_bytes * block_bytes
    for start in range(0, end, block_bytes):
        previous = xxhash.xxh64_intdigest(data[start:start + block_bytes] + _LE64.pack(previous))
        hashes.append(previous)
    return hashes


def server_block_keys(tokens: Sequence[int], block_size: int) -> array:
    """One key per *full* block of `tokens`, each covering the block and all blocks before it
    (an array of 64-bit numbers, as `picker_block_hashes`).

    vLLM caches only full blocks and a block's hash chains its parent's, so two prompts share
    block i's key exactly when they share every token up to the end of block i. Each key is the
    xxh64 of its block seeded with the previous key: the chance that two of a simulation's
    few million distinct blocks share a key is below 1 in 10^6, and keys need only be
    consistent within this process.
    """
    packed = tokens if isinstance(tokens, array) and tokens.typecode == _TOKEN_TYPECODE else array(
        _TOKEN_TYPECODE, tokens)
    data = packed.tobytes()
    block_bytes = block_size * packed.itemsize
    digest = xxhash.xxh64_intdigest
    keys = array(_HASH_TYPECODE)
    previous = 0
    for start in range(0, len(packed) // block_size * block_bytes, block_bytes):
        previous = digest(data[start:start + block_bytes], previous)
        keys.append(previous)
    return keys


try:  # the same two chains in C (chains.pyx), when the simulator's core is compiled (routing/compiled.py)
    from routing.picker.chains import picker_block_hashes, server_block_keys  # noqa: F811
except ImportError:
    pass


def go_json(value: object, *, sort_keys: bool = True) -> str:
    """`value` as Go's encoding/json writes a decoded `any`: compact, keys sorted, <>& escaped
    (`sort_keys=False`: keys in the order given, as Go writes a struct's fields).

    The estimate backend hashes `json.Marshal(tools)` of a chat request. Numbers differ from
    Go's in rare cases (Go decodes every number to float64), which only shifts where two tool
    lists stop matching, never whether identical ones match.
    """
    text = json.dumps(value, separators=(",", ":"), sort_keys=sort_keys, ensure_ascii=False)
    for char, escape in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text


class Tokenizer(Protocol):
    """Turns a prompt into the token IDs a model server would count."""

    # One line for reports: which tokenizer, and how far to trust its counts.
    description: str

    def encode(self, text: str) -> list[int]: ...


def server_tokens(tokenizer: Tokenizer, request: Any, *, packed: bool = False) -> list[Sequence[int]]:
    """The token IDs a model server computes for `request` (a picker Request), one list per
    sequence it runs: a completion's prompts (text or token IDs), or a chat rendered by the
    model's chat template when `tokenizer` can render it (HFTokenizerFile); otherwise a chat
    is counted as its flattened text.

    `packed`: arrays of unsigned ints instead of lists, the form `server_block_keys` hashes;
    the estimate's pseudo-tokens then go from the prompt's bytes to the array without
    becoming Python ints."""
    if request.server_prompts is None and isinstance(tokenizer, EstimateTokenizer):
        # A completion's one text prompt counted by the estimate: most workloads, every request.
        return [pseudo_token_array(request.prompt) if packed else tokenizer.encode(request.prompt)]
    sequences: list[Sequence[int]] = []
    for prompt in request.server_inputs:
        if prompt.token_ids is not None:
            tokens: Sequence[int] = list(prompt.token_ids)
        elif prompt.chat is not None and isinstance(tokenizer, HFTokenizerFile) and tokenizer.chat_template:
            tokens = tokenizer.encode_chat(prompt.chat)
        elif packed and isinstance(tokenizer, EstimateTokenizer):
            tokens = pseudo_token_array(prompt.text if prompt.text is not None else request.prompt)
        else:
            tokens = tokenizer.encode(prompt.text if prompt.text is not None else request.prompt)
        sequences.append(array(_TOKEN_TYPECODE, tokens) if packed and not isinstance(tokens, array) else tokens)
    return sequences


class EstimateTokenizer:
    """About 4 characters per token, with no model at hand: the picker's own estimate.

    Prompts that share a prefix of n characters share about n/4 tokens, so hit *rates* come
    out close to a real tokenizer's; absolute token counts do not (Qwen's tokenizer makes
    roughly 4–5 characters of English one token).
    """

    description = ("estimated at ~4 characters per token, not the model's tokenizer "
                   "(pass --tokenizer PATH to count with its tokenizer.json)")

    def encode(self, text: str) -> list[int]:
        return pseudo_tokens(text)


class TokenizerFileError(ValueError):
    """A --tokenizer path that is not a usable tokenizer.json."""


class HFTokenizerFile:
    """A Hugging Face fast tokenizer read from `tokenizer.json` (or a directory holding one).

    `encode` adds special tokens the way vLLM does for a completions prompt (it calls the HF
    tokenizer with add_special_tokens=True, which applies tokenizer.json's post-processor:
    a BOS token for Llama-style models, nothing for Qwen).
    """

    def __init__(self, path: str | Path):
        from tokenizers import Tokenizer as _HFTokenizer  # only this class needs the library

        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            where = f"directory {path} has no tokenizer.json" if path.is_dir() else f"no file {path}"
            raise TokenizerFileError(f"--tokenizer {path}: {where}. Pass a tokenizer.json, or the model "
                                     "directory that holds one (e.g. a Hugging Face snapshot).")
        try:
            self._tokenizer = _HFTokenizer.from_file(str(file))
        except Exception as error:  # the library raises its own Exception subclass for any bad file
            raise TokenizerFileError(f"--tokenizer {file}: not a Hugging Face tokenizer.json ({error}). "
                                     "Pass the tokenizer.json that ships with the model.") from error
        self.path = file
        self.chat_template = _chat_template(file.parent)
        chats = "chats with its chat template" if self.chat_template else "chats as flattened text (no chat template)"
        self.description = f"counted with {file}, {chats}"

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=True).ids

    def render_chat(self, chat: str) -> str:
        """The prompt vLLM makes of a chat request (`ServerPrompt.chat`): its messages, text parts
        joined with newlines (vLLM's "string" content format), through the chat template with
        add_generation_prompt, rendered as transformers renders it (a sandboxed Jinja
        environment with trim_blocks and lstrip_blocks)."""
        from jinja2.sandbox import ImmutableSandboxedEnvironment  # only chat rendering needs it

        request = json.loads(chat)
        messages = [{**message, "content": _content_string(message.get("content"))}
                    for message in request["messages"]]
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)
        template = environment.from_string(self.chat_template)
        return template.render(messages=messages, tools=request.get("tools"), add_generation_prompt=True)

    def encode_chat(self, chat: str) -> list[int]:
        # vLLM tokenizes a rendered chat without adding special tokens (the template holds them).
        return self._tokenizer.encode(self.render_chat(chat), add_special_tokens=False).ids


def _chat_template(model_dir: Path) -> str | None:
    # transformers 5 writes chat_template.jinja; older versions kept it in tokenizer_config.json.
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = model_dir / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        return template if isinstance(template, str) else None
    return None


def _content_string(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content
                         if isinstance(part, dict) and part.get("type") == "text")
    return content or ""
