"""inference-gateway: vLLM on EKS behind the SageMaker HyperPod Inference Gateway.

Config is read and validated in full before any resource is declared, so a bad value
stops `pulumi up` with every problem listed and nothing half-deployed.
"""

import pulumi

from components.addon import InferenceAddon
from components.cluster import Cluster, ExistingCluster
from components.gateway import Gateway
from components.gateway.render import gateway_url_command
from components.gpu_nodes import GpuNodes
from components.gpu_nodes.render import node_selector
from components.model_server import ModelNamespace, ModelServer
from components.stack_config import project_config
from settings import NAMESPACE, SettingsError, parse_settings

raw, secret_keys = project_config(NAMESPACE)
try:
    settings = parse_settings(raw, stack=pulumi.get_stack(), secret_keys=secret_keys)
except SettingsError as error:
    # A RunError ends the program with this message alone, before anything is declared.
    raise pulumi.RunError(str(error)) from None

for warning in settings.warnings:
    pulumi.log.warn(warning)

if settings.cluster.existing:
    cluster = ExistingCluster("cluster", settings=settings.cluster)
    cluster_ready: list[pulumi.Resource] = [cluster]
else:
    cluster = Cluster("cluster", settings=settings.cluster)
    cluster_ready = [cluster.system_nodes]

in_cluster = pulumi.ResourceOptions(provider=cluster.provider)

gpu_selector = None
models_ready: list[pulumi.Resource] = []
if settings.gpu_nodes is not None:
    gpu_nodes = GpuNodes("gpu-nodes", settings=settings.gpu_nodes, cluster=cluster.eks, node_role=cluster.node_role,
                         node_policies=cluster.node_policies, subnet_ids=cluster.subnet_ids,
                         k8s_provider=cluster.provider, opts=pulumi.ResourceOptions(depends_on=cluster_ready))
    gpu_selector = node_selector()
    # Model pods can only start once GPU nodes and the device plugin are there.
    models_ready.append(gpu_nodes)

hf_token = pulumi.Config(NAMESPACE).get_secret("hfToken") if settings.hf_token else None
namespace = ModelNamespace("models", namespace=settings.namespace, hf_token=hf_token,
                           opts=in_cluster.merge(pulumi.ResourceOptions(depends_on=cluster_ready)))

for model in settings.models:
    ModelServer(f"model-{model.name}", model=model, namespace=settings.namespace, hf_token=settings.hf_token,
                gpu_node_selector=gpu_selector,
                opts=in_cluster.merge(pulumi.ResourceOptions(depends_on=[namespace, *models_ready])))

gateway_dependencies: list[pulumi.Resource] = [namespace]
if settings.gateway.install_addon:
    addon = InferenceAddon("inference-addon", settings=settings.gateway, cluster_name=cluster.name,
                           oidc_provider_arn=cluster.oidc_provider_arn, oidc_issuer_url=cluster.oidc_issuer_url,
                           depends_on=cluster_ready)
    gateway_dependencies.append(addon)
gateway = Gateway("gateway", settings=settings,
                  opts=in_cluster.merge(pulumi.ResourceOptions(depends_on=gateway_dependencies)))

pulumi.export("clusterName", cluster.name)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("namespace", settings.namespace)
pulumi.export("gatewayName", gateway.name)
pulumi.export("effectiveWeights", {name: dict(weights) if weights is not None else "set by pickerConfigMap"
                                   for name, weights in settings.effective_weights.items()})
pulumi.export("podSelectors", {m.name: dict(m.selector) for m in settings.models})
pulumi.export("gatewayUrlCommand", gateway_url_command(settings))
