"""predict in simulated time: arrivals, sessions, scrapes, picker replicas, outputs, sweep and calibrate's fit."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest
from test_predict import run_cli

from routing.live.calibrate import (REQUESTS_PER_PHASE, CalibrateError, PhaseShape, calibrate, fit, histogram_totals,
                                    replay_phase)
from routing.picker.endpoint_picker import EndpointPicker, Request, RoundRobinPicker, with_default_weights
from routing.picker.prefix import EstimateTokenizer
from routing.simulation import predict as predict_command, prediction as prediction_module, sweep
from routing.simulation.fleet import Fleet, prepare, replay_recorded, simulate_under_load
from routing.simulation.latency import EngineLimits, LatencyModel, LatencyProfile, ProfileError, percentile
from routing.simulation.load_plan import LoadPlan, plan_load
from routing.simulation.prediction import Load, PredictError, run_prediction
from routing.workloads import Arrival, WorkloadError, load_arrivals, seed_shared, to_requests

LATENCY = LatencyModel(step_s=0.01, prefill_token_s=0.0001, decode_seq_s=0.001, overhead_s=0.0)
LIMITS = EngineLimits(max_num_seqs=64, max_num_batched_tokens=4096)
KV_ONLY = {"queue": 0, "kvCache": 1, "prefix": 0}


def body(prompt: str, max_tokens: int = 4) -> dict:
    return {"model": "m", "prompt": prompt, "max_tokens": max_tokens}


def replay(prompts, plan, *, weights=KV_ONLY, interval=0.05, seed=0, pods=2, output=4, explain=None,
           round_robin=False):
    requests = [Request("m", p) for p in prompts]
    prepared = prepare(requests, [output] * len(requests), EstimateTokenizer(), 16)
    picker = RoundRobinPicker() if round_robin else EndpointPicker(weights, seed=seed)
    fleet = Fleet(tuple(f"pod-{i}" for i in range(pods)), (picker,), 1000, LIMITS, LATENCY, interval,
                  reads_metrics=not round_robin)
    return simulate_under_load(prepared, plan, fleet, seed=seed, explain=explain)


# -- what the picker sees --------------------------------------------------------------------------

def test_a_stale_scrape_changes_a_pick():
    # Request 0 (a long prompt, a long reply) runs on one pod; request 1 comes 0.5 s later. The
    # kvCache scorer sends it to the other pod once a scrape shows request 0's blocks in use;
    # with scrapes 100 s apart the picker still sees both pods idle and breaks the tie at
    # random, so some seeds put it on the busy pod.
    prompts = ["x" * 4000, "y" * 40]
    plan = LoadPlan((None, None), send_at=(0.0, 0.5))
    fresh = [replay(prompts, plan, output=200, seed=seed, interval=0.01).placements for seed in range(20)]
    stale = [replay(prompts, plan, output=200, seed=seed, interval=100.0).placements for seed in range(20)]
    assert all(first != second for first, second in fresh)
    assert any(first == second for first, second in stale)


def test_explain_shows_what_the_last_scrape_read():
    prompts = ["x" * 4000, "y" * 40]
    result = replay(prompts, LoadPlan((None, None), send_at=(0.0, 0.5)), output=200, interval=0.01, explain=1)
    seen = {pod.name: pod for pod in result.explained.seen}
    busy = seen[result.placements[0]]
    assert busy.running == 1 and busy.kv_usage > 0
    assert result.explained.decision.pod != result.placements[0]


class FewestRunning:
    """A picker that takes the pod whose last scrape shows the fewest running requests, the
    first of them on a tie, and notes the running counts each pick saw."""

    def __init__(self):
        self.seen: list[tuple[int, ...]] = []

    def choose(self, request, pods, hashed=None) -> str:
        self.seen.append(tuple(pod.running for pod in pods))
        return min(pods, key=lambda pod: pod.running).name

    def hash_plan(self, reported_block_size):
        return None


def test_requests_sent_together_and_spaced_on_their_way_are_each_picked_from_the_scrapes_of_its_moment():
    # Steps of 0.1 s, scrapes every millisecond, 50 ms from a send to the pod: spent after the
    # pick (a concurrent gateway's hop) or before it (requests reaching the picker one at a
    # time, 50 ms apart).
    # A (3 tokens) reaches pod-0 at 0.05 and runs from its prefill step's end at 0.15 to its
    # last token at 0.35 either way. B and C are sent together at 0.33. Picked then, both see
    # A running on pod-0 and go to pod-1. Picked at 0.38 and 0.43 (in an order of their own),
    # after A's finish, both see the pods idle (the first counts on pod-0 only from its
    # prefill step's end, at 0.48), so both go to pod-0, the second a step behind the first.
    steps = LatencyModel(step_s=0.1, prefill_token_s=0.0, decode_seq_s=0.0, overhead_s=0.0)
    prepared = prepare([Request("m", p) for p in ("A " * 20, "B " * 20, "C " * 20)], [3, 1, 1],
                       EstimateTokenizer(), 16)
    plan = LoadPlan((None, None, None), send_at=(0.0, 0.33, 0.33))
    outcomes = {}
    for where, latency, spacing in (("gateway", dataclasses.replace(steps, gateway_s=0.05), 0.0),
                                    ("spaced", steps, 0.05)):
        picker = FewestRunning()
        fleet = Fleet(("pod-0", "pod-1"), (picker,), 1000, LIMITS, latency, 0.001, send_spacing=spacing)
        outcomes[where] = simulate_under_load(prepared, plan, fleet, seed=1), picker.seen
    (gateway, gateway_seen), (spaced, spaced_seen) = outcomes["gateway"], outcomes["spaced"]
    assert gateway.placements == ("pod-0", "pod-1", "pod-1") and gateway_seen[1:] == [(1, 0), (1, 0)]
    assert spaced.placements == ("pod-0", "pod-0", "pod-0") and spaced_seen[1:] == [(0, 0), (0, 0)]
    # TTFT runs from the send either way, and A's is the same. Either way one of B and C waits
    # a step for the other's; through the gateway, reaching pod-1 together, the first to
    # arrive starts a step alone.
    assert spaced.sent_at == gateway.sent_at == (0.0, 0.33, 0.33)
    assert gateway.ttfts[0] == spaced.ttfts[0] == pytest.approx(0.15)
    assert sorted(gateway.ttfts[1:]) == sorted(spaced.ttfts[1:]) == pytest.approx([0.15, 0.25])


def test_predict_send_spacing_delays_requests_sent_together_and_needs_a_replay_under_load(capsys):
    status, _, err = run_cli("--pods", "2", "--send-spacing", "0.02", capsys=capsys)
    assert status == 2 and "--send-spacing 0.02: a serial replay sends one request at a time" in err
    args = ("--pods", "2", "--concurrency", "4", "--seed", "1", "--json")
    status, at_once, _ = run_cli(*args, capsys=capsys)
    assert status == 0
    status, spaced, err = run_cli(*args, "--send-spacing", "0.02", capsys=capsys)
    assert status == 0
    assert "requests sent at one moment reach the picker 20.0 ms apart, one at a time" in err
    # The first four requests, sent at once, reach the picker 20 ms apart: their TTFT holds the wait.
    assert json.loads(spaced)["ttft"]["p50"] > json.loads(at_once)["ttft"]["p50"] + 0.02


# -- arrivals and sessions -------------------------------------------------------------------------

def test_one_in_flight_under_load_hits_as_the_serial_replay_does():
    requests = to_requests(seed_shared())
    serial = run_prediction(requests, replicas=2, seed=3)
    plan = plan_load([Arrival(b, r) for b, r in zip(seed_shared(), requests)], concurrency=1)
    loaded = run_prediction(requests, replicas=2, seed=3, load=Load(plan, (4,) * 12), latency=LATENCY)
    assert (loaded.picker.hits, loaded.picker.queries) == (serial.picker.hits, serial.picker.queries)
    assert loaded.round_robin.hits == serial.round_robin.hits


def test_closed_loop_keeps_n_in_flight_and_a_sessions_turns_in_order():
    prompts = [f"turn {n} " * 50 for n in range(12)]
    sessions = tuple(f"s{n % 3}" for n in range(12))
    result = replay(prompts, LoadPlan(sessions, concurrency=2), output=8)
    events = sorted([(t, 1) for t in result.sent_at] + [(t, -1) for t in result.finished_at])
    in_flight, most = 0, 0
    for _, change in events:
        in_flight += change
        most = max(most, in_flight)
    assert most == 2
    for session in set(sessions):
        turns = [n for n in range(12) if sessions[n] == session]
        for earlier, later in zip(turns, turns[1:]):
            assert result.sent_at[later] >= result.finished_at[earlier]


def test_a_timed_sessions_next_turn_waits_for_the_previous_one():
    plan = LoadPlan(("a", "a", None), send_at=(0.0, 0.0, 0.0))
    result = replay(["p" * 400, "q" * 400, "r" * 400], plan, output=8)
    assert result.sent_at[1] == pytest.approx(result.finished_at[0])
    assert result.sent_at[2] == 0.0


def test_poisson_arrivals_have_the_asked_rate_and_repeat_with_the_seed():
    arrivals = [Arrival(body("x"), Request("m", "x"))] * 2000
    plan = plan_load(arrivals, rate=50.0, seed=4)
    gaps = [b - a for a, b in zip(plan.send_at, plan.send_at[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 50, rel=0.1)
    assert plan_load(arrivals, rate=50.0, seed=4) == plan
    assert plan_load(arrivals) is None  # bare bodies, no option: serial


def test_jsonl_with_times_and_sessions(tmp_path):
    path = tmp_path / "w.jsonl"
    lines = [{"at": 0, "session": "a", "body": body("hello")}, {"at": 1.5, "session": 7, "body": body("again", 9)}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    arrivals = load_arrivals(str(path), model="served")
    assert [(a.at, a.session, a.output_tokens, a.body["model"]) for a in arrivals] == [
        (0.0, "a", 4, "served"), (1.5, "7", 9, "served")]
    assert plan_load(arrivals).send_at == (0.0, 1.5)


@pytest.mark.parametrize("lines, message", [
    ([{"at": 0, "body": body("a")}, body("b")], r"line 2: the file has lines of the form"),
    ([{"at": -1, "body": body("a")}], r'line 1: "at" -1 must be seconds'),
    ([{"at": 0, "body": {"model": "m"}}], r"line 1: the body has neither `prompt`"),
])
def test_timed_workload_errors_name_the_line(tmp_path, lines, message):
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    with pytest.raises(WorkloadError, match=message):
        load_arrivals(str(path))


def test_some_lines_without_a_time_need_rate_or_concurrency():
    arrivals = [Arrival(body("a"), Request("m", "a"), at=0.0), Arrival(body("b"), Request("m", "b"))]
    with pytest.raises(WorkloadError, match='request 1 has no "at".*--rate or --concurrency'):
        plan_load(arrivals)
    assert plan_load(arrivals, concurrency=2).concurrency == 2


# -- picker replicas -------------------------------------------------------------------------------

def test_each_picker_replica_learns_the_shared_prefix_on_its_own():
    requests = to_requests(seed_shared())
    plan = LoadPlan((None,) * 12, concurrency=1)
    one = run_prediction(requests, replicas=4, seed=5, load=Load(plan, (4,) * 12), latency=LATENCY)
    four = [run_prediction(requests, replicas=4, seed=seed, load=Load(plan, (4,) * 12), latency=LATENCY,
                           picker_replicas=4) for seed in range(10)]
    assert len(one.picker.pods_used) == 1
    # A replica that has not seen the preamble scores every pod 0 for it: several pods get it.
    assert any(len(p.picker.pods_used) > 1 for p in four)
    assert all(p.picker.hit_rate <= one.picker.hit_rate for p in four)


# -- the command line ------------------------------------------------------------------------------

def test_cli_under_load_prints_ttft_and_queue_per_pod_and_flags_the_default_latency(capsys):
    status, out, _ = run_cli("--pods", "2", "--workload", "seed-unique", "--concurrency", "4", "--seed", "1",
                             capsys=capsys)
    assert status == 0
    assert "12 requests, closed loop, 4 in flight" in out
    assert re.search(r"TTFT p50 +p95 +p99 +queue p50", out)
    assert "latency from the built-in default" in out and "routing calibrate" in out


def test_cli_json_under_load_keeps_the_keys_and_adds_ttft_and_the_spread(capsys):
    status, out, _ = run_cli("--pods", "2", "--workload", "seed-shared", "--rate", "20", "--seed", "1", "--runs", "3",
                             "--json", capsys=capsys)
    result = json.loads(out)
    assert status == 0
    assert {"pods", "hitRate", "roundRobin", "bestHitRate", "ttft"} <= set(result)
    assert set(result["ttft"]) == {"p50", "p95", "p99"} and set(result["roundRobin"]["ttft"]) == {"p50", "p95", "p99"}
    assert set(result["queue"]) == {"p50", "p95", "p99"} and set(result["roundRobin"]["queue"]) == {"p50", "p95", "p99"}
    low, high = result["spread"]["picker"]["hitRate"]
    assert result["spread"]["runs"] == 3 and low <= result["hitRate"] <= high


def test_cli_json_queue_times_show_requests_waiting_for_a_sequence_slot(capsys):
    def queue(max_num_seqs: str) -> dict:
        status, out, _ = run_cli("--pods", "2", "--workload", "seed-shared", "--concurrency", "6", "--seed", "1",
                                 "--max-num-seqs", max_num_seqs, "--json", capsys=capsys)
        assert status == 0
        return json.loads(out)["queue"]

    # Six in flight (the shared batch all on one pod): with one sequence slot five of them wait
    # for it; with 16 a request waits only for the step in progress to end.
    one, sixteen = queue("1"), queue("16")
    assert one["p50"] > 10 * sixteen["p50"] and one["p99"] > sixteen["p99"]


def test_cli_explain_lays_out_each_scorer_and_the_margin(capsys):
    status, out, _ = run_cli("--pods", "2", "--workload", "seed-shared", "--seed", "1", "--explain", "3",
                             capsys=capsys)
    assert status == 0
    assert "Request 3:" in out and "prefix-cache-scorer ×3" in out and "<- picked" in out
    assert re.search(r"margin over the runner-up pod-\d: 2\.\d{3}", out)


def test_cli_explain_with_json_is_the_breakdown_serve_returns(capsys):
    status, out, _ = run_cli("--pods", "2", "--workload", "seed-shared", "--concurrency", "3", "--seed", "2",
                             "--explain", "4", "--json", capsys=capsys)
    assert status == 0
    explained = json.loads(out)["explain"]
    assert explained["request"] == 4 and explained["at"] > 0
    assert {pod["pod"] for pod in explained["pods"]} == {"pod-0", "pod-1"}
    assert explained["pods"][0]["pod"] == explained["chosen"]
    chosen = explained["pods"][0]
    assert chosen["total"] == pytest.approx(sum(part["weighted"] for part in chosen["scorers"]))
    assert {"waiting", "running", "kvUsage", "matchedBlocks"} <= set(chosen)


def test_cli_explain_outside_the_workload_is_an_error(capsys):
    status, _, err = run_cli("--pods", "2", "--explain", "12", capsys=capsys)
    assert status == 2 and "--explain 12: the workload has requests 0 to 11" in err


def test_cli_latency_profile_sets_the_servers_cache(capsys, tmp_path):
    profile = tmp_path / "p.json"
    LatencyProfile(LATENCY, block_size=128, num_gpu_blocks=500, limits=EngineLimits(8, 512), source="test").save(profile)
    status, out, _ = run_cli("--pods", "2", "--concurrency", "2", "--latency-profile", str(profile), "--seed", "1",
                             capsys=capsys)
    assert status == 0
    assert "block size 128 tokens, 500 blocks" in out and "at most 8 sequences and 512 tokens per step" in out
    assert f"latency from {profile} (test)" in out


def test_a_bad_profile_names_the_file_and_the_fix(capsys, tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"kind": "something else"}')
    with pytest.raises(ProfileError, match="routing calibrate --out FILE"):
        LatencyProfile.load(path)
    status, _, err = run_cli("--pods", "2", "--latency-profile", str(path), capsys=capsys)
    assert status == 2 and str(path) in err


@pytest.mark.parametrize("key, value", [("blockSize", 0), ("numGpuBlocks", "80"), ("maxNumSeqs", -5),
                                        ("maxNumBatchedTokens", True)])
def test_a_profiles_cache_and_scheduler_sizes_must_be_whole_numbers(tmp_path, key, value):
    good = LatencyProfile(LATENCY, 16, 80, LIMITS)
    path = tmp_path / "p.json"
    good.save(path)
    assert LatencyProfile.load(path).num_gpu_blocks == 80
    path.write_text(json.dumps({**good.to_json(), key: value}))
    with pytest.raises(ProfileError, match=rf"{path}: {key}={re.escape(repr(value))} must be a whole number of at "
                                           r"least 1 .*routing calibrate --out FILE"):
        LatencyProfile.load(path)


def test_calibrate_refuses_a_scrape_interval_the_gateways_picker_would_override(capsys):
    from routing.live import calibrate as calibrate_command

    parser = argparse.ArgumentParser()
    calibrate_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(["calibrate", "--pod-url", "a=http://127.0.0.1:1", "--gateway-url", "http://127.0.0.1:2",
                              "--scrape-interval", "0.2"])
    assert args.func(args) == 2
    assert "--scrape-interval 0.2 with --gateway-url" in capsys.readouterr().err


# -- the weight advisor ----------------------------------------------------------------------------

def test_sweep_option_reads_ranges_and_single_values():
    assert sweep.sweep_option("prefix=0..2,queue=3") == {"prefix": (0, 1, 2), "queue": (3,)}


@pytest.mark.parametrize("text, message", [
    ("prefx=0..2", "not a weight"), ("prefix=2..1", "0 <= A <= B"), ("prefix=a", "whole numbers"),
    ("prefix=0..1,prefix=2", "named twice"), ("prefix", "NAME=A..B"),
    ("prefix=0..20,queue=0..20,kvCache=0..20", "more than 2000"),
])
def test_sweep_option_errors(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        sweep.sweep_option(text)


def test_sweep_finds_that_prefix_scoring_wins_on_the_shared_batch_and_prints_the_config(capsys, tmp_path):
    plot = tmp_path / "sweep.png"
    status, out, err = run_cli("--stack", "dev", "--model", "qwen-small", "--workload", "seed-shared", "--seed", "1",
                               "--sweep", "prefix=0..2,queue=0..1", "--plot", str(plot), capsys=capsys)
    assert status == 0
    assert "sweep 6/6" in err
    best = re.search(r"Best for hit-rate: prefix=(\d), queue=(\d)", out)
    assert best and best.group(1) != "0"
    # Twelve requests are too few to change what the stack deploys for.
    assert "No change recommended: the workload has 12 requests" in out and "pulumi config set" not in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_best_of_each_objective():
    results = [sweep.SettingResult({"prefix": 0}, 0.5, (0.5, 0.5), 0.2, 0.0),
               sweep.SettingResult({"prefix": 1}, 0.9, (0.9, 0.9), 0.4, 1.0),
               sweep.SettingResult({"prefix": 2}, 0.9, (0.9, 0.9), 0.1, 0.5)]
    # prefix=1 and 2 tie on hit rate; prefix=2 is better on both other figures.
    assert sweep.best_of(results, "hit-rate").setting == {"prefix": 2}
    assert sweep.best_of(results, "ttft-p95").setting == {"prefix": 2}
    assert sweep.best_of(results, "balance").setting == {"prefix": 0}


def test_plot_needs_a_sweep(capsys, tmp_path):
    status, _, err = run_cli("--pods", "2", "--plot", str(tmp_path / "x.png"), capsys=capsys)
    assert status == 2 and "--plot" in err and "--sweep" in err


def test_the_deploy_lines_of_a_sweep_include_the_weights_it_held(capsys, monkeypatch):
    # queue=3 came from --weights, not the stack: deploying only the swept prefix would deploy
    # another setting than the one predicted.
    by_prefix = {prefix: sweep.SettingResult({"prefix": prefix}, 0.5 + prefix / 10, (0.5, 0.6), 0.02, 0.1,
                                             (sweep.RunFigures(0.5 + prefix / 10, 0.02, 0.1),) * 2)
                 for prefix in (0, 1, 3)}
    monkeypatch.setattr(sweep, "summarise", lambda setting, predictions: by_prefix[setting["prefix"]])
    monkeypatch.setattr(sweep, "MIN_REQUESTS_TO_RECOMMEND", 1)
    # The stack deploys prefix=3, here the worst.
    by_prefix[3] = sweep.SettingResult({"prefix": 3}, 0.1, (0.1, 0.1), 0.02, 0.1, (sweep.RunFigures(0.1, 0.02, 0.1),) * 2)
    status, out, _ = run_cli("--stack", "dev", "--model", "qwen-small", "--seed", "1", "--weights", "queue=3",
                             "--runs", "2", "--sweep", "prefix=0..1", "--json", capsys=capsys)
    assert status == 0
    lines = json.loads(out)["pulumi"]
    assert lines[0] == "pulumi config set --path 'models[1].weights.queue' 3 --stack dev"
    assert [line.split("'")[1] for line in lines] == ["models[1].weights.queue", "models[1].weights.prefix"]


@pytest.mark.parametrize("argv, message", [
    (("--objective", "balance"), r"--objective balance: chooses among the settings of a sweep; add --sweep"),
    (("--explain", "0", "--sweep", "prefix=0..1"), r"--explain 0: shows one setting's pick and --sweep predicts many"),
])
def test_options_that_would_be_ignored_are_refused(capsys, argv, message):
    status, _, err = run_cli("--pods", "2", "--seed", "1", *argv, capsys=capsys)
    assert status == 2 and re.search(message, err)


def test_a_heat_map_of_one_weight_keeps_its_title_and_labels_on_the_figure(tmp_path):
    import matplotlib.image

    from routing.simulation.plot import MIN_WIDTH_INCHES, heat_map

    results = [sweep.SettingResult({"prefix": p}, 0.5 + p / 10, (0.5, 0.6), 0.2, 0.1) for p in range(2)]
    path = tmp_path / "one.png"
    heat_map(results, str(path), title="Prediction for stack dev, model qwen-small (Qwen/Qwen2.5-0.5B-Instruct): "
             "workload seed-shared, 3 runs per setting", best=results[1], objective="hit-rate")
    height, width, _ = matplotlib.image.imread(path).shape
    # Two cells alone would make a figure 3.3 inches wide, which clipped the title and the labels.
    assert width >= MIN_WIDTH_INCHES * 130 - 1


# -- calibrate's fit -------------------------------------------------------------------------------

def _calibration_samples(truth: LatencyModel, limits: EngineLimits, block_size: int) -> list[dict]:
    """Phase means as vLLM's histograms would give them if `truth` were the server's cost: the
    phases calibrate sends, each run by the simulated engine."""
    shapes = {"prefill-300": PhaseShape(300, 1, 1, 8), "prefill-900": PhaseShape(900, 1, 1, 8),
              "prefill-1500": PhaseShape(1500, 1, 1, 8), "prefill-hit": PhaseShape(900, 1, 1, 8, shared_tokens=700),
              "decode-1": PhaseShape(50, 32, 1, 8), "decode-6": PhaseShape(50, 32, 6, 48),
              "decode-long-1": PhaseShape(900, 32, 1, 8), "decode-long-3": PhaseShape(900, 32, 3, 24)}
    costs = (truth.step_s, truth.prefill_token_s, truth.decode_seq_s, truth.context_token_s, truth.prefill_attention_s)

    def seconds(work: list[float]) -> float:
        return sum(cost * amount for cost, amount in zip(costs, work))

    samples = []
    for phase, shape in shapes.items():
        prefill_work, decode_work = replay_phase(shape, truth, limits, block_size)
        prefill, itl = seconds(prefill_work), seconds(decode_work) if decode_work else None
        # vLLM counts a request's own computed tokens; the work counts its steps' (the same
        # when the phase sends one request at a time, as the shared-prefix one does).
        computed = prefill_work[1] if shape.shared_tokens else shape.prompt_tokens
        samples.append({"kind": "decode" if phase.startswith("decode") else "prefill", "phase": phase,
                        "sequences": shape.concurrent, "requests": shape.requests, "max_tokens": shape.output_tokens,
                        "shared_prefix": bool(shape.shared_tokens), "prompt": shape.prompt_tokens,
                        "computed": computed, "prefill": prefill, "queue": 0.0, "itl": itl, "spread": 0.1,
                        "client": prefill + truth.overhead_seconds(shape.prompt_tokens)})
    return samples


def test_replaying_a_phase_counts_what_each_step_did():
    """Two 100-token prompts sent at once, 3 tokens each. A reaches the idle engine first and
    its step starts alone (B waits for it). Step 1: A's 100 (its first token). Step 2: B's 100
    and A's decode (B's first token). Step 3: both decode (A done). Step 4: B decodes. So A's
    prefill is step 1 and B's step 2; A's intervals are steps 2-3 and B's steps 3-4, and one of
    the four holds B's prefill."""
    latency = LatencyModel(step_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002, overhead_s=0.0)
    prefill, decode = replay_phase(PhaseShape(100, 3, 2, 2), latency, EngineLimits(8, 2048), 16)
    # (steps, prompt tokens computed, decoding sequences, cached context tokens, attended pairs)
    step_1 = (1, 100, 0, 0, 100 * 50)
    step_2 = (1, 100, 1, 100, 100 * 50)
    step_3 = (1, 0, 2, 101 + 100, 0)
    step_4 = (1, 0, 1, 101, 0)
    assert prefill == pytest.approx([(x + y) / 2 for x, y in zip(step_1, step_2)])
    assert decode == pytest.approx([sum(column) / 4 for column in zip(step_2, step_3, step_3, step_4)])


def test_a_prompt_with_a_shared_prefix_is_replayed_with_its_hit():
    latency = LatencyModel(step_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002, overhead_s=0.0)
    prefill, _ = replay_phase(PhaseShape(96, 1, 1, 3, shared_tokens=64), latency, EngineLimits(8, 256), 16)
    # The first computes all 96 tokens; the other two hit the 4 shared blocks and compute 32.
    assert prefill[1] == pytest.approx((96 + 32 + 32) / 3) and prefill[3] == pytest.approx((0 + 64 + 64) / 3)


def test_fit_recovers_a_known_latency_model_from_phases_that_ran_concurrently():
    """The decode phases run several requests at once, so their inter-token latency holds
    steps that prefill a newly sent request too: fitting them as pure decode steps would
    overstate the decode and context costs."""
    truth = LatencyModel(step_s=0.004, prefill_token_s=0.0002, decode_seq_s=0.001, overhead_s=0.01,
                         overhead_token_s=0.00001, context_token_s=0.000003, prefill_attention_s=6e-10)
    limits = EngineLimits(16, 2048)
    samples = _calibration_samples(truth, limits, 16)
    decode_long_3 = next(s for s in samples if s["phase"] == "decode-long-3")
    assert decode_long_3["itl"] > truth.step_seconds(0, 3, 3 * (900 + 16)) * 1.05  # what contamination adds
    fitted = fit(samples, limits, 16)
    for name in ("step_s", "prefill_token_s", "decode_seq_s", "context_token_s", "prefill_attention_s", "overhead_s",
                 "overhead_token_s"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-6, abs=1e-12), name
    assert fitted.jitter == pytest.approx(0.1)


def test_histogram_totals_sum_label_sets():
    text = ('vllm:time_to_first_token_seconds_sum{engine="0"} 1.5\n'
            'vllm:time_to_first_token_seconds_count{engine="0"} 3\n'
            'vllm:time_to_first_token_seconds_sum{engine="1"} 0.5\n'
            'vllm:time_to_first_token_seconds_count{engine="1"} 1\n'
            'vllm:time_to_first_token_seconds_bucket{engine="1",le="1"} 1\n')
    assert histogram_totals(text)["vllm:time_to_first_token_seconds"] == (2.0, 4.0)


def test_percentile_interpolates_like_numpy():
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5 and percentile([], 0.5) is None
    assert percentile([5.0], 0.99) == 5.0


# -- the picker's tie-breaking, after its optimisation ---------------------------------------------

def test_the_picker_breaks_ties_exactly_as_shuffle_then_stable_sort():
    import random as random_module

    from routing.picker.endpoint_picker import PodMetrics

    rng = random_module.Random(11)
    for seed in range(30):
        picker = EndpointPicker({"queue": 1, "kvCache": 1, "prefix": 0}, seed=seed)
        reference = random_module.Random(seed)
        for _ in range(40):
            pods = [PodMetrics(f"pod-{i}", waiting=rng.randrange(2), kv_usage=rng.choice([0.0, 0.5]))
                    for i in range(rng.randrange(1, 9))]
            decision = picker.pick(Request("m", "x"), pods)
            order = [pod.name for pod in pods]
            reference.shuffle(order)
            order.sort(key=lambda name: -decision.totals[name])
            assert decision.pod == order[0]


# -- a weight change mid-run -----------------------------------------------------------------------

def test_a_weight_change_restarts_the_pickers_with_empty_indexes_while_caches_stay_warm(tmp_path, capsys):
    # One preamble, a request every 0.1 s: the picker keeps them all on one pod. At 1 s the
    # weights "change" (to the same values): the new picker knows no prefix, so the next
    # request is a tie the random draw may send to the other, cold pod.
    lines = [{"at": n / 10, "body": body("You are helpful. " * 60 + f"Question {n}")} for n in range(20)]
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    changed = tmp_path / "changed.jsonl"
    changed.write_text(path.read_text() + json.dumps({"at": 1.0, "weights": {"prefix": 3}}) + "\n")
    steady = [json.loads(run_cli("--pods", "2", "--workload", str(path), "--seed", str(s), "--json",
                                 capsys=capsys)[1]) for s in range(8)]
    after = [json.loads(run_cli("--pods", "2", "--workload", str(changed), "--seed", str(s), "--json",
                                capsys=capsys)[1]) for s in range(8)]
    assert all(sum(1 for pod in r["pods"] if pod["requests"]) == 1 for r in steady)
    assert any(sum(1 for pod in r["pods"] if pod["requests"]) == 2 for r in after)
    assert sum(r["hitRate"] for r in after) < sum(r["hitRate"] for r in steady)
    status, out, _ = run_cli("--pods", "2", "--workload", str(changed), "--seed", "1", capsys=capsys)
    assert status == 0 and "at 1s the weights change to prefix=3: fresh picker indexes" in out


def test_a_weight_change_needs_a_clock(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"at": 0, "session": None, "body": body("a")}).replace('"at": 0, ', "") + "\n"
                    + json.dumps({"at": 1, "weights": {"prefix": 0}}) + "\n")
    from routing.workloads import load_weight_changes

    arrivals = load_arrivals(str(path))
    with pytest.raises(WorkloadError, match="changes weights or restarts pickers or pods at set times, so it needs a clock"):
        plan_load(arrivals, weight_changes=load_weight_changes(str(path)))


# -- requests sent at one instant -----------------------------------------------------------------

def test_requests_a_closed_loop_sends_at_once_reach_the_picker_in_an_order_of_their_own():
    # Four clients start together: round-robin hands out pods in the order the sends reach
    # it, which the workload's order does not set. A seed repeats its order.
    prompts = [f"prompt {n} " * 30 for n in range(4)]
    plan = LoadPlan((None,) * 4, concurrency=4)
    placements = {replay(prompts, plan, seed=seed, round_robin=True).placements for seed in range(20)}
    assert len(placements) > 1
    assert ("pod-0", "pod-1", "pod-0", "pod-1") in placements
    once, again = (replay(prompts, plan, seed=3, round_robin=True) for _ in range(2))
    assert once.placements == again.placements


def test_a_timed_burst_is_sent_in_any_order_but_a_sessions_turns_in_theirs():
    prompts = [f"prompt {n} " * 30 for n in range(4)]
    plan = LoadPlan(("chat", None, "chat", None), send_at=(0.0, 0.0, 0.0, 0.0))
    results = [replay(prompts, plan, seed=seed, round_robin=True) for seed in range(20)]
    assert len({result.placements for result in results}) > 1
    for result in results:
        # The chat's second turn waits for its first, whatever order the burst took.
        assert result.sent_at[0] == 0.0 and result.sent_at[2] >= result.finished_at[0] > 0.0


# -- the picker's hashes, computed beforehand -------------------------------------------------------

def test_a_fleet_picks_the_same_with_the_picker_hashes_prepared_beforehand():
    requests = [Request("m", f"tenant {n % 3} " * 60 + f"question {n}") for n in range(60)]
    plan = LoadPlan((None,) * 60, send_at=tuple(n * 0.01 for n in range(60)))
    results = []
    weights = {"queue": 2, "kvCache": 2, "prefix": 3}
    for hash_plan in (None, EndpointPicker(weights, seed=0).hash_plan(16)):
        prepared = prepare(requests, [4] * 60, EstimateTokenizer(), 16, hash_plan)
        assert len(prepared.picker_hashes) == (0 if hash_plan is None else 60)
        fleet = Fleet(("pod-0", "pod-1", "pod-2"), (EndpointPicker(weights, seed=1),), 1000, LIMITS, LATENCY, 0.01)
        results.append(simulate_under_load(prepared, plan, fleet, seed=1))
    assert results[1].placements == results[0].placements
    assert results[1].hit_tokens == results[0].hit_tokens and len(set(results[0].placements)) == 3


# -- a recorded run, replayed on the simulated servers ---------------------------------------------

@pytest.mark.parametrize("concurrency", [None, 4], ids=["at-the-recorded-times", "closed-loop"])
def test_replaying_a_runs_own_sends_and_pods_gives_its_first_token_times_and_hits(concurrency):
    # The benchmark replays each measured run, a closed loop, as one, in the order the run sent
    # its requests; here the "run" is a prediction, so the replay must reproduce it exactly,
    # at its send times or as its closed loop: same arrivals, same pods, the same steps' jitter.
    # (The closed loop's first four leave at one instant, in the seed's order: the replay, with
    # the same seed, sends that burst in the same order.)
    latency = dataclasses.replace(LATENCY, overhead_s=0.002, jitter=0.1)
    prompts = [f"tenant {n % 3} " * 60 + f"question {n}" for n in range(18)]
    requests = [Request("m", p) for p in prompts]
    prepared = prepare(requests, [8] * len(requests), EstimateTokenizer(), 16)
    names = ("pod-0", "pod-1")
    picker = EndpointPicker(with_default_weights(None), seed=2)
    run = simulate_under_load(prepared, LoadPlan((None,) * 18, concurrency=4),
                              Fleet(names, (picker,), 40, LIMITS, latency, 0.05, send_spacing=0.001), seed=2)
    replayed = replay_recorded(prepared, run.sent_at, run.placements, names, num_gpu_blocks=40, limits=LIMITS,
                               latency=latency, seed=2, send_spacing=0.001, concurrency=concurrency)
    assert replayed.placements == run.placements
    assert replayed.sent_at == pytest.approx(run.sent_at)
    assert replayed.ttfts == pytest.approx(run.ttfts)
    assert replayed.hit_tokens == run.hit_tokens


def test_a_replay_refuses_a_pod_it_has_no_server_for():
    prepared = prepare([Request("m", "a" * 64)], [4], EstimateTokenizer(), 16)
    with pytest.raises(ValueError, match=r"recorded pods \['vllm-c'\] are not among the replay's servers"):
        replay_recorded(prepared, [0.0], ["vllm-c"], ["vllm-a", "vllm-b"], num_gpu_blocks=40, limits=LIMITS,
                        latency=LATENCY)


def test_a_closed_loop_replay_sends_in_the_recorded_order_when_the_simulation_frees_a_client():
    # One client, one pod. The run sent request 1 first and request 0 5 ms later, when its
    # faster server had answered request 1. At the recorded times the replay would send request 0
    # into request 1's prefill; as the closed loop it is, it sends request 0 when the simulated
    # request 1 has finished, to an idle server.
    prepared = prepare([Request("m", "a" * 400), Request("m", "b" * 400)], [4, 4], EstimateTokenizer(), 16)
    recorded = dict(sent_at=[0.005, 0.0], pods=["pod-0", "pod-0"], names=["pod-0"], num_gpu_blocks=40,
                    limits=LIMITS, latency=LATENCY)
    alone = LATENCY.prefill_seconds(100, 0, LIMITS.max_num_batched_tokens)
    at_recorded_times = replay_recorded(prepared, **recorded)
    assert at_recorded_times.ttfts[0] > alone + 0.01  # it waited for request 1's step
    closed = replay_recorded(prepared, **recorded, concurrency=1)
    assert closed.sent_at[1] == 0.0
    assert closed.sent_at[0] == pytest.approx(closed.finished_at[1])
    assert closed.ttfts == pytest.approx((alone, alone))


def test_a_closed_loop_replay_keeps_a_sessions_turns_in_order():
    # Two clients, but both requests are turns of one chat: the second waits for the first to
    # finish, as the benchmark's client waits for it.
    prepared = prepare([Request("m", "a" * 400), Request("m", "a" * 400 + "b" * 40)], [4, 4], EstimateTokenizer(), 16)
    closed = replay_recorded(prepared, [0.0, 0.001], ["pod-0", "pod-0"], ["pod-0"], num_gpu_blocks=40, limits=LIMITS,
                             latency=LATENCY, concurrency=2, sessions=["chat", "chat"])
    assert closed.sent_at[1] == pytest.approx(closed.finished_at[0])
    assert closed.hit_tokens[1] == 96  # the first turn's six full blocks, computed before the second was sent


@pytest.mark.parametrize("options, message", [
    ({"concurrency": 0}, r"a closed-loop replay needs at least one client, not concurrency=0"),
    ({"concurrency": 2, "sessions": ["chat"]}, r"a replay needs a session \(or None\) for each of the 2 requests, not 1"),
])
def test_a_closed_loop_replay_refuses_what_it_cannot_replay(options, message):
    prepared = prepare([Request("m", "a" * 64), Request("m", "b" * 64)], [4, 4], EstimateTokenizer(), 16)
    with pytest.raises(ValueError, match=message):
        replay_recorded(prepared, [0.0, 0.1], ["pod-0", "pod-0"], ["pod-0"], num_gpu_blocks=40, limits=LIMITS,
                        latency=LATENCY, **options)


# -- what the server computes: server_tokens ------------------------------------------------------

def test_a_batch_completion_is_one_request_per_prompt_serially_and_refused_under_load():
    batch = [{"model": "m", "prompt": ["first prompt " * 20, "second prompt " * 20], "max_tokens": 4}]
    serial = run_prediction(to_requests(batch), replicas=2, seed=1)
    assert serial.picker.requests == 2  # vLLM runs (and counts) each prompt as a request
    plan = plan_load([Arrival(b, r) for b, r in zip(batch, to_requests(batch))], concurrency=1)
    with pytest.raises(PredictError, match="holds 2 prompts in one completion"):
        run_prediction(to_requests(batch), replicas=2, seed=1, load=Load(plan, (4,)), latency=LATENCY)


class FailingOrHealthyPod:
    """A pod for calibrate: it answers the probes, and its completions either succeed or fail."""

    def __init__(self, name: str, fails: bool):
        self.name, self.fails, self.completions = name, fails, 0

    def get(self, path: str) -> bytes:
        if path == "/v1/models":
            return json.dumps({"data": [{"id": "tiny", "max_model_len": 4096}]}).encode()
        if path == "/metrics":
            return b'vllm:num_requests_running{engine="0"} 0.0\n'
        raise CalibrateError(f"pod {self.name}: GET {path} answered HTTP 404")

    def post(self, path: str, body) -> bytes:
        if path == "/tokenize":
            return json.dumps({"tokens": list(range(len(body["prompt"].split())))}).encode()
        self.completions += 1
        if self.fails:
            raise CalibrateError(f"pod {self.name}: POST {path} answered HTTP 500")
        return b"data: [DONE]\n\n"


def test_calibrate_runs_every_phase_on_every_pod_together_and_reports_the_pod_that_failed():
    healthy, failing = FailingOrHealthyPod("a", fails=False), FailingOrHealthyPod("b", fails=True)
    with pytest.raises(CalibrateError, match="pod b: POST /v1/completions answered HTTP 500"):
        calibrate([healthy, failing], scrape_interval=1.0, progress=lambda line: None)
    # The healthy pod finished the first phase, then waited for the failing one, and stopped.
    assert healthy.completions == REQUESTS_PER_PHASE


def test_the_benchmarks_target_tallies_count_each_target_and_name_the_rows_that_miss():
    from benchmarks.underload import Row, Run, target_tallies

    def row(experiment, setting, measured, predicted):
        return Row(experiment, setting, (Run(*measured),), (Run(*predicted),))

    # (hit rate, busiest share, TTFT p50, TTFT p95): exactly at the share target meets it.
    rows = [row("chat", "default weights", (0.689, 16 / 24, 0.200, 0.4), (0.689, 68 / 120, 0.140, 0.4)),
            row("chat", "round-robin", (0.60, 0.5, 0.200, 0.4), (0.70, 0.5, 0.240, 0.4)),
            row("chat", "prefix=0", (0.45, 0.55, 1.000, 2.0), (0.46, 0.70, 0.760, 2.0))]
    assert target_tallies(rows) == [
        "hit rate within 3 points: 2/3 (missed: chat / round-robin (+10.0 pt))",
        "busiest pod's share within 10 points: 2/3 (missed: chat / prefix=0 (+15.0 pt))",
        "TTFT p50 within 25%: 2/3 (missed: chat / default weights (-30%))",
        "same ranking of the settings by hit rate: 0/1 (different: chat)"]

    # Over several runs a miss also says how uncertain the measured mean is: round-robin's chats
    # keep their pod or not, so its runs land on a few values and their mean moves.
    runs = tuple(Run(rate, 0.5, ttft, 0.4) for rate, ttft in ((0.546, 0.30), (0.617, 0.36), (0.689, 0.42)))
    spread = Row("chat", "round-robin", runs, (Run(0.58, 0.5, 0.50, 0.4),))
    assert target_tallies([spread])[0] == ("hit rate within 3 points: 0/1 (missed: chat / round-robin (-3.7 pt; "
                                           "standard error of the measured mean 4.1 pt over 3 runs))")
    # TTFT's: relative to the measured mean, as its error is (0.06 / √3 of 0.36 s).
    assert target_tallies([spread])[2] == ("TTFT p50 within 25%: 0/1 (missed: chat / round-robin (+39%; "
                                           "standard error of the measured mean 10% over 3 runs))")
    # And over several seeds, how uncertain the predicted mean is, in the same unit: 0.02 / √2
    # points; 0.072 / √2 s, 14% of the measured 0.36 s.
    seeds = (Run(0.57, 0.5, 0.449, 0.4), Run(0.59, 0.5, 0.551, 0.4))
    both = Row("chat", "round-robin", runs, seeds)
    assert target_tallies([both])[0] == ("hit rate within 3 points: 0/1 (missed: chat / round-robin (-3.7 pt; "
                                         "standard error of the measured mean 4.1 pt over 3 runs, of the predicted "
                                         "mean 1.0 pt over 2 seeds))")
    assert target_tallies([both])[2] == ("TTFT p50 within 25%: 0/1 (missed: chat / round-robin (+39%; "
                                         "standard error of the measured mean 10% over 3 runs, of the predicted "
                                         "mean 14% over 2 seeds))")


def test_the_benchmarks_table_shows_the_replay_and_the_servers_own_means_beside_the_predicted_ones():
    from benchmarks.underload import Row, Run, format_rows

    # The run with a failed request has no replay: the replay's error is against the other run's p50.
    # The engine's part is over the runs whose server reported it (the first did not).
    measured = (Run(0.8, 0.5, 0.130, 0.9, ttft_mean=0.450, itl_mean=0.0403, failed=1),
                Run(0.8, 0.5, 0.150, 0.9, ttft_mean=0.430, itl_mean=0.0397, failed=0, replayed_ttft_p50=0.120,
                    engine_ttft_p50=0.100))
    predicted = (Run(0.79, 0.5, 0.110, 0.8, ttft_mean=0.400, itl_mean=0.0416, engine_ttft_p50=0.080),)
    table = format_rows([Row("multi-tenant", "round-robin", measured, predicted)]).splitlines()
    assert table[0].count("|") == table[1].count("|") == table[2].count("|")
    assert table[2].endswith("| 140 / 110 ms | -21% | 900 / 800 ms | 120 ms | -20% | 100 / 80 ms | -20% | 440 / 400 ms "
                             "| 40.0 / 41.6 ms | 1 |")
    unreported = format_rows([Row("multi-tenant", "round-robin", measured[:1], predicted)]).splitlines()[-1]
    assert "| – | – | – | – |" in unreported


def test_the_engines_part_of_ttft_is_what_vllm_reports_per_request_scheduled_to_first_token():
    from benchmarks.underload import engine_ttfts

    # Two requests of 100 prompt tokens, sent 1 ms apart to one idle server: the first is
    # scheduled on arrival and prefilled in one step; the second arrives during that step,
    # waits for it, then shares the next with the first one's decode (a budget of 101 tokens).
    latency = dataclasses.replace(LATENCY, overhead_s=0.003, gateway_s=0.002)
    limits = EngineLimits(max_num_seqs=8, max_num_batched_tokens=101)
    prepared = prepare([Request("m", "a" * 400), Request("m", "b" * 400)], [4, 4], EstimateTokenizer(), 16)
    result = replay_recorded(prepared, [0.0, 0.001], ["pod-0", "pod-0"], ["pod-0"], num_gpu_blocks=40,
                             limits=limits, latency=latency)
    assert result.prompt_lens == (100, 100)
    first, second = latency.step_seconds(100, 0), latency.step_seconds(100, 1)
    assert result.ttfts == pytest.approx((0.005 + first, 0.005 + first + second - 0.001))
    assert result.queue_times == pytest.approx((0.0, 0.005 + first - 0.006))
    engine = engine_ttfts(result.ttfts, result.queue_times, result.prompt_lens, latency)
    assert engine == pytest.approx([first, second])


def test_a_sweep_under_load_replays_round_robin_once_per_seed_with_the_same_figures(capsys, monkeypatch, tmp_path):
    # Settings after the first run in forked children: each replay, wherever it runs, adds a line.
    log = tmp_path / "replays"
    real_replay = prediction_module.simulate_under_load

    def counting(prepared, plan, fleet, **options):
        with log.open("a") as lines:
            lines.write(("picker" if fleet.reads_metrics else "round-robin") + "\n")
        return real_replay(prepared, plan, fleet, **options)

    monkeypatch.setattr(prediction_module, "simulate_under_load", counting)
    argv = ("--pods", "2", "--workload", "seed-shared", "--concurrency", "3", "--seed", "5", "--runs", "2")
    status, out, err = run_cli(*argv, "--sweep", "prefix=0..2", "--json", capsys=capsys)
    assert status == 0
    replays = log.read_text().split()
    # Three settings and the deployed one, two seeds each; round-robin once a seed for them all.
    assert replays.count("round-robin") == 2 and replays.count("picker") == 8
    swept = {setting["weights"]["prefix"]: setting for setting in json.loads(out)["settings"]}

    # The same settings, each run from a setup of its own: nothing reused.
    parser = argparse.ArgumentParser()
    predict_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(["predict", *argv])
    for prefix in (0, 1, 2):
        weights = {**predict_command._setup(args).target.weights, "prefix": prefix}
        alone = [predict_command._setup(args).predict(args, weights, seed) for seed in (5, 6)]
        assert swept[prefix] == sweep.summarise({"prefix": prefix}, alone).to_json()


def test_a_latency_models_description_shows_every_term_in_readable_units():
    model = LatencyModel(step_s=0.0204, prefill_token_s=0.0009, decode_seq_s=0.00148, overhead_s=0.0057,
                         overhead_token_s=2e-6, context_token_s=8.7e-6, jitter=0.07, prefill_attention_s=1.7e-7)
    described = dataclasses.replace(model, gateway_s=0.0062).describe()
    for figure in ("step 20.40 ms", "900.0 µs per prompt token computed", "1.48 ms per decoding sequence",
                   "8.70 µs per cached context token", "170 ns per token pair a prefill attends over", "±7%",
                   "5.7 ms + 2.0 µs per prompt token outside the engine", "6.2 ms through the gateway"):
        assert figure in described, figure
    assert "no time through the gateway" in model.describe()


class TimedChannel:
    """A pod or gateway whose every completion takes `seconds` on a clock the test owns."""

    def __init__(self, name: str, seconds: float, clock: list[float]):
        self.name, self.seconds, self.clock, self.prompts = name, seconds, clock, []

    def post(self, path: str, body) -> bytes:
        self.prompts.append(body["prompt"])
        self.clock[0] += self.seconds
        return b"data: [DONE]\n\n"


def test_the_gateway_hop_is_the_median_round_trip_through_it_less_the_median_straight_to_a_pod():
    import random as random_module

    from routing.live.calibrate import GATEWAY_REQUESTS, gateway_hop

    now = [0.0]
    gateway = TimedChannel("serve", 0.030, now)
    pods = [TimedChannel("a", 0.020, now), TimedChannel("b", 0.024, now)]
    hop = gateway_hop(gateway, pods, "tiny", random_module.Random(1), clock=lambda: now[0])
    assert hop == pytest.approx(0.030 - 0.022)  # the median of 20 and 24 ms, half from each pod
    assert len(gateway.prompts) == GATEWAY_REQUESTS and len(pods[0].prompts) == len(pods[1].prompts)
    every = gateway.prompts + pods[0].prompts + pods[1].prompts
    assert len(set(every)) == len(every)  # unique prompts: nothing is a cache hit on either side
    assert gateway_hop(TimedChannel("fast", 0.010, now), pods, "tiny", random_module.Random(1),
                       clock=lambda: now[0]) == 0.0


def test_the_gateway_hop_delays_every_requests_first_token_serially_and_under_load():
    requests = [Request("m", f"prompt {n} " * 40) for n in range(6)]
    through = dataclasses.replace(LATENCY, gateway_s=0.007)
    serial = [run_prediction(requests, replicas=2, seed=1, latency=model) for model in (LATENCY, through)]
    assert [b - a for a, b in zip(*(p.ttfts[0] for p in serial))] == pytest.approx([0.007] * 6)
    # One request at a time under load: each finds its pod idle, so only the hop differs.
    plan = plan_load([Arrival(body(f"prompt {n} " * 40), r) for n, r in enumerate(requests)], concurrency=1, seed=1)
    loaded = [run_prediction(requests, replicas=2, seed=1, latency=model, load=Load(plan, (4,) * 6, LIMITS))
              for model in (LATENCY, through)]
    assert [b - a for a, b in zip(*(p.ttfts[0] for p in loaded))] == pytest.approx([0.007] * 6)


def test_the_benchmarks_prediction_of_each_setting_is_that_settings_own_side():
    from types import SimpleNamespace

    from benchmarks.underload import Experiment, Setting, predict_runs, tenants_workload

    # Four tenants' prompts, each its own prefix: the picker keeps a tenant on one pod, round-robin
    # spreads it, so their hit rates differ and each row must get its own.
    experiment = Experiment("tenants", "", tuple(tenants_workload("m", 4, 24, 6, seed=1)), 4)
    pair = SimpleNamespace(servers=("vllm-a", "vllm-b"), block_size=16, capacity_blocks=400)
    profile = LatencyProfile(dataclasses.replace(LATENCY, overhead_s=0.002), limits=LIMITS)
    picker, = predict_runs(pair, profile, experiment, EstimateTokenizer(), Setting("default"), [1])
    round_robin, = predict_runs(pair, profile, experiment, EstimateTokenizer(), Setting("rr", round_robin=True), [1])
    load = Load(plan_load(experiment.arrivals, concurrency=4, seed=1), (16,) * 24, LIMITS)
    prediction = run_prediction([a.request for a in experiment.arrivals], replicas=2, block_size=16,
                                capacity_blocks=400, tokenizer=EstimateTokenizer(), seed=1, load=load,
                                latency=profile.latency)
    assert (picker.hit_rate, round_robin.hit_rate) == (prediction.picker.hit_rate, prediction.round_robin.hit_rate)
    assert picker.hit_rate > round_robin.hit_rate
    assert (picker.ttft_p50, round_robin.ttft_p50) == (percentile(prediction.ttfts[0], 0.5),
                                                       percentile(prediction.ttfts[1], 0.5))
    assert 0 < picker.engine_ttft_p50 < picker.ttft_p50 and 0 < round_robin.engine_ttft_p50 < round_robin.ttft_p50


def test_a_process_cpu_seconds_are_what_the_process_counted_itself():
    import subprocess
    import sys

    from benchmarks.underload import cpu_seconds

    # A stand-in for `serve`: it burns about 0.3 s of CPU, reports its own count, then idles.
    burner = subprocess.Popen([sys.executable, "-c", "import sys, time\nwhile time.process_time() < 0.3: pass\n"
                               "print(time.process_time(), flush=True)\ntime.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        own_count = float(burner.stdout.readline())
        # /proc counts in clock ticks (10 ms here): within two of them.
        assert cpu_seconds(burner.pid) == pytest.approx(own_count, abs=0.02)
    finally:
        burner.kill()
        burner.wait(timeout=10)


def test_the_cpu_takers_are_cpu_seconds_per_second_of_the_block(monkeypatch):
    from benchmarks import underload

    # Over 10 s of the block, this process used 1.5 s of CPU, serve 4 s, the two API servers
    # 2 s and 3 s, and the hypervisor ran something else for 0.5 s of the cores' time.
    clocks = {"monotonic": iter([100.0, 110.0]), "process_time": iter([2.0, 3.5]),
              4242: iter([7.0, 11.0]), 1: iter([5.0, 7.0]), 2: iter([1.0, 4.0]), "steal": iter([20.0, 20.5])}
    monkeypatch.setattr(underload.time, "monotonic", lambda: next(clocks["monotonic"]))
    monkeypatch.setattr(underload.time, "process_time", lambda: next(clocks["process_time"]))
    monkeypatch.setattr(underload, "cpu_seconds", lambda pid: next(clocks[pid]))
    monkeypatch.setattr(underload, "stolen_cpu_seconds", lambda: next(clocks["steal"]))
    with underload.CpuTakers(4242, [1, 2]) as cpu:
        pass
    assert (cpu.client_cores, cpu.serve_cores, cpu.api_server_cores, cpu.stolen_cores) == pytest.approx(
        (0.15, 0.40, 0.50, 0.05))
    assert cpu.describe() == ("client 0.15, serve 0.40, API servers 0.50 of a core; the hypervisor took 0.05")


def test_the_reply_spacing_is_taken_over_the_replies_whose_first_tokens_one_step_sampled():
    from benchmarks.underload import Sent, same_step_spacing

    def reply(pod, sent_at, ttft, ended_at):
        return Sent(ttft, pod, sent_at, ended_at=ended_at)

    # Pod a sampled three first tokens at 1.000-1.003 s (one step) and one a step later; the
    # three ends came 8 and 12 ms apart as each sent its next request. Pod b's first token in
    # the same millisecond is another pod's step, and a failed reply has no end: both left out.
    replies = [reply("a", 0.0, 1.000, 1.500), reply("a", 0.001, 1.001, 1.508), reply("a", 0.002, 1.001, 1.520),
               reply("a", 0.0, 1.040, 1.530), reply("b", 0.0, 1.001, 1.400), Sent(None, "a", 0.0)]
    assert same_step_spacing(replies) == pytest.approx(0.010)
    assert same_step_spacing([reply("a", 0.0, 1.0, 1.5), reply("a", 0.0, 1.04, 1.53)]) is None
    assert same_step_spacing([reply("a", 0.0, 1.0, 1.5), reply("b", 0.0, 1.0, 1.53)]) is None
    assert same_step_spacing([Sent(None, "a", 0.0)]) is None


def test_stolen_cpu_seconds_is_the_steal_column_of_proc_stat(monkeypatch, tmp_path):
    import os

    from benchmarks import underload

    # Two cores' sums; steal, the 8th figure, is 250 ticks: 2.5 s at 100 ticks a second.
    stat = tmp_path / "stat"
    stat.write_text("cpu  9130 14 779 5464 55 0 20 250 0 0\ncpu0 4039 6 341 3321 15 0 7 120 0 0\n")
    monkeypatch.setattr(os, "sysconf", lambda name: 100)
    assert underload.stolen_cpu_seconds(stat) == 2.5


def test_the_benchmark_measures_the_settings_in_turns_and_tables_each_settings_own_runs(monkeypatch):
    import contextlib
    import io
    from types import SimpleNamespace

    from benchmarks import underload

    # Stand-ins for the servers: each measured run returns its own place in the order of runs.
    order = []

    def measure(pair, experiment, setting, profile, seed):
        order.append((experiment.name, setting, seed))
        run = underload.Run(hit_rate=len(order) / 100, busiest_share=0.5, ttft_p50=0.1, ttft_p95=0.2)
        return run, SimpleNamespace(pods=[]), []

    spacings = []  # the send spacing each replay and prediction was given
    monkeypatch.setattr(underload, "measure", measure)
    monkeypatch.setattr(underload, "ServerCountedTokenizer", lambda url, arrivals: None)
    monkeypatch.setattr(underload, "prepare", lambda *args: None)
    monkeypatch.setattr(underload, "serve_process", lambda *args: contextlib.nullcontext(SimpleNamespace(url="")))
    monkeypatch.setattr(underload, "reply_spacing_seconds", lambda *args: 0.012)
    monkeypatch.setattr(underload, "replayed_ttft_p50", lambda *args: spacings.append(args[-1]) or 0.0)
    predicted = [underload.Run(hit_rate=0.5, busiest_share=0.5, ttft_p50=0.1, ttft_p95=0.2)]
    monkeypatch.setattr(underload, "predict_runs", lambda *args: spacings.append(args[-1]) or predicted)
    pair = SimpleNamespace(tokenizer=SimpleNamespace(model="tiny"), servers=[SimpleNamespace(url="")], block_size=16,
                           backends={}, log_dir=Path("logs"))

    out = io.StringIO()
    rows = underload.compare(pair, lambda experiment: None, runs=2, seeds=1, out=out, only=["multi-tenant"])

    # The client's spacing, measured once before the workload's runs, goes to every replay and prediction.
    assert "replies one step ends reach the client 12.0 ms apart" in out.getvalue()
    settings = underload.SETTINGS
    # Two replays and one prediction a setting, and the sticky row predicted at upstream's throughput.
    assert spacings == [0.012] * (3 * len(settings) + 1)
    assert "multi-tenant / sticky predicted at the calibrated (none: the profile has no peak" in out.getvalue()

    # A round of every setting, then the next round: drift over the minutes slows all alike.
    assert [(setting, seed) for _, setting, seed in order] == (
        [(setting, 100) for setting in settings] + [(setting, 101) for setting in settings])
    assert [row.setting for row in rows] == [setting.label for setting in settings]
    # Each row holds its own setting's two runs: the 1st and the 5th, the 2nd and the 6th, ...
    count = len(settings)
    assert [[run.hit_rate for run in row.measured] for row in rows] == [
        [(index + 1) / 100, (index + 1 + count) / 100] for index in range(count)]


def test_the_benchmark_client_releases_its_first_requests_together(monkeypatch):
    """`predict --concurrency N` sends the first N at one instant; the benchmark's client must
    too, however far apart its threads start, and must not wait for clients that have nothing
    to send yet (more clients than chats)."""
    import threading
    import time

    from benchmarks import underload
    from benchmarks.underload import Sent, chat_workload

    events = []  # in the order they happened: "started" as each client thread starts, then each send

    class SlowToStart(threading.Thread):
        def start(self):
            events.append("started")
            super().start()
            time.sleep(0.05)  # time for a client released early to send before the next one starts

    sends = []  # the requests' turn and chat, as sent

    def send(client, body):
        events.append("send")
        sends.append(body["messages"][-1]["content"])
        return Sent(0.01, "vllm-a", 0.0)

    monkeypatch.setattr(underload.threading, "Thread", SlowToStart)
    monkeypatch.setattr(underload, "_send", send)
    arrivals = chat_workload("tiny", sessions=2, turns=3, segments=1)

    results = underload.drive("http://127.0.0.1:9", arrivals, concurrency=4)

    assert all(result.ttft == 0.01 for result in results)
    # Two chats, so two first requests: neither went out before the second client was started.
    assert events.index("send") > [index for index, event in enumerate(events) if event == "started"][1]
    # A chat's turns still go one at a time, in order.
    for chat in (0, 1):
        asked = [question for question in sends if f"of chat {chat}:" in question]
        assert [question.split(" of")[0] for question in asked] == ["Question 0", "Question 1", "Question 2"]
