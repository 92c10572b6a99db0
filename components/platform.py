"""The one place that turns `platform` and `gateway.implementation` into components; the rest
of the program asks what it got (what to wait for, where model pods go), never which one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pulumi

from components.addon import InferenceAddon
from components.autoscaling import Autoscaling
from components.cluster import Cluster, ExistingCluster
from components.gateway import Gateway
from components.gateway_api import GatewayApiDataPlane
from components.gpu_nodes import GpuNodes
from components.gpu_nodes.render import node_selector
from components.hyperpod import ExistingHyperPodCluster, HyperPodCluster
from components.karpenter import HyperPodNodePool, Karpenter
from components.llmd_router import LlmdRouter
from components.network_policy import FrontDoorPolicies
from components.observability import Observability
from settings import Settings
from settings.hyperpod import dependencies_chart_path


@dataclass
class GpuCapacity:
    """Where model pods run: what they wait for and the node labels they select."""

    ready: list[pulumi.Resource] = field(default_factory=list)
    node_selector: dict[str, str] | None = None
    hyperpod: HyperPodCluster | ExistingHyperPodCluster | None = None


def cluster(settings: Settings) -> Cluster | ExistingCluster:
    if settings.cluster.existing:
        return ExistingCluster("cluster", settings=settings.cluster)
    # Managed node groups exist only on plain EKS; HyperPod's instance groups replace them. The
    # VPC CNI enforces NetworkPolicies on both once the add-on's network policy setting is on.
    return Cluster("cluster", settings=settings.cluster, managed_nodes=settings.platform == "eks",
                   network_policy=settings.gateway.network_policy.enabled)


def gpu_capacity(settings: Settings, eks_cluster: Cluster | ExistingCluster, *, project_dir: Path,
                 region: str) -> GpuCapacity:
    if settings.hyperpod is not None and settings.hyperpod.existing:
        return GpuCapacity(hyperpod=ExistingHyperPodCluster("hyperpod", settings=settings.hyperpod))
    if settings.hyperpod is not None:
        hyperpod = HyperPodCluster(
            "hyperpod", settings=settings.hyperpod, eks_cluster_name=eks_cluster.name,
            subnet_ids=eks_cluster.subnet_ids, security_group_id=eks_cluster.security_group_id, region=region,
            chart_path=dependencies_chart_path(settings.hyperpod, project_dir, relative=True),
            k8s_provider=eks_cluster.provider, depends_on=eks_cluster.ready)
        ready: list[pulumi.Resource] = [hyperpod]
        if settings.hyperpod.karpenter is not None:
            ready.append(HyperPodNodePool("hyperpod-karpenter", settings=settings.hyperpod,
                                          k8s_provider=eks_cluster.provider, depends_on=[hyperpod]))
        return GpuCapacity(ready=ready, node_selector=node_selector(), hyperpod=hyperpod)
    if settings.gpu_nodes is not None:
        gpu_nodes = GpuNodes("gpu-nodes", settings=settings.gpu_nodes, cluster=eks_cluster.eks,
                             node_role=eks_cluster.node_role, node_policies=eks_cluster.node_policies,
                             subnet_ids=eks_cluster.subnet_ids, k8s_provider=eks_cluster.provider,
                             opts=pulumi.ResourceOptions(depends_on=eks_cluster.ready))
        ready = [gpu_nodes]
        if settings.gpu_nodes.karpenter is not None:
            ready.append(Karpenter(
                "karpenter", settings=settings.gpu_nodes, cluster_name=eks_cluster.name, region=region,
                node_role=eks_cluster.node_role, subnet_ids=eks_cluster.subnet_ids,
                security_group_id=eks_cluster.security_group_id, oidc_provider_arn=eks_cluster.oidc_provider_arn,
                oidc_issuer_url=eks_cluster.oidc_issuer_url, k8s_provider=eks_cluster.provider,
                depends_on=eks_cluster.ready))
        # Model pods can only start once GPU nodes (or the NodePool that brings them) and the device plugin are there.
        return GpuCapacity(ready=ready, node_selector=node_selector())
    # An existing plain EKS cluster brings its own GPU nodes and device plugin.
    return GpuCapacity()


def endpoint_picker(settings: Settings, eks_cluster: Cluster | ExistingCluster, capacity: GpuCapacity, *,
                    region: str, depends_on: list[pulumi.Resource],
                    monitoring: Observability | None = None) -> Gateway | GatewayApiDataPlane:
    """The gateway and one endpoint picker per model, and the NetworkPolicies that leave the model
    pods reachable only through them; the result has `name`, `url_command` and `ca_command`."""
    in_cluster = pulumi.ResourceOptions(provider=eks_cluster.provider)
    if settings.gateway.network_policy.enabled:
        FrontDoorPolicies("front-door", settings=settings,
                          opts=in_cluster.merge(pulumi.ResourceOptions(depends_on=depends_on)))
    if settings.gateway.implementation == "llm-d":
        data_plane = GatewayApiDataPlane(
            "gateway-api", settings=settings, cluster_name=eks_cluster.name, region=region, vpc_id=eks_cluster.vpc_id,
            oidc_provider_arn=eks_cluster.oidc_provider_arn, oidc_issuer_url=eks_cluster.oidc_issuer_url,
            k8s_provider=eks_cluster.provider, depends_on=[*eks_cluster.ready, *depends_on])
        monitoring_crds = [monitoring.chart] if monitoring is not None else []
        for model in settings.models:
            LlmdRouter(f"router-{model.name}", model=model, settings=settings,
                       depends_on=[*depends_on, *data_plane.ready, *monitoring_crds], opts=in_cluster)
        return data_plane
    gateway_dependencies = list(depends_on)
    if settings.gateway.install_addon:
        addon = InferenceAddon("inference-addon", settings=settings.gateway, cluster_name=eks_cluster.name,
                               oidc_provider_arn=eks_cluster.oidc_provider_arn,
                               oidc_issuer_url=eks_cluster.oidc_issuer_url, hyperpod_cluster_arn=capacity.hyperpod.arn,
                               depends_on=[*eks_cluster.ready, *capacity.ready])
        gateway_dependencies.append(addon)
    # Depending on the add-on also orders the destroy: the gateway goes first, so its
    # controller can still remove the load balancer, security groups and certificate it made.
    return Gateway("gateway", settings=settings, depends_on=gateway_dependencies, opts=in_cluster)


def observability(settings: Settings, eks_cluster: Cluster | ExistingCluster, capacity: GpuCapacity, *, region: str,
                  grafana_password: pulumi.Input[str] | None, depends_on: list[pulumi.Resource]) -> Observability | None:
    """Prometheus, Grafana and the routing alerts, on the nodes that carry the system pods: the
    system node group on `eks`, the HyperPod cluster's CPU group on `hyperpod`."""
    if not settings.observability.enabled:
        return None
    nodes = capacity.ready if settings.hyperpod is not None else []
    # Roles for service accounts need the cluster's OIDC provider, which an existing cluster may
    # lack: it is looked up only when a role is made (the EBS CSI driver on a new cluster, remote write).
    needs_roles = not settings.cluster.existing or settings.observability.remote_write is not None
    hyperpod_arn = capacity.hyperpod.arn if settings.hyperpod is not None and not settings.hyperpod.existing else None
    return Observability("observability", settings=settings, grafana_password=grafana_password,
                         cluster_name=eks_cluster.name, region=region,
                         oidc_provider_arn=eks_cluster.oidc_provider_arn if needs_roles else None,
                         oidc_issuer_url=eks_cluster.oidc_issuer_url, hyperpod_cluster_arn=hyperpod_arn,
                         k8s_provider=eks_cluster.provider, depends_on=[*eks_cluster.ready, *nodes, *depends_on])


def autoscaling(settings: Settings, eks_cluster: Cluster | ExistingCluster, *,
                depends_on: list[pulumi.Resource]) -> Autoscaling | None:
    """The models' scalers. KEDA is the HyperPod add-on's own option on `hyperpod` (the gateway,
    in `depends_on`, waits for the add-on), its pinned chart on `eks`."""
    if not any(model.autoscaling is not None for model in settings.models):
        return None
    return Autoscaling("autoscaling", settings=settings, install_keda=settings.platform == "eks",
                       k8s_provider=eks_cluster.provider, depends_on=[*eks_cluster.ready, *depends_on])
