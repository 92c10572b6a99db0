"""llm-d-router v0.10.0's own vectors for the precise prefix index (block keys, matching,
events, speculative entries), as data in data/upstream-precise-vectors.json, run through
routing/picker/precise.py and the picker. The vectors the model cannot express are listed
there with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routing.picker.endpoint_picker import EndpointPicker, PodMetrics, Request
from routing.picker.precise import KvBlockIndex, block_keys, longest_prefix_scores
from routing.picker.prefix import server_block_keys
from settings.picker_config import PreciseIndex, load_endpoint_picker_config, render_endpoint_picker_config

VECTORS = json.loads((Path(__file__).parent / "data" / "upstream-precise-vectors.json").read_text())


def tokens_of(vector: dict) -> list[int]:
    if "tokens" in vector:
        return vector["tokens"]
    first, last = vector["tokens_range"]
    return list(range(first, last + 1))


@pytest.mark.parametrize("vector", VECTORS["block_keys"], ids=lambda vector: vector["source"].split()[-1])
def test_block_keys(vector):
    keys = block_keys(tokens_of(vector), vector["model"], vector["block_size"], vector["hash_seed"])
    if "keys" in vector:
        assert keys == vector["keys"]
    assert len(keys) == vector.get("key_count", len(keys))


def test_block_key_assertions():
    models, chained, extras = VECTORS["block_key_assertions"]
    tokens = list(range(1, 17))
    first = {model: block_keys(tokens, model, 16, "test-seed")[0] for model in models["models"]}
    assert len(set(first.values())) == len(first) and 0 not in first.values()
    assert block_keys(tokens, "gpt-4", 16, "test-seed")[0] == first["gpt-4"]
    assert block_keys(tokens, "gpt-4", 16, "other-seed")[0] != first["gpt-4"]

    tokens = list(range(1, 513))
    assert block_keys(tokens, "test-model", 32, "test-seed")[0] != block_keys(tokens, "test-model", 16, "test-seed")[0]
    assert not set(block_keys(tokens, "test-model", 256, "test-seed")) & set(block_keys(tokens, "test-model", 16,
                                                                                         "test-seed"))
    with_parent = block_keys(tokens, "test-model", 256, "test-seed", parent=999999)
    assert len(with_parent) == 2 and with_parent[0] != block_keys(tokens, "test-model", 256, "test-seed")[0]

    tokens = list(range(1, 65))
    text_only = block_keys(tokens, "model", 16, "test")
    with_image = block_keys(tokens, "model", 16, "test", extras=extras["extras"])
    assert with_image[:2] == text_only[:2] and with_image[2] != text_only[2] and with_image[3] != text_only[3]


@pytest.mark.parametrize("vector", VECTORS["longest_prefix"], ids=lambda vector: vector["source"].split()[-1])
def test_longest_prefix_scores(vector):
    holders = {int(key): [tuple(entry) for entry in entries] for key, entries in vector["holders"].items()}
    assert longest_prefix_scores(vector["keys"], holders, vector["tier_weights"]) == vector["scores"]


@pytest.mark.parametrize("case", VECTORS["matched_blocks"][0]["cases"], ids=lambda case: case["name"])
def test_matched_blocks(case):
    index = KvBlockIndex()
    for key, pods in case["holders"].items():
        for pod in pods:
            index.stored(pod, [int(key)])
    matched = [0, 0]
    index.match(VECTORS["matched_blocks"][0]["keys"], {"A": 0, "B": 1}, matched, now=0.0)
    assert matched[0] == case["A"]


@pytest.mark.parametrize("vector", VECTORS["index"], ids=lambda vector: vector["source"].split()[0])
def test_index_events(vector):
    keys = block_keys(list(range(1, 65)), "test-model", 16)
    index = KvBlockIndex()
    for kind, pod in vector["steps"]:
        if kind == "stored":
            index.stored(pod, keys)
        elif kind == "stored-child-only":
            index.stored(pod, keys[1:], keys[0])
        else:
            index.cleared(pod)
    for key in keys:
        held = [pod for pod in ("pod-a", "pod-cleared", "pod-kept") if index.holds(key, pod, now=0.0)]
        assert held == vector["holders_after"]


@pytest.mark.parametrize("vector", VECTORS["speculative"], ids=lambda vector: vector["source"].split()[-1])
def test_speculative_entries(vector):
    precise = PreciseIndex(16, "tiny", "http://vllm", speculative=vector["speculative_indexing"])
    config = load_endpoint_picker_config(render_endpoint_picker_config({"prefix": 1}, precise))
    picker = EndpointPicker(config, seed=0, engine_tokens=lambda request: [list(range(1, 33))])
    chosen = picker.pick(Request(model="tiny", prompt="x"), [PodMetrics("pod-a"), PodMetrics("pod-b")]).pod
    keys = server_block_keys(list(range(1, 33)), 16)  # the picker keys blocks as the simulated servers do
    assert all(picker.prefix_index.holds(key, chosen, now=0.0) for key in keys) == vector["entered_for_chosen_pod"]


def test_every_vector_left_out_says_why():
    for entry in VECTORS["not_expressible"]:
        assert entry["source"] and len(entry["why"]) > 40
