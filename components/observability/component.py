"""The monitoring stack: kube-prometheus-stack at its pin with persistent volumes, the Grafana
admin Secret, remote write when asked, and per model its monitors, alerts and dashboard."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.iam.role import service_account_role
from settings import Settings

from . import render

# Random, alphanumeric (no character a shell or URL would mangle), kept in the stack's state.
GENERATED_PASSWORD_LENGTH = 32


class Observability(pulumi.ComponentResource):
    def __init__(self, name: str, *, settings: Settings, grafana_password: pulumi.Input[str] | None,
                 cluster_name: pulumi.Input[str], region: str, oidc_provider_arn: pulumi.Input[str],
                 oidc_issuer_url: pulumi.Input[str], hyperpod_cluster_arn: pulumi.Input[str] | None,
                 k8s_provider: k8s.Provider, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:Observability", name, None, opts)
        self._child = pulumi.ResourceOptions(parent=self)
        self._partition = aws.get_partition_output().partition
        self._oidc = (oidc_provider_arn, oidc_issuer_url)

        def in_cluster(*after: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=[*depends_on, *after])

        namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=render.namespace_manifest(settings)["metadata"],
                                          opts=in_cluster())
        volumes: list[pulumi.Resource] = []
        if not settings.cluster.existing:
            volumes = self._ebs_csi_driver(name, cluster_name=cluster_name, hyperpod_cluster_arn=hyperpod_cluster_arn,
                                           depends_on=depends_on)
            manifest = render.storage_class()
            volumes.append(k8s.storage.v1.StorageClass(
                f"{name}-storage-class", metadata=manifest["metadata"], provisioner=manifest["provisioner"],
                parameters=manifest["parameters"], volume_binding_mode=manifest["volumeBindingMode"],
                allow_volume_expansion=manifest["allowVolumeExpansion"], reclaim_policy=manifest["reclaimPolicy"],
                opts=in_cluster(*volumes)))

        if grafana_password is None:
            grafana_password = random.RandomPassword(f"{name}-grafana-password", length=GENERATED_PASSWORD_LENGTH,
                                                     special=False, opts=self._child).result
        self.grafana_password = pulumi.Output.secret(grafana_password)
        secret = render.grafana_secret(settings)
        admin = k8s.core.v1.Secret(f"{name}-grafana-admin", metadata=secret["metadata"], type=secret["type"],
                                   string_data={"admin-user": render.GRAFANA_USER,
                                                "admin-password": self.grafana_password},
                                   opts=in_cluster(namespace))

        values: pulumi.Input[dict] = render.chart_values(settings)
        self.workspace_arn: pulumi.Output[str] | None = None
        granted: list[pulumi.Resource] = []
        if settings.observability.remote_write is not None:
            values, granted = self._remote_write(name, settings, region)
        # Pulumi waits for the chart's Deployments and StatefulSets: Prometheus's volume bound, the
        # operator serving its CRDs, Grafana up, before any monitor or rule is declared.
        self.chart = k8s.helm.v4.Chart(
            f"{name}-kube-prometheus-stack", chart=render.CHART, name=render.RELEASE, version=render.VERSION,
            namespace=settings.observability.namespace, repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=render.REPO),
            values=values, opts=in_cluster(namespace, admin, *volumes, *granted))

        for model in settings.models:
            objects = [render.pod_monitor(settings, model), render.prometheus_rule(settings, model)]
            if settings.gateway.implementation == "hyperpod":
                objects.append(render.picker_pod_monitor(settings, model))
            for manifest in objects:
                k8s.apiextensions.CustomResource(
                    f"{name}-{model.name}-{manifest['kind'].lower()}-{manifest['metadata']['name']}",
                    api_version=manifest["apiVersion"], kind=manifest["kind"], metadata=manifest["metadata"],
                    spec=manifest["spec"], opts=in_cluster(self.chart))
            board = render.dashboard_config_map(settings, model)
            k8s.core.v1.ConfigMap(f"{name}-{model.name}-dashboard", metadata=board["metadata"], data=board["data"],
                                  opts=in_cluster(namespace))
        self.prometheus_url = render.prometheus_url(settings)
        self.grafana_command = render.grafana_command(settings)
        self.prometheus_command = render.prometheus_command(settings)
        self.register_outputs({"grafanaCommand": self.grafana_command, "prometheusUrl": self.prometheus_url})

    def _ebs_csi_driver(self, name: str, *, cluster_name: pulumi.Input[str],
                        hyperpod_cluster_arn: pulumi.Input[str] | None,
                        depends_on: list[pulumi.Resource]) -> list[pulumi.Resource]:
        """The EBS CSI driver add-on, which neither platform's cluster has until the stack adds it.
        Its version is EKS's default for the cluster's Kubernetes release, as AWS's own HyperPod
        templates install their add-ons without a dependency on a version."""
        inline = (pulumi.Output.from_input(hyperpod_cluster_arn).apply(render.hyperpod_volume_policy)
                  if hyperpod_cluster_arn is not None else None)
        role, attached = service_account_role(
            f"{name}-ebs-csi", render.EBS_CSI_ROLE, oidc_provider_arn=self._oidc[0], oidc_issuer_url=self._oidc[1],
            partition=self._partition, opts=self._child, inline=inline)
        addon = aws.eks.Addon(f"{name}-ebs-csi-driver", cluster_name=cluster_name, addon_name=render.EBS_CSI_ADDON,
                              service_account_role_arn=role.arn, resolve_conflicts_on_create="OVERWRITE",
                              resolve_conflicts_on_update="OVERWRITE",
                              opts=pulumi.ResourceOptions(parent=self, depends_on=[*depends_on, *attached]))
        return [addon]

    def _remote_write(self, name: str, settings: Settings,
                      region: str) -> tuple[pulumi.Output[dict], list[pulumi.Resource]]:
        """A workspace (created, or the one given), and Prometheus's service account allowed to
        write to it and nothing else."""
        given = settings.observability.remote_write.workspace_arn
        if given is None:
            workspace = aws.amp.Workspace(f"{name}-workspace", alias=f"{settings.cluster.name}-{settings.namespace}",
                                          opts=self._child)
            arn, endpoint, write_region = workspace.arn, workspace.prometheus_endpoint, region
        else:
            write_region = settings.observability.remote_write.region
            arn = pulumi.Output.from_input(given)
            endpoint = pulumi.Output.from_input(render.workspace_endpoint(given, write_region))
        self.workspace_arn = arn
        role, granted = service_account_role(
            f"{name}-remote-write", render.remote_write_role(settings), oidc_provider_arn=self._oidc[0],
            oidc_issuer_url=self._oidc[1], partition=self._partition, opts=self._child,
            inline=arn.apply(render.remote_write_policy))
        values = pulumi.Output.all(endpoint, role.arn).apply(lambda args: render.chart_values(
            settings, remote_write=render.remote_write(args[0], write_region), prometheus_role_arn=args[1]))
        return values, granted
