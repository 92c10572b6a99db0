"""serve's side of the precise index: event maps in vLLM 0.32's wire form (kv_events.py's
BlockStored, BlockRemoved, AllBlocksCleared) translated to the router's keys as the llm-d
router's pool does, and the feed the picker drains. tests/e2e/test_precise_routing_on_real_vllm.py runs the
same path on real vLLM servers' events."""

from __future__ import annotations

from routing.live.kv_events import EventSource, EventTranslator, LiveEventLog, SourceState, rendered_token_ids
from routing.picker.endpoint_picker import KvEvent
from routing.picker.precise import block_keys

TOKENS = list(range(1, 257))


def state(name: str = "vllm-a") -> SourceState:
    return SourceState(EventSource(name, "ipc:///tmp/x.sock", f"kv@{name}@tiny"))


def stored(hashes, parent, tokens):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": 128, "lora_id": None, "medium": "GPU", "lora_name": None}


def test_stored_blocks_get_the_routers_keys_chained_from_the_parents():
    translator, source = EventTranslator(128), state()
    first = translator.translate(source, stored([11], None, TOKENS[:128]))
    second = translator.translate(source, stored([12], 11, TOKENS[128:]))
    assert first == KvEvent("vllm-a", "stored", block_keys(TOKENS[:128], "tiny", 128), None)
    assert second.keys == block_keys(TOKENS, "tiny", 128)[1:] and second.parent == first.keys[0]


def test_a_block_whose_parent_was_never_seen_is_dropped_and_counted():
    translator, source = EventTranslator(128), state()
    assert translator.translate(source, stored([12], 11, TOKENS[128:])) is None
    assert source.dropped == 1


def test_removed_and_cleared_name_the_routers_keys():
    translator, source = EventTranslator(128), state()
    keys = translator.translate(source, stored([11, 12], None, TOKENS)).keys
    assert translator.translate(source, {"type": "BlockRemoved", "block_hashes": [12, 99], "medium": "GPU"}) == \
        KvEvent("vllm-a", "removed", [keys[1]])
    assert translator.translate(source, {"type": "AllBlocksCleared"}) == KvEvent("vllm-a", "cleared")
    assert (source.stored, source.removed, source.cleared) == (2, 1, 1)


def test_the_log_gives_each_cursor_the_events_up_to_a_time_once():
    log = LiveEventLog()
    cursor = log.cursor()
    log.publish(1.0, [KvEvent("a", "cleared")], 0.001)
    log.publish(2.0, [KvEvent("b", "cleared")], 0.003)
    assert log.drain(cursor, 1.5) == [KvEvent("a", "cleared")]
    assert log.drain(cursor, 3.0) == [KvEvent("b", "cleared")] and log.drain(cursor, 3.0) == []
    assert log.delay_figures()["batches"] == 2


def test_render_answers_give_one_token_list_per_prompt():
    assert rendered_token_ids([{"token_ids": [1, 2]}, {"token_ids": [3]}]) == [[1, 2], [3]]
    assert rendered_token_ids({"token_ids": [4]}) == [[4]]
