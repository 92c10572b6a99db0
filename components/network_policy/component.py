"""The NetworkPolicies of the model pods and their pickers (render.py says what each admits)."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from settings import Settings

from . import render


class FrontDoorPolicies(pulumi.ComponentResource):
    def __init__(self, name: str, *, settings: Settings, opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:FrontDoorPolicies", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        names = []
        for policy in render.policies(settings):
            names.append(policy["metadata"]["name"])
            k8s.networking.v1.NetworkPolicy(f"{name}-{policy['metadata']['name']}", metadata=policy["metadata"],
                                            spec=policy["spec"], opts=child)
        self.register_outputs({"policies": names})
