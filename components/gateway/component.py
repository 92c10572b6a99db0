"""The InferenceGatewayConfig: one gateway, one endpoint picker per model."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from settings import Settings

from . import render


class Gateway(pulumi.ComponentResource):
    def __init__(self, name: str, *, settings: Settings, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:Gateway", name, None, opts)
        # On the resource itself, not only the component: the engine orders each resource by its
        # own dependencies (the add-on before the gateway on create, after it on destroy).
        dependencies = list(depends_on)
        manifest = render.gateway_manifest(settings)
        config_maps = [k8s.core.v1.ConfigMap(f"{name}-picker-{index}", metadata=config_map["metadata"],
                                             data=config_map["data"], opts=pulumi.ResourceOptions(parent=self))
                       for index, config_map in enumerate(render.picker_config_maps(settings))]
        # A plain CustomResource is patched in place on update: a weight change edits the live
        # object (no replacement, no delete-and-apply), and only this resource's inputs change.
        self.config = k8s.apiextensions.CustomResource(
            f"{name}-config",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            # The pickers read their custom configuration at start: it must be there first.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*config_maps, *dependencies]),
        )
        # The name is known up front; tying it to the resource's id makes the output resolve
        # only once the gateway exists (and has reported Ready).
        gateway_name = settings.gateway.name
        self.name = self.config.id.apply(lambda _: gateway_name)
        self.url_command = render.gateway_url_command(settings)
        # The controller issues tls: {} certificates itself; AWS does not document from which CA.
        self.ca_command = None
        self.register_outputs({"name": self.name})
