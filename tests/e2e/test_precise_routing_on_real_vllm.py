"""Precise prefix-cache routing on the two real vLLM CPU servers: `serve --prefix-index precise`
subscribes to both servers' KV-cache events and, once one server's cache is reset, sends the
prefix it held to the server that still holds part of it, where the approximate index, which
remembers only its own picks, sends it back to the emptied one."""

from __future__ import annotations

import json
import time
import urllib.request

import openai
import pytest

from routing import __main__ as cli
from routing.lab.vllm_server import SERVED_MODEL, VllmPair
from routing.live.serve import DECISION_HEADER, EXPLAIN_HEADER, ROUTED_HEADER, start_gateway
from routing.live.verify import reset_prefix_cache

pytestmark = pytest.mark.e2e

SEED = 3
# Three full blocks of 128 of the tiny model's tokens; half of it, one.
PREAMBLE = "You are a careful assistant. The following is the shared system prompt for every question. " * 12


def complete(base_url: str, prompt: str, explain: bool = False) -> tuple[str | None, dict | None]:
    """A completion by the real openai client: the backend serve chose, and its explanation."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="not-checked", max_retries=0, timeout=120)
    reply = client.completions.with_raw_response.create(
        model=SERVED_MODEL, prompt=prompt, max_tokens=4, extra_headers={EXPLAIN_HEADER: "true"} if explain else None)
    decision = reply.headers.get(DECISION_HEADER)
    return reply.headers.get(ROUTED_HEADER), json.loads(decision) if decision else None


def health(gateway) -> dict:
    with urllib.request.urlopen(gateway.url + "/health", timeout=10) as response:
        return json.load(response)


def reset_then_ask_again(pair: VllmPair, prefix_index: str) -> tuple[str, str | None, dict | None, dict]:
    """Through serve: the preamble's first question goes to some server X; the other server Y
    computes half the preamble (sent to it directly, as another gateway replica's traffic
    would); X's cache is reset and X serves an unrelated request (vLLM publishes the reset
    with its next step's events). Returns X, where the second question went, its explanation
    and serve's /health."""
    pair.reset_prefix_caches()
    with start_gateway(pair.backends, seed=SEED, prefix_index=prefix_index) as gateway:
        first, _ = complete(gateway.url, PREAMBLE + "What is the first question?")
        other = next(name for name in pair.backends if name != first)
        complete(pair.backends[other], PREAMBLE[:len(PREAMBLE) // 2])
        reset_prefix_cache(pair.backends[first])
        complete(pair.backends[first], "An unrelated question.")
        time.sleep(0.2)  # events arrive within milliseconds; this leaves no doubt
        second, explained = complete(gateway.url, PREAMBLE + "What is the second question?", explain=True)
        return first, second, explained, health(gateway)


def test_precise_routing_follows_a_reset_where_the_approximate_index_walks_into_it(pair):
    first, second, _, _ = reset_then_ask_again(pair, "approximate")
    assert second == first  # its index still credits the emptied server with the whole preamble

    first, second, explained, status = reset_then_ask_again(pair, "precise")
    assert second != first
    index = explained["index"]
    assert index["matchedBlocks"] == {first: 0, second: 1} and index["requestBlocks"] == 3
    sources = status["kvEvents"]["sources"]
    assert all(source["batches"] >= 1 and source["blocksStored"] >= 1 for source in sources.values()), sources
    assert sources[first]["cleared"] >= 1
    delay = status["kvEvents"]["deliveryDelaySeconds"]
    assert 0 <= delay["p50"] < 0.5, delay


def test_serve_names_the_backend_whose_events_it_cannot_find(pair, capsys):
    status = cli.main(["serve", "--backend", f"a={pair.servers[0].url}", "--backend", "b=http://127.0.0.1:9",
                       "--prefix-index", "precise", "--port", "18999"])
    assert status == 2
    assert "backend b (http://127.0.0.1:9): GET /kv_event_sources failed" in capsys.readouterr().err
