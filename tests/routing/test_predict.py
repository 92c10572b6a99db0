"""`predict` against the seed page's published results, its bound, its workloads and its CLI."""

import argparse
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from routing.picker.endpoint_picker import EndpointPicker
from routing.picker.prefix import EstimateTokenizer
from routing.simulation import predict as predict_command
from routing.simulation.fleet import SimulatedServer, simulate_side_by_side
from routing.simulation.prediction import predict, run_prediction
from routing.workloads import (SEED_MODEL, WorkloadError, load_jsonl, seed_shared, seed_shared_prompts, seed_unique,
                               seed_unique_prompts, to_requests)

DEFAULT = {"queue": 2, "kvCache": 2, "prefix": 3}
NO_PREFIX = {"prefix": 0, "queue": 3, "kvCache": 2}
# The page's step 3 and step 4 shell blocks, copied verbatim (its first line says from where).
SEED_PAGE_BATCHES = Path(__file__).resolve().parent / "data" / "seed-page-batches.txt"


def pods_used(result: dict) -> int:
    return sum(1 for pod in result["pods"] if pod["requests"])


# -- the seed's workloads ---------------------------------------------------------------------------

def test_seed_shared_prompts_are_the_pages_preamble_plus_question():
    prompts = seed_shared_prompts()
    assert len(prompts) == 12
    preamble = prompts[0][:-len(" Question 1: name one factor.")]
    assert len(preamble) == 6723 and all(p.startswith(preamble) for p in prompts)
    assert [len(p) for p in prompts] == [6752] * 9 + [6753] * 3
    assert prompts[11].endswith("inference architecture. Question 12: name one factor.")


def test_seed_unique_prompts_share_no_leading_text():
    prompts = seed_unique_prompts()
    assert [len(p) for p in prompts] == [3589] * 9 + [3671] * 3
    assert prompts[0].startswith("Request 1 context: Unique-1-segment-1 padding text for request 1 segment 1 ")
    assert len({p[:10] for p in prompts}) == 12


def test_seed_bodies_are_the_pages_completions_requests_for_any_model():
    body = seed_shared()[0]
    assert list(body) == ["model", "prompt", "max_tokens", "temperature"]
    assert (body["model"], body["max_tokens"], body["temperature"]) == (SEED_MODEL, 4, 0)
    assert {b["model"] for b in seed_unique("tiny")} == {"tiny"}


def _page_loop(block: str) -> str:
    """The shell between `sh -c '` and `echo'` of one of the page's blocks, made to print bodies."""
    text = SEED_PAGE_BATCHES.read_text()
    script = text[text.index(block):]
    script = script[script.index("sh -c '") + len("sh -c '"):script.index("echo'")]
    assert script.count('printf "%s" "$BODY" | curl') == 1, "the page's loop is not the one this test rewrites"
    script = script.replace('GW="\'"${GW}"\'"', "")
    return script.replace('printf "%s" "$BODY" | curl', 'printf "%s\\n" "$BODY" #')


@pytest.mark.parametrize("block, bodies", [("kubectl run batch-shared", seed_shared),
                                           ("kubectl run batch-unique", seed_unique)])
def test_seed_bodies_match_the_pages_shell_loop_byte_for_byte(block, bodies):
    sh = shutil.which("sh")
    if sh is None:
        pytest.fail("this test runs the seed page's shell loop and needs a POSIX `sh` on PATH; install one "
                    "(e.g. dash or busybox) or fix PATH", pytrace=False)
    sent = subprocess.run([sh, "-c", _page_loop(block)], capture_output=True, text=True, check=True).stdout
    assert sent.splitlines() == [json.dumps(b, separators=(",", ":")) for b in bodies()]


def test_load_jsonl_reads_completions_and_chat_bodies(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text('{"model": "m", "prompt": "a"}\n\n{"model": "m", "messages": [{"role": "user", "content": "b"}]}\n')
    bodies, requests = load_jsonl(path)
    assert [("prompt" in b) for b in bodies] == [True, False]
    assert [r.prompt for r in requests] == ["a", "userb"]
    assert {b["model"] for b in load_jsonl(path, model="served")[0]} == {"served"}


@pytest.mark.parametrize("content, message", [
    ('{"model": "m", "prompt": "a"}\n{"model": "m", "prompt": \n', r"line 2: not JSON"),
    ('{"model": "m", "prompt": "a"}\n["x"]\n', r"line 2: is a JSON list"),
    ('{"model": "m", "input": "a"}\n', r"line 1: the body has neither `prompt`"),
    ("\n\n", r"has no requests"),
])
def test_load_jsonl_errors_name_the_line_and_the_fix(tmp_path, content, message):
    path = tmp_path / "w.jsonl"
    path.write_text(content)
    with pytest.raises(WorkloadError, match=message):
        load_jsonl(path)


def test_load_jsonl_missing_file_suggests_the_builtin_workloads(tmp_path):
    with pytest.raises(WorkloadError, match="no such file.*seed-shared, seed-unique"):
        load_jsonl(tmp_path / "nope.jsonl")


# -- the seed page's three results ------------------------------------------------------------------------

def test_default_weights_send_the_whole_shared_batch_to_one_pod_at_about_92_percent():
    result = predict(seed_shared(), weights=DEFAULT, replicas=2, pod_prefix="qwen-small", seed=1)
    assert [pod["pod"] for pod in result["pods"]] == ["qwen-small-0", "qwen-small-1"]
    assert sorted(pod["requests"] for pod in result["pods"]) == [0, 12]
    # 11 of 12 requests hit, less each prompt's final partial block: just under 11/12.
    assert 0.90 < result["hitRate"] < 11 / 12
    assert result["hitRate"] == pytest.approx(result["bestHitRate"])


def test_default_weights_concentrate_the_shared_batch_for_every_seed():
    assert all(pods_used(predict(seed_shared(), weights=DEFAULT, replicas=2, seed=s)) == 1 for s in range(50))


def test_unique_prefixes_spread_over_both_pods_with_no_hits():
    result = predict(seed_unique(), weights=DEFAULT, replicas=2, seed=1)
    assert pods_used(result) == 2 and result["hitRate"] == 0 and result["bestHitRate"] == 0
    spread = sum(pods_used(predict(seed_unique(), weights=DEFAULT, replicas=2, seed=s)) == 2 for s in range(200))
    assert spread >= 190


def test_prefix_zero_spreads_the_shared_batch_and_loses_hits():
    result = predict(seed_shared(), weights=NO_PREFIX, replicas=2, seed=1)
    assert pods_used(result) == 2
    assert result["hitRate"] < predict(seed_shared(), weights=DEFAULT, replicas=2, seed=1)["hitRate"]
    spread = sum(pods_used(predict(seed_shared(), weights=NO_PREFIX, replicas=2, seed=s)) == 2 for s in range(200))
    assert spread >= 190


def test_round_robin_splits_the_shared_batch_evenly_and_misses_once_per_pod():
    result = predict(seed_shared(), weights=DEFAULT, replicas=2, seed=1)["roundRobin"]
    assert [pod["requests"] for pod in result["pods"]] == [6, 6]
    hits_per_warm_request = result["pods"][0]["hits"] / 5
    assert result["pods"][1]["hits"] == pytest.approx(5 * hits_per_warm_request)


def test_json_has_exactly_the_documented_keys_with_token_counts():
    result = predict(seed_shared(), weights=DEFAULT, replicas=2, seed=1)
    assert set(result) == {"pods", "hitRate", "ttft", "queue", "roundRobin", "bestHitRate"}
    assert set(result["roundRobin"]) == {"pods", "hitRate", "ttft", "queue"}
    assert result["queue"] == {"p50": 0.0, "p95": 0.0, "p99": 0.0}  # serially, no request waits
    assert set(result["ttft"]) == {"p50", "p95", "p99"} and 0 < result["ttft"]["p50"] <= result["ttft"]["p99"]
    assert all(set(pod) == {"pod", "requests", "hits", "queries", "hitRate"} for pod in result["pods"])
    unused = next(pod for pod in result["pods"] if not pod["requests"])
    assert (unused["queries"], unused["hitRate"]) == (0, None)
    used = next(pod for pod in result["pods"] if pod["requests"])
    assert used["queries"] == sum((len(p.encode()) + 3) // 4 for p in seed_shared_prompts())  # estimated tokens


# -- the best-case bound ----------------------------------------------------------------------------------

prompt_parts = st.sampled_from(["System: be brief. " * 20, "Tools: search, fetch. " * 15, "Q: ", "A: ", "x" * 90])
workloads = st.lists(st.lists(prompt_parts, min_size=1, max_size=5).map("".join), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(workloads, st.integers(1, 4), st.integers(0, 10 ** 6),
       st.sampled_from([DEFAULT, NO_PREFIX, {"queue": 0, "kvCache": 0, "prefix": 0, "lru": 2}]))
def test_no_placement_beats_best_hit_rate(prompts, replicas, seed, weights):
    bodies = [{"model": "m", "prompt": p} for p in prompts]
    result = predict(bodies, weights=weights, replicas=replicas, seed=seed, capacity_blocks=40)
    best = result["bestHitRate"]
    assert result["hitRate"] <= best + 1e-12 and result["roundRobin"]["hitRate"] <= best + 1e-12


def test_best_is_flagged_unreachable_only_when_the_workload_outgrows_one_pod():
    roomy = run_prediction(to_requests(seed_shared()), weights=DEFAULT, replicas=2, seed=1)
    assert roomy.best_fits_one_pod and roomy.best_cache_blocks > 100
    tight = run_prediction(to_requests(seed_shared()), weights=DEFAULT, replicas=2, seed=1, capacity_blocks=50)
    assert not tight.best_fits_one_pod
    assert tight.picker.hit_rate < tight.best.hit_rate


def test_simulate_places_serially_and_a_second_replay_finds_the_cache_warm():
    fleet = ([SimulatedServer("a"), SimulatedServer("b")], EndpointPicker(DEFAULT, seed=2))
    [first] = simulate_side_by_side(to_requests(seed_shared()), [fleet], EstimateTokenizer())
    assert len(set(first.placements)) == 1 and len(first.placements) == 12
    [both] = simulate_side_by_side(to_requests(seed_shared()), [fleet], EstimateTokenizer())
    # The picker remembers where the prefix went; the counters are totals, so the second
    # replay's are both minus first: 12 more requests, at a higher hit rate (no cold miss).
    assert both.placements == first.placements
    assert both.requests - first.requests == 12
    assert (both.hits - first.hits) / (both.queries - first.queries) > first.hit_rate


def test_bigger_kv_blocks_lower_the_hit_rate():
    small = predict(seed_shared(), weights=DEFAULT, replicas=2, seed=1, block_size=16)["hitRate"]
    cpu = predict(seed_shared(), weights=DEFAULT, replicas=2, seed=1, block_size=128)["hitRate"]
    assert cpu < small


def test_replicas_must_be_positive():
    with pytest.raises(ValueError, match="replicas=0"):
        predict(seed_shared(), weights=DEFAULT, replicas=0)


# -- the command line -------------------------------------------------------------------------------------

def run_cli(*argv: str, capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    predict_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(["predict", *argv])
    status = args.func(args)
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_reads_the_dev_stack_and_prints_json(capsys):
    status, out, err = run_cli("--stack", "dev", "--model", "qwen-small", "--workload", "seed-shared", "--seed", "4",
                               "--json", capsys=capsys)
    assert status == 0
    result = json.loads(out)
    assert [pod["pod"] for pod in result["pods"]] == ["qwen-small-0", "qwen-small-1"]
    assert pods_used(result) == 1 and 0.9 < result["hitRate"] < 11 / 12
    assert "estimated at ~4 characters per token" in err


def test_cli_weight_override_spreads_the_shared_batch(capsys):
    status, out, _ = run_cli("--stack", "dev", "--model", "qwen-small", "--weights", "prefix=0,queue=3,kvCache=2",
                             "--seed", "1", capsys=capsys)
    assert status == 0
    assert "weights queue=3 kvCache=2 prefix=0" in out
    assert "Round-robin" in out and "bestHitRate" in out


def test_cli_table_shows_per_pod_rows(capsys):
    status, out, _ = run_cli("--pods", "3", "--workload", "seed-unique", "--seed", "2", capsys=capsys)
    assert status == 0
    assert all(f"pod-{i}" in out for i in range(3)) and "Prediction without a stack: 3 pods" in out


@pytest.mark.parametrize("argv, message", [
    (["--stack", "dev", "--model", "qwen-small", "--weights", "predictedLatency=1"], "predictedLatency=1"),
    (["--stack", "dev"], "--model: stack 'dev' has 2 models"),
    (["--stack", "dev", "--model", "qwen-big"],
     r"--model qwen-big: stack 'dev' has no model named 'qwen-big'; its models are: qwen, qwen-small"),
    (["--stack", "nope", "--model", "qwen-small"], "stacks here: "),
    (["--pods", "2", "--replicas", "3"], "--replicas needs --stack"),
    (["--pods", "2", "--workload", "seed-sharde"], "no such file.*seed-shared"),
    (["--pods", "2", "--tokenizer", "/nonexistent/tokenizer.json"], "--tokenizer"),
    (["--stack", "org/project/dev", "--model", "qwen-small"],
     r"--stack 'org/project/dev': give the stack's short name"),
    (["--pods", "2", "--stacks-dir", "stacks"], r"--stacks-dir stacks: needs --stack"),
    (["--pods", "2", "--model", "qwen"], r"--model qwen: needs --stack"),
])
def test_cli_errors_name_the_option_the_value_and_the_fix(capsys, argv, message):
    status, out, err = run_cli(*argv, capsys=capsys)
    assert status == 2 and out == ""
    assert err.startswith("predict: ")
    assert re.search(message, err), err


@pytest.mark.parametrize("argv, message", [
    (["--stack", "dev", "--model", "qwen-small", "--weights", "prefx=1"], "Did you mean 'prefix'"),
    (["--stack", "dev", "--model", "qwen-small", "--weights", "queue=-2"], "--weights queue = '-2'"),
    (["--pods", "2", "--weights", ""], r"--weights = '': names no weight; write name=value pairs"),
    (["--stack", "dev", "--model", "qwen-small", "--weights", " "], r"--weights = ' ': names no weight"),
    (["--stack", "dev", "--model", "qwen-small", "--weights", "prefix=0,"],
     r"--weights = '': write each weight as name=value"),
    (["--pods", "0"], r"argument --pods: '0' must be at least 1"),
    (["--pods", "2", "--rate", "0"], r"argument --rate: '0' must be a positive number of requests per second"),
    (["--pods", "2", "--picker-version", "v0.4"], r"argument --picker-version: invalid choice: 'v0.4'"),
])
def test_bad_option_values_are_usage_errors_naming_the_value(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        run_cli(*argv, capsys=capsys)
    assert exit_.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def _stack_with(tmp_path: Path, extra: str) -> Path:
    dev = (Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.dev.yaml").read_text()
    marker = "      model: Qwen/Qwen2.5-0.5B-Instruct\n"
    assert marker in dev
    (tmp_path / "Pulumi.custom.yaml").write_text(dev.replace(marker, marker + extra))
    return tmp_path


def test_cli_refuses_a_model_whose_picker_config_map_is_only_in_the_cluster(capsys, tmp_path):
    stacks = _stack_with(tmp_path, "      pickerConfigMap:\n        name: my-picker\n")
    status, _, err = run_cli("--stack", "custom", "--model", "qwen-small", "--stacks-dir", str(stacks), capsys=capsys)
    assert status == 2
    assert "uses the picker ConfigMap my-picker" in err and "pickerConfigMap.file" in err and "--pods" in err


def test_cli_replicas_override_and_scaled_down_models(capsys, tmp_path):
    stacks = _stack_with(tmp_path, "")
    text = (stacks / "Pulumi.custom.yaml").read_text().replace("replicas: 2", "replicas: 0")
    (stacks / "Pulumi.custom.yaml").write_text(text)
    common = ("--stack", "custom", "--model", "qwen-small", "--stacks-dir", str(stacks), "--json", "--seed", "1")
    status, _, err = run_cli(*common, capsys=capsys)
    assert status == 2 and "replicas 0" in err and "--replicas N" in err
    status, out, _ = run_cli(*common, "--replicas", "3", capsys=capsys)
    assert status == 0 and len(json.loads(out)["pods"]) == 3


@pytest.mark.parametrize("stack, pickers", [("dev", 2), ("eks", 1)])
def test_a_stack_without_picker_replicas_is_predicted_with_the_pickers_it_deploys(capsys, tmp_path, stack, pickers):
    # HyperPod's controller runs two pickers when pickerReplicas is unset, each with its own
    # prefix index; the llm-d router's Deployment runs one.
    text = (Path(__file__).resolve().parents[2] / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    assert "      pickerReplicas: 1\n" in text
    (tmp_path / "Pulumi.custom.yaml").write_text(text.replace("      pickerReplicas: 1\n", ""))
    status, out, _ = run_cli("--stack", "custom", "--model", "qwen-small", "--stacks-dir", str(tmp_path),
                             "--concurrency", "4", "--seed", "1", capsys=capsys)
    assert status == 0
    assert ("2 picker replicas: each request goes to one at random" in out) == (pickers == 2)


def test_the_picker_version_sets_how_predict_hashes_prefixes(capsys, tmp_path):
    # v0.8 and earlier hash a chat as the JSON of its messages, later versions role and text: the
    # same conversation is a different number of prefix blocks.
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"model": "m", "messages": [{"role": "system", "content": "policy " * 400},
                                                           {"role": "user", "content": "hello"}]}) + "\n")
    blocks = {}
    for version in ("v0.10", "v0.8"):
        status, out, err = run_cli("--pods", "2", "--workload", str(path), "--seed", "1", "--explain", "0", "--json",
                                   "--picker-version", version, capsys=capsys)
        assert status == 0
        blocks[version] = json.loads(out)["explain"]["prefixBlocks"]
        assert ("prefix hashing of picker v0.8 (characters)" in err) == (version == "v0.8")
    assert blocks["v0.10"] != blocks["v0.8"]


def test_requests_of_unknown_length_are_named_under_load(capsys, tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps(body) + "\n" for body in (
        {"model": "m", "messages": [{"role": "user", "content": "no length"}]},
        {"model": "m", "messages": [{"role": "user", "content": "a length"}], "max_completion_tokens": 8},
        {"model": "m", "prompt": "a completion runs to vLLM's default of 16"})))
    status, out, _ = run_cli("--pods", "2", "--workload", str(path), "--concurrency", "2", "--seed", "1",
                             capsys=capsys)
    assert status == 0
    assert "1 request(s) (chat, responses, ...) state no max_tokens" in out
    status, out, _ = run_cli("--pods", "2", "--workload", str(path), "--seed", "1", capsys=capsys)
    assert status == 0 and "state no max_tokens" not in out  # serially, reply lengths play no part


@pytest.mark.parametrize("extra", [("--rate", "40"), (), ("--concurrency", "8")])
def test_the_readmes_example_trace_predicts(capsys, extra):
    trace = Path(__file__).resolve().parents[2] / "examples" / "trace.jsonl"
    status, out, err = run_cli("--stack", "dev", "--model", "qwen-small", "--workload", str(trace), "--seed", "1",
                               *extra, capsys=capsys)
    assert status == 0, err
    assert "TTFT p50" in out and "42 requests" in out


@pytest.mark.parametrize("weights, message", [
    ({"prefx": 0}, r"line 2: \"weights\" prefx = '0': is not a scorer weight. Did you mean 'prefix'\?"),
    ({"prefix": -1}, r"line 2: \"weights\" prefix = '-1': is out of range"),
    ({"prefix": 0.5}, r"line 2: \"weights\" prefix=0.5 must be a whole number of at least 0"),
])
def test_a_weight_change_line_with_a_bad_weight_names_the_line(capsys, tmp_path, weights, message):
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"at": 0, "body": {"model": "m", "prompt": "a"}}) + "\n"
                    + json.dumps({"at": 1, "weights": weights}) + "\n")
    status, _, err = run_cli("--pods", "2", "--workload", str(path), capsys=capsys)
    assert status == 2 and re.search(message, err), err


def test_cli_jsonl_workload_errors_carry_the_line_number(capsys, tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text('{"model": "m", "prompt": "ok"}\n{"prompt": \n')
    status, _, err = run_cli("--pods", "2", "--workload", str(path), capsys=capsys)
    assert status == 2 and "line 2" in err


@pytest.mark.parametrize("line, escape, column", [
    ('{"model": "m", "prompt": "a\\ud800b"}', "\\ud800", 28),
    ('{"model": "m", "messages": [{"role": "user", "content": "\\uDFFF"}]}', "\\udfff", 58),
])
def test_a_lone_surrogate_is_a_workload_error_naming_the_line(capsys, tmp_path, line, escape, column):
    path = tmp_path / "w.jsonl"
    path.write_text('{"model": "m", "prompt": "fine \\ud83d\\ude00"}\n' + line + "\n")
    with pytest.raises(WorkloadError, match=f"line 2: holds the lone surrogate \\{escape} \\(column {column}\\)"):
        load_jsonl(path)
    status, out, err = run_cli("--pods", "2", "--workload", str(path), capsys=capsys)
    assert status == 2 and out == ""
    assert err.startswith(f"predict: workload {path} line 2: holds the lone surrogate {escape}")
    assert "both halves of its surrogate pair" in err


def test_a_lone_surrogate_in_a_programmatic_workload_names_the_request():
    with pytest.raises(WorkloadError, match=r"workload request 1: `prompt` holds a lone surrogate \\ud800"):
        predict([{"model": "m", "prompt": "ok"}, {"model": "m", "prompt": "x\ud800"}], weights=DEFAULT, replicas=2)


def test_cli_counts_tokens_with_a_tokenizer_file(capsys, tmp_path):
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(seed_shared_prompts(), trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>"]))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    status, out, err = run_cli("--pods", "2", "--tokenizer", str(tmp_path), "--json", "--seed", "1", capsys=capsys)
    assert status == 0 and f"counted with {tmp_path / 'tokenizer.json'}" in err
    result = json.loads(out)
    expected_queries = sum(len(tokenizer.encode(p).ids) for p in seed_shared_prompts())
    assert sum(pod["queries"] for pod in result["pods"]) == expected_queries
    assert pods_used(result) == 1 and result["hitRate"] > 0.85


def test_cli_epp_scheduler_is_flagged_and_refuses_the_lru_weight(capsys, tmp_path):
    stacks = _stack_with(tmp_path, "      scheduler: epp\n")
    common = ("--stack", "custom", "--model", "qwen-small", "--stacks-dir", str(stacks), "--seed", "1")
    status, out, _ = run_cli(*common, capsys=capsys)
    assert status == 0 and "scheduler epp: modelled with the llm-d router v0.10 scorers" in out
    status, _, err = run_cli(*common, "--weights", "lru=2", capsys=capsys)
    assert status == 2 and "lru weight exists only with scheduler llm-d" in err
