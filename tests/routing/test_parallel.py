"""run_beside: the second computation runs in a forked child, with results and errors as if both ran here."""

from __future__ import annotations

import os
import threading

import pytest

from benchmarks.underload import experiments
from routing.simulation import parallel as parallel_module, prediction as predict
from routing.simulation.load_plan import plan_load
from routing.simulation.parallel import can_fork, run_beside
from routing.simulation.prediction import Load, run_prediction

# CI and this project's machines have two cores; on one core the fork is skipped by design.
needs_fork = pytest.mark.skipif(not can_fork(), reason="one core or no fork: run_beside runs both here")


@needs_fork
def test_the_second_computation_runs_in_a_child_and_both_results_come_back():
    here, beside = run_beside(os.getpid, os.getpid, parallel=True)
    assert here == os.getpid()
    assert beside != os.getpid()


def test_without_parallel_both_run_here_in_order():
    calls = []
    result = run_beside(lambda: calls.append("here") or 1, lambda: calls.append("beside") or 2, parallel=False)
    assert result == (1, 2)
    assert calls == ["here", "beside"]


@needs_fork
def test_an_error_in_the_child_is_raised_here_with_its_message():
    def fails():
        raise ValueError("a request of 9000 tokens needs 600 KV blocks")

    with pytest.raises(ValueError, match="needs 600 KV blocks"):
        run_beside(lambda: None, fails, parallel=True)


@needs_fork
@pytest.mark.timeout(60)
def test_an_error_here_stops_the_child_instead_of_waiting_for_it():
    def fails():
        raise KeyError("here")

    started = threading.Event()
    # The child would block forever: run_beside returning at all shows it did not wait.
    with pytest.raises(KeyError):
        run_beside(fails, lambda: started.wait(), parallel=True)


@needs_fork
def test_a_result_that_cannot_travel_back_is_an_error_that_says_so():
    with pytest.raises(RuntimeError, match="could not be sent back"):
        run_beside(lambda: None, lambda: (lambda: "a closure does not pickle"), parallel=True)


class ErrorWithTwoArguments(Exception):
    """Pickles as (message,), so loading it calls __init__ with one argument and fails."""

    def __init__(self, pod: str, reason: str):
        super().__init__(f"{pod}: {reason}")


def fail_with_two_arguments():
    raise ErrorWithTwoArguments("pod-0", "gone")


@needs_fork
def test_an_error_that_cannot_be_rebuilt_here_still_comes_back_with_its_message():
    with pytest.raises(RuntimeError, match="could not be sent back: ErrorWithTwoArguments\\('pod-0: gone'\\)"):
        run_beside(lambda: None, fail_with_two_arguments, parallel=True)


def test_no_fork_beside_another_thread():
    # A fork copies only the calling thread: with another one running, both run here.
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        assert not can_fork()
    finally:
        stop.set()
        worker.join()


def test_a_prediction_is_the_same_with_round_robin_in_a_child(monkeypatch):
    experiment = experiments("Qwen/Qwen2.5-0.5B-Instruct")[0]
    requests = [arrival.request for arrival in experiment.arrivals]
    load = Load(plan_load(experiment.arrivals, concurrency=experiment.concurrency, seed=3),
                tuple(arrival.output_tokens for arrival in experiment.arrivals))
    modes = []
    real_run_beside = predict.run_beside

    def spy(here, beside, *, parallel):
        modes.append(parallel and parallel_module.can_fork())
        return real_run_beside(here, beside, parallel=parallel)

    monkeypatch.setattr(predict, "run_beside", spy)
    monkeypatch.setattr(predict, "PARALLEL_MIN_REQUESTS", 1)
    forked = run_prediction(requests, replicas=2, block_size=128, capacity_blocks=80, seed=3, load=load)
    monkeypatch.setattr(parallel_module, "can_fork", lambda: False)
    here = run_prediction(requests, replicas=2, block_size=128, capacity_blocks=80, seed=3, load=load)
    assert modes == [can_fork(), False]
    assert forked.to_json() == here.to_json()
    assert forked.round_robin == here.round_robin and forked.best_cache_blocks == here.best_cache_blocks
