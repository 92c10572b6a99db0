"""The endpoint-picker model: each scorer, their combination, the pick, and what it remembers."""

from collections import Counter

import pytest

from routing.picker.endpoint_picker import (WEIGHT_NAMES, EndpointPicker, PickerConfigError, PodMetrics, Request,
                                            RoundRobinPicker)
from settings.picker_config import load_endpoint_picker_config

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
# The picker hashes pseudo-tokens of 4 bytes in blocks of at least 64 of them: 256 characters.
BLOCK_CHARS = 64 * 4


def request(text: str, lora: str | None = None) -> Request:
    return Request(model=MODEL, prompt=text, lora=lora)


def idle(*names: str, **metrics) -> list[PodMetrics]:
    return [PodMetrics(name=name, **metrics) for name in names]


def blocks(*letters: str) -> str:
    """A prompt of whole picker blocks, one letter per block (so blocks differ by letter)."""
    return "".join(letter * BLOCK_CHARS for letter in letters)


def prefix_picker(seed: int = 0, **producer_parameters) -> EndpointPicker:
    """A picker with only the prefix scorer, its producer tuned with `producer_parameters`."""
    return EndpointPicker(load_endpoint_picker_config({
        "apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "approx-prefix-cache-producer", "parameters": producer_parameters},
                    {"type": "prefix-cache-scorer"}]}), seed=seed)


def scores_of(weights, pods, prompt="hello") -> dict:
    return EndpointPicker(weights, seed=0).pick(request(prompt), pods).scores


# -- single scorers ---------------------------------------------------------------------------

def test_queue_scores_min_max_normalised_shortest_queue_best():
    pods = [PodMetrics("a", waiting=0), PodMetrics("b", waiting=5), PodMetrics("c", waiting=10)]
    assert dict(scores_of({"queue": 1}, pods)["queue-scorer"]) == {"a": 1.0, "b": 0.5, "c": 0.0}


def test_queue_scores_all_equal_queues_are_neutral_one():
    pods = [PodMetrics("a", waiting=7), PodMetrics("b", waiting=7)]
    assert dict(scores_of({"queue": 1}, pods)["queue-scorer"]) == {"a": 1.0, "b": 1.0}


def test_running_requests_uses_running_not_waiting():
    pods = [PodMetrics("a", running=2, waiting=9), PodMetrics("b", running=6, waiting=0)]
    assert dict(scores_of({"runningRequests": 1}, pods)["running-requests-size-scorer"]) == {"a": 1.0, "b": 0.0}


def test_kv_cache_is_one_minus_usage_and_not_normalised():
    pods = [PodMetrics("a", kv_usage=0.2), PodMetrics("b", kv_usage=0.4)]
    got = scores_of({"kvCache": 1}, pods)["kv-cache-utilization-scorer"]
    assert got["a"] == pytest.approx(0.8) and got["b"] == pytest.approx(0.6)


@pytest.mark.parametrize("pod, expected", [
    (PodMetrics("p", running_loras=frozenset({"sql"}), max_lora=1), 1.0),  # active, even when full
    (PodMetrics("p", running_loras=frozenset({"chat"}), max_lora=2), 0.8),  # room for one more adapter
    (PodMetrics("p", running_loras=frozenset({"chat"}), waiting_loras=frozenset({"sql"}), max_lora=2), 0.6),
    (PodMetrics("p", running_loras=frozenset({"chat", "code"}), max_lora=2), 0.0),  # full, not queued
    # The capacity test adds the two set sizes, so an adapter both running and waiting counts twice.
    (PodMetrics("p", running_loras=frozenset({"chat"}), waiting_loras=frozenset({"chat"}), max_lora=2), 0.0),
])
def test_lora_affinity_rules(pod, expected):
    decision = EndpointPicker({"loraAffinity": 1}, seed=0).pick(request("hi", lora="sql"), [pod])
    assert decision.scores["lora-affinity-scorer"]["p"] == expected


def test_lora_affinity_targets_the_model_when_no_adapter_is_named():
    pod = PodMetrics("p", running_loras=frozenset({MODEL}), max_lora=1)
    assert EndpointPicker({"loraAffinity": 1}, seed=0).pick(request("hi"), [pod]).scores["lora-affinity-scorer"]["p"] == 1.0


def test_prefix_scores_matched_over_total_blocks_after_the_first_request():
    picker = EndpointPicker({"prefix": 1}, seed=0)
    first = picker.pick(request(blocks("a", "b", "c", "d")), idle("x", "y"))
    assert dict(first.match_blocks) == {"x": 0, "y": 0} and first.total_blocks == 4
    second = picker.pick(request(blocks("a", "b", "z", "z")), idle("x", "y"))
    other = "y" if first.pod == "x" else "x"
    assert second.match_blocks[first.pod] == 2 and second.match_blocks[other] == 0
    assert second.scores["prefix-cache-scorer"][first.pod] == 0.5 and second.pod == first.pod


def test_prefix_final_partial_block_counts_in_the_total():
    picker = EndpointPicker({"prefix": 1}, seed=0)
    picker.pick(request(blocks("a") + "tail"), idle("x"))
    decision = picker.pick(request(blocks("a") + "TAIL"), idle("x"))
    # 64 full pseudo-tokens + 1 partial: two blocks, of which only the first matches.
    assert decision.total_blocks == 2 and decision.match_blocks["x"] == 1
    assert decision.scores["prefix-cache-scorer"]["x"] == 0.5


def test_prefix_differs_per_model_name():
    picker = EndpointPicker({"prefix": 1}, seed=0)
    picker.pick(Request(model="model-a", prompt=blocks("a", "b")), idle("x"))
    assert picker.pick(Request(model="model-b", prompt=blocks("a", "b")), idle("x")).match_blocks["x"] == 0


@pytest.mark.parametrize("pod_block_size, auto_tune, configured, expected_blocks", [
    (16, True, 16, 6),     # vLLM's 16 is clamped up to 64 tokens: 384 tokens -> 6 blocks
    (128, True, 16, 3),    # autoTune takes the pod's 128
    (None, True, 16, 6),   # no cache_config_info: configured 16, clamped to 64
    (128, False, 32, 6),   # no autoTune: configured 32, clamped to 64; the pod's 128 is ignored
    (128, False, 192, 2),  # no autoTune: configured 192 is above the floor and used as is
])
def test_prefix_block_size_autotune_and_64_token_floor(pod_block_size, auto_tune, configured, expected_blocks):
    picker = prefix_picker(autoTune=auto_tune, blockSizeTokens=configured)
    prompt = "x" * (384 * 4)  # 384 pseudo-tokens
    assert picker.pick(request(prompt), idle("p", block_size=pod_block_size)).total_blocks == expected_blocks


def test_prefix_block_size_comes_from_the_first_candidate_when_pods_disagree():
    prompt = "x" * (384 * 4)
    picker = EndpointPicker({"prefix": 1}, seed=0)
    pods = [PodMetrics("a", block_size=128), PodMetrics("b", block_size=16)]
    assert picker.pick(request(prompt), pods).total_blocks == 3
    assert picker.pick(request(prompt), list(reversed(pods))).total_blocks == 6


def test_choose_picks_what_pick_picks_with_the_same_effect_on_later_picks():
    # Shared and unique prefixes onto three pods: prefix matches and no-hit-LRU's memory both
    # carry from pick to pick, so a choose that recorded less than pick would drift apart.
    prompts = [blocks(tenant, "q", str(n % 10)) for n in range(40) for tenant in "abcd"[n % 4]]
    pods = idle("p0", "p1", "p2", block_size=16)
    by_pick, by_choose = EndpointPicker({"prefix": 3, "queue": 2}, seed=5), EndpointPicker({"prefix": 3, "queue": 2}, seed=5)
    plan = by_choose.hash_plan(16)
    picked = [by_pick.pick(request(prompt), pods).pod for prompt in prompts]
    chosen = [by_choose.choose(request(prompt), pods, (plan, plan.hashes(request(prompt)))) for prompt in prompts]
    assert chosen == picked
    assert len(set(picked)) == 3


def test_precomputed_hashes_are_used_only_by_the_plan_they_were_made_with():
    # Handed another prompt's hashes, a picker that uses them shows it in its pick: warm's
    # blocks are on p0, cold's on no pod, so using warm's sends cold to p0 every time, and
    # hashing cold itself leaves a tie that seeds break both ways.
    warm, cold = request(blocks("a", "b")), request(blocks("z", "y"))
    pods = idle("p0", "p1", block_size=16)
    plan_of_64 = prefix_picker(autoTune=False, blockSizeTokens=64).hash_plan(16)
    handed = (plan_of_64, plan_of_64.hashes(warm))
    for block_size_tokens, used in ((64, True), (128, False)):
        picks = set()
        for seed in range(20):
            picker = prefix_picker(seed, autoTune=False, blockSizeTokens=block_size_tokens)
            picker.choose(warm, pods[:1])
            picks.add(picker.choose(cold, pods, handed))
        assert (picks == {"p0"}) is used, (block_size_tokens, picks)


def test_prefix_max_prefix_tokens_caps_the_hashed_blocks():
    picker = prefix_picker(maxPrefixTokensToMatch=128)
    assert picker.pick(request(blocks("a", "b", "c", "d")), idle("p")).total_blocks == 2


def test_prefix_match_stops_at_the_first_block_no_pod_holds_and_credits_every_holder():
    picker = EndpointPicker({"prefix": 1}, seed=0)
    picker.pick(request(blocks("a", "b", "c")), idle("x"))
    picker.pick(request(blocks("a")), idle("y"))
    decision = picker.pick(request(blocks("a", "b", "q", "c")), idle("x", "y"))
    # Block 0 is on both pods, block 1 only on x, block 2 on none: the walk stops there.
    assert dict(decision.match_blocks) == {"x": 2, "y": 1}


def test_prefix_index_evicts_least_recently_used_blocks_at_num_gpu_blocks():
    picker = EndpointPicker({"prefix": 1}, seed=0)
    small = idle("x", num_gpu_blocks=2)
    picker.pick(request(blocks("a", "b")), small)
    picker.pick(request(blocks("c", "d")), small)  # fills the 2-entry LRU: a, b evicted
    both = small + idle("y", num_gpu_blocks=2)
    assert picker.pick(request(blocks("a", "b")), both).match_blocks["x"] == 0

    roomy = EndpointPicker({"prefix": 1}, seed=0)
    roomy.pick(request(blocks("a", "b")), idle("x", num_gpu_blocks=4))
    roomy.pick(request(blocks("c", "d")), idle("x", num_gpu_blocks=4))
    assert roomy.pick(request(blocks("a", "b")), idle("x", num_gpu_blocks=4)).match_blocks["x"] == 2


def test_prefix_index_refreshes_recency_when_a_block_is_added_again():
    picker = EndpointPicker({"prefix": 1}, seed=0)
    pod = idle("x", num_gpu_blocks=3)
    picker.pick(request(blocks("a")), pod)
    picker.pick(request(blocks("b")), pod)
    picker.pick(request(blocks("a")), pod)  # a is now the most recent
    picker.pick(request(blocks("c", "d")), pod)  # a fourth entry evicts the least recently used: b
    assert picker.prefix_index.blocks_held("x") == 3
    assert picker.pick(request(blocks("a")), idle("x", "y")).match_blocks["x"] == 1
    assert picker.pick(request(blocks("b")), idle("x", "y")).match_blocks["x"] == 0


def test_prefix_lru_capacity_is_fixed_when_the_pod_is_first_seen():
    picker = EndpointPicker({"prefix": 1}, seed=0)
    picker.pick(request(blocks("a")), idle("x", num_gpu_blocks=2))
    picker.pick(request(blocks("b", "c")), idle("x", num_gpu_blocks=1000))  # the new capacity is ignored
    assert picker.prefix_index.capacity("x") == 2
    assert picker.pick(request(blocks("a")), idle("x")).match_blocks["x"] == 0


def test_prefix_lru_capacity_without_autotune_is_lru_capacity_per_server():
    picker = prefix_picker(autoTune=False, lruCapacityPerServer=5)
    picker.pick(request(blocks("a")), idle("x", num_gpu_blocks=2))
    assert picker.prefix_index.capacity("x") == 5


def test_prefix_request_longer_than_the_lru_leaves_its_blocks_matchable_like_upstream():
    # Upstream adds every hash to the pod's LRU (evicting its own head) before adding them
    # all to the hash->pods map, so the map keeps blocks the LRU has already dropped.
    picker = EndpointPicker({"prefix": 1}, seed=0)
    picker.pick(request(blocks("a", "b", "c")), idle("x", num_gpu_blocks=2))
    assert picker.prefix_index.blocks_held("x") == 2
    assert picker.pick(request(blocks("a", "b", "c")), idle("x", "y")).match_blocks["x"] == 3


def test_lru_cold_requests_rotate_never_used_first_then_least_recently_used():
    picker = EndpointPicker({"lru": 1}, seed=0)
    pods = idle("p0", "p1", "p2")
    first = picker.pick(request(blocks("a")), pods)
    assert dict(first.scores["no-hit-lru-scorer"]) == {"p0": 1.0, "p1": 0.5, "p2": 0.0}
    picked = [first.pod] + [picker.pick(request(blocks(letter)), pods).pod for letter in "bcdef"]
    assert picked == ["p0", "p1", "p2", "p0", "p1", "p2"]


def test_lru_warm_requests_score_half_everywhere_and_do_not_move_the_lru():
    picker = EndpointPicker({"lru": 1, "prefix": 1}, seed=0)
    pods = idle("p0", "p1", "p2")
    assert picker.pick(request(blocks("a")), pods).pod == "p0"  # cold: p0 never used, first
    warm = picker.pick(request(blocks("a", "b")), pods)
    assert dict(warm.scores["no-hit-lru-scorer"]) == {"p0": 0.5, "p1": 0.5, "p2": 0.5} and warm.pod == "p0"
    cold = picker.pick(request(blocks("z")), pods)
    # p0 took the only cold request so far; the warm one did not count.
    assert dict(cold.scores["no-hit-lru-scorer"]) == {"p1": 1.0, "p2": 0.5, "p0": 0.0}


def test_lru_rank_counts_pods_that_left_the_candidate_list():
    picker = EndpointPicker({"lru": 1}, seed=0)
    for letter in "abc":
        picker.pick(request(blocks(letter)), idle("p0", "p1", "p2"))
    # LRU is p0, p1, p2 (oldest first); with p0 gone upstream still ranks p1 at 1, p2 at 2.
    assert dict(picker.pick(request(blocks("d")), idle("p1", "p2")).scores["no-hit-lru-scorer"]) == {"p1": 0.0, "p2": 0.0}


def test_lru_single_candidate_scores_one():
    assert scores_of({"lru": 1}, idle("only"))["no-hit-lru-scorer"]["only"] == 1.0


# -- combination and picking --------------------------------------------------------------------

def test_total_is_the_weighted_sum_without_normalising():
    pods = [PodMetrics("a", waiting=0, kv_usage=0.5), PodMetrics("b", waiting=4, kv_usage=0.1)]
    decision = EndpointPicker({"queue": 2, "kvCache": 2}, seed=0).pick(request("q"), pods)
    assert decision.totals["a"] == pytest.approx(2 * 1 + 2 * 0.5)
    assert decision.totals["b"] == pytest.approx(2 * 0 + 2 * 0.9)
    assert decision.pod == "a"
    assert EndpointPicker({"queue": 1, "kvCache": 4}, seed=0).pick(request("q"), pods).pod == "b"


def test_scores_are_clamped_to_zero_one_before_weighting():
    pods = [PodMetrics("over", kv_usage=1.5), PodMetrics("under", kv_usage=-0.5)]
    decision = EndpointPicker({"kvCache": 3}, seed=0).pick(request("q"), pods)
    assert decision.scores["kv-cache-utilization-scorer"]["over"] == pytest.approx(-0.5)  # raw score kept for inspection
    assert decision.totals == {"over": 0.0, "under": 3.0}


def test_zero_weights_are_not_scored_and_do_not_sway_the_pick():
    pods = [PodMetrics("busy", waiting=50, kv_usage=0.0), PodMetrics("idle", waiting=0, kv_usage=0.3)]
    decision = EndpointPicker({"queue": 0, "kvCache": 1}, seed=0).pick(request("q"), pods)
    assert set(decision.scores) == {"kv-cache-utilization-scorer"} and decision.pod == "busy"


def test_prefix_weight_zero_keeps_no_prefix_state():
    picker = EndpointPicker({"prefix": 0, "queue": 3, "kvCache": 2}, seed=0)
    picker.pick(request(blocks("a")), idle("x"))
    decision = picker.pick(request(blocks("a")), idle("x", "y"))
    assert decision.total_blocks == 0 and dict(decision.match_blocks) == {}


def test_ties_are_broken_uniformly_at_random():
    picker = EndpointPicker({"queue": 2, "kvCache": 2}, seed=11)
    counts = Counter(picker.pick(request("q"), idle("a", "b", "c")).pod for _ in range(3000))
    assert set(counts) == {"a", "b", "c"}
    assert all(900 <= n <= 1100 for n in counts.values()), counts


def test_the_same_seed_gives_the_same_picks_and_another_seed_does_not():
    def picks(seed):
        picker = EndpointPicker({"queue": 1}, seed=seed)
        return [picker.pick(request("q"), idle("a", "b")).pod for _ in range(64)]
    assert picks(5) == picks(5)
    assert picks(5) != picks(6)


def test_a_higher_total_always_wins_regardless_of_seed():
    pods = [PodMetrics("a", waiting=1), PodMetrics("b", waiting=0)]
    assert {EndpointPicker({"queue": 1}, seed=s).pick(request("q"), pods).pod for s in range(50)} == {"b"}


# -- the score breakdown ----------------------------------------------------------------------------

def test_breakdown_shows_each_scorers_raw_weight_and_weighted_value_per_pod():
    pods = [PodMetrics("a", waiting=0, kv_usage=0.5), PodMetrics("b", waiting=4, kv_usage=1.5)]
    decision = EndpointPicker({"queue": 2, "kvCache": 3}, seed=0).pick(request("q"), pods)
    breakdown = decision.breakdown()
    assert breakdown.chosen == "a" and [pod.pod for pod in breakdown.pods] == ["a", "b"]
    a, b = breakdown.pods
    assert [(part.scorer, part.raw, part.weight, part.weighted) for part in a.contributions] == [
        ("queue-scorer", 1.0, 2.0, 2.0), ("kv-cache-utilization-scorer", 0.5, 3.0, 1.5)]
    # b's raw KV score is -0.5 (usage above 1): shown raw, counted clamped at 0.
    assert [(part.raw, part.weighted) for part in b.contributions] == [(0.0, 0.0), (-0.5, 0.0)]
    assert a.total == 3.5 and b.total == 0.0
    assert breakdown.runner_up == "b" and breakdown.margin == 3.5


def test_breakdown_totals_are_the_totals_the_picker_maximised():
    picker = EndpointPicker({"queue": 2, "kvCache": 2, "prefix": 3, "lru": 1}, seed=3)
    pods = [PodMetrics("a", waiting=1, kv_usage=0.25), PodMetrics("b", kv_usage=0.75), PodMetrics("c", waiting=3)]
    for prompt in (blocks("a", "b"), blocks("a", "c"), blocks("z")):
        decision = picker.pick(request(prompt), pods)
        for pod in decision.breakdown().pods:
            assert pod.total == pytest.approx(sum(part.weighted for part in pod.contributions))
            assert pod.total == decision.totals[pod.pod]


def test_breakdown_of_a_random_tie_break_has_zero_margin_and_the_chosen_pod_first():
    chosen = set()
    for seed in range(20):
        breakdown = EndpointPicker({"queue": 1}, seed=seed).pick(request("q"), idle("a", "b", "c")).breakdown()
        assert breakdown.pods[0].pod == breakdown.chosen and breakdown.margin == 0.0
        assert breakdown.runner_up != breakdown.chosen
        chosen.add(breakdown.chosen)
    assert chosen == {"a", "b", "c"}


def test_breakdown_with_one_candidate_has_no_runner_up():
    breakdown = EndpointPicker({"queue": 1}, seed=0).pick(request("q"), idle("only")).breakdown()
    assert breakdown.runner_up is None and breakdown.margin is None and breakdown.pods[0].total == 1.0


def test_breakdown_as_dict_is_json_ready():
    import json

    decision = EndpointPicker({"queue": 2}, seed=0).pick(request("q"), [PodMetrics("a"), PodMetrics("b", waiting=2)])
    assert json.loads(json.dumps(decision.breakdown().as_dict())) == {
        "chosen": "a", "runnerUp": "b", "margin": 2.0,
        "pods": [{"pod": "a", "total": 2.0, "scorers": [{"scorer": "queue-scorer", "raw": 1.0, "weight": 2.0, "weighted": 2.0}]},
                 {"pod": "b", "total": 0.0, "scorers": [{"scorer": "queue-scorer", "raw": 0.0, "weight": 2.0, "weighted": 0.0}]}]}


def test_round_robin_decisions_have_an_empty_breakdown():
    breakdown = RoundRobinPicker().pick(request("q"), idle("a", "b")).breakdown()
    assert breakdown.chosen == "a" and breakdown.pods == () and breakdown.margin is None


# -- configuration errors --------------------------------------------------------------------------

def test_nonzero_predicted_latency_is_refused_with_the_reason():
    with pytest.raises(PickerConfigError, match="predictedLatency=1.*latency-predictor"):
        EndpointPicker({"predictedLatency": 1})
    EndpointPicker({"predictedLatency": 0, "queue": 1})  # zero is simply off


def test_unknown_and_negative_weights_are_named():
    with pytest.raises(PickerConfigError) as error:
        EndpointPicker({"prefx": 3, "queue": -1})
    assert "prefx=3" in str(error.value) and "queue=-1" in str(error.value) and "prefix" in str(error.value)


def test_weight_names_are_the_crd_fields():
    assert WEIGHT_NAMES == ("queue", "kvCache", "prefix", "runningRequests", "loraAffinity", "predictedLatency", "lru")


def test_picking_from_no_pods_is_an_error():
    with pytest.raises(ValueError, match="no candidate pods"):
        EndpointPicker({"queue": 1}).pick(request("q"), [])


# -- the round-robin baseline -------------------------------------------------------------------------

def test_round_robin_takes_pods_in_turn():
    picker = RoundRobinPicker()
    assert [picker.pick(request("q"), idle("a", "b", "c")).pod for _ in range(5)] == ["a", "b", "c", "a", "b"]


def test_picks_on_many_pods_follow_shuffle_then_stable_sort_and_keep_the_random_stream():
    # Totals mostly unique (the winner is certain, the shuffle's draws are still taken), some
    # tied; the same pod list is passed again after a change in place, which must be rescored.
    import random as random_module

    rng = random_module.Random(5)
    for seed in range(10):
        picker = EndpointPicker({"queue": 1, "kvCache": 1, "prefix": 0}, seed=seed)
        reference = random_module.Random(seed)
        pods = [PodMetrics(f"pod-{i}") for i in range(70)]
        for _ in range(30):
            count = rng.randrange(1, 71)
            tied = rng.random() < 0.3
            pods[:count] = [PodMetrics(f"pod-{i}", waiting=rng.randrange(2),
                                       kv_usage=rng.choice([0.0, 0.5]) if tied else rng.random())
                            for i in range(count)]
            candidates = pods[:count] if rng.random() < 0.5 else pods
            decision = picker.pick(Request("m", "x"), candidates)
            assert all(decision.scores["kv-cache-utilization-scorer"][pod.name] == 1.0 - pod.kv_usage
                       for pod in candidates)
            order = [pod.name for pod in candidates]
            reference.shuffle(order)
            order.sort(key=lambda name: -decision.totals[name])
            assert decision.pod == order[0]
