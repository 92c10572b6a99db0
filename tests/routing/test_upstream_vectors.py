"""Upstream's own unit-test vectors for the sticky recipe's plugins (llm-d router v0.10.0), run
through the picker model: the prefix-cache-affinity filter, the token-load and active-request
scorers and the in-flight-load producer with its token estimator. Each case names its source
test; the cases the model cannot run are listed in the data with the reason."""

import json
import random
from pathlib import Path

import pytest

from routing.picker.load import (AffinityFilter, InFlightLoad, active_request_scores, estimate_output,
                                 token_load_score, uncached_input_tokens)
from settings.picker_config import PickerConfigError, load_endpoint_picker_config

DATA = Path(__file__).parent / "data"
FILTER = json.loads((DATA / "upstream-prefix-cache-affinity-filter.json").read_text())
TOKEN_LOAD = json.loads((DATA / "upstream-token-load-scorer.json").read_text())
ACTIVE_REQUEST = json.loads((DATA / "upstream-active-request-scorer.json").read_text())
INFLIGHT = json.loads((DATA / "upstream-inflight-load-producer.json").read_text())


def cases(data: dict, kind: str):
    return pytest.mark.parametrize("case", data[kind], ids=[case["test"] for case in data[kind]])


def loaded(plugin_type: str, parameters: dict | None):
    plugin = {"type": plugin_type, **({"parameters": parameters} if parameters is not None else {})}
    return load_endpoint_picker_config({"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
                                        "plugins": [plugin]})


def test_every_vector_file_names_its_upstream_source_and_why_each_skipped_case_is_skipped():
    for data in (FILTER, TOKEN_LOAD, ACTIVE_REQUEST, INFLIGHT):
        assert data["source"].startswith("llm-d/llm-d-router pkg/epp/") and data["source"].endswith("@v0.10.0")
        assert all(skipped["test"] and skipped["reason"] for skipped in data["skipped"])


# -- prefix-cache-affinity-filter -------------------------------------------------------------------

@cases(FILTER, "filter")
def test_the_filter_keeps_the_pods_upstream_keeps(case):
    endpoints = case["endpoints"]
    # makeEndpoint: prefixMatch of 100 blocks; -1 leaves the attribute out (score 0, no tokens).
    scores = {e["name"]: e["prefixMatch"] / 100 for e in endpoints if e["prefixMatch"] >= 0}
    tokens = {e["name"]: e["tokens"] for e in endpoints if e["tokens"] >= 0}
    outcome = AffinityFilter("test", case["config"]).run([e["name"] for e in endpoints], scores, tokens,
                                                         random.Random(0))
    assert list(outcome.kept) == case["kept"]


@cases(FILTER, "consumes")
def test_the_filter_requires_the_producers_upstream_creates_for_it(case):
    config = loaded("prefix-cache-affinity-filter", case["parameters"])
    created = {spec.name for spec in config.plugins if spec.origin.startswith("added:")}
    # The prefix producer always (its match info is required), the gate's source when the gate is on.
    assert created - {"approx-prefix-cache-producer", "single-profile-handler", "max-score-picker"} == set(
        case["creates"])
    assert "approx-prefix-cache-producer" in created


@cases(FILTER, "factory")
def test_the_loader_decodes_and_refuses_the_filter_as_its_factory_does(case):
    if "refused" in case:
        with pytest.raises(PickerConfigError) as error:
            loaded("prefix-cache-affinity-filter", case["parameters"])
        assert f".parameters.{case['refused']}:" in str(error.value)
        return
    parameters = loaded("prefix-cache-affinity-filter", case["parameters"]).plugin(
        "prefix-cache-affinity-filter").parameters
    assert {key: parameters[key] for key in case["expect"]} == case["expect"]


# -- token-load-scorer and active-request-scorer -------------------------------------------------------

@cases(TOKEN_LOAD, "cases")
def test_the_token_load_scorer_scores_as_upstream(case):
    for endpoint in case["endpoints"]:
        score = token_load_score(endpoint["inFlight"] + endpoint["uncached"], float(TOKEN_LOAD["threshold"]))
        assert score == pytest.approx(endpoint["score"], abs=1e-4)


@cases(ACTIVE_REQUEST, "cases")
def test_the_active_request_scorer_scores_as_upstream(case):
    counts = {f"pod-{index}": count for index, count in enumerate(case["requests"])}
    scores = active_request_scores(counts, case["idleThreshold"], case["maxBusyScore"])
    assert list(scores.values()) == pytest.approx(case["scores"], abs=case.get("tolerance", 0))


# -- inflight-load-producer and its token estimator --------------------------------------------------

def producer(config: dict) -> InFlightLoad:
    spec = loaded("inflight-load-producer", config).plugin("inflight-load-producer")
    return InFlightLoad(spec.name, spec.parameters, None)


@cases(INFLIGHT, "lifecycle")
def test_the_producer_counts_and_releases_as_upstream(case):
    load = producer(case["config"])
    for step in case["steps"]:
        if "send" in step:
            pod, match = step["pod"], step.get("match")
            load.produce([pod], step.get("inputTokens", 0), None,
                         None if match is None else ({pod: match[0]}, match[1], match[2]))
            load.send(step["send"], pod)
        elif "start" in step:
            load.first_chunk(step["start"])
        elif "end" in step or "reap" in step:
            load.finished(step.get("end", step.get("reap")))
        elif "start+end" in step:
            load.first_chunk(step["start+end"])
            load.finished(step["start+end"])
        elif "expect" in step:
            held = {pod: [load.requests.get(pod, 0), load.tokens.get(pod, 0)] for pod in step["expect"]}
            assert held == step["expect"]
        else:
            counts = {pod: load.requests.get(pod, 0) for pod in case["pods"]}
            assert active_request_scores(counts, 0, 1.0) == step["expectActive"]


@cases(INFLIGHT, "produce")
def test_the_producer_tells_the_scorer_what_the_request_adds(case):
    load = producer(case["config"])
    load.produce(case["pods"], case["inputTokens"], None, None)
    assert load.request_tokens == case["uncached"]


@cases(INFLIGHT, "uncached")
def test_cached_prefix_tokens_are_not_counted(case):
    match = tuple(case["match"]) if case["match"] is not None else None
    assert uncached_input_tokens(case["inputTokens"], match) == case["expected"]


@cases(INFLIGHT, "output")
def test_output_estimates_agree(case):
    assert estimate_output(case["input"], case["ratio"], case.get("clientCap"), case.get("operatorCap")) == case[
        "expected"]


@cases(INFLIGHT, "estimate")
def test_total_estimates_agree(case):
    # Estimate: input + EstimateOutput(input), 0 without input.
    output = estimate_output(case["input"], case["ratio"], case.get("clientCap"), None)
    assert (case["input"] + output if case["input"] > 0 else 0) == case["expected"]


@cases(INFLIGHT, "factory")
def test_the_loader_refuses_the_producer_as_its_factory_does(case):
    with pytest.raises(PickerConfigError) as error:
        loaded("inflight-load-producer", case["parameters"])
    assert f".parameters.{case['refused']}:" in str(error.value)
