"""Simulated vLLM servers (continuous batching, a paged KV cache with prefix caching, a latency
model) routed by the picker model: `predict`, its weight advisor (`sweep`) and heat maps.
May import `picker/` and routing's top-level modules; never `live/` or `lab/`."""
