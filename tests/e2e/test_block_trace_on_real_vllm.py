"""A block-hash trace on the two real vLLM servers: verify's synthesized token prompts, routed by
`serve`, land and hit exactly where `predict` says from the ids alone."""

from __future__ import annotations

import json

from tests.e2e.test_real_vllm import SEED, assert_measured_as_predicted

from routing.lab.demo import measure_through_serve
from routing.lab.vllm_server import SERVED_MODEL
from routing.simulation.prediction import run_prediction
from routing.workloads import load_arrivals

# Three conversations growing turn by turn, a fourth sharing nothing, and one-offs: lengths that
# end inside a block, so partial blocks count as the trace says.
REQUESTS = [([1, 2, 3], 300), ([1, 2, 4], 330), ([5, 6], 200), ([1, 2, 3, 7], 420), ([5, 8], 256), ([9], 100),
            ([1, 2, 4, 10], 500), ([5, 6, 11], 300), ([12, 13], 250), ([1, 2, 3, 7, 14], 600), ([5, 8, 15], 300),
            ([9, 16], 200)]


def test_a_trace_is_routed_and_cached_on_real_vllm_as_predicted_from_its_ids(pair, progress, tmp_path):
    block = pair.block_size  # ids of one vLLM block each: the sharing is the servers' own granularity
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"input_length": length * block // 128, "output_length": 2,
                                         "hash_ids": ids}) + "\n" for ids, length in REQUESTS))
    arrivals = load_arrivals(str(trace), SERVED_MODEL, block, trace_prompts=True)
    assert [len(arrival.body["prompt"]) for arrival in arrivals] == [length * block // 128 for _, length in REQUESTS]

    measurement, history = measure_through_serve(pair, [arrival.body for arrival in arrivals], None, seed=SEED,
                                                 out=progress)
    prediction = run_prediction([arrival.request for arrival in arrivals], replicas=len(pair.servers),
                                block_size=pair.block_size, capacity_blocks=pair.capacity_blocks, seed=SEED)

    assert measurement.statuses == (200,) * len(REQUESTS)
    assert measurement.report.hits > 0
    assert_measured_as_predicted(pair, measurement, history, prediction)
    progress.write(f"trace: hits {measurement.report.hits} of {measurement.report.queries} tokens, as predicted\n")
