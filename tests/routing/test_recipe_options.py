"""The sticky recipe on the command line: --routing, sweeping its parameters, the `pulumi config set`
lines for them, and the peak prefill throughput calibrate records and predict and serve read."""

import argparse

import pytest

from routing.live.calibrate import chunk_tokens, peak_prefill
from routing.options import routing_option
from routing.simulation import sweep
from routing.simulation.latency import (DEFAULT_LATENCY, EngineLimits, LatencyProfile, PeakPrefill, ProfileError)


def test_routing_option_reads_a_recipe_and_its_parameters_by_upstream_names():
    assert routing_option("weights") == ("weights", {})
    assert routing_option("sticky") == ("sticky", {})
    assert routing_option("sticky,maxTTFTPenaltyMs=5000,affinityThreshold=0.9") == (
        "sticky", {"maxTTFTPenaltyMs": 5000, "affinityThreshold": 0.9})


@pytest.mark.parametrize(("text", "words"), [
    ("stiky", "starts with the recipe, one of weights, sticky"),
    ("sticky,maxTtftPenaltyMs=5", "Did you mean 'maxTTFTPenaltyMs'?"),
    ("sticky,maxTTFTPenaltyMs", "write NAME=NUMBER"),
    ("sticky,maxTTFTPenaltyMs=soon", "write NAME=NUMBER"),
    ("weights,maxTTFTPenaltyMs=5", "parameters belong to the sticky recipe"),
])
def test_routing_option_refuses_what_it_cannot_read(text, words):
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        routing_option(text)


def test_a_parameter_range_without_a_step_takes_nine_values_and_a_step_its_own():
    assert sweep.sweep_option("maxTTFTPenaltyMs=0..20000") == {
        "maxTTFTPenaltyMs": (0, 2500, 5000, 7500, 10000, 12500, 15000, 17500, 20000)}
    assert sweep.sweep_option("maxTTFTPenaltyMs=0..1000:500,affinityThreshold=0.5..1:0.25") == {
        "maxTTFTPenaltyMs": (0, 500, 1000), "affinityThreshold": (0.5, 0.75, 1)}
    # Weights keep whole-number steps of one.
    assert sweep.sweep_option("prefix=0..2") == {"prefix": (0, 1, 2)}


@pytest.mark.parametrize(("text", "words"), [
    ("maxTTFTPenaltyMs=10..0", "needs A <= B and STEP > 0"),
    ("maxTTFTPenaltyMs=0..10:0", "needs A <= B and STEP > 0"),
    ("maxTTFTPenaltyMs=0..20000:1", "20001 values; take a larger STEP"),
    ("penalty=0..5", "not a weight, a sticky-recipe parameter or a scaling one"),
])
def test_a_bad_parameter_range_is_refused_with_the_fix(text, words):
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        sweep.sweep_option(text)


def test_the_config_lines_deploy_the_recipe_and_the_best_parameters():
    best = sweep.SettingResult({"maxTTFTPenaltyMs": 2500}, 0.8, (0.8, 0.8), 0.1, 0.2)
    lines = sweep.config_lines(best, "models[1].routing", "eks", {"recipe": "sticky", "peakPrefillThroughput": 4210,
                                                                 "maxTTFTPenaltyMs": 18000})
    assert lines == ["pulumi config set --path 'models[1].routing.recipe' sticky --stack eks",
                     "pulumi config set --path 'models[1].routing.peakPrefillThroughput' 4210 --stack eks",
                     "pulumi config set --path 'models[1].routing.maxTTFTPenaltyMs' 2500 --stack eks"]


def test_a_chunk_is_the_step_budget_within_the_context():
    assert chunk_tokens(EngineLimits(16, 2048), 4096) == 2048
    assert chunk_tokens(EngineLimits(16, 8192), 4096) == 4088
    assert chunk_tokens(None, 32768) == 2048  # vLLM's default budget when the pods do not say


def test_the_peak_is_the_median_one_chunk_rate_with_its_range_and_survives_the_profile_file(tmp_path):
    assert peak_prefill([], 2048) is None
    peak = peak_prefill([1800.0, 2100.0, 2000.0, 1900.0], 2048)
    assert (peak.tokens_per_s, peak.low, peak.high, peak.samples) == (1950.0, 1800.0, 2100.0, 4)
    path = tmp_path / "profile.json"
    LatencyProfile(DEFAULT_LATENCY, 16, 100, None, "test", peak_prefill=peak).save(path)
    assert LatencyProfile.load(path).peak_prefill == peak
    assert "1,950 tokens/s (median of 4 one-chunk prefills of 2,048 tokens; 1,800-2,100)" == peak.describe()


def test_a_profile_with_a_broken_peak_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "profile.json"
    LatencyProfile(DEFAULT_LATENCY, peak_prefill=PeakPrefill(10.0, 5.0, 20.0, 3, 100)).save(path)
    path.write_text(path.read_text().replace('"low": 5.0', '"low": 50.0'))
    with pytest.raises(ProfileError, match="needs 0 < low <= tokensPerSecond <= high.*routing calibrate --out FILE"):
        LatencyProfile.load(path)
