"""run_beside: the second computation runs in a forked child, with results and errors as if both ran here."""

from __future__ import annotations

import os
import threading
import time

import pytest

from benchmarks.underload import experiments
from routing.simulation import parallel as parallel_module, prediction as predict
from routing.simulation.load_plan import plan_load
from routing.simulation.parallel import can_fork, run_beside
from routing.simulation.prediction import Load, run_prediction


@pytest.fixture
def two_cores(monkeypatch):
    """can_fork's core check passes on any machine: a fork works on one core too, only without the
    speed-up, so the fork path is tested wherever the suite runs."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert can_fork(), "fork must be possible here for these tests: no fork start method, or another thread runs"


def test_the_second_computation_runs_in_a_child_and_both_results_come_back(two_cores):
    here, beside = run_beside(os.getpid, os.getpid, parallel=True)
    assert here == os.getpid()
    assert beside != os.getpid()


def test_on_one_core_both_run_here(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert run_beside(os.getpid, os.getpid, parallel=True) == (os.getpid(), os.getpid())


def test_without_parallel_both_run_here_in_order():
    calls = []
    result = run_beside(lambda: calls.append("here") or 1, lambda: calls.append("beside") or 2, parallel=False)
    assert result == (1, 2)
    assert calls == ["here", "beside"]


def test_an_error_in_the_child_is_raised_here_with_its_message(two_cores):
    def fails():
        raise ValueError(f"pid {os.getpid()}: a request of 9000 tokens needs 600 KV blocks")

    with pytest.raises(ValueError, match="needs 600 KV blocks") as raised:
        run_beside(lambda: None, fails, parallel=True)
    assert f"pid {os.getpid()}:" not in str(raised.value)  # raised in the child, not here


@pytest.mark.timeout(60)
def test_an_error_here_stops_the_child_instead_of_waiting_for_it(two_cores, tmp_path):
    started = tmp_path / "child.pid"

    def blocks_forever():
        started.write_text(str(os.getpid()))
        while True:
            time.sleep(60)

    def fails_once_the_child_runs():
        while not started.exists() or not started.read_text():
            time.sleep(0.01)
        raise KeyError("here")

    # The child never ends by itself: run_beside returning at all shows it did not wait.
    with pytest.raises(KeyError):
        run_beside(fails_once_the_child_runs, blocks_forever, parallel=True)
    with pytest.raises(ProcessLookupError):
        os.kill(int(started.read_text()), 0)


def test_a_result_that_cannot_travel_back_is_an_error_that_says_so(two_cores):
    with pytest.raises(RuntimeError, match="could not be sent back"):
        run_beside(lambda: None, lambda: (lambda: "a closure does not pickle"), parallel=True)


class ErrorWithTwoArguments(Exception):
    """Pickles as (message,), so loading it calls __init__ with one argument and fails."""

    def __init__(self, pod: str, reason: str):
        super().__init__(f"{pod}: {reason}")


def fail_with_two_arguments():
    raise ErrorWithTwoArguments("pod-0", "gone")


def test_an_error_that_cannot_be_rebuilt_here_still_comes_back_with_its_message(two_cores):
    with pytest.raises(RuntimeError, match="could not be sent back: ErrorWithTwoArguments\\('pod-0: gone'\\)"):
        run_beside(lambda: None, fail_with_two_arguments, parallel=True)


def test_no_fork_beside_another_thread(two_cores):
    # A fork copies only the calling thread: with another one running, both run here.
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        assert not can_fork()
    finally:
        stop.set()
        worker.join()
    assert can_fork()


def test_a_prediction_is_the_same_with_round_robin_in_a_child(two_cores, monkeypatch):
    experiment = experiments("Qwen/Qwen2.5-0.5B-Instruct")[0]
    requests = [arrival.request for arrival in experiment.arrivals]
    load = Load(plan_load(experiment.arrivals, concurrency=experiment.concurrency, seed=3),
                tuple(arrival.output_tokens for arrival in experiment.arrivals))
    beside_ran_in = []  # the process round-robin's fleet ran in, per prediction
    real_run_beside = predict.run_beside

    def spy(here, beside, *, parallel):
        here_result, (pid, beside_result) = real_run_beside(here, lambda: (os.getpid(), beside()), parallel=parallel)
        beside_ran_in.append(pid)
        return here_result, beside_result

    monkeypatch.setattr(predict, "run_beside", spy)
    monkeypatch.setattr(predict, "PARALLEL_MIN_REQUESTS", 1)
    forked = run_prediction(requests, replicas=2, block_size=128, capacity_blocks=80, seed=3, load=load)
    monkeypatch.setattr(parallel_module, "can_fork", lambda: False)
    here = run_prediction(requests, replicas=2, block_size=128, capacity_blocks=80, seed=3, load=load)
    assert beside_ran_in[0] != os.getpid() and beside_ran_in[1] == os.getpid()
    assert forked.to_json() == here.to_json()
    assert forked.round_robin == here.round_robin and forked.best_cache_blocks == here.best_cache_blocks
