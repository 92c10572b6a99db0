"""One model's llm-d router: its InferencePool and endpoint picker (the router's own chart) and
the HTTPRoute that sends the model's requests to that pool."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from settings import ModelSettings, Settings

from . import render


class LlmdRouter(pulumi.ComponentResource):
    def __init__(self, name: str, *, model: ModelSettings, settings: Settings, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:LlmdRouter", name, None, opts)
        # The chart needs what the data plane installs (the InferencePool and Gateway API CRDs) and,
        # with observability on, the monitoring chart's ServiceMonitor CRD: created after them and
        # destroyed before them.
        child = pulumi.ResourceOptions(parent=self, depends_on=depends_on)
        # A weight change alters only these values (the configuration and its hash on the
        # picker's pods), so `pulumi up` rolls the picker and nothing else.
        self.chart = k8s.helm.v4.Chart(f"{name}-router", chart=render.ROUTER_CHART, name=model.name,
                                       version=render.ROUTER_VERSION, namespace=settings.namespace,
                                       values=render.router_values(model, settings), opts=child)
        route = render.http_route(model, settings)
        self.route = k8s.apiextensions.CustomResource(
            f"{name}-route", api_version=route["apiVersion"], kind=route["kind"], metadata=route["metadata"],
            spec=route["spec"], opts=pulumi.ResourceOptions(parent=self, depends_on=[self.chart]))
        self.register_outputs({"pool": model.name})
