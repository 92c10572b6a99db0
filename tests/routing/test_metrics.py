"""Parsing vLLM's /metrics in both metric spellings, and counter deltas between two reads."""

from __future__ import annotations

import pytest

from routing.metrics import (NO_PREFIX_METRIC, DeltaReport, MetricsError, PodDelta, VllmMetrics, counter_delta,
                             diff_reads, parse_metrics)
from routing.simulation.fleet import SimulationResult
from routing.tables import format_pod_table, percent

# Trimmed from a real vLLM 0.32 CPU server (engine and model_name labels, _created samples).
NEW_SPELLING = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 15039.0
vllm:prefix_cache_queries_created{engine="0",model_name="tiny"} 1.796073687e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 12672.0
vllm:prefix_cache_hits_created{engine="0",model_name="tiny"} 1.796073687e+09
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 2.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 10.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 0.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="tiny"} 1.796073687e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="0",num_gpu_blocks="8192"} 1.0
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters=""} 1.7e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql",waiting_lora_adapters="old"} 1.6e+09
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
"""

# The names the seed page greps: vLLM 0.8.5 (V0 engine), before the 0.9.2 rename.
OLD_SPELLING = """\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen2.5-0.5B-Instruct"} 0.5
# HELP vllm:gpu_prefix_cache_queries_total GPU prefix cache queries, in terms of number of queried blocks.
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{model_name="Qwen/Qwen2.5-0.5B-Instruct"} 600.0
# HELP vllm:gpu_prefix_cache_hits_total GPU prefix cache hits, in terms of number of cached blocks.
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{model_name="Qwen/Qwen2.5-0.5B-Instruct"} 550.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="length",model_name="Qwen/Qwen2.5-0.5B-Instruct"} 12.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="Qwen/Qwen2.5-0.5B-Instruct"} 0.0
"""

NO_PREFIX = """\
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="m"} 7.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 0.0
"""


def metrics(requests: float, hits: float | None = 0.0, queries: float | None = 0.0) -> VllmMetrics:
    return VllmMetrics(requests, hits, queries, waiting=0.0, running=0.0, kv_usage=0.0)


def test_new_spelling_reads_every_field_the_picker_and_the_page_use():
    m = parse_metrics(NEW_SPELLING)
    assert m.requests == 12  # summed over finished reasons
    assert (m.prefix_hits, m.prefix_queries) == (12672, 15039)
    assert (m.waiting, m.running, m.kv_usage) == (3, 1, 0.25)
    assert (m.block_size, m.num_gpu_blocks) == (128, 8192)
    # The newest lora_requests_info sample (its value is the update time) is the current one.
    assert (m.running_loras, m.waiting_loras, m.max_lora) == (("sql", "chat"), (), 4)


def test_old_gpu_spelling_of_the_seed_vllm_is_read_too():
    m = parse_metrics(OLD_SPELLING)
    assert (m.prefix_hits, m.prefix_queries) == (550, 600)
    assert m.kv_usage == 0.5
    assert m.requests == 12
    assert m.block_size is None and m.num_gpu_blocks is None


def test_new_spelling_wins_when_a_server_exposes_both():
    m = parse_metrics(NEW_SPELLING + OLD_SPELLING.replace("vllm:request_success_total", "vllm:ignored_total")
                      .replace("vllm:num_requests_waiting", "vllm:ignored_waiting"))
    assert (m.prefix_hits, m.prefix_queries, m.kv_usage) == (12672, 15039, 0.25)


def test_counters_and_gauges_sum_over_engines():
    text = NO_PREFIX + 'vllm:request_success_total{engine="1",finished_reason="stop",model_name="m"} 5.0\n'
    assert parse_metrics(text).requests == 12


def test_missing_prefix_metric_is_none_not_zero():
    m = parse_metrics(NO_PREFIX)
    assert m.prefix_hits is None and m.prefix_queries is None


def test_a_page_without_vllm_metrics_is_rejected():
    with pytest.raises(MetricsError, match="vLLM"):
        parse_metrics("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.0\n")


def test_delta_is_after_minus_before():
    delta = counter_delta("pod-a", metrics(10, 1000, 5000), metrics(22, 13672, 20039))
    assert (delta.requests, delta.hits, delta.queries, delta.restarted) == (12, 12672, 15039, False)
    assert delta.hit_rate == pytest.approx(12672 / 15039)


def test_counter_that_went_down_means_restart_and_the_delta_is_the_after_value():
    delta = counter_delta("pod-a", metrics(40, 9000, 12000), metrics(3, 256, 1200))
    assert delta.restarted
    assert (delta.requests, delta.hits, delta.queries) == (3, 256, 1200)
    assert any(note.startswith("restarted") and "40 → 3" in note for note in delta.notes)
    assert "(restarted)" in format_pod_table(DeltaReport((delta,)))


def test_pod_without_prefix_metric_is_marked_and_left_out_of_the_hit_rate():
    with_prefix = counter_delta("pod-a", metrics(0, 0, 0), metrics(6, 500, 1000))
    without = counter_delta("pod-b", metrics(0, None, None), metrics(6, None, None))
    assert without.hits is None and without.hit_rate is None
    assert any(NO_PREFIX_METRIC in note for note in without.notes)
    report = DeltaReport((with_prefix, without))
    assert (report.requests, report.hits, report.queries) == (12, 500, 1000)
    table = format_pod_table(report)
    assert "pod-b  " in table and NO_PREFIX_METRIC in table


def test_pods_that_appear_or_vanish_between_reads_are_reported():
    report = diff_reads({"a": metrics(5, 0, 0), "gone": metrics(9, 0, 0)},
                        {"a": metrics(7, 128, 256), "new": metrics(4, 100, 400)})
    by_pod = {p.pod: p for p in report.pods}
    assert by_pod["new"].requests == 4 and "new since the first read" in by_pod["new"].notes[0]
    assert by_pod["gone"].requests == 0 and "gone" in by_pod["gone"].notes[0]
    assert [p.pod for p in report.pods_used] == ["a", "new"]


def test_json_shape_matches_predict():
    report = DeltaReport((counter_delta("pod-a", metrics(0), metrics(12, 12672, 15039)),
                          counter_delta("pod-b", metrics(0), metrics(0, 0, 0))))
    assert report.to_json() == {
        "pods": [{"pod": "pod-a", "requests": 12, "hits": 12672, "queries": 15039, "hitRate": 12672 / 15039},
                 {"pod": "pod-b", "requests": 0, "hits": 0, "queries": 0, "hitRate": None}],
        "hitRate": 12672 / 15039,
    }


def test_one_table_for_measured_and_predicted_pods():
    measured = DeltaReport((counter_delta("pod-a", metrics(0), metrics(12, 12672, 15039)),
                            counter_delta("pod-b", metrics(0), metrics(0, 0, 0))))
    predicted = SimulationResult((PodDelta("pod-a", 12, 12672, 15039), PodDelta("pod-b", 0, 0, 0)), ("pod-a",) * 12)
    assert format_pod_table(measured) == format_pod_table(predicted)
    lines = format_pod_table(predicted, indent="  ").splitlines()
    assert lines[0].split() == ["pod", "requests", "hits", "queries", "hit", "rate"]
    assert lines[1].split() == ["pod-a", "12", "12672", "15039", "84.3%"]
    assert lines[2].split() == ["pod-b", "0", "0", "0", "-"]
    assert lines[3].split() == ["overall", "12", "12672", "15039", "84.3%"]
    assert all(line.startswith("  ") for line in lines)
    assert (percent(None), percent(0.0), percent(11 / 12)) == ("-", "0.0%", "91.7%")
