"""Request bodies as the picker's estimate backend reads them, and how each form is routed."""

import base64
import struct

import pytest
import xxhash

from routing.picker.endpoint_picker import EndpointPicker, PickerConfigError, PodMetrics, Request
from routing.picker.estimate import (COMPLETIONS, COUNT_TOKENS, EMBEDDINGS, GENERATE, MESSAGES, RESPONSES, ServerPrompt,
                                     image_size, parse_body)
from routing.picker.prefix import EstimateTokenizer, character_block_hashes, picker_block_hashes, pseudo_token_bytes
from routing.simulation.fleet import prepare
from settings.picker_config import load_endpoint_picker_config

MODEL = "m"
# 64 pseudo-tokens of 4 bytes: one picker block.
BLOCK = "p" * 256


def body(**fields):
    return {"model": MODEL, **fields}


def prefix_picker(**kwargs) -> EndpointPicker:
    return EndpointPicker({"prefix": 1}, seed=0, **kwargs)


def pods(*names):
    return [PodMetrics(name) for name in names]


# -- completions ----------------------------------------------------------------------------------

def test_a_text_prompt_is_one_stream_of_pseudo_tokens():
    request = Request.from_openai_body(body(prompt="Hello", max_tokens=4))
    assert request.prompt == "Hello" and request.token_streams == (b"Hello\x00\x00\x00",)
    assert request.server_inputs == (ServerPrompt(text="Hello"),)
    assert Request.from_openai_body(body(prompt=["Hello"])).token_streams == (b"Hello\x00\x00\x00",)


def test_several_prompts_are_hashed_separately_and_their_matches_summed():
    picker = prefix_picker()
    picker.pick(Request.from_openai_body(body(prompt=BLOCK + "a")), pods("x", "y"))
    several = Request.from_openai_body(body(prompt=[BLOCK + "b", BLOCK + "c", "short"]))
    assert several.token_streams == tuple(pseudo_token_bytes(text) for text in (BLOCK + "b", BLOCK + "c", "short"))
    assert [prompt.text for prompt in several.server_inputs] == [BLOCK + "b", BLOCK + "c", "short"]
    decision = picker.pick(several, pods("x", "y"))
    # Each prompt's first block is the shared one: 2 + 2 + 1 blocks, 2 of them matched on one pod.
    assert decision.total_blocks == 5 and sorted(decision.match_blocks.values()) == [0, 2]


def test_token_id_prompts_are_hashed_as_the_tokens_themselves():
    ids = list(range(1000, 1100))
    request = Request.from_openai_body(body(prompt=ids))
    assert request.token_streams == (struct.pack("<100I", *ids),)
    assert request.server_inputs == (ServerPrompt(token_ids=tuple(ids)),)
    picker = prefix_picker()
    picker.pick(request, pods("x", "y"))
    again = picker.pick(Request.from_openai_body(body(prompt=ids[:64] + [7] * 36)), pods("x", "y"))
    assert again.total_blocks == 2 and sorted(again.match_blocks.values()) == [0, 1]


@pytest.mark.parametrize("prompt, message", [
    ("", "`prompt` is empty; upstream refuses"),
    ([], "`prompt` is empty"),
    (["a", 1], "mixed types"),
    ([1, "a"], "mixed types"),
    ([1.5], "1.5 is not a valid token ID"),
    ([[1, 2], [3]], "a list of list is not routed upstream"),
    (7, "`prompt` must be a string or a list"),
])
def test_completions_upstream_refuses_are_refused(prompt, message):
    with pytest.raises(ValueError, match=message):
        Request.from_openai_body(body(prompt=prompt))


# -- chat -------------------------------------------------------------------------------------------

def test_chat_is_tools_json_then_role_and_text_per_message():
    chat = body(tools=[{"type": "function", "function": {"name": "f", "description": "a<b"}}],
                messages=[{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]}])
    expected = '[{"function":{"description":"a\\u003cb","name":"f"},"type":"function"}]systemBe brief.userHi!'
    request = Request.from_openai_body(chat)
    assert request.prompt == expected and request.token_streams == (pseudo_token_bytes(expected),)
    assert request.server_inputs[0].chat is not None


def _png(width, height) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height) + b"\x08\x02"
    return "data:image/png;base64," + base64.b64encode(header + bytes(20)).decode()


def test_media_parts_become_placeholder_tokens_and_unknown_parts_are_skipped():
    url = _png(320, 128)  # 320 x 128 / 1024 = 40 placeholder tokens
    parts = [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": url}},
             {"type": "mystery", "text": "ignored"}, {"type": "text", "text": "ok"}]
    request = Request.from_openai_body(body(messages=[{"role": "user", "content": parts}]))
    token = struct.pack("<I", xxhash.xxh64_intdigest(url.encode()) & 0xFFFFFFFF)
    # "usersee" is 7 bytes: padded to 8 before the image's 40 tokens.
    assert request.token_streams == (b"usersee\x00" + token * 40 + b"ok\x00\x00",)


@pytest.mark.parametrize("part, tokens", [
    ({"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}, 640 * 360 // 1024),
    ({"type": "video_url", "video_url": {"url": "https://example.com/a.mp4"}}, 20 * (640 * 360 // 1024)),
    ({"type": "input_audio", "input_audio": {"data": "AAAAAAAA", "format": "wav"}}, 3),
])
def test_media_placeholder_counts_follow_upstreams_defaults(part, tokens):
    request = Request.from_openai_body(body(messages=[{"role": "user", "content": [part]}]))
    assert len(request.token_streams[0]) == 4 + 4 * tokens  # "user" + the placeholders


def test_image_headers_give_the_image_size():
    assert image_size(_png(300, 200)[len("data:image/png;base64,"):]) == (300, 200)
    gif = base64.b64encode(b"GIF89a" + struct.pack("<HH", 64, 32) + bytes(8)).decode()
    jpeg = base64.b64encode(b"\xff\xd8\xff\xe0" + struct.pack(">H", 4) + b"JF" + b"\xff\xc0" + struct.pack(
        ">HBHH", 11, 8, 480, 640) + bytes(8)).decode()
    assert image_size(gif) == (64, 32) and image_size(jpeg) == (640, 480)
    assert image_size(base64.b64encode(b"not an image").decode()) is None


@pytest.mark.parametrize("chat, message", [
    (body(messages=[]), "`messages` must be a non-empty list"),
    (body(messages=[{"role": "user", "content": 3}]), "must be a string or a list of parts"),
    (body(messages=[{"role": "user", "content": [{"type": "text", "text": 3}]}]), "text must be a string"),
])
def test_chat_upstream_refuses_is_refused(chat, message):
    with pytest.raises(ValueError, match=message):
        Request.from_openai_body(chat)


# -- embeddings, the API from the path, cache_salt ------------------------------------------------

def test_embeddings_hash_gos_json_of_the_input_struct():
    text = Request.from_openai_body(body(input="hello"), api=EMBEDDINGS)
    assert text.token_streams == (pseudo_token_bytes('{"Raw":"hello","Strings":null,"TokenIDs":null}'),)
    listed = Request.from_openai_body(body(input=["a", "b"]), api=EMBEDDINGS)
    assert listed.token_streams == (pseudo_token_bytes('{"Raw":"","Strings":["a","b"],"TokenIDs":null}'),)
    assert Request.from_openai_body(body(input=[5, 6]), api=EMBEDDINGS).token_streams == (struct.pack("<2I", 5, 6),)


def test_the_api_comes_from_the_path_not_the_fields():
    with pytest.raises(ValueError, match="`prompt` is empty"):
        parse_body(body(messages=[{"role": "user", "content": "x"}]), COMPLETIONS)


def test_cache_salt_goes_into_the_first_block_so_salted_and_unsalted_never_share():
    assert Request.from_openai_body(body(prompt="x", cache_salt="tenant-a")).cache_salt == "tenant-a"
    assert picker_block_hashes(MODEL, b"abcd", 64, 10, "s")[0] != picker_block_hashes(MODEL, b"abcd", 64, 10)[0]
    picker = prefix_picker()
    first = picker.pick(Request.from_openai_body(body(prompt=BLOCK * 2, cache_salt="tenant-a")), pods("x", "y"))
    same_salt = picker.pick(Request.from_openai_body(body(prompt=BLOCK * 2, cache_salt="tenant-a")), pods("x", "y"))
    assert same_salt.match_blocks[first.pod] == 2
    for other in ({}, {"cache_salt": "tenant-b"}):
        assert sum(picker.pick(Request.from_openai_body(body(prompt=BLOCK * 2, **other)),
                               pods("x", "y")).match_blocks.values()) == 0
    with pytest.raises(ValueError, match="`cache_salt` must be a string"):
        Request.from_openai_body(body(prompt="x", cache_salt=5))


# -- picker versions: tokens (v0.9+) or characters (before v0.9) ---------------------------------------

def test_pickers_before_v09_hash_whole_64_character_blocks_and_drop_the_partial_one():
    old = prefix_picker(picker_version="v0.8")
    text = "c" * 64 * 3 + "tail"
    # blockSizeTokens 16 x 4 = 64 characters, no 64-token floor; the 4-character tail is dropped.
    assert old.pick(Request(model=MODEL, prompt=text), pods("x")).total_blocks == 3
    assert prefix_picker().pick(Request(model=MODEL, prompt=text), pods("x")).total_blocks == 1
    assert old.pick(Request(model=MODEL, prompt="short"), pods("x")).total_blocks == 0
    assert character_block_hashes(MODEL, text.encode(), 16, 256)[0] == xxhash.xxh64_intdigest(
        b"c" * 64 + struct.pack("<Q", xxhash.xxh64_intdigest(MODEL.encode())))


def test_pickers_before_v09_hash_chat_as_gos_json_of_the_messages():
    chat = Request.from_openai_body(body(messages=[{"role": "user", "content": "hi"}, {"content": [
        {"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "u", "detail": "high"}}]}]))
    assert chat.characters == (b'[{"role":"user","content":"hi"},{"content":[{"type":"text","text":"x",'
                               b'"image_url":{},"input_audio":{},"video_url":{}},{"type":"image_url",'
                               b'"image_url":{"url":"u"},"input_audio":{},"video_url":{}}]}]')


def test_pickers_before_v09_cap_at_256_blocks_and_ignore_lru_capacity_per_server():
    config = load_endpoint_picker_config({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "approx-prefix-cache-producer", "parameters": {"autoTune": False,
                                                                             "lruCapacityPerServer": 5}},
                    {"type": "prefix-cache-scorer"}]})
    long_prompt = Request(model=MODEL, prompt="z" * 64 * 300)
    old, new = (EndpointPicker(config, seed=0, picker_version=version) for version in ("v0.5", "v0.10"))
    assert old.pick(long_prompt, [PodMetrics("x")]).total_blocks == 256
    assert old.prefix_index.capacity("x") == 31250
    new.pick(long_prompt, [PodMetrics("x")])
    assert new.prefix_index.capacity("x") == 5


def test_an_unknown_picker_version_is_refused():
    with pytest.raises(PickerConfigError, match="picker version 'v1.0': not one of v0.10, v0.9"):
        prefix_picker(picker_version="v1.0")


# -- responses, Anthropic messages, vLLM generate ---------------------------------------------------

def test_responses_hash_the_json_of_instructions_tools_and_input():
    request = Request.from_openai_body(body(input="hi", instructions="be <brief>"), api=RESPONSES)
    assert request.token_streams == (pseudo_token_bytes('[{"instructions":"be \\u003cbrief\\u003e"},{"input":"hi"}]'),)
    with pytest.raises(ValueError, match="`input` is missing"):
        Request.from_openai_body(body(instructions="x"), api=RESPONSES)


def test_anthropic_messages_are_tools_system_then_roles_and_blocks():
    request = Request.from_openai_body(body(
        tools=[{"name": "f", "input_schema": {"type": "object"}, "description": "d"}],
        system=[{"type": "text", "text": "sys"}, {"type": "text", "text": "x-anthropic-billing-header: 1"}],
        messages=[{"role": "user", "content": "hi"},
                  {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"},
                                                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"b": 1, "a": 2}},
                                                    {"type": "redacted_thinking", "data": "skipped"}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                "content": [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}]}]}]),
        api=MESSAGES)
    expected = ('[{"name":"f","description":"d","input_schema":{"type":"object"}}]sysuserhiassistanthmmt1f{"b":1,"a":2}'
                'userr1\nr2')
    assert request.token_streams == (pseudo_token_bytes(expected),)
    with pytest.raises(ValueError, match="`messages` must be a non-empty list"):
        Request.from_openai_body(body(messages=[]), api=MESSAGES)


def test_generate_passes_token_ids_through_and_needs_no_model():
    request = Request.from_openai_body({"token_ids": [3, 4, 5], "sampling_params": {"max_tokens": 1}}, api=GENERATE)
    assert request.token_streams == (struct.pack("<3I", 3, 4, 5),) and request.model == ""
    with pytest.raises(ValueError, match="`token_ids` must be a non-empty list"):
        Request.from_openai_body({"token_ids": []}, api=GENERATE)


def test_anthropic_count_tokens_is_picked_with_nothing_to_hash():
    picker = prefix_picker()
    request = Request.from_openai_body(body(messages=[{"role": "user", "content": "x" * 600}]), api=COUNT_TOKENS)
    assert request.token_streams == () and picker.pick(request, pods("x", "y")).total_blocks == 0


# -- the token producer's media estimates ----------------------------------------------------------

PNG_64X32 = _png(64, 32)
IMAGE_URL = "https://example.com/a.png"
VIDEO_URL = "https://example.com/clip.mp4"


def estimating_picker(estimate, **producer) -> EndpointPicker:
    return EndpointPicker(load_endpoint_picker_config({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "token-producer", "parameters": {"estimate": estimate}},
                    {"type": "approx-prefix-cache-producer", "parameters": {"autoTune": False, **producer}},
                    {"type": "prefix-cache-scorer"}]}), seed=0)


def media_chat(*parts, text="") -> Request:
    content = ([{"type": "text", "text": text}] if text else []) + [
        {"type": f"{kind}_url", f"{kind}_url": {"url": url}} for kind, url in parts]
    return Request.from_openai_body(body(messages=[{"role": "user", "content": content}]))


def placeholders(url: str, count: int) -> bytes:
    return struct.pack("<I", xxhash.xxh64_intdigest(url.encode()) & 0xFFFFFFFF) * count


def hashes_of(stream: bytes) -> list[list[int]]:
    return [picker_block_hashes(MODEL, stream, 64, 2048)]


# estimate_test.go@v0.10.0 (llm-d-router, pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer):
# the test, its estimateConfig in the JSON names the loader reads, the part and the placeholder count it
# asserts. Its PNG is 64x32 (here one of the same size). Left out: the tests whose counts come from
# x-llm-d-video-* headers (HeaderMetadataOverridesDefaults, HeaderFPSStridedMode, SampledIgnoresHeaderFPS,
# HeaderRespectsMaxVideoTokens, and TemporalMergeAndMinFrames' 1 s case), which a workload line cannot carry;
# TemporalMergeAndMinFrames' 10 s header is the default duration, so that case stands.
UPSTREAM_ESTIMATES = [
    ("TestEstimateBackend_ChatImageWeightingDistinct", {}, ("image", IMAGE_URL), 640 * 360 // 1024),
    ("TestEstimateBackend_ChatImageWeightingDistinct", {}, ("image", PNG_64X32), 2),
    ("TestImageEstimator_StaticMode", {"image": {"mode": "static", "static": {"staticToken": 7}}},
     ("image", PNG_64X32), 7),
    ("TestImageEstimator_CustomFactor", {"image": {"dynamic": {"factor": 2048}}}, ("image", IMAGE_URL),
     640 * 360 // 2048),
    ("TestImageEstimator_CustomDefaultResolution", {"image": {"defaultResolution": {"width": 1024, "height": 1024}}},
     ("image", IMAGE_URL), 1024 * 1024 // 1024),
    ("TestVideoEstimator_Default", {}, ("video", VIDEO_URL), 10 * 2 * (640 * 360 // 1024)),
    ("TestVideoEstimator_NoHeadersUseDefaults", {}, ("video", VIDEO_URL), 10 * 2 * (640 * 360 // 1024)),
    ("TestVideoEstimator_StaticTokensPerFrame",
     {"video": {"tokensPerFrame": {"mode": "static", "static": {"numTokensPerFrame": 100}}}}, ("video", VIDEO_URL),
     10 * 2 * 100),
    ("TestVideoEstimator_DynamicFactor",
     {"video": {"tokensPerFrame": {"mode": "dynamic", "dynamic": {"factor": 2048}}}}, ("video", VIDEO_URL),
     10 * 2 * (640 * 360 // 2048)),
    ("TestVideoEstimator_SampledFrames", {"video": {
        "defaultDuration": 8, "frames": {"mode": "sampled", "sampled": {"sampleFPS": 2}},
        "tokensPerFrame": {"mode": "static", "static": {"numTokensPerFrame": 10}}}}, ("video", VIDEO_URL), 8 * 2 * 10),
    ("TestVideoEstimator_StridedFramesCapped", {"video": {
        "defaultDuration": 10, "frames": {"mode": "strided", "maxFrames": 16,
                                          "strided": {"defaultSourceFPS": 24, "frameStride": 4}},
        "tokensPerFrame": {"mode": "static", "static": {"numTokensPerFrame": 100}}}}, ("video", VIDEO_URL), 16 * 100),
    ("TestVideoEstimator_StridedFramesFloored", {"video": {
        "defaultDuration": 1, "frames": {"mode": "strided", "minFrames": 8,
                                         "strided": {"defaultSourceFPS": 24, "frameStride": 4}},
        "tokensPerFrame": {"mode": "static", "static": {"numTokensPerFrame": 100}}}}, ("video", VIDEO_URL), 8 * 100),
    ("TestVideoEstimator_MaxVideoTokens", {"video": {"maxVideoTokens": 500}}, ("video", VIDEO_URL), 500),
    ("TestVideoEstimator_Qwen3AndGemma4 (qwen3)", {"video": {
        "defaultResolution": {"width": 640, "height": 480}, "defaultDuration": 10,
        "tokensPerFrame": {"mode": "dynamic", "dynamic": {"factor": 1024}},
        "frames": {"mode": "sampled", "sampled": {"sampleFPS": 2}}, "maxVideoTokens": 100000}}, ("video", VIDEO_URL),
     20 * (640 * 480 // 1024)),
    ("TestVideoEstimator_Qwen3AndGemma4 (gemma4)", {"video": {
        "defaultDuration": 10, "tokensPerFrame": {"mode": "static", "static": {"numTokensPerFrame": 256}},
        "frames": {"mode": "strided", "maxFrames": 16, "strided": {"defaultSourceFPS": 24, "frameStride": 4}}}},
     ("video", VIDEO_URL), 16 * 256),
    ("TestVideoEstimator_TemporalMergeAndMinFrames (10 s)", {"video": {
        "frames": {"mode": "sampled", "minFrames": 4, "sampled": {"sampleFPS": 2, "temporalPatchSize": 2}},
        "tokensPerFrame": {"mode": "static", "static": {"numTokensPerFrame": 1}}}}, ("video", VIDEO_URL), 10),
]


@pytest.mark.parametrize("test, estimate, part, count", UPSTREAM_ESTIMATES, ids=[row[0] for row in UPSTREAM_ESTIMATES])
def test_upstreams_estimator_vectors_give_the_picker_the_same_placeholder_counts(test, estimate, part, count):
    picker = estimating_picker(estimate)
    hashed = picker.hash_plan(None).hashes(media_chat(part))
    assert hashed == hashes_of(b"user" + placeholders(part[1], count))


def test_a_token_producers_estimates_change_the_prefix_hashes_of_images_and_videos_but_not_of_text():
    # An image at 64 tokens and a video of 4 s at 30 fps keeping every 5th frame, 320x240 frames at 1024
    # pixels a token: int(4 x 30) / 5 = 24 frames of 75 tokens.
    estimate = {"image": {"mode": "static", "static": {"staticToken": 64}},
                "video": {"defaultDuration": 4, "defaultResolution": {"width": 320, "height": 240},
                          "frames": {"mode": "strided", "strided": {"defaultSourceFPS": 30, "frameStride": 5}}}}
    picker, default = estimating_picker(estimate), estimating_picker({})
    request = media_chat(("image", IMAGE_URL), ("video", VIDEO_URL), text="look")
    configured = b"userlook" + placeholders(IMAGE_URL, 64) + placeholders(VIDEO_URL, 24 * 75)
    upstream_defaults = b"userlook" + placeholders(IMAGE_URL, 225) + placeholders(VIDEO_URL, 20 * 225)
    assert picker.hash_plan(None).hashes(request) == hashes_of(configured)
    assert default.hash_plan(None).hashes(request) == hashes_of(upstream_defaults)
    # 2 + 64 + 1800 tokens in 64-token blocks, against 2 + 225 + 4500 with the defaults.
    assert picker.pick(request, pods("x")).total_blocks == 30
    assert default.pick(request, pods("x")).total_blocks == 74
    # The simulation hashes a workload once, by the picker's plan: the same blocks.
    assert prepare([request], [1], EstimateTokenizer(), 16, picker.hash_plan(16)).picker_hashes == (
        hashes_of(configured),)
    text_only = Request.from_openai_body(body(messages=[{"role": "user", "content": "look" * 100}]))
    assert picker.hash_plan(None).hashes(text_only) == default.hash_plan(None).hashes(text_only)


def test_images_in_anthropic_messages_and_tool_results_are_recounted_too():
    estimate = {"image": {"mode": "static", "static": {"staticToken": 3}}}
    data = PNG_64X32[len("data:image/png;base64,"):]
    request = Request.from_openai_body(body(messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        {"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "text", "text": "seen"}, {"type": "image", "source": {"type": "base64", "data": data}}]}]}]),
        api=MESSAGES)
    # A tool result's image is hashed as the data URL vLLM is sent (image/jpeg when no media_type).
    tool_url = "data:image/jpeg;base64," + data
    assert request.token_streams == (b"user" + placeholders(data, 2) + b"seen" + placeholders(tool_url, 2),)
    assert estimating_picker(estimate).hash_plan(None).hashes(request) == hashes_of(
        b"user" + placeholders(data, 3) + b"seen" + placeholders(tool_url, 3))


@pytest.mark.parametrize("estimate, message", [
    ({"video": {"defaultDuration": 1e290, "frames": {"sampled": {"sampleFPS": 1e10}}}},
     "plugins[0].parameters.estimate.video: defaultDuration 1e+290 x frames.sampled.sampleFPS 1e+10 is 1e+300 frames, "
     "beyond Go's 64-bit int, where upstream's count depends on the CPU"),
    ({"image": {"mode": "static", "static": {"staticToken": 6_400_000_000}}},
     "plugins[0].parameters.estimate.image: 6,400,000,000 placeholder tokens per image, more than any model's context"),
    ({"video": {"defaultDuration": 36_000, "frames": {"sampled": {"sampleFPS": 30}}}},
     "plugins[0].parameters.estimate.video: 243,000,000 placeholder tokens per video"),
])
def test_estimates_this_model_cannot_count_are_refused_with_their_place(estimate, message):
    with pytest.raises(PickerConfigError) as error:
        estimating_picker(estimate)
    assert str(error.value).startswith(message)


def test_counts_overflow_as_gos_int_arithmetic_does():
    # 2^32 x 2^32 pixels wraps Go's int to 0: the image gets the minimum of 1 token, as upstream gives it.
    picker = estimating_picker({"image": {"defaultResolution": {"width": 2 ** 32, "height": 2 ** 32}}})
    assert picker.hash_plan(None).hashes(media_chat(("image", IMAGE_URL))) == hashes_of(
        b"user" + placeholders(IMAGE_URL, 1))
