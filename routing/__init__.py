"""Predict and prove how the gateway's endpoint picker routes requests across model replicas.

`python -m routing COMMAND` (see `__main__.py`). Nothing here imports Pulumi: stacks are read
through the `settings` package, exactly as `pulumi up` reads them. The package is laid out by
role, and imports flow one way, left to right never back:

    picker/  ->  workloads, metrics, tables, options  ->  simulation/  ->  live/  ->  lab/  ->  __main__

- `picker/`: the model of the llm-d router's endpoint picker (request parsing, prefix hashing,
  scorers), built from an `EndpointPickerConfig` (`settings.picker_config`);
- the top-level modules: what every room shares (the workloads sent, vLLM's `/metrics` and
  per-pod counter deltas, the tables they print as, the command-line options);
- `simulation/`: simulated vLLM servers and `predict` with its weight advisor;
- `live/`: the tools that talk to real pods (`verify`, `serve`, `calibrate`);
- `lab/`: the local lab of real vLLM CPU servers (the tiny model, `demo`, `servers`).
"""

# Before any module of the simulator's core loads: compiled, or the pure-Python reference (compiled.py).
from routing import compiled  # noqa: E402,F401
