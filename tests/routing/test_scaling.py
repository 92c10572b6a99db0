"""`predict --autoscale`: the HPA's decisions against a hand calculation, replicas that join cold
after their lead time and leave after the scale-down window, node reuse within consolidateAfter,
the cost against a fixed fleet, the plot, and what the options refuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_predict import run_cli

from routing import compiled
from routing.simulation.scaling import HorizontalScaler, ScalingPolicy
from routing.workloads import Ramp

REPO = Path(__file__).resolve().parents[2]
POLICY = ScalingPolicy(min_replicas=1, max_replicas=4, metric="waiting", target=2)


def test_the_hpa_decides_as_a_hand_calculation():
    scaler = HorizontalScaler(POLICY, 1)
    decisions = [(t, scaler.decide(t, metric)) for t, metric in [
        (7.5, 0),     # 0 / (2 x 1) = 0: outside the tolerance, ceil(0 / 2) = 0, raised to minReplicas 1
        (22.5, 9),    # 9 / 2 = 4.5: ceil -> 5; up at once, at most max(2 x 1, 1 + 4) = 5; maxReplicas 4
        (37.5, 9),    # 9 / (2 x 4) = 1.125: outside 0.1, ceil(4.5) = 5 -> 4
        (52.5, 7.5),  # 7.5 / 8 = 0.94: within the tolerance, stays 4
        (67.5, 2),    # recommends 1, but the window's highest recommendation is 5: stays 4
        (337.5, 2),   # the 5s of 22.5 and 37.5 have left the 300 s window; the 4 of 52.5 has not: 4
        (352.5, 2),   # only recommendations after now - 300 s count: since 67.5 every one is 1, and 100%
                      # a sync may go: down to 1
    ]]
    assert decisions == [(7.5, 1), (22.5, 4), (37.5, 4), (52.5, 4), (67.5, 4), (337.5, 4), (352.5, 1)]


def test_the_hpa_scales_up_by_at_most_max_of_double_and_four_a_sync():
    scaler = HorizontalScaler(ScalingPolicy(min_replicas=1, max_replicas=50, metric="running", target=1), 3)
    assert scaler.decide(15, 40) == 7  # max(6, 3 + 4)
    assert scaler.decide(30, 40) == 14  # max(14, 11)
    assert scaler.decide(45, 40) == 28
    assert scaler.decide(60, 40) == 40


@pytest.fixture(scope="module")
def burst(tmp_path_factory) -> Path:
    """A pod's worth of traffic, a burst of twice that for three minutes, then quiet again."""
    ramp = Ramp(low_rate=2, peak_rate=60, quiet_s=400, climb_s=1, hold_s=180, fall_s=1, tenants=50, segments=20,
                max_tokens=256)
    path = tmp_path_factory.mktemp("scaling") / "burst.jsonl"
    path.write_text("".join(json.dumps({"at": a.at, "body": a.body}) + "\n"
                            for a in ramp.arrivals("Qwen/Qwen2.5-0.5B-Instruct")))
    return path


BURST_ARGS = ("--pods", "1", "--min-replicas", "1", "--max-replicas", "3", "--target", "2", "--metric", "waiting",
              "--node-lead-time", "100", "--pod-start", "50", "--consolidate-after", "600", "--weights", "queue=4",
              "--node-price", "1.006", "--seed", "3", "--autoscale", "--json")


def burst_prediction(burst: Path, capsys, *extra: str) -> dict:
    status, out, err = run_cli("--workload", str(burst), *BURST_ARGS, *extra, capsys=capsys)
    assert status == 0, err
    return json.loads(out)


def test_replicas_join_cold_after_the_lead_time_and_leave_after_the_window(burst, capsys):
    result = burst_prediction(burst, capsys)
    steps = result["scalerSteps"]
    asked = next(step for step in steps if step["desired"] > 1)
    # The first sync that reads a queue past the target asks for more, at a sync time (7.5 s + 15k).
    assert asked["metric"] > 2 and (asked["at"] - 7.5) % 15 == 0
    # A new node and a model load later (100 + 50 s), the replicas join the pool.
    joined = next(step for step in steps if step["ready"] > 1)
    assert joined["at"] == pytest.approx(asked["at"] + 150)
    # Cold: their first minute's requests hit less of their prompts than the rest.
    scaled = result["scaled"]
    assert scaled["coldRequests"] > 0 and scaled["coldHitRate"] < scaled["warmHitRate"]
    # Once the queue is gone, the scaler keeps them for its 300 s window, then lets them go.
    emptied = next(step for step in steps if step["at"] > joined["at"] and step["metric"] == 0)
    left = next(step for step in steps if step["at"] > joined["at"] and step["desired"] == 1)
    assert left["at"] >= emptied["at"] + 300 - 15
    # Cost: the scaled fleet's replica-hours against three fixed replicas for the whole run.
    assert 0 < scaled["nodeHours"] < result["fixed"]["nodeHours"]
    assert scaled["cost"] == pytest.approx(scaled["nodeHours"] * 1.006, abs=1e-3)


def test_a_spare_node_only_waits_for_the_model_load(tmp_path, capsys):
    # Two bursts 700 s apart: after the first the scaler lets two replicas go (300 s after the
    # queue emptied); the second asks for them again within consolidateAfter (600 s), when their
    # nodes are still there.
    burst = Ramp(low_rate=0.5, peak_rate=60, quiet_s=30, climb_s=1, hold_s=120, fall_s=1, tenants=50, segments=20,
                 max_tokens=256).arrivals("Qwen/Qwen2.5-0.5B-Instruct")
    path = tmp_path / "twice.jsonl"
    path.write_text("".join(json.dumps({"at": round(a.at + offset, 3), "body": a.body}) + "\n"
                            for offset in (0, 700) for a in burst))
    steps = burst_prediction(path, capsys, "--node-lead-time", "30", "--pod-start", "10")["scalerSteps"]
    first_ask = next(step for step in steps if step["desired"] > 1)
    first_join = next(step for step in steps if step["ready"] > 1)
    assert first_join["at"] == pytest.approx(first_ask["at"] + 40)  # a new node, then the model load
    went = next(step for step in steps if step["at"] > first_join["at"] and step["desired"] == 1)
    back = next(step for step in steps if step["at"] > went["at"] and step["desired"] > 1)
    assert back["at"] < went["at"] + 600
    rejoin = next(step for step in steps if step["at"] > back["at"] and step["ready"] > 1)
    assert rejoin["at"] == pytest.approx(back["at"] + 10)  # the model load alone


def test_the_report_prints_replicas_over_time_the_cold_dip_and_the_cost_and_draws_the_plot(burst, capsys, tmp_path):
    plot = tmp_path / "scaling.png"
    status, out, err = run_cli("--workload", str(burst), *[a for a in BURST_ARGS if a != "--json"],
                               "--plot", str(plot), capsys=capsys)
    assert status == 0, err
    assert "in the pool" in out and "asked at end" in out
    assert "Cold caches:" in out and "in their first 60 s in the pool" in out
    assert "Replica-hours:" in out and "for 3 fixed" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_sweep_of_the_scaling_parameters_prints_one_row_each(burst, capsys):
    status, out, err = run_cli("--workload", str(burst), *[a for a in BURST_ARGS if a != "--json"],
                               "--sweep", "minReplicas=1..2,leadTime=0..100:100", capsys=capsys)
    assert status == 0, err
    rows = [line for line in out.splitlines() if line.strip().startswith("minReplicas=")]
    assert [row.split()[0] for row in rows] == ["minReplicas=1,leadTime=0", "minReplicas=1,leadTime=100",
                                                "minReplicas=2,leadTime=0", "minReplicas=2,leadTime=100"]
    assert "3 fixed replicas" in out


def test_the_stack_gives_the_scaler_the_consolidation_delay_and_the_price(capsys, burst):
    status, out, err = run_cli("--stack", "eks-karpenter", "--model", "qwen-small", "--workload", str(burst),
                               "--autoscale", "--seed", "1", "--json", capsys=capsys)
    assert status == 0, err
    result = json.loads(out)
    assert result["policy"] == {"minReplicas": 1, "maxReplicas": 4, "metric": "waiting", "target": 2,
                                "nodeLeadSeconds": 180.0, "podStartSeconds": 90.0, "consolidateAfterSeconds": 600.0,
                                "scaleDownWindowSeconds": 300.0}
    assert result["fixed"]["cost"] == pytest.approx(result["fixed"]["nodeHours"] * 1.006, abs=1e-3)


@pytest.mark.parametrize(("argv", "expected"), [
    (("--workload", "ramp", "--pods", "2", "--min-replicas", "2"), "--min-replicas: sets how replicas follow the load; add --autoscale"),
    (("--workload", "seed-shared", "--autoscale", "--pods", "2", "--min-replicas", "1", "--max-replicas", "2"),
     "a scaler follows load over time, and the workload has no clock"),
    (("--stack", "eks", "--model", "qwen-small", "--workload", "ramp", "--autoscale"),
     "stack eks's model qwen-small has no autoscaling; give --min-replicas and --max-replicas"),
    (("--workload", "ramp", "--autoscale", "--pods", "2", "--min-replicas", "3", "--max-replicas", "2"),
     "--min-replicas 3: above maxReplicas 2"),
    (("--workload", "ramp", "--autoscale", "--pods", "2", "--min-replicas", "1", "--max-replicas", "2",
      "--sweep", "prefix=0..1"), "--sweep prefix with --autoscale"),
])
def test_what_autoscale_refuses_is_one_line(capsys, argv, expected):
    status, out, err = run_cli(*argv, capsys=capsys)
    assert status == 2 and out == "" and expected in err and err.count("\n") == 1


@pytest.mark.skipif(not compiled.ACTIVE, reason="compares the compiled core with the pure-Python reference")
def test_the_pure_python_modules_scale_alike(burst, capsys):
    compiled_result = burst_prediction(burst, capsys)
    pure = subprocess.run([sys.executable, "-m", "routing", "predict", "--workload", str(burst), *BURST_ARGS],
                          cwd=REPO, env={**os.environ, compiled.PURE_PYTHON_ENV: "1"}, capture_output=True, text=True,
                          timeout=600)
    assert pure.returncode == 0, pure.stderr[-2000:]
    assert json.loads(pure.stdout) == compiled_result
