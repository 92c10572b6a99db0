"""The model namespace and one vLLM Deployment + Service (+ PodDisruptionBudget) per model."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from settings import ModelSettings

from . import render

ROLLOUT_TIMEOUT = "40m"


class ModelNamespace(pulumi.ComponentResource):
    """The namespace models and the gateway resource live in, and the Hugging Face token Secret."""

    def __init__(self, name: str, *, namespace: str, hf_token: pulumi.Output[str] | None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:ModelNamespace", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        manifest = render.namespace_manifest(namespace)
        self.namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=manifest["metadata"], opts=child)
        self.name = self.namespace.metadata.name
        if hf_token is not None:
            secret = render.hf_token_secret(namespace)
            # string_data of a Pulumi secret stays encrypted in state and masked in diffs.
            k8s.core.v1.Secret(f"{name}-hf-token", metadata=secret["metadata"], type=secret["type"],
                               string_data={render.HF_TOKEN_KEY: pulumi.Output.secret(hf_token)},
                               opts=pulumi.ResourceOptions(parent=self, depends_on=[self.namespace]))
        self.register_outputs({"name": self.name})


class ModelServer(pulumi.ComponentResource):
    def __init__(self, name: str, *, model: ModelSettings, namespace: str, hf_token: bool,
                 gpu_node_selector: dict[str, str] | None, depends_on: list[pulumi.Resource],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:ModelServer", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        deployment = render.deployment(model, namespace, hf_token=hf_token, gpu_node_selector=gpu_node_selector)
        # A first rollout pulls a ~10 GiB image and loads the weights; the provider's default
        # 10-minute wait is shorter than the startup probe allows.
        rollout = pulumi.CustomTimeouts(create=ROLLOUT_TIMEOUT, update=ROLLOUT_TIMEOUT)
        self.deployment = k8s.apps.v1.Deployment(f"{name}-deployment", metadata=deployment["metadata"],
                                                 spec=deployment["spec"],
                                                 opts=pulumi.ResourceOptions(parent=self, custom_timeouts=rollout,
                                                                             depends_on=depends_on))
        service = render.service(model, namespace)
        self.service = k8s.core.v1.Service(f"{name}-service", metadata=service["metadata"], spec=service["spec"], opts=child)
        budget = render.pod_disruption_budget(model, namespace)
        if budget is not None:
            k8s.policy.v1.PodDisruptionBudget(f"{name}-pdb", metadata=budget["metadata"], spec=budget["spec"], opts=child)
        self.register_outputs({"deployment": self.deployment.metadata.name, "service": self.service.metadata.name})
