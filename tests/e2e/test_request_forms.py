"""Every request form the upstream picker routes, sent through `serve` to two real vLLM servers
with the real `openai` client; and the tiny model's tokenizer counting what the servers count."""

from __future__ import annotations

import io
import json
import time
import urllib.error
import urllib.request

import anthropic
import openai
import pytest

from routing.lab.vllm_server import SERVED_MODEL, VllmPair
from routing.live.serve import CACHED_TOKENS_HINT, DECISION_HEADER, EXPLAIN_HEADER, ROUTED_HEADER, start_gateway
from routing.picker.endpoint_picker import Request
from routing.picker.prefix import HFTokenizerFile, server_tokens
from routing.workloads import seed_shared

SEED = 5
PNG_URL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
           "RU5ErkJggg==")


@pytest.fixture
def gateway(pair: VllmPair):
    with start_gateway(pair.backends, seed=SEED) as running:
        yield running


@pytest.fixture
def client(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="not-checked", max_retries=0, timeout=120)


def routed(raw) -> str:
    return raw.headers[ROUTED_HEADER]


def test_completion_forms_are_routed_and_served(client, gateway, pair):
    backends = set(pair.backends)
    text = client.completions.with_raw_response.create(model=SERVED_MODEL, prompt="the pod and the gateway",
                                                       max_tokens=2)
    several = client.completions.with_raw_response.create(model=SERVED_MODEL, prompt=["first prompt", "second"],
                                                          max_tokens=2)
    token_ids = client.completions.with_raw_response.create(model=SERVED_MODEL, prompt=[40, 41, 42, 43, 44],
                                                            max_tokens=2)
    salted = client.completions.with_raw_response.create(model=SERVED_MODEL, prompt="tenant text", max_tokens=2,
                                                         extra_body={"cache_salt": "tenant-a"})
    assert {routed(raw) for raw in (text, several, token_ids, salted)} <= backends
    assert len(several.parse().choices) == 2  # vLLM ran both prompts
    assert token_ids.parse().usage.prompt_tokens == 5
    stream = client.completions.create(model=SERVED_MODEL, prompt="streamed", max_tokens=3, stream=True)
    assert sum(1 for _ in stream) >= 1
    assert len(gateway.gateway.history) == 5


def test_chat_forms_are_routed_and_served(client, gateway, pair):
    parts = client.chat.completions.with_raw_response.create(
        model=SERVED_MODEL, max_tokens=2,
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": [{"type": "text", "text": "name one"}, {"type": "text", "text": "factor"}]}])
    assert routed(parts) in pair.backends and parts.parse().choices
    stream = client.chat.completions.create(model=SERVED_MODEL, max_tokens=3, stream=True,
                                            messages=[{"role": "user", "content": "hello"}])
    assert sum(1 for _ in stream) >= 1
    # An image part: the picker routes it (as upstream does, with placeholder tokens); this
    # text-only model then refuses it, and that refusal is vLLM's, passed back.
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=SERVED_MODEL, max_tokens=2, messages=[{"role": "user", "content": [
            {"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": PNG_URL}}]}])
    assert len(gateway.gateway.history) == 3


def post(url: str, body: dict) -> tuple[int, dict, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, dict(response.headers), json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.load(error)


def test_responses_messages_generate_and_render_are_routed_and_served(client, gateway, pair):
    response = client.responses.with_raw_response.create(model=SERVED_MODEL, input="name one factor",
                                                         instructions="be brief", max_output_tokens=16)
    assert routed(response) in pair.backends and response.parse().output
    # Anthropic Messages with Anthropic's own client, pointed at serve.
    claude = anthropic.Anthropic(base_url=gateway.url, api_key="not-checked", max_retries=0, timeout=120)
    message = claude.messages.with_raw_response.create(
        model=SERVED_MODEL, max_tokens=2, system="be brief",
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert message.headers[ROUTED_HEADER] in pair.backends and message.parse().content is not None
    counted = claude.messages.with_raw_response.count_tokens(
        model=SERVED_MODEL, messages=[{"role": "user", "content": "count these"}])
    assert counted.headers[ROUTED_HEADER] in pair.backends and counted.parse().input_tokens > 0
    # vLLM's native token-in/token-out and render endpoints (served with --enable-scale-out) have
    # no client package: the wire format, as vLLM documents it.
    for path, body in (("/inference/v1/generate", {"model": SERVED_MODEL, "token_ids": [40, 41, 42, 43],
                                                   "sampling_params": {"max_tokens": 2}}),
                       ("/v1/completions/render", {"model": SERVED_MODEL, "prompt": "render this"}),
                       ("/v1/chat/completions/render", {"model": SERVED_MODEL,
                                                        "messages": [{"role": "user", "content": "render"}]})):
        status, headers, answer = post(gateway.url + path, body)
        assert headers[ROUTED_HEADER] in pair.backends, path
        assert status == 200, (path, answer)
    assert len(gateway.gateway.history) == 6


def test_embeddings_are_routed_as_upstream_routes_them(client, gateway, pair):
    # Whether this generative model embeds is vLLM's business; the request is picked for first.
    try:
        raw = client.embeddings.with_raw_response.create(model=SERVED_MODEL, input=["embed me", "and me"])
        assert routed(raw) in pair.backends
    except openai.APIStatusError as error:
        assert error.response.headers[ROUTED_HEADER] in pair.backends
    assert len(gateway.gateway.history) == 1


def test_unrouted_paths_pass_through_and_the_breakdown_comes_when_asked(client, gateway, pair):
    assert [model.id for model in client.models.list()] == [SERVED_MODEL]
    body = json.dumps({"model": SERVED_MODEL, "prompt": "the pod"}).encode()
    request = urllib.request.Request(gateway.url + "/tokenize", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.load(response)["tokens"] == pair.tokenizer.encode("the pod")
    with urllib.request.urlopen(gateway.url + "/metrics", timeout=30) as response:
        assert b"vllm:num_requests_running" in response.read()
    assert not gateway.gateway.history
    raw = client.completions.with_raw_response.create(model=SERVED_MODEL, prompt="explain this pick", max_tokens=1,
                                                      extra_headers={EXPLAIN_HEADER: "true"})
    decision = json.loads(raw.headers[DECISION_HEADER])
    assert decision["chosen"] == routed(raw) and {pod["pod"] for pod in decision["pods"]} == set(pair.backends)
    assert {part["scorer"] for part in decision["pods"][0]["scorers"]} == {
        "queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"}


def test_the_shipped_tokenizer_counts_what_the_server_counts(pair):
    tokenizer = HFTokenizerFile(pair.servers[0].model_dir)
    prompts = ["Guideline 12: consider queue depth 345 and KV cache 6789.", "rule 0.1 keep answers grounded 2026",
               "You are an expert cloud infrastructure assistant", "x-17-gateway-3 ; 42"]
    assert [tokenizer.encode(prompt) for prompt in prompts] == [pair.tokenizer.encode(prompt) for prompt in prompts]
    messages = [{"role": "system", "content": "Be brief 12."},
                {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there 345"}]}]
    body = json.dumps({"model": SERVED_MODEL, "messages": messages, "add_generation_prompt": True}).encode()
    request = urllib.request.Request(pair.servers[0].url + "/tokenize", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        served = json.load(response)["tokens"]
    chat = Request.from_openai_body({"model": SERVED_MODEL, "messages": messages})
    assert server_tokens(tokenizer, chat) == [served]


def test_serve_logs_each_request_with_the_cached_prompt_tokens_vllm_reports(pair):
    log = io.StringIO()
    prompt = seed_shared(SERVED_MODEL)[0]["prompt"]  # ~1,250 tokens: several full KV blocks to cache
    with start_gateway(pair.backends, seed=SEED, request_log=log) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="not-checked", max_retries=0, timeout=120)
        first, again = (client.completions.with_raw_response.create(model=SERVED_MODEL, prompt=prompt, max_tokens=2)
                        for _ in range(2))
        chat = client.chat.completions.with_raw_response.create(
            model=SERVED_MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=2, stream=True,
            stream_options={"include_usage": True})
        chat_usage = [chunk.usage for chunk in chat.parse() if chunk.usage is not None][-1]
        no_usage = client.completions.with_raw_response.create(model=SERVED_MODEL, prompt=prompt, max_tokens=2,
                                                               stream=True)
        list(no_usage.parse())
        deadline = time.monotonic() + 30  # a hang guard: the last line follows the stream's end
        while log.getvalue().count("\n") < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    *lines, hint = log.getvalue().splitlines()
    usages = [first.parse().usage, again.parse().usage, chat_usage]
    for line, raw, usage in zip(lines, (first, again, chat), usages):
        assert f" -> {routed(raw)}: 200 in " in line
        assert line.endswith(f"s, {usage.prompt_tokens_details.cached_tokens} of {usage.prompt_tokens} prompt tokens "
                             "cached")
    assert routed(again) == routed(first) and usages[1].prompt_tokens_details.cached_tokens > 0
    # A stream whose client did not ask for usage: the line has no cached tokens, and the hint says why, once.
    assert lines[3].startswith("serve: ") and f" -> {routed(no_usage)}: 200 in " in lines[3]
    assert lines[3].endswith("s") and hint == CACHED_TOKENS_HINT
