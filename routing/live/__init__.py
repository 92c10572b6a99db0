"""The tools that talk to live vLLM pods and gateways: `verify` (per-pod counter deltas),
`serve` (a local gateway that picks with the picker model) and `calibrate` (a latency profile).
May import `picker/`, `simulation/` and routing's top-level modules; never `lab/`."""
