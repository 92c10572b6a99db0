"""predict under load against two real vLLM servers behind `serve`, driven by the `openai` client.

Its own pair of servers, each with its own core: the tiny model at its `medium` size (prefill
costs more than the front ends' and the client's share of the machine) and a small KV cache
(benchmarks.underload.SERVER_ARGS), calibrated with `calibrate` through a `serve` as the
gateway (benchmarks.underload.calibrate_pair). Each of
the three workloads runs once per setting (default weights, prefix=0,queue=3,kvCache=2,
round-robin), predicted over three seeds. What is asserted is what held run after run in
the benchmark (benchmarks/bench_under_load.py; the README has its table) and in the test's
own runs: every request succeeds, default weights give the best hit rate on both sides,
predicted hit rates are close to measured ones (within 5 points with default weights, 10
with the load-placed settings, 15 for multi-turn chat under prefix=0), round-robin splits
evenly, and each measured share lies within 10 points of the shares the predicted seeds
reach. Latency is reported, not asserted: on a shared two-core machine it moves with
whatever else runs.
"""

from __future__ import annotations

import pytest

from benchmarks.underload import benchmark_pair, calibrate_pair, compare, format_rows, ranking

# Points of hit rate between prediction and one measured run. With the default weights the
# prefix scorer decides: runs measured what was predicted within a point, except under cache
# pressure, where what is evicted depends on timing (up to 3.2 points in one run). Under
# prefix=0 and round-robin, placement follows load, so the order requests finish in moves
# single runs by several points. Multi-turn chat under prefix=0 moves most: 44.5-57.4% over
# 25 benchmark and test runs, mostly below 50%, against 45% predicted, so it gets 15 points.
# Round-robin on multi-turn chat depends on the order near-simultaneous sends reach `serve`:
# a run lands on one of a few values (48.1-68.9% over 52 runs, 61.7% in 25), and so does
# each predicted seed, which sends requests released together in a random order. Three
# seeds' mean against one run can differ by 18 points either way (68.9% measured against
# 53.4% predicted once), so it is not asserted; the benchmark compares 20 seeds with three runs.
PREFIX_SCORED_TOLERANCE = 0.05
LOAD_PLACED_TOLERANCE = 0.10
WIDEST_RUN_TO_RUN = {("multi-turn chat", "prefix=0,queue=3,kvCache=2"): 0.15}
ORDER_DEPENDENT = {("multi-turn chat", "round-robin")}


@pytest.fixture(scope="module")
def rows(vllm_python, tmp_path_factory, progress):
    work = tmp_path_factory.mktemp("under-load")
    with benchmark_pair(work, vllm_python, out=progress) as pair:
        profile = calibrate_pair(pair, progress=lambda line: progress.write(line + "\n"))
        result = compare(pair, lambda experiment: profile, runs=1, seeds=3, out=progress)
    progress.write(format_rows(result) + "\n")
    return result


def test_every_request_through_serve_succeeds(rows):
    assert [row.measured[0].failed for row in rows] == [0] * len(rows)
    assert {row.experiment for row in rows} == {"multi-tenant", "multi-turn chat", "cache pressure"}


def test_every_run_reports_the_engines_part_of_first_token_time_from_vllm_itself(rows):
    # vLLM's per-request metrics (scheduled to first token) ride on each answer's last chunk; the
    # engine's part lies inside the client's TTFT, request by request, so its median does too.
    for row in rows:
        run = row.measured[0]
        assert 0 < run.engine_ttft_p50 < run.ttft_p50, (row.experiment, row.setting)
        assert all(0 < predicted.engine_ttft_p50 < predicted.ttft_p50 for predicted in row.predicted)


def test_default_weights_have_the_best_hit_rate_measured_and_predicted(rows):
    for experiment in dict.fromkeys(row.experiment for row in rows):
        # The seed's claim is about the weighted blend against its variants and round-robin;
        # the sticky recipe keeps prefixes as well or better, which the agreement tests cover.
        mine = [row for row in rows if row.experiment == experiment and row.setting != "sticky"]
        assert ranking(mine, 0)[0] == "default weights", experiment
        default = next(row for row in mine if row.setting == "default weights").figure("hit_rate")[1]
        others = [row.figure("hit_rate")[1] for row in mine
                  if row.setting != "default weights" and (row.experiment, row.setting) not in ORDER_DEPENDENT]
        assert all(default > other for other in others), experiment


def test_predicted_hit_rates_are_close_to_the_measured_ones(rows):
    for row in rows:
        if (row.experiment, row.setting) in ORDER_DEPENDENT:
            continue
        measured, predicted = row.figure("hit_rate")
        tolerance = WIDEST_RUN_TO_RUN.get((row.experiment, row.setting), PREFIX_SCORED_TOLERANCE
                                          if row.setting == "default weights" else LOAD_PLACED_TOLERANCE)
        assert abs(predicted - measured) <= tolerance, (row.experiment, row.setting, measured, predicted)


# A split of whole tenants or chats moves in steps: four tenants on two pods are 50% or 75%
# on the busier one, so one run is compared with the shares the predicted seeds reach, not
# with their mean (a run measured 75% where three seeds' shares averaged 58%).
SHARE_TOLERANCE = 0.10


def test_round_robin_splits_evenly_and_prefix_scoring_keeps_tenants_together(rows):
    for row in rows:
        measured, predicted = row.figure("busiest_share")
        if row.setting == "round-robin":
            assert measured == predicted == 0.5
        shares = [run.busiest_share for run in row.predicted]
        assert min(shares) - SHARE_TOLERANCE <= measured <= max(shares) + SHARE_TOLERANCE, (
            row.experiment, row.setting, measured, shares)
