"""The simulated vLLM server's batching and KV blocks, on cases small enough to work out by hand.

Blocks of 4 tokens; a latency of 1 s per step plus 0.1 s per prompt token computed, so the
step times below can be checked with pen and paper.
"""

from __future__ import annotations

import pytest

from routing.simulation.engine import BlockPool, CapacityError, Engine, EngineRequest, Published
from routing.simulation.latency import EngineLimits, LatencyModel

LATENCY = LatencyModel(step_s=1.0, prefill_token_s=0.1, decode_seq_s=0.0, overhead_s=0.0)
ROOMY = EngineLimits(max_num_seqs=8, max_num_batched_tokens=64)


def keys(*names: str) -> tuple[int, ...]:
    """Prefix keys: block i's key stands for blocks 0..i, so prompts sharing keys share a prefix.
    Non-negative 64-bit keys, as prefix.server_block_keys makes them."""
    return tuple(hash(names[: index + 1]) % 2 ** 64 for index in range(len(names)))


def gauges(published: Published) -> tuple[int, int, float]:
    return published.waiting, published.running, published.kv_usage


def run(engine: Engine, arrivals: list[tuple[float, EngineRequest]]) -> dict[int, tuple[float, float]]:
    """Drives one engine: (first token, finish) time per request index."""
    first, done = {}, {}
    pending = sorted(arrivals, key=lambda pair: pair[0])
    now = 0.0
    while pending or engine.busy:
        if not engine.busy:
            now = max(now, pending[0][0])
        while pending and pending[0][0] <= now:
            engine.add(pending.pop(0)[1])
        now += engine.schedule(now)
        engine.finish_step(now, lambda seq, t: first.__setitem__(seq.index, t),
                           lambda seq, t: done.__setitem__(seq.index, t))
    return {index: (first[index], done[index]) for index in done}


def test_the_null_block_and_partial_blocks_count_against_capacity():
    # 4 blocks, one of them the null block: 3 usable. A 9-token prompt needs 3 (the third
    # holds one token) and fills the pool: usage 3/3.
    engine = Engine("a", 4, 4, ROOMY, LATENCY)
    engine.add(EngineRequest(0, 9, keys("x", "y"), 2, 0.0))
    engine.schedule(0.0)
    assert engine.pool.usage == 1.0
    with pytest.raises(CapacityError, match="needs 4 KV blocks of 4 tokens, more than the 3"):
        engine.check_fits(12, 1)


def test_a_request_waits_when_blocks_run_out_and_runs_when_they_are_freed():
    # 5 blocks (4 usable). A: 8 tokens = 2 blocks, 3 output tokens (a third block once it
    # decodes past token 8). B: 8 tokens needs 2 more; only 1 is left while A runs.
    engine = Engine("a", 4, 5, ROOMY, LATENCY)
    times = run(engine, [(0.0, EngineRequest(0, 8, keys("a1", "a2"), 3, 0.0)),
                         (0.5, EngineRequest(1, 8, keys("b1", "b2"), 1, 0.5))])
    # A: prefill step 0..1.8 (1 s + 8 × 0.1) samples token 1; decode steps end at 2.8 and 3.8.
    assert times[0] == (pytest.approx(1.8), pytest.approx(3.8))
    # At 1.8 B needs 2 blocks, A holds 2 (3 from its first decode step): B waits until A
    # finishes at 3.8, then prefills alone (1.8 s).
    assert times[1][0] == pytest.approx(5.6)
    assert (engine.hits, engine.queries) == (0, 16)


def test_a_running_requests_blocks_are_not_evicted_but_a_finished_ones_are():
    # 4 usable blocks. A (8 tokens, 2 blocks, long reply) runs; B (8 other tokens) must not
    # evict A's cached blocks: it waits. C shares A's prefix once A is done and hits it
    # only if A's blocks survived B.
    engine = Engine("a", 4, 5, EngineLimits(8, 64), LATENCY)
    a = EngineRequest(0, 8, keys("p", "q"), 6, 0.0)
    engine.add(a)
    engine.schedule(0.0)
    engine.finish_step(1.8, lambda *_: None, lambda *_: None)
    b = EngineRequest(1, 12, keys("r", "s", "t"), 1, 1.8)
    engine.add(b)
    engine.schedule(1.8)
    assert list(engine.waiting) == [b] and engine.running == [a]
    assert set(engine.pool.cached_blocks().values()) >= set(a.blocks[:2])


def test_a_request_that_arrives_during_a_step_is_in_the_gauges_only_after_the_next_step():
    # vLLM's engine core takes new requests in between steps: the step running when B arrives
    # publishes gauges without it, and the next step admits it and publishes it running.
    engine = Engine("a", 4, 64, ROOMY, LATENCY)
    engine.add(EngineRequest(0, 8, keys("a1", "a2"), 3, 0.0))
    assert engine.schedule(0.0) == pytest.approx(1.8)
    engine.add(EngineRequest(1, 8, keys("b1", "b2"), 3, 0.5))
    engine.finish_step(1.8, lambda *_: None, lambda *_: None)
    assert gauges(engine.published) == (0, 1, pytest.approx(2 / 63))
    engine.schedule(1.8)
    engine.finish_step(3.6, lambda *_: None, lambda *_: None)
    # A decodes into a third block, B holds two.
    assert gauges(engine.published) == (0, 2, pytest.approx(5 / 63))


def test_a_freed_cached_prefix_is_shared_then_evicted_least_recently_freed_first():
    # 6 blocks (5 usable), block 4. A caches p,q and finishes; B (12 tokens r,s,t + a
    # partial block) needs 4 blocks: 3 never used, then the LRU cached one, A's tail q
    # (freed before p). C = p,q,... then hits only p.
    engine = Engine("a", 4, 6, ROOMY, LATENCY)
    run(engine, [(0.0, EngineRequest(0, 8, keys("p", "q"), 1, 0.0))])
    run(engine, [(10.0, EngineRequest(1, 13, keys("r", "s", "t"), 1, 10.0))])
    hits_before = engine.hits
    run(engine, [(20.0, EngineRequest(2, 9, keys("p", "q"), 1, 20.0))])
    assert engine.hits - hits_before == 4


def test_a_fully_cached_prompt_still_computes_its_last_block():
    engine = Engine("a", 4, 16, ROOMY, LATENCY)
    run(engine, [(0.0, EngineRequest(0, 8, keys("p", "q"), 1, 0.0))])
    times = run(engine, [(5.0, EngineRequest(1, 8, keys("p", "q"), 1, 5.0))])
    # Hits stop one block short of the last token: 4 of 8 tokens, and the step computes 4.
    assert (engine.hits, engine.queries) == (4, 16)
    assert times[1][0] == pytest.approx(5.0 + 1.0 + 0.4)


def test_a_concurrent_request_shares_blocks_a_running_one_has_computed():
    engine = Engine("a", 4, 16, ROOMY, LATENCY)
    # B arrives while A decodes: A's prompt blocks are cached from the step that computed them.
    run(engine, [(0.0, EngineRequest(0, 9, keys("p", "q"), 5, 0.0)),
                 (2.0, EngineRequest(1, 9, keys("p", "q"), 1, 2.0))])
    assert engine.hits == 8


def test_a_prefill_pays_attention_over_the_tokens_before_it_cached_or_not():
    # 0.01 s per attended token pair. A alone: 8 tokens attend over 8 × 4 pairs, 1 + 0.8 + 0.32 s.
    # B shares A's first block (4 tokens hit) and computes 4 more over 4 × (4 + 2) pairs.
    engine = Engine("a", 4, 16, ROOMY, LatencyModel(step_s=1.0, prefill_token_s=0.1, decode_seq_s=0.0,
                                                    overhead_s=0.0, prefill_attention_s=0.01))
    times = run(engine, [(0.0, EngineRequest(0, 8, keys("p", "q"), 1, 0.0))])
    assert times[0][0] == pytest.approx(2.12)
    times = run(engine, [(10.0, EngineRequest(1, 8, keys("p", "r"), 1, 10.0))])
    assert times[1][0] == pytest.approx(10.0 + 1.0 + 0.4 + 0.24)


def test_batching_limits_hold_requests_in_the_waiting_queue():
    # One sequence at a time: B waits for A's whole reply.
    engine = Engine("a", 4, 64, EngineLimits(max_num_seqs=1, max_num_batched_tokens=64), LATENCY)
    times = run(engine, [(0.0, EngineRequest(0, 4, keys("a"), 2, 0.0)), (0.0, EngineRequest(1, 4, keys("b"), 1, 0.0))])
    assert times[0] == (pytest.approx(1.4), pytest.approx(2.4))
    assert times[1][0] == pytest.approx(2.4 + 1.4)


def test_chunked_prefill_spreads_a_long_prompt_over_steps_within_the_token_budget():
    engine = Engine("a", 4, 64, EngineLimits(max_num_seqs=8, max_num_batched_tokens=8), LATENCY)
    times = run(engine, [(0.0, EngineRequest(0, 20, keys("a", "b", "c", "d", "e"), 1, 0.0))])
    # 8 + 8 + 4 tokens: three steps of 1.8, 1.8 and 1.4 s.
    assert times[0][0] == pytest.approx(5.0)


def test_preemption_frees_the_newest_running_request_and_it_is_counted_once():
    # 4 usable blocks, block 4. A and B (4 tokens each, long replies) each grow a block per 4
    # tokens; when the pool runs dry the newest (B) is preempted, recomputed later, and its
    # prefix lookup is not counted twice.
    engine = Engine("a", 4, 5, ROOMY, LATENCY)
    a, b = EngineRequest(0, 4, keys("a"), 6, 0.0), EngineRequest(1, 4, keys("b"), 6, 0.0)
    times = run(engine, [(0.0, a), (0.0, b)])
    assert (a.preemptions, b.preemptions) == (0, 1)
    assert times[1][1] > times[0][1]
    assert engine.queries == 8 and engine.finished == 2


def test_block_pool_usage_counts_cached_free_blocks_as_free():
    pool = BlockPool(5)
    blocks = pool.allocate(2)
    pool.cache_prefix(blocks, (11,), 0, 1)
    assert pool.usage == pytest.approx(0.5)
    pool.release(blocks)
    assert pool.usage == 0.0 and pool.cached_blocks() == {11: blocks[0]}
