"""predict under load against two real vLLM servers behind `serve`, driven by the `openai` client.

Its own pair of servers: a wider tiny model (prefill costs more than the servers' contention)
and a small KV cache (routing.underload.SERVER_ARGS), calibrated with `calibrate`. Each of
the three workloads runs once per setting (default weights, prefix=0,queue=3,kvCache=2,
round-robin), predicted over three seeds. What is asserted is what held run after run in
the benchmark (benchmarks/bench_under_load.py; the README has its table): every request
succeeds, default weights give the best hit rate on both sides, predicted hit rates are
close to measured ones, round-robin splits evenly. Latency is reported, not asserted: on a
shared two-core machine it moves with whatever else runs.
"""

from __future__ import annotations

import pytest

from routing.calibrate import UrlPod, calibrate
from routing.underload import HIDDEN_SIZE, LAYERS, SERVER_ARGS, compare, format_rows, ranking
from routing.vllm_server import vllm_pair

# Points of hit rate between prediction and one measured run: the benchmark's errors over
# three runs stayed within 3 points except round-robin on multi-turn chat (see the README),
# whose hit rate depends on the order turns finish in.
HIT_RATE_TOLERANCE = 0.05
ORDER_SENSITIVE = {("multi-turn chat", "round-robin")}


@pytest.fixture(scope="module")
def rows(vllm_python, tmp_path_factory, progress):
    work = tmp_path_factory.mktemp("under-load")
    with vllm_pair(work / "tiny-model", work / "logs", vllm_python, out=progress, hidden_size=HIDDEN_SIZE,
                   layers=LAYERS, extra_args=SERVER_ARGS) as pair:
        profile = calibrate([UrlPod(name, url) for name, url in pair.backends.items()],
                            progress=lambda line: progress.write(line + "\n"))
        result = compare(pair, profile, runs=1, seeds=3, out=progress)
    progress.write(format_rows(result) + "\n")
    return result


def test_every_request_through_serve_succeeds(rows):
    assert [row.measured[0].failed for row in rows] == [0] * len(rows)
    assert {row.experiment for row in rows} == {"multi-tenant", "multi-turn chat", "cache pressure"}


def test_default_weights_have_the_best_hit_rate_measured_and_predicted(rows):
    for experiment in dict.fromkeys(row.experiment for row in rows):
        mine = [row for row in rows if row.experiment == experiment]
        assert ranking(mine, 0)[0] == ranking(mine, 1)[0] == "default weights", experiment


def test_predicted_hit_rates_are_close_to_the_measured_ones(rows):
    for row in rows:
        if (row.experiment, row.setting) in ORDER_SENSITIVE:
            continue
        measured, predicted = row.figure("hit_rate")
        assert abs(predicted - measured) <= HIT_RATE_TOLERANCE, (row.experiment, row.setting, measured, predicted)


def test_round_robin_splits_evenly_and_prefix_scoring_keeps_tenants_together(rows):
    for row in rows:
        measured, predicted = row.figure("busiest_share")
        if row.setting == "round-robin":
            assert measured == predicted == 0.5
        assert abs(measured - predicted) <= 0.15, (row.experiment, row.setting, measured, predicted)
