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
- embeddings hash Go's JSON of the parsed input struct, or pass token IDs through;
- `cache_salt` goes into every prompt's first block hash.

`parse_body` returns that view (`picker_prompts`, little-endian uint32 bytes per stream) next
to what vLLM turns into tokens (`server_prompts`), so the server side can be counted too.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from dataclasses import dataclass
from typing import Any, Mapping

import xxhash

from routing.picker.prefix import PSEUDO_TOKEN_BYTES, go_json, pseudo_token_bytes

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

# mm_estimate.go@v0.10.0 defaults (no `estimate` parameters, no x-llm-d-video-* headers).
DEFAULT_IMAGE_SIZE = (640, 360)
IMAGE_TOKEN_FACTOR = 1024
DEFAULT_VIDEO_FRAMES = 10 * 2  # 10 s sampled at 2 frames per second
VIDEO_TOKEN_FACTOR = 1024

SURROGATE_FIX = ("a JSON escape from the U+D800-U+DFFF range without its other half, which is not text; write the "
                 "character itself, or both halves of its surrogate pair")


@dataclass(frozen=True)
class ServerPrompt:
    """One sequence as vLLM receives it: a text, token IDs, or a chat request (JSON of its
    `messages` and `tools`) that its chat template renders."""

    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    chat: str | None = None


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
    if api == CHAT:
        text, picker_prompts, server_prompts = _chat(body)
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
        text, picker_prompts, server_prompts = _anthropic_messages(body)
        characters = text
    else:
        text, picker_prompts, server_prompts = _generate(body.get("token_ids"))
        characters = ""
    return ParsedBody(model, salt, text, picker_prompts, server_prompts, characters.encode("utf-8"))


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


def _anthropic_messages(body: Mapping[str, Any]) -> tuple[str, tuple[bytes, ...], tuple[ServerPrompt, ...]]:
    """estimate.go messagesBytes: json(tools), the system text, then each message's role and
    content: text, thinking, tool_use as id + name + input JSON, tool_result as its text, and
    images as placeholder runs. Tool inputs are hashed in compact JSON (upstream hashes the
    bytes as the client wrote them)."""
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
                _append_anthropic_image(stream, block.get("source"))
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
                        if item.get("type") == "image":
                            _append_anthropic_image(stream, item.get("source"))
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


def _append_anthropic_image(stream: bytearray, source: Any) -> None:
    # placeholderForAnthropicImage: the URL, else the base64 data, sized from its header.
    if not isinstance(source, Mapping):
        return
    if source.get("url"):
        url = str(source["url"])
        _append_placeholders(stream, url, _image_placeholders(url))
    elif source.get("data"):
        data = str(source["data"])
        width, height = image_size(data) or DEFAULT_IMAGE_SIZE
        _append_placeholders(stream, data, max(1, width * height // IMAGE_TOKEN_FACTOR))


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


def _chat(body: Mapping[str, Any]) -> tuple[str, tuple[bytes, ...], tuple[ServerPrompt, ...]]:
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
        _append_content(stream, texts, message.get("content"), index)
    text = check_unicode("`messages`", "".join(texts))
    chat = json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False, sort_keys=True)
    return text, (_aligned(stream),), (ServerPrompt(chat=chat),)


def _append_content(stream: bytearray, texts: list[str], content: Any, index: int) -> None:
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
            _append_placeholders(stream, url, _image_placeholders(url))
        elif kind == "video_url":
            # Without x-llm-d-video-* headers: 20 frames of 640x360 at 1024 pixels per token.
            url = _field(part, "video_url", "url")
            frame_tokens = DEFAULT_IMAGE_SIZE[0] * DEFAULT_IMAGE_SIZE[1] // VIDEO_TOKEN_FACTOR
            _append_placeholders(stream, url, DEFAULT_VIDEO_FRAMES * frame_tokens)
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


def _append_placeholders(stream: bytearray, content: str, count: int) -> None:
    # appendMMAsset: align to a token, then `count` copies of the low 32 bits of xxh64(content).
    stream[:] = _aligned(stream)
    token = struct.pack("<I", xxhash.xxh64_intdigest(content.encode("utf-8")) & 0xFFFFFFFF)
    stream += token * count


def _image_placeholders(url: str) -> int:
    # mm_estimate.go placeholderCount: width·height / 1024 from a base64 data URL's image header
    # (PNG, GIF, JPEG as Go's image package decodes them), else 640x360.
    width, height = DEFAULT_IMAGE_SIZE
    if url.startswith("data:image/") and "base64," in url:
        size = image_size(url[url.index("base64,") + len("base64,"):])
        if size:
            width, height = size
    return max(1, width * height // IMAGE_TOKEN_FACTOR)


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
