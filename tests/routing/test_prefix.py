"""Pseudo-tokens and hashes the picker uses; tokenizers and block keys the simulated servers use."""

import json
import struct

import pytest
import xxhash
from hypothesis import given, strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

from routing.picker.endpoint_picker import Request
from routing.picker.prefix import (EstimateTokenizer, HFTokenizerFile, TokenizerFileError, go_json, picker_block_hashes,
                                   picker_block_size, pseudo_token_bytes, pseudo_tokens, server_block_keys,
                                   server_tokens)
from routing.simulation.fleet import SimulatedServer


def test_pseudo_tokens_pack_four_utf8_bytes_little_endian_zero_padded():
    assert pseudo_token_bytes("abcde") == b"abcde\0\0\0"
    assert pseudo_tokens("abcd") == [int.from_bytes(b"abcd", "little")]
    assert pseudo_tokens("é") == [int.from_bytes("é".encode() + b"\0\0", "little")]  # bytes, not characters
    assert pseudo_tokens("") == []


def test_picker_block_size_floor_and_autotune():
    assert picker_block_size(16, 16, auto_tune=True) == 64
    assert picker_block_size(16, 128, auto_tune=True) == 128
    assert picker_block_size(256, 16, auto_tune=False) == 256
    assert picker_block_size(100, None, auto_tune=True) == 100


def test_picker_block_hashes_follow_the_chained_xxhash64_formula():
    data = b"a" * 256 + b"b" * 4
    h0 = xxhash.xxh64_intdigest(b"my-model")
    h1 = xxhash.xxh64_intdigest(struct.pack("<QQ", xxhash.xxh64_intdigest(b"a" * 256), h0))
    h2 = xxhash.xxh64_intdigest(struct.pack("<QQ", xxhash.xxh64_intdigest(b"b" * 4), h1))
    assert picker_block_hashes("my-model", data, block_tokens=64, max_blocks=10).tolist() == [h1, h2]


def test_picker_block_hashes_include_the_partial_final_block_and_respect_the_cap():
    assert len(picker_block_hashes("m", b"x" * 256, 64, 10)) == 1
    assert len(picker_block_hashes("m", b"x" * 260, 64, 10)) == 2
    assert len(picker_block_hashes("m", b"x" * 2560, 64, 3)) == 3
    assert picker_block_hashes("m", b"", 64, 10).tolist() == []


def test_picker_block_hashes_depend_on_model_salt_and_every_earlier_block():
    base = picker_block_hashes("m", b"a" * 256 + b"c" * 256, 64, 10)
    assert picker_block_hashes("other", b"a" * 256 + b"c" * 256, 64, 10)[0] != base[0]
    assert picker_block_hashes("m", b"a" * 256 + b"c" * 256, 64, 10, cache_salt="s")[0] != base[0]
    changed_head = picker_block_hashes("m", b"b" * 256 + b"c" * 256, 64, 10)
    assert changed_head[1] != base[1]  # same second block, different history


@given(st.text(max_size=600), st.text(max_size=300), st.text(max_size=300))
def test_picker_hashes_are_equal_exactly_where_the_bytes_so_far_are(shared, tail_a, tail_b):
    a, b = pseudo_token_bytes(shared + tail_a), pseudo_token_bytes(shared + tail_b)
    ha, hb = picker_block_hashes("m", a, 64, 100), picker_block_hashes("m", b, 64, 100)
    for i in range(min(len(ha), len(hb))):
        end_a, end_b = min((i + 1) * 256, len(a)), min((i + 1) * 256, len(b))
        assert (ha[i] == hb[i]) == (a[:end_a] == b[:end_b])


def test_server_block_keys_cover_full_blocks_only_and_chain():
    assert len(server_block_keys(list(range(47)), 16)) == 2
    a = server_block_keys([1] * 16 + [2] * 16 + [3] * 16, 16)
    b = server_block_keys([1] * 16 + [9] * 16 + [3] * 16, 16)
    assert a[0] == b[0] and a[1] != b[1] and a[2] != b[2]  # block 2 equal in content, not in history


def test_go_json_is_compact_sorted_and_html_escaped():
    assert go_json([{"b": 1, "a": "x<y>&z"}]) == '[{"a":"x\\u003cy\\u003e\\u0026z","b":1}]'
    assert go_json({"k": "é"}) == '{"k":"é"}'


def test_estimate_tokenizer_is_about_four_characters_per_token_and_says_so():
    tokenizer = EstimateTokenizer()
    assert len(tokenizer.encode("x" * 400)) == 100
    assert "estimated" in tokenizer.description and "--tokenizer" in tokenizer.description


# -- tokenizer.json files -----------------------------------------------------------------------------

def write_tokenizer(path, bos: bool = False):
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(["the cache the prefix the pod"] * 20,
                                  trainers.BpeTrainer(vocab_size=60, special_tokens=["<unk>", "<s>"]))
    if bos:
        tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer.save(str(path))
    return tokenizer


def test_hf_tokenizer_file_reads_a_file_or_a_directory(tmp_path):
    reference = write_tokenizer(tmp_path / "tokenizer.json")
    expected = reference.encode("the prefix cache").ids
    assert HFTokenizerFile(tmp_path / "tokenizer.json").encode("the prefix cache") == expected
    from_dir = HFTokenizerFile(tmp_path)
    assert from_dir.encode("the prefix cache") == expected
    assert str(tmp_path / "tokenizer.json") in from_dir.description


def test_hf_tokenizer_file_adds_special_tokens_like_vllm_completions(tmp_path):
    write_tokenizer(tmp_path / "tokenizer.json", bos=True)
    assert HFTokenizerFile(tmp_path).encode("the pod")[0] == 1


CHAT_TEMPLATE = ("{% for message in messages %}<s>{{ message['role'] }} {{ message['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant {% endif %}")


def test_chat_requests_are_counted_through_the_models_chat_template(tmp_path):
    reference = write_tokenizer(tmp_path / "tokenizer.json", bos=True)
    (tmp_path / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    tokenizer = HFTokenizerFile(tmp_path)
    chat = Request.from_openai_body({"model": "m", "messages": [
        {"role": "the", "content": "cache"}, {"role": "pod", "content": [{"type": "text", "text": "the"},
                                                                       {"type": "text", "text": "prefix"}]}]})
    rendered = "<s>the cache\n<s>pod the\nprefix\n<s>assistant "
    assert tokenizer.render_chat(chat.server_inputs[0].chat) == rendered
    # Rendered, then tokenized without adding special tokens: the template's <s> are the only ones.
    assert server_tokens(tokenizer, chat) == [reference.encode(rendered, add_special_tokens=False).ids]
    assert "chat template" in tokenizer.description


def test_the_chat_template_may_live_in_tokenizer_config(tmp_path):
    write_tokenizer(tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    assert HFTokenizerFile(tmp_path).chat_template == CHAT_TEMPLATE


def test_server_tokens_are_per_sequence_and_token_ids_pass_through(tmp_path):
    reference = write_tokenizer(tmp_path / "tokenizer.json")
    tokenizer = HFTokenizerFile(tmp_path)
    several = Request.from_openai_body({"model": "m", "prompt": ["the pod", "the cache"]})
    assert server_tokens(tokenizer, several) == [reference.encode("the pod").ids, reference.encode("the cache").ids]
    assert server_tokens(tokenizer, Request.from_openai_body({"model": "m", "prompt": [5, 6, 7]})) == [[5, 6, 7]]
    # Without a template (or a real tokenizer), a chat counts as its flattened text.
    chat = Request.from_openai_body({"model": "m", "messages": [{"role": "user", "content": "the pod"}]})
    assert server_tokens(tokenizer, chat) == [reference.encode("userthe pod").ids]
    assert server_tokens(EstimateTokenizer(), chat) == [EstimateTokenizer().encode("userthe pod")]


def test_hf_tokenizer_file_errors_name_the_path_and_the_fix(tmp_path):
    with pytest.raises(TokenizerFileError, match=r"no tokenizer\.json.*Pass a tokenizer\.json"):
        HFTokenizerFile(tmp_path)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(TokenizerFileError, match=r"bad\.json: not a Hugging Face tokenizer\.json"):
        HFTokenizerFile(tmp_path / "bad.json")


# -- the simulated vLLM server's prefix cache ----------------------------------------------------------

def serve(server: SimulatedServer, tokens: list[int]) -> int:
    """Serves `tokens` on `server`; the prefix-cache hits (tokens) the request added to its counter."""
    hits = server.hits
    server.serve(len(tokens), server_block_keys(tokens, server.block_size))
    return server.hits - hits


def test_server_counts_queries_in_tokens_and_hits_only_whole_cached_blocks():
    server = SimulatedServer("s", block_size=16, capacity_blocks=None)
    assert (serve(server, list(range(50))), server.queries) == (0, 50)
    shared_then_new = list(range(40)) + [999] * 10  # shares 40 tokens: 2 whole blocks
    assert serve(server, shared_then_new) == 32
    assert (server.requests, server.hits, server.queries) == (2, 32, 100)


def test_server_always_computes_the_last_token_of_a_fully_cached_prompt():
    server = SimulatedServer("s", block_size=16, capacity_blocks=None)
    serve(server, list(range(64)))
    assert serve(server, list(range(64))) == 48  # ((64 - 1) // 16) * 16
    assert serve(server, list(range(65))) == 64


def test_server_evicts_least_recently_used_blocks_and_the_tail_of_a_request_first():
    server = SimulatedServer("s", block_size=4, capacity_blocks=3)
    serve(server, [1, 1, 1, 1, 2, 2, 2, 2, 0])  # 2 blocks cached
    serve(server, [7, 7, 7, 7, 0])  # 3 blocks: full
    serve(server, [8, 8, 8, 8, 0])  # evicts the oldest: the first request's *tail* block
    assert server.cached_blocks == 3
    assert serve(server, [1, 1, 1, 1, 2, 2, 2, 2, 0]) == 4  # its head survived


def test_server_reports_cache_config_and_idle_load_to_the_picker():
    metrics = SimulatedServer("s", block_size=128, capacity_blocks=900).metrics()
    assert (metrics.name, metrics.block_size, metrics.num_gpu_blocks) == ("s", 128, 900)
    assert (metrics.waiting, metrics.running, metrics.kv_usage) == (0, 0, 0.0)


@pytest.mark.parametrize("kwargs, message", [({"block_size": 0}, "block_size=0"),
                                             ({"capacity_blocks": 0}, "capacity_blocks=0")])
def test_server_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SimulatedServer("s", **kwargs)
