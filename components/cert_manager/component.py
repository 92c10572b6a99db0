"""cert-manager at its pinned version, and the stack's private CA as a ClusterIssuer."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from settings import Settings

from . import render


class PrivateCertificateAuthority(pulumi.ComponentResource):
    def __init__(self, name: str, *, settings: Settings, k8s_provider: k8s.Provider,
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:PrivateCertificateAuthority", name, None, opts)

        def after(*resources: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=[*depends_on, *resources])

        namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata={"name": render.NAMESPACE}, opts=after())
        # Pulumi waits for its Deployments, the webhook's included, before any issuer is created.
        chart = k8s.helm.v4.Chart(f"{name}-cert-manager", chart=render.CHART, name="cert-manager",
                                  version=render.VERSION, namespace=render.NAMESPACE, values=render.chart_values(),
                                  opts=after(namespace))
        objects = {}
        for key, manifest in (("selfsigned", render.self_signed_issuer(settings)),
                              ("ca-certificate", render.ca_certificate(settings)),
                              ("ca", render.ca_issuer(settings))):
            objects[key] = k8s.apiextensions.CustomResource(
                f"{name}-{key}", api_version=manifest["apiVersion"], kind=manifest["kind"],
                metadata=manifest["metadata"], spec=manifest["spec"], opts=after(chart, *objects.values()))
        self.issuer_name = render.ca_issuer_name(settings)
        # What a certificate issued by the CA waits for.
        self.ready: list[pulumi.Resource] = [objects["ca"]]
        self.register_outputs({"issuer": self.issuer_name})
