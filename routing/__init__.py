"""Predict and prove how the gateway's endpoint picker routes requests across model replicas.

`python -m routing predict|verify|serve|demo`. Nothing here imports Pulumi: it reads stacks
through the `settings` package and runs without a cluster.
"""
