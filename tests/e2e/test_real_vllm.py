"""The seed page's experiments on two real vLLM servers, through `serve`, measured from vLLM's own
counters, and compared with `predict`.

Expected numbers are derived from the servers' own tokenizer (/tokenize) and block size
(vllm:cache_config_info), never written in: vLLM caches full blocks only, so a request that
shares its first n tokens with an earlier one on the same server hits n // block_size blocks.

Each batch is sent serially and settled: before each request, the test waits until `serve`
has scraped both servers idle after the previous response, so its picker sees what
`predict`'s simulated pods report between serial requests. With the same seed, `predict`
must then name the same pod for every request, and its per-pod requests, hits and queries
must equal the servers' counters (its pod-0 and pod-1 stand for vllm-a and vllm-b).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from routing import __main__ as cli
from routing.lab.demo import counts, measure_through_serve, predict_like
from routing.lab.vllm_server import SERVED_MODEL, VllmPair
from routing.live.serve import ROUTED_HEADER, RoutedRequest, start_gateway
from routing.live.verify import Measurement
from routing.simulation.prediction import Prediction
from routing.workloads import seed_shared, seed_unique

SEED = 11
NO_PREFIX = {"prefix": 0, "queue": 3, "kvCache": 2}


def common_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


def cache_can_give(prompts: list[list[int]], block_size: int) -> int:
    """Hits (tokens) if every prompt is served where all earlier ones were: each reuses the full
    blocks of its longest shared prefix with an earlier prompt (and never its last token)."""
    hits = 0
    for index, tokens in enumerate(prompts):
        shared = max((common_prefix(tokens, earlier) for earlier in prompts[:index]), default=0)
        hits += min(shared, len(tokens) - 1) // block_size * block_size
    return hits


def tokens_of(bodies, tokenizer) -> list[list[int]]:
    return [tokenizer.encode(body["prompt"]) for body in bodies]


def assert_measured_as_predicted(pair: VllmPair, measurement: Measurement, history: list[RoutedRequest],
                                 prediction: Prediction) -> None:
    """Every pick, and every server's (requests, hits, queries), as `predict` says; pod-i is server i."""
    assert measurement.unsettled == (), "serve never saw every server idle before these requests"
    name_of = {f"pod-{i}": server.name for i, server in enumerate(pair.servers)}
    assert [h.backend for h in history] == [name_of[pod] for pod in prediction.picker.placements]
    assert [p.pod for p in measurement.report.pods] == [name_of[p.pod] for p in prediction.picker.pods]
    assert counts(measurement.report) == counts(prediction.picker)


def pods_used(result) -> int:
    return sum(1 for pod in result.pods if pod.requests)


def test_shared_prefix_concentrates_and_hits_every_full_block_of_the_preamble(pair, progress):
    block_size = pair.block_size
    bodies = seed_shared(SERVED_MODEL)
    tokens = tokens_of(bodies, pair.tokenizer)
    expected_hits, expected_queries = cache_can_give(tokens, block_size), sum(map(len, tokens))

    measurement, history = measure_through_serve(pair, bodies, None, seed=SEED, out=progress)
    report = measurement.report

    assert measurement.statuses == (200,) * 12
    assert [(p.pod, p.requests) for p in report.pods_used] == [(history[0].backend, 12)]
    assert (report.hits, report.queries) == (expected_hits, expected_queries)
    # Every request but the first reuses every full block of the shared preamble.
    preamble_blocks = common_prefix(tokens[0], tokens[1]) // block_size
    assert expected_hits == 11 * preamble_blocks * block_size
    progress.write(f"shared: {len(tokens[0])} tokens per prompt, block {block_size}, hits {report.hits} / queries "
                   f"{report.queries} = {report.hit_rate:.1%}\n")

    assert_measured_as_predicted(pair, measurement, history, predict_like(pair, bodies, None, seed=SEED))


def test_unique_prefixes_spread_with_zero_hits(pair, progress):
    bodies = seed_unique(SERVED_MODEL)
    measurement, history = measure_through_serve(pair, bodies, None, seed=SEED, out=progress)
    report = measurement.report

    assert measurement.statuses == (200,) * 12
    assert len(report.pods_used) == 2
    assert report.hits == 0
    assert report.queries == sum(map(len, tokens_of(bodies, pair.tokenizer)))

    prediction = predict_like(pair, bodies, None, seed=SEED)
    assert pods_used(prediction.picker) == 2
    assert (prediction.picker.hits, prediction.picker.queries) == (0, report.queries)
    assert_measured_as_predicted(pair, measurement, history, prediction)


def test_prefix_weight_zero_spreads_the_shared_batch(pair, progress):
    block_size = pair.block_size
    bodies = seed_shared(SERVED_MODEL)
    tokens = tokens_of(bodies, pair.tokenizer)
    preamble_hit = common_prefix(tokens[0], tokens[1]) // block_size * block_size

    measurement, history = measure_through_serve(pair, bodies, NO_PREFIX, seed=SEED, out=progress)
    report = measurement.report

    assert measurement.statuses == (200,) * 12
    assert len(report.pods_used) == 2
    # Each pod misses on its first request of the batch and hits the preamble on the others.
    for pod in report.pods_used:
        assert pod.hits == (pod.requests - 1) * preamble_hit
    prediction = predict_like(pair, bodies, NO_PREFIX, seed=SEED)
    assert pods_used(prediction.picker) == 2
    assert prediction.picker.queries == report.queries
    assert prediction.picker.hits == sum((p.requests - 1) * preamble_hit for p in prediction.picker.pods
                                         if p.requests)
    assert_measured_as_predicted(pair, measurement, history, prediction)


def verify_json(pair: VllmPair, gateway_url: str, workload: str, expect: str, capsys,
                *options: str) -> tuple[int, dict, str]:
    """verify's exit code, its JSON report and what it printed on stderr."""
    argv = ["verify", "--gateway-url", gateway_url, "--model-id", SERVED_MODEL, "--workload", workload,
            "--expect", expect, "--json", *options]
    for name, url in pair.backends.items():
        argv += ["--pod-url", f"{name}={url}"]
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_verify_command_reports_the_real_counters(pair, capsys):
    shared_tokens = tokens_of(seed_shared(SERVED_MODEL), pair.tokenizer)
    with start_gateway(pair.backends, seed=SEED) as gateway:
        code, shared, _ = verify_json(pair, gateway.url, "seed-shared", "concentrate", capsys)
    assert code == 0
    used = [p for p in shared["pods"] if p["requests"]]
    assert len(used) == 1 and used[0]["requests"] == 12
    assert used[0]["hits"] == cache_can_give(shared_tokens, pair.block_size)
    assert used[0]["queries"] == sum(map(len, shared_tokens))
    assert shared["hitRate"] == pytest.approx(used[0]["hits"] / used[0]["queries"])

    pair.reset_prefix_caches()
    with start_gateway(pair.backends, seed=SEED) as gateway:
        code, unique, _ = verify_json(pair, gateway.url, "seed-unique", "spread", capsys)
    assert code == 0
    assert sum(1 for p in unique["pods"] if p["requests"]) == 2
    assert unique["hitRate"] == 0


def test_verify_says_when_the_pods_held_the_workloads_prefixes_and_empties_their_caches_on_request(pair, capsys):
    tokens = tokens_of(seed_shared(SERVED_MODEL), pair.tokenizer)
    cold_hits = cache_can_give(tokens, pair.block_size)
    # One gateway for the three runs, so its prefix index keeps every run on the same pod.
    with start_gateway(pair.backends, seed=SEED) as gateway:
        runs = [verify_json(pair, gateway.url, "seed-shared", "concentrate", capsys, *options)
                for options in ((), (), ("--reset-caches",))]
    (_, cold, cold_err), (_, warm, warm_err), (_, emptied, emptied_err) = runs
    assert [code for code, _, _ in runs] == [0, 0, 0]
    [(pod, hits)] = [(p["pod"], p["hits"]) for p in cold["pods"] if p["requests"]]
    assert hits == cold_hits and "alreadyCached" not in cold and "already in" not in cold_err
    # Run again on the same servers: its first prompt, the first run's first, is cached whole (full blocks).
    first_cached = (len(tokens[0]) - 1) // pair.block_size * pair.block_size
    assert warm["alreadyCached"] == {"pod": pod, "requests": 1, "hits": first_cached, "queries": len(tokens[0]),
                                     "hitRate": first_cached / len(tokens[0])}
    assert warm["hitRate"] > cold["hitRate"]
    assert (f"note: the run's first request found {first_cached} of its {len(tokens[0])} prompt tokens already in "
            f"{pod}'s prefix cache") in warm_err and "Run again with --reset-caches" in warm_err
    # --reset-caches: the servers' own /reset_prefix_cache empties them, and the run is cold again.
    assert f"prefix caches emptied: {', '.join(pair.backends)}" in emptied_err
    assert "alreadyCached" not in emptied and emptied["hitRate"] == cold["hitRate"]


def test_reset_caches_on_a_server_that_refuses_it_is_one_line(pair, capsys):
    name, url = next(iter(pair.backends.items()))
    # vLLM started without VLLM_SERVER_DEV_MODE has no /reset_prefix_cache route. Under /v1 there is
    # none either, so this real server refuses the POST just as such a server does.
    code = cli.main(["verify", "--gateway-url", url, "--model-id", SERVED_MODEL, "--pod-url", f"{name}={url}/v1",
                     "--reset-caches"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"verify: --reset-caches: {name} ({url}/v1) answered HTTP 404 to POST /reset_prefix_cache, which "
                   "vLLM serves only when started with VLLM_SERVER_DEV_MODE=1 (`python -m routing servers` starts its "
                   "servers so; a stack's pods run without it): start it so, or drop --reset-caches and read the run "
                   "as one on warm pods (`python -m routing verify --help`)\n")


@dataclass
class Sent:
    sent_at: float
    status: int
    routed_to: str | None


def send_one(url: str, body: dict) -> Sent:
    started = time.monotonic()
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return Sent(started, response.status, response.headers.get(ROUTED_HEADER))
    except urllib.error.HTTPError as error:
        return Sent(started, error.code, error.headers.get(ROUTED_HEADER))
    except (urllib.error.URLError, OSError):
        return Sent(started, 0, None)


def test_killed_server_stops_being_picked_once_its_metrics_go_stale(pair, progress):
    """Kills one server mid-run: requests sent after its metrics go stale all succeed on the other."""
    survivor, victim = pair.servers
    prompts = [body["prompt"] for body in seed_unique(SERVED_MODEL)]
    results: list[Sent] = []
    lock = threading.Lock()
    stop_at = [time.monotonic() + 60]  # hang guard; shortened once the victim is stale
    # A hard bound on the number of requests. Requests to the killed server fail at once, so
    # the two seconds before it goes stale can use hundreds (293 seen); 400 left none for after.
    counter = iter(range(2000))

    def worker(gateway_url: str) -> None:
        for number in counter:
            if time.monotonic() > stop_at[0]:
                return
            body = {"model": SERVED_MODEL, "prompt": f"{prompts[number % len(prompts)]} #{number}", "max_tokens": 4}
            sent = send_one(gateway_url, body)
            with lock:
                results.append(sent)

    with start_gateway(pair.backends, seed=SEED) as gateway, ThreadPoolExecutor(4) as pool:
        workers = [pool.submit(worker, gateway.url) for _ in range(4)]
        time.sleep(3)
        with lock:
            before_kill = list(results)
        killed_at = time.monotonic()
        victim.kill()
        dead_at = time.monotonic()  # kill() returns once the server's processes are gone
        victim_backend = gateway.gateway.backends[victim.name]
        staleness = gateway.gateway.staleness
        while victim_backend.is_fresh(time.monotonic(), staleness):
            # A hang guard only, far above the 2 s threshold: how late the poll notices is not asserted.
            assert time.monotonic() - killed_at < 30, "the killed server's metrics never went stale"
            time.sleep(0.02)
        stale_at = time.monotonic()
        last_good_scrape, last_good_scrape_sent = victim_backend.last_good_scrape, victim_backend.scrape.started
        stop_at[0] = stale_at + 4
        for future in workers:
            future.result(timeout=90)

    after_stale = [r for r in results if r.sent_at > stale_at]
    in_window = [r for r in results if killed_at <= r.sent_at <= stale_at]
    on_victim = sum(r.routed_to == victim.name for r in before_kill)
    failed_in_window = sum(r.status != 200 for r in in_window)
    progress.write(f"failover: {len(before_kill)} requests before the kill ({on_victim} on {victim.name}); stale "
                   f"{stale_at - killed_at:.2f}s after the kill, {stale_at - last_good_scrape:.2f}s after its "
                   f"last good scrape; {len(in_window)} sent in between ({failed_in_window} failed); "
                   f"{len(after_stale)} after\n")
    assert any(r.routed_to == victim.name and r.status == 200 for r in before_kill), "victim never served: no test"
    # Its last good scrape was answered by the living server, so sent before it was gone. When it
    # went stale is Backend.is_fresh's rule (unit-tested in tests/routing/test_serve.py); how late
    # the polling loop noticed depends on the machine's load, so no bound on it is asserted.
    assert last_good_scrape_sent < dead_at
    assert len(after_stale) >= 10
    assert [(r.status, r.routed_to) for r in after_stale] == [(200, survivor.name)] * len(after_stale)
