"""The Gateway API data plane the open-source pickers sit behind: CRDs, Istio, the AWS Load
Balancer Controller, one Gateway with its TLS (cert-manager and the stack's CA on auto) and its
request authentication (gateway.jwt), and body-based routing when several models share it."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.cert_manager import PrivateCertificateAuthority
from components.iam import render as iam
from components.iam.role import service_account_role
from settings import Settings
from settings.endpoints import bbr_name

from . import render


class GatewayApiDataPlane(pulumi.ComponentResource):
    def __init__(self, name: str, *, settings: Settings, cluster_name: pulumi.Input[str], region: str,
                 vpc_id: pulumi.Input[str], oidc_provider_arn: pulumi.Input[str], oidc_issuer_url: pulumi.Input[str],
                 k8s_provider: k8s.Provider, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:GatewayApiDataPlane", name, None, opts)
        in_cluster = pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=depends_on)
        crds = [k8s.yaml.v2.ConfigFile(f"{name}-gateway-api-crds", file=render.GATEWAY_API_CRDS, opts=in_cluster),
                k8s.yaml.v2.ConfigFile(f"{name}-inference-pool-crd", file=render.INFERENCE_POOL_CRD, opts=in_cluster)]
        after_crds = pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=[*depends_on, *crds])

        namespace = k8s.core.v1.Namespace(f"{name}-istio-namespace", metadata={"name": render.ISTIO_NAMESPACE},
                                          opts=in_cluster)
        istio_repo = k8s.helm.v4.RepositoryOptsArgs(repo=render.ISTIO_REPO)
        base = k8s.helm.v4.Chart(f"{name}-istio-base", chart="base", name="istio-base", version=render.ISTIO_VERSION,
                                 namespace=render.ISTIO_NAMESPACE, repository_opts=istio_repo,
                                 opts=after_crds.merge(pulumi.ResourceOptions(depends_on=[namespace])))
        istiod = k8s.helm.v4.Chart(f"{name}-istiod", chart="istiod", name="istiod", version=render.ISTIO_VERSION,
                                   namespace=render.ISTIO_NAMESPACE, repository_opts=istio_repo,
                                   values=render.istiod_values(),
                                   opts=after_crds.merge(pulumi.ResourceOptions(depends_on=[base])))
        gateway_needs: list[pulumi.Resource] = [istiod]
        if settings.gateway.load_balancer_controller:
            gateway_needs.append(self._load_balancer_controller(
                name, cluster_name=cluster_name, region=region, vpc_id=vpc_id, oidc_provider_arn=oidc_provider_arn,
                oidc_issuer_url=oidc_issuer_url, k8s_provider=k8s_provider, depends_on=depends_on))
        if settings.gateway.tls_acm_arn == "":
            gateway_needs.append(self._certificate(name, settings=settings, region=region, k8s_provider=k8s_provider,
                                                   depends_on=depends_on))
        manifest = render.gateway_manifest(settings, internal_load_balancer=settings.gateway.load_balancer_controller)
        # After the controller: its webhook claims the Service Istio creates for the Gateway, and
        # on destroy the Gateway (and so that Service and its NLB) goes while the controller runs.
        self.gateway = k8s.apiextensions.CustomResource(
            f"{name}-gateway", api_version=manifest["apiVersion"], kind=manifest["kind"],
            metadata=manifest["metadata"], spec=manifest["spec"],
            opts=after_crds.merge(pulumi.ResourceOptions(depends_on=gateway_needs)))
        self.ready: list[pulumi.Resource] = [self.gateway, *crds]
        if settings.gateway.jwt is not None:
            # Istio's CRDs come with its base chart, and istiod's webhook validates them.
            for key, policy in (("jwt", render.request_authentication(settings)),
                                ("jwt-required", render.authorization_policy(settings))):
                self.ready.append(k8s.apiextensions.CustomResource(
                    f"{name}-{key}", api_version=policy["apiVersion"], kind=policy["kind"],
                    metadata=policy["metadata"], spec=policy["spec"],
                    opts=after_crds.merge(pulumi.ResourceOptions(depends_on=[base, istiod, self.gateway]))))
        if settings.gateway.bbr_enabled:
            self.ready.append(k8s.helm.v4.Chart(
                f"{name}-bbr", chart=render.BBR_CHART, name=bbr_name(settings), version=render.BBR_VERSION,
                namespace=settings.namespace, values=render.bbr_values(settings),
                opts=after_crds.merge(pulumi.ResourceOptions(depends_on=[istiod, self.gateway]))))
        gateway_name = settings.gateway.name
        self.name = self.gateway.id.apply(lambda _: gateway_name)
        self.url_command = render.url_command(settings)
        self.ca_command = render.ca_command(settings)
        self.register_outputs({"name": self.name})

    def _certificate(self, name: str, *, settings: Settings, region: str, k8s_provider: k8s.Provider,
                     depends_on: list[pulumi.Resource]) -> k8s.apiextensions.CustomResource:
        """The Gateway's certificate from the stack's private CA; `pulumi up` waits until it is issued,
        so the Gateway never starts without its Secret."""
        authority = PrivateCertificateAuthority(f"{name}-ca", settings=settings, k8s_provider=k8s_provider,
                                                depends_on=depends_on, opts=pulumi.ResourceOptions(parent=self))
        certificate = render.gateway_certificate(settings, region=region, issuer=authority.issuer_name)
        return k8s.apiextensions.CustomResource(
            f"{name}-certificate", api_version=certificate["apiVersion"], kind=certificate["kind"],
            metadata=certificate["metadata"], spec=certificate["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=[*depends_on, *authority.ready]))

    def _load_balancer_controller(self, name: str, *, cluster_name, region, vpc_id, oidc_provider_arn, oidc_issuer_url,
                                  k8s_provider, depends_on) -> k8s.helm.v4.Chart:
        partition = aws.get_partition_output().partition
        role, policies = service_account_role(
            f"{name}-load-balancer-controller", render.LOAD_BALANCER_CONTROLLER_ROLE,
            oidc_provider_arn=oidc_provider_arn, oidc_issuer_url=oidc_issuer_url, partition=partition,
            opts=pulumi.ResourceOptions(parent=self), inline=partition.apply(iam.load_balancer_controller_policy))
        values = pulumi.Output.all(cluster_name, vpc_id, role.arn).apply(
            lambda args: render.load_balancer_controller_values(cluster_name=args[0], region=region, vpc_id=args[1],
                                                                role_arn=args[2]))
        return k8s.helm.v4.Chart(
            f"{name}-load-balancer-controller", chart=render.LOAD_BALANCER_CONTROLLER_CHART,
            name=render.LOAD_BALANCER_CONTROLLER_CHART, version=render.LOAD_BALANCER_CONTROLLER_VERSION,
            namespace=render.LOAD_BALANCER_CONTROLLER_NAMESPACE,
            repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=render.LOAD_BALANCER_CONTROLLER_REPO), values=values,
            opts=pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=[*depends_on, *policies]))
