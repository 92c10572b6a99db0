"""Block-hash traces (Mooncake's format): the reader's refusals, keys cut from ids at any block
size, and predictions on constructed traces whose hit rates are known by hand."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from routing.picker.endpoint_picker import HashPlan, PrecisePlan
from routing.picker.prefix import EstimateTokenizer
from routing.picker.traced import TracedPrompt
from routing.simulation.fleet import prepare
from routing.simulation.prediction import run_prediction
from routing.lab.trace import slice_conversations
from routing.traces import (MOONCAKE_BLOCK_TOKENS, SYNTHETIC_TOKEN_COUNT, SYNTHETIC_TOKEN_FIRST, TraceError, read_trace,
                            synthetic_tokens, write_trace as write_requests)
from routing.workloads import WorkloadError, load_arrivals

ROOT = Path(__file__).resolve().parents[2]


def write_trace(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def line(ids, length, output=8, at=None):
    value = {"input_length": length, "output_length": output, "hash_ids": ids}
    return value if at is None else {"timestamp": at, **value}


# -- the reader ----------------------------------------------------------------------------------

def test_a_trace_is_read_with_times_in_seconds_lengths_and_ids_numbered_by_first_appearance(tmp_path):
    trace = read_trace(write_trace(tmp_path / "t.jsonl", [line([7, 9], 1000, 5, at=0), line([7, 11], 600, 3, at=1500)]))
    assert [(r.at, r.prompt.length, r.prompt.ids, r.output_tokens, r.line) for r in trace.requests] == [
        (0.0, 1000, (0, 1), 5, 1), (1.5, 600, (0, 2), 3, 2)]
    assert trace.distinct_blocks == 3 and trace.repeated_share() == 0.25


@pytest.mark.parametrize("lines, message", [
    ([line([0, 1], 1000), line([2, 1], 1000)],
     "line 2: hash id 1 follows another id here and a different one on line 1"),
    ([line([0], 100), line([1, 0], 600)],
     "line 2: hash id 0 follows another id here and a different one on line 1"),
    ([line([0, 0], 1000)], "line 1: hash id 0 follows another id here and a different one on line 1"),
    ([line([0, 1], 1025)], "line 1: 2 hash_ids for input_length 1025: blocks of 512 tokens make 3"),
    ([line([0, 1, 2], 1024)], "line 1: 3 hash_ids for input_length 1024: blocks of 512 tokens make 2"),
    ([line([0], 0)], "line 1: input_length 0 must be a whole number of tokens, at least 1"),
    ([line([0], 10, output=0)], "line 1: output_length 0 must be a whole number of tokens, at least 1"),
    ([line([0], 10), {"input_length": 10, "hash_ids": [1]}], "line 2: output_length None must be"),
    ([line(["a"], 10)], "line 1: hash_ids must be a list of whole numbers of at least 0"),
    ([line([-1], 10)], "line 1: hash_ids must be a list of whole numbers of at least 0"),
    ([line([0], 10, at=-5)], "line 1: timestamp -5 must be milliseconds from the start"),
    ([line([0], 10, at=0), line([1], 10)], "line 2: has no timestamp where the first line has one"),
    ([line([0], 10), line([1], 10, at=3)], "line 2: has a timestamp where the first line has none"),
    ([line([0], 10), "{not json"], "line 2: not JSON"),
    ([line([0], 10), {"prompt": "hi"}], "line 2: has no hash_ids and input_length"),
])
def test_each_malformed_line_is_refused_with_its_number(tmp_path, lines, message):
    with pytest.raises(TraceError, match="trace .*t.jsonl " + message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(write_trace(tmp_path / "t.jsonl", lines))


def test_the_block_size_option_changes_how_many_ids_a_length_needs(tmp_path):
    path = write_trace(tmp_path / "t.jsonl", [line([0, 1, 2, 3], 1000)])
    with pytest.raises(TraceError, match="pass --trace-block-tokens"):
        read_trace(path)
    assert read_trace(path, id_tokens=256).requests[0].prompt.ids == (0, 1, 2, 3)


def test_load_arrivals_recognises_a_trace_by_its_fields(tmp_path):
    path = write_trace(tmp_path / "t.jsonl", [line([4], 300, 12, at=250)])
    (arrival,) = load_arrivals(str(path), "tiny")
    assert (arrival.at, arrival.body, arrival.output_tokens, arrival.request.model) == (
        0.25, {"model": "tiny", "max_tokens": 12}, 12, "tiny")
    assert arrival.request.traced.length == 300 and arrival.request.prompt == ""
    with pytest.raises(WorkloadError, match="line 2: hash id 4 follows"):
        load_arrivals(str(write_trace(tmp_path / "bad.jsonl", [line([4], 300), line([5, 4], 700)])))


# -- keys from ids ---------------------------------------------------------------------------------

def prompt(ids, length, id_tokens=MOONCAKE_BLOCK_TOKENS):
    return TracedPrompt(tuple(ids), length, id_tokens)


def test_an_id_is_eight_picker_blocks_and_thirty_two_vllm_blocks():
    whole = prompt([0, 1], 1024)
    assert len(whole.keys(64)) == 16 and len(whole.keys(16)) == 64
    assert len(set(whole.keys(16))) == 64


def test_prompts_sharing_ids_share_exactly_the_blocks_inside_them_at_every_size():
    one, other = prompt([0, 1, 2], 1500), prompt([0, 1, 3], 1300)
    for block in (16, 64, 96, 128, 512, 700):
        shared = sum(1 for a, b in zip(one.keys(block), other.keys(block)) if a == b)
        assert shared == 1024 // block, block


def test_the_partial_last_block_is_keyed_only_when_asked_and_by_its_length():
    short, longer = prompt([0], 100), prompt([0], 120)
    assert len(short.keys(64)) == 1 and len(short.keys(64, partial=True)) == 2
    assert short.keys(64) == longer.keys(64)
    assert short.keys(64, partial=True)[1] != longer.keys(64, partial=True)[1]
    assert prompt([0], 100).keys(64, partial=True) == short.keys(64, partial=True)


def test_max_blocks_caps_the_keys():
    assert len(prompt(range(10), 5000).keys(64, partial=True, max_blocks=20)) == 20


@given(st.lists(st.integers(0, 50), min_size=1, max_size=6, unique=True), st.integers(1, 511),
       st.sampled_from([16, 32, 48, 64, 100, 128, 512]))
def test_the_fast_path_and_the_general_one_agree(ids, tail, block):
    traced = prompt(ids, (len(ids) - 1) * 512 + tail)
    expected = [traced._key(end) for end in range(block, traced.length // block * block + 1, block)]
    assert list(traced.keys(block)) == expected


# -- predictions on constructed traces ---------------------------------------------------------------

HAND_TRACE = [line([0, 1], 1024), line([0, 1, 2], 1100), line([3, 4], 600), line([0], 512)]


def test_a_constructed_trace_is_predicted_exactly_serially(tmp_path):
    # vLLM blocks of 16: the second request hits ids 0 and 1 (1,024 tokens); the fourth its one
    # id, less the last block vLLM always computes (496). On one pod whose cache never evicts:
    # 1,520 of 3,236 tokens.
    arrivals = load_arrivals(str(write_trace(tmp_path / "t.jsonl", HAND_TRACE)))
    result = run_prediction([arrival.request for arrival in arrivals], replicas=2, seed=3)
    assert (result.best.hits, result.best.queries) == (1520, 3236)
    assert result.picker.hits == 1520  # the picker keeps ids 0 and 1 where it sent them
    assert result.round_robin.placements == ("pod-0", "pod-1", "pod-0", "pod-1")
    # Round-robin parts ids 0 and 1 from the second request; the fourth meets id 0 on pod-1.
    assert result.round_robin.hits == 496


def test_prepare_keys_a_trace_without_a_tokenizer_for_either_index(tmp_path):
    arrivals = load_arrivals(str(write_trace(tmp_path / "t.jsonl", HAND_TRACE)))
    requests = [arrival.request for arrival in arrivals]
    approximate = prepare(requests, [8] * 4, EstimateTokenizer(), 16, HashPlan(False, 64, 256))
    assert approximate.prompt_lens == (1024, 1100, 600, 512)
    assert [len(keys) for keys in approximate.keys] == [64, 68, 37, 32]
    assert [len(chain) for (chain,) in approximate.picker_hashes] == [16, 18, 10, 8]
    precise = prepare(requests, [8] * 4, EstimateTokenizer(), 64, PrecisePlan(64))
    assert [len(keys) for keys in precise.keys] == [16, 17, 9, 8]


def test_predict_reads_a_trace_and_names_its_bound(tmp_path):
    path = write_trace(tmp_path / "t.jsonl", [{"timestamp": 100 * i, **value} for i, value in enumerate(HAND_TRACE)])
    run = subprocess.run([sys.executable, "-m", "routing", "predict", "--pods", "2", "--workload", str(path),
                          "--seed", "1", "--json"], cwd=ROOT, capture_output=True, text=True, check=True)
    figures = json.loads(run.stdout)
    assert figures["hitRate"] == pytest.approx(1520 / 3236) and figures["bestHitRate"] == pytest.approx(1520 / 3236)
    text = subprocess.run([sys.executable, "-m", "routing", "predict", "--pods", "2", "--workload", str(path),
                           "--seed", "1"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "a block-hash trace: 4 requests, 3,236 prompt tokens in 8 blocks of 512 tokens, 37.5% of them" in text
    refused = subprocess.run([sys.executable, "-m", "routing", "predict", "--pods", "2", "--workload", str(path),
                              "--tokenizer", "x.json"], cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 2 and "drop --tokenizer" in refused.stderr


# -- synthesized prompts, scaled slices ---------------------------------------------------------------

def test_synthesized_prompts_have_the_length_and_share_exactly_the_ids_blocks():
    one, other = synthetic_tokens(prompt([3, 4], 700)), synthetic_tokens(prompt([3, 5], 600))
    assert (len(one), len(other)) == (700, 600)
    assert one[:512] == other[:512] and one[512:600] != other[512:600]
    assert synthetic_tokens(prompt([3, 4], 700)) == one
    assert all(SYNTHETIC_TOKEN_FIRST <= token < SYNTHETIC_TOKEN_FIRST + SYNTHETIC_TOKEN_COUNT for token in one + other)


def test_a_scaled_request_keeps_its_ids_and_scales_the_last_partial_block(tmp_path):
    (request,) = read_trace(write_trace(tmp_path / "t.jsonl", [line([0, 1, 2], 1100, 300, at=0)])).requests
    scaled = request.scaled(64, max_output=16)
    assert (scaled.prompt.ids, scaled.prompt.length, scaled.prompt.id_tokens, scaled.output_tokens) == (
        (0, 1, 2), 2 * 64 + 10, 64, 16)  # 76 of 512 tokens in the last block become 10 of 64
    assert request.scaled(64, max_output=1000).output_tokens == 300


def test_a_slice_takes_whole_conversations_by_their_start_and_reads_back(tmp_path):
    # Conversations are requests sharing their first two ids: (0, 1) starts at 0 s and has a
    # second turn at 30 s; (0, 5) starts at 25 s; (0, 7) at 10 s is too long once scaled.
    trace = read_trace(write_trace(tmp_path / "t.jsonl", [
        line([0, 1], 1000, at=0), line([0, 7, 8, 9], 2000, at=10_000), line([0, 5], 900, at=25_000),
        line([0, 1, 2, 3], 1800, at=30_000)]))
    kept, too_long = slice_conversations(trace, 20.0, 64, 16, max_model_len=240)
    assert [(request.line, request.prompt.length) for request in kept] == [(1, 64 + 61), (4, 3 * 64 + 33)]
    assert too_long == 1
    write_requests(tmp_path / "slice.jsonl", kept)
    again = read_trace(tmp_path / "slice.jsonl", id_tokens=64)
    assert [(r.at, r.prompt.length, r.output_tokens) for r in again.requests] == [(0.0, 125, 8), (30.0, 225, 8)]
