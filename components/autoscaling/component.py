"""KEDA (its chart on `eks`; on HyperPod the inference add-on's keda option) and one ScaledObject
per model that autoscales."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from settings import Settings

from . import render


class Autoscaling(pulumi.ComponentResource):
    def __init__(self, name: str, *, settings: Settings, install_keda: bool, k8s_provider: k8s.Provider,
                 depends_on: list[pulumi.Resource], opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:Autoscaling", name, None, opts)

        def in_cluster(*after: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=[*depends_on, *after])

        keda: list[pulumi.Resource] = []
        if install_keda:
            namespace = k8s.core.v1.Namespace(f"{name}-keda-namespace", metadata={"name": render.NAMESPACE},
                                              opts=in_cluster())
            keda.append(k8s.helm.v4.Chart(
                f"{name}-keda", chart=render.CHART, name="keda", version=render.VERSION, namespace=render.NAMESPACE,
                repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=render.REPO), values=render.chart_values(),
                opts=in_cluster(namespace)))
        scaled = []
        for model in settings.models:
            if model.autoscaling is None:
                continue
            manifest = render.scaled_object(settings, model)
            scaled.append(manifest["metadata"]["name"])
            k8s.apiextensions.CustomResource(
                f"{name}-{model.name}", api_version=manifest["apiVersion"], kind=manifest["kind"],
                metadata=manifest["metadata"], spec=manifest["spec"], opts=in_cluster(*keda))
        self.register_outputs({"scaledObjects": scaled})
