"""Where each implementation's gateway Service and picker pods are, as `routing verify` looks for them."""

from settings import load_stack
from settings.endpoints import gateway_scheme, gateway_service, picker_pods, service_scheme


def test_the_hyperpod_gateway_is_the_envoy_service_in_the_system_namespace_over_tls():
    settings = load_stack("dev")
    service = gateway_service(settings)
    assert (service.namespace, service.selector) == (
        "hyperpod-inference-system", "gateway.envoyproxy.io/owning-gateway-name=inference-gateway")
    assert gateway_scheme(settings) == "https"
    pickers = picker_pods(settings, settings.model_named("qwen-small"))
    assert (pickers.namespace, pickers.selector) == ("inference", "app=qwen-small-epp")


def test_the_open_source_gateway_is_istios_service_beside_the_models_over_tls():
    settings = load_stack("eks")
    service = gateway_service(settings)
    assert (service.namespace, service.selector) == ("inference", "gateway.networking.k8s.io/gateway-name=inference-gateway")
    # gateway.tls auto: the Gateway's own pods terminate TLS.
    assert gateway_scheme(settings) == service_scheme(settings) == "https"
    assert picker_pods(settings, settings.model_named("qwen-small")).selector == "llm-d-router-gateway=qwen-small-epp"
