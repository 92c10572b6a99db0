"""Routing on what each pod holds: the precise index fed by the pods' KV-cache events, in the
picker and in the simulation, against the approximate index on the same traffic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routing.picker.endpoint_picker import EndpointPicker, KvEvent, PodMetrics, Request
from routing.picker.precise import KvBlockIndex
from routing.picker.prefix import EstimateTokenizer, server_block_keys, server_tokens
from routing.simulation.engine import BlockPool as PythonBlockPool
from routing.simulation.fleet import KvEventLog, SimulatedServer
from routing.simulation.prediction import Load, PredictError, run_prediction
from routing.simulation.load_plan import plan_load
from routing.workloads import Arrival, PodRestart, WeightChange, to_requests
from settings.picker_config import PreciseIndex, load_endpoint_picker_config, render_endpoint_picker_config

MODEL = "tiny"
BLOCK = 16
WEIGHTS = {"queue": 2, "kvCache": 2, "prefix": 3}


def precise_picker(weights=WEIGHTS, seed=0, speculative=False) -> EndpointPicker:
    precise = PreciseIndex(BLOCK, MODEL, "http://vllm", speculative=speculative)
    config = load_endpoint_picker_config(render_endpoint_picker_config(weights, precise))
    tokenizer = EstimateTokenizer()
    return EndpointPicker(config, seed=seed, engine_tokens=lambda request: server_tokens(tokenizer, request))


def request(text: str) -> Request:
    return Request(model=MODEL, prompt=text)


def keys_of(text: str) -> list[int]:
    (tokens,) = server_tokens(EstimateTokenizer(), request(text))
    return server_block_keys(tokens, BLOCK)


PODS = [PodMetrics("pod-0", block_size=BLOCK), PodMetrics("pod-1", block_size=BLOCK)]
PREFIX = "the shared system prompt of a long conversation " * 12


# -- the index -----------------------------------------------------------------------------------

def test_a_pods_match_is_its_run_of_blocks_from_the_first():
    index = KvBlockIndex()
    index.stored("a", [1, 2, 3])
    index.stored("b", [1], None)
    index.stored("b", [3], 2)  # a's block 2 maps its parent: taken, though b holds no block 2
    index.stored("b", [5], 4)  # no pod ever stored 4: dropped, as upstream drops it
    matched = [0, 0]
    index.match([1, 2, 3, 4], {"a": 0, "b": 1}, matched, now=0.0)
    assert matched == [3, 1]
    assert index.dropped_events == 1


def test_a_block_no_pod_holds_loses_its_mapping_and_a_cleared_pod_keeps_it():
    index = KvBlockIndex()
    index.stored("a", [1, 2])
    index.cleared("a")
    assert index.stored("a", [3], 2)  # Clear keeps the mapping
    index.removed("a", [3])
    assert not index.stored("a", [4], 3)  # the last holder evicted it: the mapping went with it


def test_a_pod_missing_an_early_block_gets_no_credit_past_it():
    index = KvBlockIndex()
    index.stored("a", [1, 2, 3])
    index.removed("a", [2])
    matched = [0]
    index.match([1, 2, 3], {"a": 0}, matched, now=0.0)
    assert matched == [1]


def test_cleared_forgets_the_pod_and_its_speculative_entries():
    index = KvBlockIndex()
    index.stored("a", [1, 2])
    index.speculate("a", [1, 2, 3], until=10.0, now=0.0)
    index.cleared("a")
    matched = [0]
    index.match([1, 2, 3], {"a": 0}, matched, now=1.0)
    assert matched == [0] and index.blocks_held("a") == 0


def test_speculative_entries_last_their_ttl_from_the_first_pick_that_made_them():
    index = KvBlockIndex()
    index.speculate("a", [1, 2], until=2.0, now=0.0)
    index.speculate("a", [1, 2], until=3.5, now=1.5)  # upstream keeps the first expiry
    for now, expected in ((1.9, 2), (2.0, 0)):
        matched = [0]
        index.match([1, 2], {"a": 0}, matched, now=now)
        assert matched == [expected], now


# -- the picker ----------------------------------------------------------------------------------

class ListFeed:
    """A feed of hand-written events, all delivered at time 0."""

    def __init__(self):
        self.log = KvEventLog()

    def cursor(self):
        return self.log.cursor()

    def drain(self, cursor, until):
        return self.log.drain(cursor, until)

    def publish(self, *events: KvEvent) -> None:
        self.log.publish(events[0].pod, 0.0, [(event.kind, event.keys, event.parent) for event in events])


def test_precise_avoids_a_pod_whose_cache_was_reset_where_approximate_walks_into_it():
    """A constructed trace: pod-0 served the long prompt and pod-1 a shorter one with its start, so
    both indexes credit pod-0 with more; then pod-0's cache is reset. The approximate index
    still sends the prompt to pod-0; the precise one, told by pod-0's AllBlocksCleared, sends
    it to pod-1, the one pod that holds any of it."""
    long_prompt, short_prompt = PREFIX + "and the question asked today", PREFIX[:len(PREFIX) // 2]
    approximate = EndpointPicker(WEIGHTS, seed=0)
    precise = precise_picker()
    feed = ListFeed()
    precise.attach(feed)
    # The history both pickers saw: their own picks (approximate) and the pods' events (precise).
    assert approximate.pick(request(long_prompt), PODS[:1]).pod == "pod-0"
    assert approximate.pick(request(short_prompt), PODS[1:]).pod == "pod-1"
    feed.publish(KvEvent("pod-0", "stored", keys_of(long_prompt)))
    feed.publish(KvEvent("pod-1", "stored", keys_of(short_prompt)))
    precise.advance(0.0)
    assert precise.pick(request(long_prompt), PODS).pod == "pod-0"  # before the reset both agree

    feed.publish(KvEvent("pod-0", "cleared"))
    precise.advance(0.0)
    assert approximate.pick(request(long_prompt), PODS).pod == "pod-0"
    decision = precise.pick(request(long_prompt), PODS)
    assert decision.pod == "pod-1"
    assert decision.match_blocks == {"pod-0": 0, "pod-1": len(keys_of(short_prompt))}


def test_a_picker_attached_later_knows_nothing_published_before():
    feed = ListFeed()
    feed.publish(KvEvent("pod-0", "stored", keys_of(PREFIX)))
    picker = precise_picker()
    picker.attach(feed)
    picker.advance(1.0)
    assert picker.pick(request(PREFIX), PODS).match_blocks == {"pod-0": 0, "pod-1": 0}


def test_a_stored_event_that_continues_a_chain_from_before_a_restart_is_dropped():
    """pool.go@v0.10.0 drops a BlockStored whose parent the index never saw: a restarted picker
    does not learn blocks that extend what the pod cached before it started."""
    keys = keys_of(PREFIX + "and more")
    picker = precise_picker()
    feed = ListFeed()
    picker.attach(feed)
    feed.publish(KvEvent("pod-0", "stored", keys[2:], keys[1]))
    picker.advance(0.0)
    assert picker.prefix_index.blocks_held("pod-0") == 0
    assert picker.prefix_index.dropped_events == 1


def test_speculative_indexing_credits_the_chosen_pod_until_its_events_arrive():
    picker = precise_picker(speculative=True)
    picker.attach(ListFeed())
    picker.advance(0.0)
    first = picker.pick(request(PREFIX), PODS).pod
    picker.advance(1.0)
    assert picker.pick(request(PREFIX), PODS).match_blocks[first] == len(keys_of(PREFIX))
    picker.advance(2.5)  # upstream's 2 s TTL has run out and no event came
    assert picker.pick(request(PREFIX), PODS).match_blocks == {"pod-0": 0, "pod-1": 0}


# -- the simulated servers' events -------------------------------------------------------------

@pytest.mark.parametrize("pool_type", ["python", "compiled"])
def test_the_block_pool_records_what_vllm_publishes(pool_type):
    if pool_type == "python":
        pool = PythonBlockPool(6)
    else:
        native = pytest.importorskip("routing.simulation.block_pool", exc_type=ImportError)  # compiled core only
        pool = native.BlockPool(6)
    pool.events = []
    blocks = pool.allocate(3)
    pool.cache_prefix(blocks, [11, 12], 0, 2)  # two full prompt blocks
    pool.cache_prefix(blocks, [11, 12], 2, 3)  # a block of generated tokens: no event
    pool.release(blocks)
    pool.allocate(5)  # evicts the cached blocks, least recently freed first
    pool.reset()
    # Freed tail first, so the later block is evicted first.
    assert pool.events == [("stored", [11, 12], None), ("removed", [12, 11], None), ("cleared", (), None)]


def test_a_serial_server_publishes_the_blocks_it_computes_after_its_hit():
    server = SimulatedServer("pod-0", block_size=4, capacity_blocks=3)
    server.events = []
    server.serve(12, [1, 2, 3])
    server.serve(16, [1, 2, 4, 5])
    # The request's blocks are freed tail first, so its own last block goes before its shared head.
    assert server.events == [("stored", [1, 2, 3], None), ("stored", [4, 5], 2), ("removed", [3, 5], None)]


# -- predictions ------------------------------------------------------------------------------

def timed(prompts_at, output=4):
    bodies = [{"model": MODEL, "prompt": prompt, "max_tokens": output} for _, prompt in prompts_at]
    return [Arrival(body, request, at) for body, request, (at, _) in zip(bodies, to_requests(bodies), prompts_at)]


def predict_timed(arrivals, *, precise, restarts=(), changes=(), capacity=400, seed=3):
    plan = plan_load(arrivals, seed=seed, pod_restarts=restarts, weight_changes=changes)
    load = Load(plan, tuple(arrival.output_tokens for arrival in arrivals), count_stale=not precise)
    return run_prediction([arrival.request for arrival in arrivals], replicas=2, block_size=BLOCK,
                          capacity_blocks=capacity, seed=seed, load=load,
                          precise=PreciseIndex(BLOCK, MODEL, "http://vllm") if precise else None)


def test_after_a_pod_restart_the_approximate_index_walks_into_the_emptied_pod_and_counts_stale_picks():
    arrivals = timed([(second * 0.5, PREFIX + f"question {second}") for second in range(40)])
    restart = (PodRestart(10.05, 0, 1), PodRestart(10.05, 1, 2))  # both pods: whichever held the prefix is emptied
    approximate = predict_timed(arrivals, precise=False, restarts=restart)
    assert approximate.stale.stale >= 1
    assert approximate.stale.elsewhere == 0  # nobody else held it
    precise = predict_timed(arrivals, precise=True, restarts=restart)
    assert precise.stale is None  # a precise index is never stale by this count
    assert precise.picker.hit_rate >= approximate.picker.hit_rate - 0.01


def test_without_evictions_or_restarts_there_are_no_stale_picks():
    arrivals = timed([(second * 0.5, PREFIX + f"question {second}") for second in range(20)])
    prediction = predict_timed(arrivals, precise=False, capacity=4000)
    assert prediction.stale.picks == 20 and prediction.stale.stale == 0


def test_a_picker_restart_empties_the_approximate_index_and_the_precise_one_relearns_only_new_chains():
    arrivals = timed([(second * 0.5, PREFIX + f"question {second}") for second in range(40)])
    change = (WeightChange(10.0, {}, 1),)
    for precise in (False, True):
        prediction = predict_timed(arrivals, precise=precise, changes=change)
        placements = prediction.picker.placements
        # Before the restart one pod takes the prefix; after it the new picker has to find it again.
        assert len(set(placements[:20])) == 1, precise
        assert prediction.picker.requests == 40


def test_the_precise_index_needs_the_servers_block_size():
    arrivals = timed([(0.0, PREFIX)])
    plan = plan_load(arrivals, seed=1)
    with pytest.raises(PredictError, match="--block-size 16: the precise prefix index keys blocks of 64 tokens"):
        run_prediction([arrivals[0].request], replicas=2, block_size=BLOCK, capacity_blocks=100, seed=1,
                       load=Load(plan, (4,)), precise=PreciseIndex(64, MODEL, "http://vllm"))


def test_a_serial_precise_prediction_follows_the_pods_events():
    bodies = [{"model": MODEL, "prompt": PREFIX + f"question {n}"} for n in range(6)]
    prediction = run_prediction(to_requests(bodies), replicas=2, block_size=BLOCK, capacity_blocks=1000, seed=0,
                                precise=PreciseIndex(BLOCK, MODEL, "http://vllm"))
    assert len(set(prediction.picker.placements)) == 1  # the first request's pod holds the prefix for the rest
    assert prediction.picker.hit_rate > 0.8


def test_predict_prints_stale_picks_and_the_restart_dip(tmp_path, capsys):
    from test_predict import run_cli

    path = tmp_path / "restart.jsonl"
    lines = [{"at": second * 0.25, "body": {"model": MODEL, "prompt": PREFIX + f"question {second}",
                                            "max_tokens": 4}} for second in range(120)]
    lines.insert(60, {"at": 15.0, "restart": "pod", "pod": 0})
    lines.insert(61, {"at": 15.0, "restart": "pod", "pod": 1})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    common = ("--pods", "2", "--workload", str(path), "--seed", "1", "--block-size", "16", "--capacity-blocks", "400")
    code, out, _ = run_cli(*common, capsys=capsys)
    assert code == 0
    assert "prefix index approximate" in out
    assert "Stale picks: 1 of 120 picks" in out
    assert "at 15s pod pod-0 restarts: -5 to +0s" in out
    code, out, _ = run_cli(*common, "--prefix-index", "precise", "--json", capsys=capsys)
    result = json.loads(out)
    assert result["prefixIndex"] == "precise" and "stalePicks" not in result
    assert [moment["at"] for moment in result["restarts"]] == [15.0, 15.0]


def test_compare_sets_the_precise_index_beside_the_stacks_own_at_the_block_size_each_runs_vllm_with(capsys):
    from test_predict import run_cli

    code, out, _ = run_cli("--stack", "eks", "--model", "qwen-small", "--compare", "--prefix-index", "precise",
                           "--workload", "examples/trace.jsonl", "--concurrency", "8", "--seed", "1", capsys=capsys)
    assert code == 0
    assert ("deployed: weights queue=2 kvCache=2 prefix=3, approximate prefix index, 2 pods (stack eks as its file "
            "sets it); vLLM blocks of 16 tokens") in out
    assert "proposed: weights queue=2 kvCache=2 prefix=3, precise prefix index, 2 pods (--prefix-index precise); " \
           "vLLM blocks of 64 tokens" in out


def test_a_stack_that_runs_precise_is_predicted_precise_by_default(tmp_path, capsys):
    from test_predict import run_cli

    stacks = tmp_path / "stacks"
    stacks.mkdir()
    text = (Path(__file__).parents[2] / "stacks" / "Pulumi.eks.yaml").read_text()
    (stacks / "Pulumi.eks.yaml").write_text(text.replace("config:\n", "config:\n  inference-gateway:routing:\n"
                                                                      "    prefixIndex: precise\n", 1))
    code, out, err = run_cli("--stack", "eks", "--model", "qwen-small", "--stacks-dir", str(stacks), "--seed", "1",
                             capsys=capsys)
    assert code == 0, err
    assert "prefix index precise (each pod's KV-cache events, blocks of 64 tokens" in out
    code, _, err = run_cli("--stack", "eks", "--model", "qwen-small", "--stacks-dir", str(stacks),
                           "--speculative-indexing", capsys=capsys)
    assert code == 2 and "sets them itself (routing.speculativeIndexing)" in err


@pytest.mark.parametrize("reset, still_credited", [(True, True), (False, False)])
def test_an_idle_pods_cache_reset_reaches_the_precise_index_with_its_next_step_and_a_restart_at_once(
        reset, still_credited):
    """vLLM queues AllBlocksCleared and publishes it with its next step's events (seen on vLLM
    0.32), so a reset pod that serves nothing stays credited; a restarted pod's endpoint leaves
    the pool and the precise producer clears it at once."""
    arrivals = timed([(0.0, PREFIX + "first"), (2.0, PREFIX + "second")])
    restarts = tuple(PodRestart(1.0, pod, pod, reset=reset) for pod in (0, 1))
    plan = plan_load(arrivals, seed=1, pod_restarts=restarts)
    prediction = run_prediction([arrival.request for arrival in arrivals], replicas=2, block_size=BLOCK,
                                capacity_blocks=400, seed=1, load=Load(plan, (4, 4)), explain=1,
                                precise=PreciseIndex(BLOCK, MODEL, "http://vllm"))
    first = prediction.picker.placements[0]
    credited = prediction.picker.explained.decision.match_blocks[first]
    assert (credited > 0) is still_credited
