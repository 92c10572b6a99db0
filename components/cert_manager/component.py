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
        chart = k8s.helm.v4.Chart(f"{name}-cert-manager", chart=render.CHART, name="cert-manager",
                                  version=render.VERSION, namespace=render.NAMESPACE, values=render.chart_values(),
                                  opts=after(namespace))
        account = render.startup_check_service_account()
        role, binding = render.startup_check_role(), render.startup_check_role_binding()
        rbac = [k8s.core.v1.ServiceAccount(f"{name}-startup-check", metadata=account["metadata"],
                                           automount_service_account_token=account["automountServiceAccountToken"],
                                           opts=after(namespace)),
                k8s.rbac.v1.Role(f"{name}-startup-check", metadata=role["metadata"], rules=role["rules"],
                                 opts=after(namespace))]
        rbac.append(k8s.rbac.v1.RoleBinding(f"{name}-startup-check", metadata=binding["metadata"],
                                            role_ref=binding["roleRef"], subjects=binding["subjects"],
                                            opts=after(*rbac)))
        job = render.startup_check_job()
        # Awaited until it completes: the webhook then admits cert-manager's objects. A changed Job
        # is a new one of the same name, so the old one goes first.
        startup_check = k8s.batch.v1.Job(
            f"{name}-startup-check", metadata=job["metadata"], spec=job["spec"],
            opts=after(chart, *rbac).merge(pulumi.ResourceOptions(delete_before_replace=True)))
        objects = {}
        for key, manifest in (("selfsigned", render.self_signed_issuer(settings)),
                              ("ca-certificate", render.ca_certificate(settings)),
                              ("ca", render.ca_issuer(settings))):
            objects[key] = k8s.apiextensions.CustomResource(
                f"{name}-{key}", api_version=manifest["apiVersion"], kind=manifest["kind"],
                metadata=manifest["metadata"], spec=manifest["spec"],
                opts=after(chart, startup_check, *objects.values()))
        self.issuer_name = render.ca_issuer_name(settings)
        # What a certificate issued by the CA waits for.
        self.ready: list[pulumi.Resource] = [objects["ca"]]
        self.register_outputs({"issuer": self.issuer_name})
