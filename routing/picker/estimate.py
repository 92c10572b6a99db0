"""What the picker's `estimate` token backend makes of an OpenAI request body, and what vLLM gets.

With no tokenizer configured, llm-d router v0.10 turns a request into token streams without a
model's tokenizer (LDR dataproducer/tokenizer/estimate.go, tokenizer/backend.go,
interface/requesthandling/types.go and parsers/openai/openai.go@v0.10.0):

- the API comes from the URL path; an empty `prompt`, `messages` or `input` is refused;
- a completion's text prompt is one stream of 4-byte pseudo-tokens; several prompt strings are
  one stream each (hashed separately, matches summed); token-ID prompts pass through as tokens;
- chat is json(tools), then each message's role and text, with each image, video or audio part
  as a run of placeholder tokens (the asset's hash, repeated as many times as its estimated
  token count); part types it does not know are skipped;
- how many tokens an image or a video gets is the token-producer's `estimate` parameters'
  business (`MediaEstimates`); a body is parsed with upstream's built-in estimates, and keeps
  where each image and video run lies (`MediaRun`), so that a picker configured with other
  estimates recounts them (`with_estimates`) without parsing the body again;
- embeddings hash Go's JSON of the parsed input struct, or pass token IDs through;
- `cache_salt` goes into every prompt's first block hash.

`parse_body` returns that view (`picker_prompts`, little-endian uint32 bytes per stream) next
to what vLLM turns into tokens (`server_prompts`), so the server side can be counted too.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import xxhash

from routing.picker.prefix import PSEUDO_TOKEN_BYTES, go_json, pseudo_token_bytes
from settings.picker_config import PickerConfigError

COMPLETIONS, CHAT, EMBEDDINGS = "completions", "chat", "embeddings"
RESPONSES, MESSAGES, GENERATE, COUNT_TOKENS = "responses", "messages", "generate", "count_tokens"
# The paths the default parsers route (openai, anthropic, vllmhttp: parsers/*/...go@v0.10.0
# Claims) that vLLM 0.32 serves; a render sub-path reads its parent's body.
API_PATHS = {"/v1/completions": COMPLETIONS, "/v1/completions/render": COMPLETIONS,
             "/v1/chat/completions": CHAT, "/v1/chat/completions/render": CHAT,
             "/v1/embeddings": EMBEDDINGS, "/v1/responses": RESPONSES, "/v1/messages": MESSAGES,
             "/v1/messages/count_tokens": COUNT_TOKENS, "/inference/v1/generate": GENERATE}
# tokenizer.go@v0.10.0 anthropicBillingHeaderPrefix: system blocks that are billing metadata.
ANTHROPIC_BILLING_PREFIX = "x-anthropic-billing-header"

# mm_estimate.go@v0.10.0 built-in defaults, for what the `estimate` parameters leave out (and,
# for videos, what no x-llm-d-video-* header gives).
DEFAULT_IMAGE_SIZE = (640, 360)
IMAGE_TOKEN_FACTOR = 1024
DEFAULT_VIDEO_SIZE = (640, 360)
DEFAULT_VIDEO_SECONDS = 10.0
DEFAULT_SAMPLE_FPS = 2.0
DEFAULT_SOURCE_FPS = 24.0
VIDEO_TOKEN_FACTOR = 1024
DYNAMIC, STATIC, STRIDED = "dynamic", "static", "strided"
IMAGE, VIDEO = "image", "video"
_GO_INT_LIMIT = 2 ** 63
# The longest placeholder run a configured estimate may give one image or video (64 MiB of
# stream): upstream has no bound, but no model's context holds more.
MAX_RUN_TOKENS = 2 ** 24

SURROGATE_FIX = ("a JSON escape from the U+D800-U+DFFF range without its other half, which is not text; write the "
                 "character itself, or both halves of its surrogate pair")


@dataclass(frozen=True)
class ServerPrompt:
    """One sequence as vLLM receives it: a text, token IDs, or a chat request (JSON of its
    `messages` and `tools`) that its chat template renders."""

    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    chat: str | None = None


def _go_int(value: int) -> int:
    """`value` wrapped to Go's 64-bit int, as Go's integer arithmetic wraps on overflow."""
    return (value + _GO_INT_LIMIT) % (2 * _GO_INT_LIMIT) - _GO_INT_LIMIT


def _go_quotient(dividend: int, divisor: int) -> int:
    # Go's integer division truncates toward zero (divisor > 0 here).
    quotient = abs(dividend) // divisor
    return quotient if dividend >= 0 else -quotient


def _pixel_tokens(width: int, height: int, factor: int) -> int:
    # width x height / factor in Go's int arithmetic, at least 1 (countFromDims, tokensPerFrame).
    tokens = _go_quotient(_go_int(width * height), factor)
    return tokens if tokens > 0 else 1


@dataclass(frozen=True)
class ImageEstimate:
    """mm_estimate.go@v0.10.0 imageEstimator with its fallbacks applied, so equal estimates count
    alike: static mode gives every image `static_tokens` (staticToken, or 1 when it is not
    positive); dynamic mode width x height / factor, at least 1, from the image's decoded header,
    else `default_size`."""

    mode: str = DYNAMIC
    default_size: tuple[int, int] = DEFAULT_IMAGE_SIZE
    factor: int = IMAGE_TOKEN_FACTOR
    static_tokens: int = 0

    @classmethod
    def from_config(cls, image: Mapping[str, Any]) -> ImageEstimate:
        """From a loaded `estimate.image` mapping (settings/picker_config.py), zero fields defaulted."""
        if image.get("mode") == STATIC:
            tokens = (image.get("static") or {}).get("staticToken", 0)
            return cls(STATIC, static_tokens=tokens if tokens > 0 else 1)
        resolution = image.get("defaultResolution") or {}
        width, height = resolution.get("width", 0), resolution.get("height", 0)
        factor = (image.get("dynamic") or {}).get("factor", 0)
        size = (width if width > 0 else DEFAULT_IMAGE_SIZE[0], height if height > 0 else DEFAULT_IMAGE_SIZE[1])
        return cls(DYNAMIC, size, factor if factor > 0 else IMAGE_TOKEN_FACTOR)

    def count(self, size: tuple[int, int] | None) -> int:
        """Placeholder tokens for an image of decoded `size` (None: not decodable)."""
        if self.mode == STATIC:
            return self.static_tokens
        width, height = size or self.default_size
        return _pixel_tokens(width, height, self.factor)


def video_tokens(video: Mapping[str, Any], where: str) -> int:
    """Placeholder tokens for every video under a loaded `estimate.video` mapping: mm_estimate.go@v0.10.0
    videoEstimator.placeholderCount, min(frames x tokensPerFrame, maxVideoTokens), at least 1.

    Upstream reads the video's duration, resolution and source frame rate from the request's
    x-llm-d-video-duration-seconds, x-llm-d-video-resolution and x-llm-d-video-fps headers
    first. A workload line and a body carry no headers, so this model takes each from the
    config (defaultDuration, defaultResolution, frames.strided.defaultSourceFPS), then from the
    built-in defaults (10 s, 640x360, 24 fps): what upstream does for a request without them.
    Every video of a request then gets the same count. PickerConfigError (naming `where`) when
    duration x frame rate is beyond Go's int, where upstream's conversion depends on the CPU.
    """
    frames_config, per_frame = video.get("frames") or {}, video.get("tokensPerFrame") or {}
    duration = video.get("defaultDuration", 0.0)
    duration = duration if duration > 0 else DEFAULT_VIDEO_SECONDS
    if frames_config.get("mode") == STRIDED:
        strided = frames_config.get("strided") or {}
        fps = strided.get("defaultSourceFPS", 0.0)
        fps = fps if fps > 0 else DEFAULT_SOURCE_FPS
        stride = max(1, strided.get("frameStride", 0))
        frames = _clamped(_go_quotient(_truncated(duration, fps, "strided.defaultSourceFPS", where), stride),
                          frames_config)
    else:
        sampled = frames_config.get("sampled") or {}
        fps = sampled.get("sampleFPS", 0.0)
        fps = fps if fps > 0 else DEFAULT_SAMPLE_FPS
        frames = _clamped(_truncated(duration, fps, "sampled.sampleFPS", where), frames_config)
        patch = sampled.get("temporalPatchSize", 0)
        if patch > 1:
            frames = _go_quotient(frames, patch)
    if per_frame.get("mode") == STATIC:
        per_frame_tokens = (per_frame.get("static") or {}).get("numTokensPerFrame", 0)
        per_frame_tokens = per_frame_tokens if per_frame_tokens > 0 else 1
    else:
        resolution = video.get("defaultResolution") or {}
        width, height = resolution.get("width", 0), resolution.get("height", 0)
        factor = (per_frame.get("dynamic") or {}).get("factor", 0)
        per_frame_tokens = _pixel_tokens(width if width > 0 else DEFAULT_VIDEO_SIZE[0],
                                         height if height > 0 else DEFAULT_VIDEO_SIZE[1],
                                         factor if factor > 0 else VIDEO_TOKEN_FACTOR)
    tokens = _go_int(frames * per_frame_tokens)
    cap = video.get("maxVideoTokens", 0)
    if 0 < cap < tokens:
        tokens = cap
    return tokens if tokens > 0 else 1


def _truncated(duration: float, fps: float, rate: str, where: str) -> int:
    # Go's int(float64): toward zero; out of int64's range the result is the CPU's, not Go's.
    frames = duration * fps
    if not frames < _GO_INT_LIMIT:
        raise PickerConfigError(f"{where}: defaultDuration {duration:g} x frames.{rate} {fps:g} is {frames:g} frames, "
                                "beyond Go's 64-bit int, where upstream's count depends on the CPU; give the "
                                "video's real duration and frame rate")
    return int(frames)


def _clamped(frames: int, frames_config: Mapping[str, Any]) -> int:
    low, high = frames_config.get("minFrames", 0), frames_config.get("maxFrames", 0)
    if 0 < low and frames < low:
        frames = low
    if 0 < high < frames:
        frames = high
    return frames


@dataclass(frozen=True)
class MediaRun:
    """One image or video part's run of placeholder tokens in a parsed chat or messages stream,
    counted with upstream's default estimates, and what another estimate needs to recount it."""

    offset: int  # where the run starts in the stream, in bytes (a whole number of tokens)
    count: int  # its placeholder tokens under the default estimates
    token: bytes  # the placeholder: the low 32 bits of xxh64(the asset), little-endian
    kind: str  # IMAGE or VIDEO
    size: tuple[int, int] | None = None  # an image's width and height from its header; None: not decodable


@dataclass(frozen=True)
class MediaEstimates:
    """What a token-producer's `estimate` parameters make of image and video parts: the image
    estimate, and the one count every video gets (see `video_tokens`). Equal instances count
    every part alike; DEFAULT_ESTIMATES are upstream's built-in ones."""

    image: ImageEstimate
    videos: int

    @classmethod
    def from_config(cls, estimate: Mapping[str, Any] | None, where: str) -> MediaEstimates:
        """From a loaded `estimate` mapping (None or {}: the defaults); `where` names it in errors,
        which also refuse a count this model cannot hold (MAX_RUN_TOKENS)."""
        estimate = estimate or {}
        image = ImageEstimate.from_config(estimate.get("image") or {})
        estimates = cls(image, video_tokens(estimate.get("video") or {}, f"{where}.video"))
        for kind, tokens in ((IMAGE, image.count(None)), (VIDEO, estimates.videos)):
            if tokens > MAX_RUN_TOKENS:
                raise PickerConfigError(f"{where}.{kind}: {tokens:,} placeholder tokens per {kind}, more than any "
                                        f"model's context and more than this model holds ({MAX_RUN_TOKENS:,}, 4 "
                                        f"bytes each); give the {kind} estimate real sizes and counts")
        return estimates

    def count(self, run: MediaRun) -> int:
        return self.videos if run.kind == VIDEO else self.image.count(run.size)

    def describe(self) -> str:
        image = self.image
        images = (f"{image.static_tokens} tokens per image" if image.mode == STATIC else
                  f"image width x height / {image.factor} tokens ({image.default_size[0]}x{image.default_size[1]} "
                  "when undecodable)")
        return f"{images}, {self.videos} tokens per video"


DEFAULT_ESTIMATES = MediaEstimates.from_config(None, "estimate")


def with_estimates(stream: bytes, runs: Sequence[MediaRun], estimates: MediaEstimates) -> bytes:
    """`stream` (parsed with the default estimates) with each of its media `runs` recounted under
    `estimates`: the bytes around the runs are unchanged, as every run starts token-aligned."""
    parts, start = [], 0
    for run in runs:
        parts += (stream[start:run.offset], run.token * estimates.count(run))
        start = run.offset + run.count * PSEUDO_TOKEN_BYTES
    parts.append(stream[start:])
    return b"".join(parts)


@dataclass(frozen=True)
class ParsedBody:
    model: str
    cache_salt: str
    text: str  # the request's text as one string (chat: roles and texts, as the estimate backend flattens)
    picker_prompts: tuple[bytes, ...]
    server_prompts: tuple[ServerPrompt, ...]
    # What pickers before v0.9 hash instead (GIE approximateprefix/hashing.go@v1.5.0
    # getUserInputBytes): the completion's plain text, or Go's JSON of the chat messages or the
    # embeddings input.
    character_input: bytes
    # The image and video runs in picker_prompts[0] (chat and messages only).
    media: tuple[MediaRun, ...] = ()
    # The client's cap on output tokens, as the parser normalises it (None: no cap).
    max_output_tokens: int | None = None


def lone_surrogate(text: str) -> int | None:
    """Where `text` holds a lone surrogate (what JSON's "\\ud800" decodes to), which UTF-8 cannot encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def check_unicode(what: str, text: str) -> str:
    index = lone_surrogate(text)
    if index is not None:
        raise ValueError(f"{what} holds a lone surrogate \\u{ord(text[index]):04x} at character {index}: "
                         f"{SURROGATE_FIX}")
    return text


def infer_api(body: Mapping[str, Any]) -> str:
    """The API a body without a URL belongs to (a workload line), by the field it carries:
    workloads are completions or chats; embeddings are routed only when sent to their path."""
    for field, api in (("messages", CHAT), ("prompt", COMPLETIONS)):
        if field in body:
            return api
    raise ValueError("the body has neither `prompt` (a /v1/completions request) nor `messages` "
                     "(a /v1/chat/completions request)")


def parse_body(body: Mapping[str, Any], api: str | None = None) -> ParsedBody:
    """The picker's and the server's view of `body`, sent to `api` (inferred from its fields when
    None). ValueError says what upstream would refuse, or what is not text."""
    if api == COUNT_TOKENS:
        # anthropic.go ParseRequest: forwarded unparsed, so it is picked with no tokens to hash.
        model = body.get("model")
        return ParsedBody(model if isinstance(model, str) else "", "", "", (), (), b"")
    model = body.get("model")
    if api == GENERATE and model is None:
        model = ""  # the generate API names no model; the first block hash then has none
    elif not isinstance(model, str) or not model:
        raise ValueError(f"`model` must be a non-empty string, got {model!r}")
    check_unicode("`model`", model)
    salt = body.get("cache_salt", "")
    if salt is None:
        salt = ""
    if not isinstance(salt, str):
        raise ValueError(f"`cache_salt` must be a string, got {salt!r}")
    check_unicode("`cache_salt`", salt)
    api = api or infer_api(body)
    media: list[MediaRun] = []
    if api == CHAT:
        text, picker_prompts, server_prompts = _chat(body, media)
        characters = _go_messages_json(body["messages"])
    elif api == COMPLETIONS:
        text, picker_prompts, server_prompts = _completions(body.get("prompt"))
        characters = text
    elif api == EMBEDDINGS:
        text, picker_prompts, server_prompts = _embeddings(body.get("input"))
        characters = _go_embeddings_input_json(body["input"])
    elif api == RESPONSES:
        text, picker_prompts, server_prompts = _responses(body)
        characters = text
    elif api == MESSAGES:
        text, picker_prompts, server_prompts = _anthropic_messages(body, media)
        characters = text
    else:
        text, picker_prompts, server_prompts = _generate(body.get("token_ids"))
        characters = ""
    return ParsedBody(model, salt, text, picker_prompts, server_prompts, characters.encode("utf-8"), tuple(media),
                      max_output_tokens(body, api))


# Where each API's body states its output cap, in the order the parser tries them
# (parsers/openai/openai.go maxOutputTokensForAPI, anthropic/anthropic.go, vllmhttp/vllmhttp.go
# @v0.10.0); embeddings have none.
_OUTPUT_CAP_KEYS = {CHAT: ("max_completion_tokens", "max_tokens"), COMPLETIONS: ("max_tokens",),
                    RESPONSES: ("max_output_tokens",), MESSAGES: ("max_tokens",)}


def max_output_tokens(body: Mapping[str, Any], api: str) -> int | None:
    """The client's output-token cap as upstream's parser reads it (requesthandling/types.go
    MaxOutputTokensFromPayload@v0.10.0): the first key holding a non-negative whole number; a
    value of another type, negative or fractional is skipped. The generate API keeps it under
    sampling_params."""
    if api == GENERATE:
        source, keys = body.get("sampling_params"), ("max_tokens",)
        if not isinstance(source, Mapping):
            return None
    else:
        source, keys = body, _OUTPUT_CAP_KEYS.get(api, ())
    for key in keys:
        value = source.get(key)
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
                or value != int(value)):
            continue
        # Go converts to int64; beyond it the cap wraps negative, which the estimator ignores.
        return int(value) if value < 2 ** 63 else None
    return None


def _array(values: list, field: str) -> tuple[list[str], list[int]]:
    # types.go parseArrayInput: the first element decides; strings, or token IDs (uint32).
    if isinstance(values[0], str):
        if not all(isinstance(value, str) for value in values):
            raise ValueError(f"`{field}`: mixed types in the list; write only strings or only token IDs")
        return [check_unicode(f"`{field}`", value) for value in values], []
    if isinstance(values[0], (int, float)) and not isinstance(values[0], bool):
        ids = []
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"`{field}`: mixed types in the list; write only strings or only token IDs")
            if value != int(value) or not 0 <= value < 2 ** 32:
                raise ValueError(f"`{field}`: {value!r} is not a valid token ID (a whole number, 0 to 2^32-1)")
            ids.append(int(value))
        return [], ids
    raise ValueError(f"`{field}`: a list of {type(values[0]).__name__} is not routed upstream; write a string, a "
                     "list of strings or a list of token IDs")


def _token_bytes(ids: list[int]) -> bytes:
    return struct.pack(f"<{len(ids)}I", *ids)


def _completions(prompt: Any) -> tuple[str, tuple[bytes, ...], tuple[ServerPrompt, ...]]:
    if isinstance(prompt, str) and prompt:
        check_unicode("`prompt`", prompt)
        return prompt, (pseudo_token_bytes(prompt),), (ServerPrompt(text=prompt),)
    if isinstance(prompt, list) and prompt:
        strings, ids = _array(prompt, "prompt")
        if ids:
            return "", (_token_bytes(ids),), (ServerPrompt(token_ids=tuple(ids)),)
        servers = tuple(ServerPrompt(text=text) for text in strings)
        if len(strings) == 1:
            return strings[0], (pseudo_token_bytes(strings[0]),), servers
        # estimateMultiStringCompletions: one stream per prompt.
        return " ".join(strings), tuple(pseudo_token_bytes(text) for text in strings), servers
    if isinstance(prompt, (str, list)) or prompt is None:
        raise ValueError("`prompt` is empty; upstream refuses a completions request without a prompt")
    raise ValueError(f"`prompt` must be a string or a list, got {type(prompt).__name__}")


def _embeddings(value: Any) -> tuple[str, tuple[bytes, ...], tuple[ServerPrompt, ...]]:
    if isinstance(value, list) and value:
        strings, ids = _array(value, "input")
        if ids:
            return "", (_token_bytes(ids),), (ServerPrompt(token_ids=tuple(ids)),)
        raw, listed = "", strings
    elif isinstance(value, str) and value:
        raw, listed = check_unicode("`input`", value), None
    else:
        raise ValueError("`input` is empty or not a string or list; upstream refuses an embeddings request "
                         "without input")
    marshalled = _go_embeddings_input_json(value)
    servers = tuple(ServerPrompt(text=text) for text in (listed or [raw]))
    return raw or " ".join(listed or []), (pseudo_token_bytes(marshalled),), servers


def _responses(body: Mapping[str, Any]) -> tuple[str, tuple[bytes, ...], tuple[ServerPrompt, ...]]:
    # estimateBytes: json.Marshal([{instructions}, {tools}, {input}]), the first two when present.
    if body.get("input") is None:
        raise ValueError("`input` is missing; upstream refuses a responses request without input")
    combined = [{key: body[key]} for key in ("instructions", "tools") if body.get(key) is not None]
    text = check_unicode("the request", go_json(combined + [{"input": body["input"]}]))
    return text, (pseudo_token_bytes(text),), (ServerPrompt(text=text),)


def _generate(ids: Any) -> tuple[str, tuple[bytes, ...], tuple[ServerPrompt, ...]]:
    # vllmhttp.go parseGenerateRequest: token IDs, passed through as tokens.
    if not isinstance(ids, list) or not ids:
        raise ValueError("`token_ids` must be a non-empty list; upstream refuses a generate request without them")
    _, tokens = _array(ids, "token_ids")
    if not tokens:
        raise ValueError("`token_ids` must be token IDs (whole numbers), not strings")
    return "", (_token_bytes(tokens),), (ServerPrompt(token_ids=tuple(tokens)),)


def _anthropic_messages(body: Mapping[str, Any], media: list[MediaRun]
                        ) -> tuple[str, tuple[bytes, ...], tuple[ServerPrompt, ...]]:
    """estimate.go messagesBytes: json(tools), the system text, then each message's role and
    content: text, thinking, tool_use as id + name + input JSON, tool_result as its text, and
    images as placeholder runs (recorded in `media`). Tool inputs are hashed in compact JSON
    (upstream hashes the bytes as the client wrote them)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("`messages` must be a non-empty list; upstream refuses a messages request without messages")
    stream = bytearray()
    tools = body.get("tools")
    if tools:
        if not isinstance(tools, list) or not all(isinstance(tool, Mapping) for tool in tools):
            raise ValueError("`tools` must be a list of tool objects")
        stream += go_json([_anthropic_tool(tool) for tool in tools], sort_keys=False).encode("utf-8")
    system = _anthropic_content(body.get("system"), "`system`")
    if isinstance(system, str):
        stream += system.encode("utf-8")
    else:
        stream += "".join(block.get("text") or "" for block in system if block.get("type") == "text"
                          and not str(block.get("text") or "").startswith(ANTHROPIC_BILLING_PREFIX)).encode("utf-8")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"`messages[{index}]` must be an object")
        stream += str(message.get("role") or "").encode("utf-8")
        content = _anthropic_content(message.get("content"), f"`messages[{index}].content`")
        if isinstance(content, str):
            stream += content.encode("utf-8")
            continue
        for block in content:
            kind = block.get("type")
            if kind == "text":
                stream += str(block.get("text") or "").encode("utf-8")
            elif kind == "image":
                _append_anthropic_image(stream, media, block.get("source"))
            elif kind == "thinking":
                stream += str(block.get("thinking") or "").encode("utf-8")
            elif kind == "tool_use":
                stream += (str(block.get("id") or "") + str(block.get("name") or "")).encode("utf-8")
                if block.get("input") is not None:
                    stream += go_json(block["input"], sort_keys=False).encode("utf-8")
            elif kind == "tool_result":
                result = _anthropic_content(block.get("content"), f"`messages[{index}]` tool_result content")
                if isinstance(result, str):
                    stream += result.encode("utf-8")
                else:
                    stream += "\n".join(str(item.get("text") or "") for item in result
                                        if item.get("type") == "text").encode("utf-8")
                    for item in result:
                        url = _anthropic_image_url(item.get("source")) if item.get("type") == "image" else ""
                        if url:
                            _append_media(stream, media, IMAGE, url, _data_url_size(url))
    text = check_unicode("`messages`", bytes(stream).decode("utf-8", errors="replace"))
    return text, (_aligned(stream),), (ServerPrompt(text=text),)


def _anthropic_tool(tool: Mapping[str, Any]) -> dict:
    # AnthropicTool's fields in declaration order, empty ones omitted.
    fields: dict[str, Any] = {"name": tool.get("name") or ""}
    for key in ("description", "input_schema", "strict", "defer_loading"):
        if tool.get(key) not in (None, ""):
            fields[key] = tool[key]
    return fields


def _anthropic_content(content: Any, where: str) -> str | list:
    # AnthropicContent: a string, or a list of blocks (objects); absent is empty.
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(block, Mapping) for block in content):
        return content
    raise ValueError(f"{where} must be a string or a list of content blocks")


def _append_anthropic_image(stream: bytearray, media: list[MediaRun], source: Any) -> None:
    # placeholderForAnthropicImage: the URL, else the base64 data, sized from its header.
    if not isinstance(source, Mapping):
        return
    if source.get("url"):
        url = str(source["url"])
        _append_media(stream, media, IMAGE, url, _data_url_size(url))
    elif source.get("data"):
        data = str(source["data"])
        _append_media(stream, media, IMAGE, data, image_size(data))


def _anthropic_image_url(source: Any) -> str:
    # tokenizer.go anthropicImageToURL: a tool_result's image is hashed as the URL vLLM is sent,
    # its source's URL, or its data as a data URL (image/jpeg when no media_type); "" drops it.
    if not isinstance(source, Mapping):
        return ""
    if source.get("type") == "url" or source.get("url"):
        return str(source.get("url") or "")
    if not source.get("data"):
        return ""
    return f"data:{source.get('media_type') or 'image/jpeg'};base64,{source['data']}"


def _go_embeddings_input_json(value: Any) -> str:
    # estimateBytes: json.Marshal of the parsed EmbeddingsInput struct, which has no MarshalJSON,
    # so its fields Raw, Strings and TokenIDs are written out.
    if isinstance(value, str):
        return go_json({"Raw": value, "Strings": None, "TokenIDs": None})
    strings = value if isinstance(value[0], str) else None
    ids = None if strings else [int(token) for token in value]
    return go_json({"Raw": "", "Strings": strings, "TokenIDs": ids})


def _go_messages_json(messages: list) -> str:
    # json.Marshal([]Message) as GIE v1.5 declares them: role (omitted when empty), then content
    # as a string, or as blocks of type, text, image_url, input_audio, video_url (empty fields
    # omitted inside them); a message without content writes "".
    def block(part: Mapping[str, Any]) -> dict:
        fields: dict[str, Any] = {"type": part.get("type") or ""}
        if part.get("text"):
            fields["text"] = part["text"]
        fields["image_url"] = _present({"url": _field(part, "image_url", "url")})
        fields["input_audio"] = _present({"data": _field(part, "input_audio", "data"),
                                          "format": _field(part, "input_audio", "format")})
        fields["video_url"] = _present({"url": _field(part, "video_url", "url")})
        return fields

    written = []
    for message in messages:
        fields: dict[str, Any] = {}
        if message.get("role"):
            fields["role"] = message["role"]
        content = message.get("content")
        fields["content"] = [block(part) for part in content] if isinstance(content, list) else (content or "")
        written.append(fields)
    return go_json(written, sort_keys=False)


def _present(fields: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in fields.items() if value}


def _chat(body: Mapping[str, Any], media: list[MediaRun]) -> tuple[str, tuple[bytes, ...], tuple[ServerPrompt, ...]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("`messages` must be a non-empty list; upstream refuses a chat request without messages")
    stream = bytearray()
    texts = []
    tools = body.get("tools")
    if tools:
        stream += go_json(tools).encode("utf-8")
        texts.append(go_json(tools))
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"`messages[{index}]` must be an object, got {json.dumps(message)[:60]}")
        role = message.get("role") or ""
        if not isinstance(role, str):
            raise ValueError(f"`messages[{index}].role` must be a string, got {role!r}")
        stream += role.encode("utf-8")
        texts.append(role)
        _append_content(stream, texts, media, message.get("content"), index)
    text = check_unicode("`messages`", "".join(texts))
    chat = json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False, sort_keys=True)
    return text, (_aligned(stream),), (ServerPrompt(chat=chat),)


def _append_content(stream: bytearray, texts: list[str], media: list[MediaRun], content: Any, index: int) -> None:
    if content is None:
        return
    if isinstance(content, str):
        stream += check_unicode(f"`messages[{index}].content`", content).encode("utf-8")
        texts.append(content)
        return
    if not isinstance(content, list):
        raise ValueError(f"`messages[{index}].content` must be a string or a list of parts")
    for position, part in enumerate(content):
        where = f"`messages[{index}].content[{position}]`"
        if not isinstance(part, Mapping):
            raise ValueError(f"{where} must be an object with a `type`")
        kind = part.get("type")
        if kind == "text":
            text = part.get("text") or ""
            if not isinstance(text, str):
                raise ValueError(f"{where}.text must be a string")
            stream += check_unicode(f"{where}.text", text).encode("utf-8")
            texts.append(text)
        elif kind == "image_url":
            url = _field(part, "image_url", "url")
            _append_media(stream, media, IMAGE, url, _data_url_size(url))
        elif kind == "video_url":
            _append_media(stream, media, VIDEO, _field(part, "video_url", "url"))
        elif kind in ("input_audio", "audio_url"):
            # appendChatMessage reads input_audio for both part types.
            data = _field(part, "input_audio", "data") + _field(part, "input_audio", "format")
            _append_placeholders(stream, data, max(1, -(-len(data.encode("utf-8")) // PSEUDO_TOKEN_BYTES)))
        # Any other part type is skipped, as upstream does.


def _field(part: Mapping[str, Any], block: str, key: str) -> str:
    value = part.get(block)
    value = value.get(key, "") if isinstance(value, Mapping) else ""
    return value if isinstance(value, str) else ""


def _aligned(stream: bytearray) -> bytes:
    # packBytes/align: zero-padded to whole 4-byte pseudo-tokens.
    return bytes(stream + bytes(-len(stream) % PSEUDO_TOKEN_BYTES))


def _append_placeholders(stream: bytearray, content: str, count: int) -> tuple[int, bytes]:
    # appendMMAsset: align to a token, then `count` copies of the low 32 bits of xxh64(content).
    # Returns where the run starts and its token.
    stream += bytes(-len(stream) % PSEUDO_TOKEN_BYTES)
    offset = len(stream)
    token = struct.pack("<I", xxhash.xxh64_intdigest(content.encode("utf-8")) & 0xFFFFFFFF)
    stream += token * count
    return offset, token


def _append_media(stream: bytearray, media: list[MediaRun], kind: str, content: str,
                  size: tuple[int, int] | None = None) -> None:
    # An image or video run, counted with the default estimates and recorded for recounting.
    count = DEFAULT_ESTIMATES.videos if kind == VIDEO else DEFAULT_ESTIMATES.image.count(size)
    offset, token = _append_placeholders(stream, content, count)
    media.append(MediaRun(offset, count, token, kind, size))


def _data_url_size(url: str) -> tuple[int, int] | None:
    # mm_estimate.go imageDimensionsFromBase64: the header of a base64 data URL's image (PNG,
    # GIF, JPEG as Go's image package decodes them); None for any other URL.
    if url.startswith("data:image/") and "base64," in url:
        return image_size(url[url.index("base64,") + len("base64,"):])
    return None


def image_size(payload: str) -> tuple[int, int] | None:
    """Width and height from a base64 PNG, GIF or baseline/progressive JPEG header, or None."""
    head = payload[:65536]
    try:
        data = base64.b64decode(head[:len(head) // 4 * 4], validate=False)
    except (binascii.Error, ValueError):
        return None
    size = None
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        size = struct.unpack(">II", data[16:24])
    elif data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        size = struct.unpack("<HH", data[6:10])
    elif data.startswith(b"\xff\xd8"):
        size = _jpeg_size(data)
    return size if size and size[0] > 0 and size[1] > 0 else None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    index = 2
    while index + 9 <= len(data):
        if data[index] != 0xFF:
            return None
        marker = data[index + 1]
        if marker in (0xC0, 0xC1, 0xC2):  # the frame headers Go's image/jpeg decodes
            height, width = struct.unpack(">HH", data[index + 5:index + 9])
            return width, height
        index += 2 + struct.unpack(">H", data[index + 2:index + 4])[0]
    return None
