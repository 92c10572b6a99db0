"""inference-gateway: vLLM on Amazon EKS behind an LLM-aware endpoint picker.

Config is read and validated in full before any resource is declared, so a bad value
stops `pulumi up` with every problem listed and nothing half-deployed. Which platform and
which picker implementation the stack runs is decided once, in components/platform.py.
"""

from pathlib import Path

import pulumi

from components import platform
from components.model_server import ModelNamespace, ModelServer
from components.stack_config import project_config
from settings import NAMESPACE, SettingsError, parse_settings
from settings.hyperpod import check_dependencies_chart
from settings.observability import grafana_password

PROJECT_DIR = Path(__file__).resolve().parent

raw, secret_keys = project_config(NAMESPACE)
region = pulumi.Config("aws").get("region")
try:
    settings = parse_settings(raw, stack=pulumi.get_stack(), secret_keys=secret_keys)
    warnings = [*settings.warnings, *check_dependencies_chart(settings.hyperpod, PROJECT_DIR, region)]
except SettingsError as error:
    # A RunError ends the program with this message alone, before anything is declared.
    raise pulumi.RunError(str(error)) from None
if region is None:
    raise pulumi.RunError("aws:region is not set; nothing was deployed. Set it with `pulumi config set aws:region us-west-2`.")

for warning in warnings:
    pulumi.log.warn(warning)

cluster = platform.cluster(settings)
capacity = platform.gpu_capacity(settings, cluster, project_dir=PROJECT_DIR, region=region)
in_cluster = pulumi.ResourceOptions(provider=cluster.provider)

hf_token = pulumi.Config(NAMESPACE).get_secret("hfToken") if settings.hf_token else None
namespace = ModelNamespace("models", namespace=settings.namespace, hf_token=hf_token,
                           opts=in_cluster.merge(pulumi.ResourceOptions(depends_on=cluster.ready)))

models = [ModelServer(f"model-{model.name}", model=model, namespace=settings.namespace, hf_token=settings.hf_token,
                      gpu_node_selector=capacity.node_selector, depends_on=[namespace, *capacity.ready],
                      opts=in_cluster)
          for model in settings.models]

# The password given as a secret, else one the stack generates and keeps.
given_password = grafana_password(raw) if settings.observability.grafana_password_given else None
monitoring = platform.observability(settings, cluster, capacity, region=region,
                                    grafana_password=pulumi.Output.secret(given_password) if given_password else None,
                                    depends_on=[namespace])
gateway = platform.endpoint_picker(settings, cluster, capacity, region=region, depends_on=[namespace],
                                   monitoring=monitoring)
platform.autoscaling(settings, cluster, depends_on=[*models, gateway, *([monitoring] if monitoring else [])])

pulumi.export("platform", settings.platform)
pulumi.export("clusterName", cluster.name)
pulumi.export("kubeconfig", cluster.kubeconfig)
if capacity.hyperpod is not None:
    pulumi.export("hyperpodClusterArn", capacity.hyperpod.arn)
pulumi.export("namespace", settings.namespace)
pulumi.export("gatewayName", gateway.name)
pulumi.export("effectiveWeights", {
    m.name: dict(m.effective_weights) if m.effective_weights is not None
    else "set by pickerConfigMap" if m.picker_config_map is not None else f"none: the {m.routing.recipe} recipe"
    for m in settings.models})
pulumi.export("routing", {m.name: m.routing.as_config() for m in settings.models})
pulumi.export("podSelectors", {m.name: dict(m.selector) for m in settings.models})
pulumi.export("gatewayUrlCommand", gateway.url_command)
if gateway.ca_command is not None:
    pulumi.export("gatewayCaCommand", gateway.ca_command)
if monitoring is not None:
    pulumi.export("grafanaCommand", monitoring.grafana_command)
    pulumi.export("grafanaAdminPassword", monitoring.grafana_password)
    pulumi.export("prometheusCommand", monitoring.prometheus_command)
    if monitoring.workspace_arn is not None:
        pulumi.export("managedPrometheusWorkspaceArn", monitoring.workspace_arn)
