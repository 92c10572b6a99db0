"""The "sticky until saturated" recipe: its config, the picker model running it (the prefix-cache-
affinity filter, the token-load scorer, the in-flight load they read) and its simulation under load."""

import json
import random
import urllib.request

import pytest
from fake_http import FakeModelServer

from routing.live.serve import start_gateway
from routing.picker.endpoint_picker import EndpointPicker, PodMetrics, Request
from routing.picker.prefix import EstimateTokenizer
from routing.simulation.fleet import Fleet, prepare, simulate_under_load
from routing.simulation.latency import DEFAULT_LATENCY, DEFAULT_LIMITS
from routing.simulation.load_plan import LoadPlan
from routing.simulation.predict import format_explanation
from routing.simulation.prediction import Load, run_prediction
from settings.picker_config import (STICKY_PARAMETERS, PickerConfigError, endpoint_picker_config_yaml,
                                    load_endpoint_picker_config, render_sticky_picker_config)

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
# 4,096 characters: 1,024 pseudo-tokens, 16 of the picker's 64-token blocks.
PREAMBLE = "You answer from the rules. " * 151 + "x" * 19


def config(**parameters):
    return load_endpoint_picker_config(render_sticky_picker_config(parameters))


def sticky(seed=0, **parameters) -> EndpointPicker:
    return EndpointPicker(config(**parameters), seed=seed)


def pods(*names: str) -> list[PodMetrics]:
    return [PodMetrics(name, block_size=16, num_gpu_blocks=10_000) for name in names]


def question(number: int) -> Request:
    # ~200 tokens of its own after the shared preamble.
    return Request(model=MODEL, prompt=PREAMBLE + f" Question {number}: " + "why? " * 160)


def in_flight(picker: EndpointPicker, pod: str) -> tuple[int, int]:
    return picker.in_flight()["inflight-load-producer"].get(pod, (0, 0))


# -- the rendered config --------------------------------------------------------------------------

def test_the_recipe_renders_the_filter_with_exactly_the_parameters_given_in_a_stable_order():
    given = {"explorationProbability": 0.01, "maxTTFTPenaltyMs": 5000, "peakPrefillThroughput": 4000}
    document = render_sticky_picker_config(given)
    assert document["plugins"][0] == {"type": "prefix-cache-affinity-filter", "parameters": {
        "maxTTFTPenaltyMs": 5000, "peakPrefillThroughput": 4000, "explorationProbability": 0.01}}
    assert [plugin["type"] for plugin in document["plugins"]] == [
        "prefix-cache-affinity-filter", "token-load-scorer", "approx-prefix-cache-producer", "inflight-load-producer",
        "max-score-picker", "single-profile-handler"]
    assert document["schedulingProfiles"] == [{"name": "default", "plugins": [
        {"pluginRef": "prefix-cache-affinity-filter"}, {"pluginRef": "token-load-scorer", "weight": 1},
        {"pluginRef": "max-score-picker"}]}]
    # The same parameters in another order give the same text (and hash); none gives no parameters.
    reordered = render_sticky_picker_config(dict(reversed(given.items())))
    assert endpoint_picker_config_yaml(reordered) == endpoint_picker_config_yaml(document)
    assert render_sticky_picker_config({})["plugins"][0] == {"type": "prefix-cache-affinity-filter"}
    loaded = load_endpoint_picker_config(document)
    assert loaded.warnings == ()
    assert {key: loaded.plugin("prefix-cache-affinity-filter").parameters[key] for key in STICKY_PARAMETERS} == {
        "maxTTFTPenaltyMs": 5000, "peakPrefillThroughput": 4000, "affinityThreshold": 0.8,
        "explorationProbability": 0.01}


def test_sticky_parameters_are_upstreams_names_and_defaults():
    assert dict(STICKY_PARAMETERS) == {"maxTTFTPenaltyMs": 18000, "peakPrefillThroughput": 15928,
                                       "affinityThreshold": 0.8, "explorationProbability": 0}


@pytest.mark.parametrize("parameters, named", [
    ({"affinityThreshold": 1.5}, "affinityThreshold: 1.5 is above 1.0"),
    ({"explorationProbability": -0.1}, "explorationProbability: -0.1 is outside [0, 1]"),
    ({"explorationProbability": 1.2}, "explorationProbability: 1.2 is outside [0, 1]"),
    ({"maxTTFTPenaltyMs": -1}, "maxTTFTPenaltyMs: -1 is negative"),
    ({"peakPrefillThroughput": -5}, "peakPrefillThroughput: -5 is negative"),
    ({"peakPrefillThroughput": 0}, "peakPrefillThroughput: 0 with the TTFT load gate on"),
    ({"peakPrefillThroughput": 0, "maxTTFTPenaltyMs": 5000}, "peakPrefillThroughput: 0 with the TTFT load gate on"),
    ({"affinityThreshold": "high"}, "affinityThreshold: 'high' is not a number"),
])
def test_a_bad_parameter_is_refused_in_one_line_naming_it_with_the_fix(parameters, named):
    with pytest.raises(PickerConfigError) as error:
        config(**parameters)
    message = str(error.value)
    assert message.startswith(f"plugins[0].parameters.{named}") and "\n" not in message
    assert "e.g." in message


def test_a_zero_throughput_is_accepted_when_the_gate_never_divides_by_it():
    assert config(peakPrefillThroughput=0, maxTTFTPenaltyMs=0).plugin(
        "prefix-cache-affinity-filter").parameters["peakPrefillThroughput"] == 0


def test_an_unknown_recipe_parameter_is_refused_with_a_did_you_mean():
    with pytest.raises(PickerConfigError, match=r"maxTTFTPenalty=5000: not a parameter of the sticky recipe \(did you "
                                                r"mean maxTTFTPenaltyMs\?\)"):
        render_sticky_picker_config({"maxTTFTPenalty": 5000})


def test_producers_the_plugins_require_are_created_as_upstream_creates_them():
    header = {"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig"}
    alone = load_endpoint_picker_config({**header, "plugins": [{"type": "prefix-cache-affinity-filter"},
                                                               {"type": "active-request-scorer"}]})
    assert {spec.name: spec.origin for spec in alone.plugins if spec.role == "producer"} == {
        "approx-prefix-cache-producer": "added: prefix-cache-affinity-filter needs its prefix match info",
        "inflight-load-producer": "added: prefix-cache-affinity-filter needs its in-flight load"}
    # The token-load scorer also reads the request's uncached tokens, which have no default
    # producer: upstream does not start without an inflight-load-producer declared.
    with pytest.raises(PickerConfigError, match=r"plugins\[0\]: token-load-scorer \(token-load-scorer\) reads the "
                                                r"uncached request tokens .* declare one: "
                                                r"\{type: inflight-load-producer\}"):
        load_endpoint_picker_config({**header, "plugins": [{"type": "token-load-scorer"}]})
    with pytest.raises(PickerConfigError, match=r"plugins\[0\].parameters.inFlightLoadProducerName: no plugin named "
                                                r"'mine' produces in-flight load"):
        load_endpoint_picker_config({**header, "plugins": [
            {"type": "active-request-scorer", "parameters": {"inFlightLoadProducerName": "mine"}}]})


def test_the_load_scorers_parameters_are_settled_as_upstreams_factories_settle_them():
    header = {"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig"}
    loaded = load_endpoint_picker_config({**header, "plugins": [
        {"type": "token-load-scorer", "parameters": {"queueThresholdTokens": 0}},
        {"type": "active-request-scorer",
         "parameters": {"idleThreshold": -2, "maxBusyScore": 3, "requestTimeout": "2m"}},
        {"type": "inflight-load-producer"}]})
    assert loaded.plugin("token-load-scorer").parameters["queueThresholdTokens"] == 4194304
    active = loaded.plugin("active-request-scorer").parameters
    assert (active["idleThreshold"], active["maxBusyScore"]) == (0, 1.0)
    assert len(loaded.warnings) == 4  # each replaced value, and the deprecated requestTimeout


# -- the picker model -------------------------------------------------------------------------------

def test_a_shared_prefix_batch_sticks_to_its_pod_until_the_ttft_gap_passes_the_penalty_then_spreads():
    # At 1,000 tokens/s a pod's estimated TTFT in ms is its in-flight tokens.
    picker = sticky(maxTTFTPenaltyMs=1000, peakPrefillThroughput=1000)
    fleet = pods("a", "b", "c")
    home = picker.pick(question(0), fleet, key="warm").pod
    picker.first_chunk("warm")
    picker.finished("warm")
    stuck = 0
    for number in range(1, 20):
        gap = in_flight(picker, home)[1]  # the other pods have nothing in flight
        decision = picker.pick(question(number), fleet, key=number)
        outcome = decision.filters[0]
        if gap <= 1000:
            assert (decision.pod, outcome.outcome, outcome.kept) == (home, "sticky", (home,))
            stuck += 1
            continue
        # The gate breaks: every pod is kept and the token-load scorer takes the least loaded.
        assert outcome.outcome == "gate-broken" and outcome.penalty_ms == gap and decision.pod != home
        assert outcome.best_sticky == home and outcome.in_flight_tokens[home] == gap
        break
    else:
        pytest.fail("the load gate never broke")
    assert stuck >= 3
    # Once the first chunks come back the prefill load drains, and requests stick again.
    for number in range(1, stuck + 2):
        picker.first_chunk(number)
    decision = picker.pick(question(99), fleet, key=99)
    assert decision.filters[0].outcome == "sticky" and decision.pod in decision.filters[0].kept


def test_a_zero_penalty_always_sticks():
    picker = sticky(maxTTFTPenaltyMs=0, peakPrefillThroughput=1)
    fleet = pods("a", "b", "c")
    picks = {picker.pick(question(number), fleet, key=number).pod for number in range(40)}
    assert len(picks) == 1
    assert in_flight(picker, picks.pop())[0] == 40
    assert "always sticks" in picker.pick(question(40), fleet).filters[0].describe()


def test_the_exploration_draw_comes_from_the_seed():
    def run(seed):
        picker = sticky(seed=seed, explorationProbability=0.5)
        fleet = pods("a", "b", "c")
        decisions = [picker.pick(question(number), fleet) for number in range(40)]
        return [(d.pod, d.filters[0].outcome) for d in decisions]

    first = run(7)
    assert run(7) == first
    assert run(8) != first
    outcomes = [outcome for _, outcome in first[1:]]  # request 0 finds no sticky pod
    assert 5 < outcomes.count("explored") < 35 and "sticky" in outcomes


def test_a_request_counts_its_uncached_blocks_and_the_tokens_past_the_indexed_prefix():
    picker = sticky()
    fleet = pods("a", "b")
    first = picker.pick(Request(model=MODEL, prompt="y" * 512), fleet, key=1).pod
    assert in_flight(picker, first) == (1, 128)  # 512 characters: 128 pseudo-tokens, two 64-token blocks
    # 100 tokens past the cached two blocks: one block and a partial one, counted whole as upstream counts it.
    assert picker.pick(Request(model=MODEL, prompt="y" * 512 + "w" * 400), fleet, key=2).pod == first
    assert in_flight(picker, first) == (2, 128 + 128)
    picker.first_chunk(1)
    assert in_flight(picker, first) == (2, 128)
    picker.finished(1)
    picker.finished(2)
    assert in_flight(picker, first) == (0, 0)


def test_tokens_past_a_capped_prefix_are_the_estimate_backends_pseudo_tokens():
    document = render_sticky_picker_config({})
    document["plugins"][2]["parameters"] = {"maxPrefixTokensToMatch": 128}  # two blocks indexed
    picker = EndpointPicker(load_endpoint_picker_config(document), seed=0)
    fleet = pods("a", "b")
    pod = picker.pick(Request(model=MODEL, prompt="q" * 4000), fleet, key=1).pod
    assert in_flight(picker, pod) == (1, 1000)  # 4,000 characters, 4 per token
    picker.pick(Request(model=MODEL, prompt="q" * 4000), fleet, key=2)
    assert in_flight(picker, pod) == (2, 1000 + 872)  # the two indexed blocks are cached now


def test_estimated_output_tokens_respect_max_tokens_and_stay_until_the_end():
    document = render_sticky_picker_config({})
    document["plugins"][3]["parameters"] = {"addEstimatedOutputTokens": True}
    picker = EndpointPicker(load_endpoint_picker_config(document), seed=0)
    body = {"model": MODEL, "prompt": "z" * 512, "max_tokens": 7}
    pod = picker.pick(Request.from_openai_body(body, "completions"), pods("a", "b"), key="r").pod
    assert in_flight(picker, pod) == (1, 135)  # 128 input + min(round(128 x 1.5), 7)
    picker.first_chunk("r")
    assert in_flight(picker, pod) == (1, 135)
    picker.finished("r")
    assert in_flight(picker, pod) == (0, 0)


@pytest.mark.parametrize("api, body, cap", [
    ("chat", {"max_tokens": 5, "max_completion_tokens": 9}, 9),
    ("chat", {"max_tokens": 5, "max_completion_tokens": -1}, 5),  # a negative cap is skipped for the next key
    ("completions", {"max_tokens": 2.5}, None),
    ("completions", {"max_tokens": True}, None),
    ("responses", {"max_output_tokens": 4, "max_tokens": 8}, 4),
    ("embeddings", {"max_tokens": 4}, None),
    ("generate", {"sampling_params": {"max_tokens": 4.0}}, 4),
])
def test_the_clients_output_cap_is_read_as_upstreams_parsers_read_it(api, body, cap):
    inputs = {"chat": {"messages": [{"role": "user", "content": "hi"}]}, "completions": {"prompt": "hi"},
              "responses": {"input": "hi"}, "embeddings": {"input": "hi"}, "generate": {"token_ids": [1, 2]}}
    request = Request.from_openai_body({"model": MODEL, **inputs[api], **body}, api)
    assert request.max_output_tokens == cap


def test_a_pick_without_a_key_is_not_counted_in_flight():
    picker = sticky()
    pod = picker.pick(question(0), pods("a", "b")).pod
    assert in_flight(picker, pod) == (0, 0)


def test_the_latency_predictor_is_refused_by_the_model_not_the_loader():
    predictor = {"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig", "plugins": [
        {"type": "prefix-cache-affinity-filter", "parameters": {"ttftSource": "latencyPredictor"}}]}
    loaded = load_endpoint_picker_config(predictor)
    assert loaded.plugin("predicted-latency-producer").origin.startswith("added:")
    with pytest.raises(PickerConfigError, match="ttftSource latencyPredictor reads each pod's TTFT from the latency "
                                                "predictor's sidecars, which this model does not have"):
        EndpointPicker(loaded)
    # Without the load gate the source is never read.
    predictor["plugins"][0]["parameters"]["maxTTFTPenaltyMs"] = 0
    EndpointPicker(load_endpoint_picker_config(predictor))


def test_picker_versions_before_the_filter_refuse_it():
    with pytest.raises(PickerConfigError, match="the llm-d router has it since v0.9; picker version v0.8 has no such "
                                                "plugin"):
        EndpointPicker(config(), picker_version="v0.8")
    EndpointPicker(config(), picker_version="v0.9")


def test_the_breakdown_says_which_pods_the_filter_kept_and_why():
    picker = sticky(maxTTFTPenaltyMs=1000, peakPrefillThroughput=1000)
    fleet = pods("a", "b")
    home = picker.pick(question(0), fleet).pod
    shown = json.loads(json.dumps(picker.pick(question(1), fleet).breakdown().as_dict()))
    (outcome,) = shown["filters"]
    assert outcome["outcome"] == "sticky" and outcome["kept"] == [home] and outcome["candidates"] == ["a", "b"]
    assert outcome["prefixScores"][home] >= 0.8 > outcome["prefixScores"][({"a", "b"} - {home}).pop()]
    assert [pod["pod"] for pod in shown["pods"]] == [home]  # only the kept pod is scored


# -- under load -------------------------------------------------------------------------------------

def shared_prefix_workload(count: int) -> list[Request]:
    rng = random.Random(3)
    return [Request(model=MODEL, prompt=f"{PREAMBLE} Question {n}: " + " ".join(str(rng.random()) for _ in range(20)))
            for n in range(count)]


def test_under_load_a_tight_penalty_spreads_what_the_weighted_default_piles_on_one_pod():
    requests = shared_prefix_workload(90)
    load = Load(LoadPlan(sessions=(None,) * len(requests), concurrency=24), output_lens=(64,) * len(requests))

    def predicted(picker_config=None):
        prediction = run_prediction(requests, replicas=3, seed=1, load=load, picker_config=picker_config)
        result = prediction.picker
        busiest = max(pod.requests for pod in result.pods) / result.requests
        return busiest, result.hit_rate, sorted(prediction.ttfts[0])[len(requests) // 2]

    weights = predicted()
    spread = predicted(config(maxTTFTPenaltyMs=50))
    stuck = predicted(config(maxTTFTPenaltyMs=0))
    assert weights[0] == stuck[0] == 1.0  # the prefix pod takes every request
    assert spread[0] < 0.5  # the load gate sends the overflow to the other pods...
    assert spread[1] > weights[1] - 0.05  # ...which soon hold the prefix too: few hits lost
    assert spread[2] < weights[2]  # and the median request starts sooner


def test_the_simulation_tells_the_picker_of_first_tokens_and_ends():
    requests = shared_prefix_workload(40)
    picker = sticky(maxTTFTPenaltyMs=50)
    prepared = prepare(requests, (16,) * len(requests), EstimateTokenizer(), 16, picker.hash_plan(16))
    fleet = Fleet(("pod-0", "pod-1", "pod-2"), (picker,), 10_000, DEFAULT_LIMITS, DEFAULT_LATENCY)
    result = simulate_under_load(prepared, LoadPlan((None,) * len(requests), concurrency=16), fleet, seed=2)
    assert len(set(result.placements)) > 1  # the gate broke on load counted in flight...
    assert all(counts == (0, 0) for counts in picker.in_flight()["inflight-load-producer"].values())  # ...all released


def test_explain_shows_the_filters_work(capsys):
    requests = shared_prefix_workload(30)
    load = Load(LoadPlan(sessions=(None,) * len(requests), concurrency=12), output_lens=(64,) * len(requests))
    prediction = run_prediction(requests, replicas=3, seed=1, load=load, explain=20,
                                picker_config=config(maxTTFTPenaltyMs=50))
    text = format_explanation(prediction)
    assert "prefix-cache-affinity-filter: " in text and "prefix score" in text and "kept" in text


# -- serve ------------------------------------------------------------------------------------------

def test_serve_tells_the_picker_of_the_first_chunk_and_the_end_of_each_request():
    servers = [FakeModelServer("a", chunks=3).start(), FakeModelServer("b", chunks=3).start()]
    try:
        with start_gateway({s.name: s.url for s in servers}, seed=1, config=config()) as gateway:
            picker = gateway.gateway.picker
            calls = []  # each lifecycle call, with what the picker holds in flight right after it

            class Recorded:
                """The gateway's picker, its lifecycle calls recorded."""

                def __getattr__(self, name):
                    return getattr(picker, name)

                def first_chunk(self, key):
                    picker.first_chunk(key)
                    calls.append(("first_chunk", picker.in_flight()["inflight-load-producer"]))

                def finished(self, key):
                    picker.finished(key)
                    calls.append(("finished", picker.in_flight()["inflight-load-producer"]))

            gateway.gateway.picker = Recorded()
            streamed = {"model": "m", "prompt": "hello " * 100, "stream": True}  # 150 tokens, three blocks
            for body in (streamed, {**streamed, "stream": False}):
                request = urllib.request.Request(gateway.url + "/v1/completions", data=json.dumps(body).encode(),
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=10) as response:
                    pod = response.headers["x-routed-to"]
                    response.read()
        # Stopping the gateway waits for its handlers, so both requests have ended.
        assert calls == [("first_chunk", {pod: (1, 0)}), ("finished", {pod: (0, 0)}),
                         ("first_chunk", {pod: (1, 0)}), ("finished", {pod: (0, 0)})]
    finally:
        for server in servers:
            server.stop()
