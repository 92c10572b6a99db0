"""A scale-out on real parts: the two vLLM CPU servers behind `serve`, Debian's Prometheus scraping
them with the stack's PodMonitor job, and the HPA's decisions (routing/simulation/scaling.py) made on
the stack's own scaler query as Prometheus answers it. When the query crosses the target, a third
real server starts; once healthy it joins Prometheus's targets and `serve --backends-file`, and
takes requests. benchmarks/bench_scale_out.py sets the same run beside `predict --autoscale`."""

from __future__ import annotations

import threading

import pytest

from benchmarks.scale_out import lab_stack, run_scale_out
from routing.lab.vllm_server import SERVED_MODEL
from routing.workloads import Ramp
from tests.e2e.test_prometheus_on_real_vllm import prometheus_binary  # noqa: F401 (a fixture)

pytestmark = pytest.mark.e2e

# The eks-karpenter stack's qwen-small, on the two servers there are: two to three replicas, one
# running request each as the target.
MIN, MAX, TARGET = 2, 3, 1


def test_a_load_past_the_target_starts_a_third_server_that_serve_then_routes_to(pair, prometheus_binary, tmp_path,
                                                                                   progress):
    threads_before = set(threading.enumerate())
    stack = lab_stack(MIN, MAX, "running", TARGET)
    # Quiet, then eight requests a second of 64 tokens each for four minutes: more in flight than
    # two replicas' target, and long enough for a third server to start (about 100 s here, beside
    # the load) and take its share.
    arrivals = Ramp(low_rate=0.5, peak_rate=8, quiet_s=10, climb_s=10, hold_s=240, fall_s=5, tenants=6, segments=10,
                    max_tokens=64, seed=2).arrivals(SERVED_MODEL)
    # prefix=0: with prefix scoring on, the picker keeps every tenant on the pods that cached its
    # prompt (nothing waits in vLLM's queue on these servers, so the queue scorer sees no load)
    # and the new server takes nothing, as `predict --autoscale` says (docs/routing.md).
    run = run_scale_out(pair, arrivals, stack, prometheus_binary, tmp_path, progress,
                        serve_options=("--weights", "prefix=0"))
    progress.write(f"scale-out: routed {run.routed}; added servers' start {run.start_seconds}; (s, query, asked, "
                   f"ready) {[(round(s.at), s.metric, s.desired, s.ready) for s in run.steps]}\n")
    asked = next(step for step in run.steps if step.desired == MAX)
    # The HPA's rule on Prometheus's answer: above the target by more than the tolerance.
    assert asked.metric / (TARGET * MIN) > 1.1
    assert len(run.start_seconds) == 1, "one server added, started and healthy"
    joined = next(step for step in run.steps if step.ready == MAX)
    assert joined.at >= asked.at
    # serve picked the new server once it joined, and every request was answered.
    assert run.routed.get("vllm-c", 0) > 0, run.routed
    assert all(reply.ttft is not None for reply in run.sent)
    # A thread outlived this test in one CI run (tests/conftest.py runs it last since): name any here.
    left = set(threading.enumerate()) - threads_before
    for thread in left:
        thread.join(timeout=10)
    if left:
        progress.write(f"scale-out: threads started during the test: {sorted(t.name for t in left)}; still alive: "
                       f"{sorted(t.name for t in left if t.is_alive())}\n")
