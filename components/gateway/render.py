"""The InferenceGatewayConfig, rendered as a plain dict from the settings."""

from __future__ import annotations

from typing import Any

from settings import ModelSettings, Settings
from settings.endpoints import gateway_scheme, gateway_service

API_VERSION = "inference.sagemaker.aws.amazon.com/v1alpha1"
KIND = "InferenceGatewayConfig"
# How long `pulumi up` waits for the controller to report the gateway Ready.
READY_TIMEOUT_SECONDS = 900


def scheduler_spec(model: ModelSettings) -> dict[str, Any]:
    """One spec.schedulers[] entry; optional fields appear only when set, as the seed writes them."""
    spec: dict[str, Any] = {
        "name": model.name,
        "modelName": model.model,
        "modelSelector": {"matchLabels": dict(model.selector)},
        "targetPort": model.port,
        "scheduler": model.scheduler,
    }
    if model.weights:
        spec["weights"] = dict(model.weights)
    if model.picker_config_map is not None:
        spec["configMapRef"] = {"name": model.picker_config_map.name, "key": model.picker_config_map.key}
    if model.picker_replicas is not None:
        spec["replicas"] = model.picker_replicas
    if model.lora_adapters:
        spec["loraAdapters"] = list(model.lora_adapters)
    if model.route_timeout is not None:
        spec["routeTimeout"] = model.route_timeout
    if model.log_level is not None:
        spec["logLevel"] = model.log_level
    return spec


def gateway_spec(settings: Settings) -> dict[str, Any]:
    gateway = settings.gateway
    bbr: dict[str, Any] = {"enabled": gateway.bbr_enabled}
    if gateway.bbr_replicas is not None:
        bbr["replicas"] = gateway.bbr_replicas
    spec: dict[str, Any] = {"bbr": bbr}
    if gateway.tls_acm_arn is not None:
        spec["tls"] = {"acmArn": gateway.tls_acm_arn} if gateway.tls_acm_arn else {}
    if gateway.jwt is not None:
        jwt = gateway.jwt
        provider: dict[str, Any] = {"name": jwt.name, "issuer": jwt.issuer, "remoteJWKS": {"uri": jwt.jwks_uri}}
        if jwt.audiences:
            provider["audiences"] = list(jwt.audiences)
        if jwt.required_claims:
            provider["requiredClaims"] = [{"name": name, "valueType": value_type, "values": list(values)}
                                          for name, value_type, values in jwt.required_claims]
        spec["auth"] = {"jwt": {"provider": provider}}
    if gateway.metrics is not None:
        spec["observability"] = {"metrics": {"enabled": gateway.metrics}}
    if gateway.pod_defaults:
        spec["podDefaults"] = dict(gateway.pod_defaults)
    spec["schedulers"] = [scheduler_spec(model) for model in settings.models]
    return spec


def gateway_manifest(settings: Settings) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": settings.gateway.name,
            "namespace": settings.namespace,
            "annotations": {
                # pulumi-kubernetes (>= 4.18) holds `pulumi up` until the controller reports this
                # condition (and, where it reports observedGeneration, has seen the new spec);
                # without it a custom resource counts as ready the moment it is accepted.
                "pulumi.com/waitFor": "condition=Ready",
                "pulumi.com/timeoutSeconds": str(READY_TIMEOUT_SECONDS),
            },
        },
        "spec": gateway_spec(settings),
    }


def picker_config_maps(settings: Settings) -> list[dict[str, Any]]:
    """The ConfigMaps of custom picker configurations given as files; the schedulers' configMapRef names them."""
    return [{"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": model.picker_config_map.name, "namespace": settings.namespace},
             "data": {model.picker_config_map.key: model.picker_config_map.text}}
            for model in settings.models if model.picker_config_map is not None and model.picker_config_map.text]


def gateway_url_command(settings: Settings) -> str:
    """A shell command that prints the gateway's in-cluster URL (its Envoy Service lives in the system namespace)."""
    service = gateway_service(settings)
    return (f"kubectl get svc -n {service.namespace} -l {service.selector} -o jsonpath='{gateway_scheme(settings)}://"
            f"{{.items[0].metadata.name}}.{service.namespace}.svc.cluster.local{{\"\\n\"}}'")
