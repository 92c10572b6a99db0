"""gateway.tls, gateway.jwt and gateway.networkPolicy: one parse for both gateway implementations,
what each value gives, what is refused, and what every `pulumi up` warns about."""

import json

import pytest

from settings import SettingsError, parse_settings
from settings.endpoints import gateway_scheme, picker_pod_labels, picker_pods, service_scheme
from settings.security import CERT_MANAGER_VERSION

SMALL = {"name": "qwen-small", "model": "Qwen/Qwen2.5-0.5B-Instruct", "replicas": 2}
PLATFORMS = {"hyperpod": {"platform": "hyperpod"}, "eks": {"platform": "eks"}}
ACM = "arn:aws:acm:us-west-2:123456789012:certificate/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
JWT = {"issuer": "https://idp.example.com/realms/inference", "jwksUri": "https://idp.example.com/realms/inference/certs",
       "audiences": ["inference-api", "batch"],
       "requiredClaims": [{"name": "groups", "valueType": "StringArray", "values": ["ml-team", "ops"]},
                          {"name": "tier", "values": ["gold"]}]}


def parse(platform, models=(SMALL,), **config):
    raw = {"models": json.dumps(list(models)), **PLATFORMS[platform],
           **{k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}}
    return parse_settings(raw, stack="test")


def problems(platform, **config) -> dict[str, str]:
    with pytest.raises(SettingsError) as caught:
        parse(platform, **config)
    return {p.key: str(p) for p in caught.value.problems}


def test_the_same_jwt_keys_give_the_same_settings_on_both_implementations():
    hyperpod, eks = parse("hyperpod", **{"gateway.jwt": JWT}), parse("eks", **{"gateway.jwt": JWT})
    assert (hyperpod.gateway.implementation, eks.gateway.implementation) == ("hyperpod", "llm-d")
    assert hyperpod.gateway.jwt == eks.gateway.jwt
    jwt = eks.gateway.jwt
    assert (jwt.issuer, jwt.jwks_uri, jwt.audiences) == (JWT["issuer"], JWT["jwksUri"], ("inference-api", "batch"))
    assert jwt.required_claims == (("groups", "StringArray", ("ml-team", "ops")), ("tier", "String", ("gold",)))


BAD_JWT = [
    ({"jwksUri": JWT["jwksUri"], "audiences": ["a"]}, "gateway.jwt.issuer", "is required for JWT authentication"),
    ({**JWT, "jwksUri": "http://idp.example.com/certs"}, "gateway.jwt.jwksUri", "must be an https:// URL"),
    ({"issuer": JWT["issuer"], "jwksUri": JWT["jwksUri"]}, "gateway.jwt.audiences",
     "needs at least one of audiences or requiredClaims"),
    ({**JWT, "audiences": [f"aud-{i}" for i in range(9)]}, "gateway.jwt.audiences", "must hold between 0 and 8 entries"),
    ({**JWT, "requiredClaims": [{"name": "groups", "valueType": "Number", "values": ["1"]}]},
     "gateway.jwt.requiredClaims[0].valueType", "must be 'String' or 'StringArray'"),
    ({**JWT, "requiredClaims": [{"name": "groups", "values": []}]}, "gateway.jwt.requiredClaims[0].values",
     "must hold between 1 and 128 entries"),
    ({**JWT, "jwks": "inline"}, "gateway.jwt.jwks", "is not a known key of gateway.jwt"),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize(("jwt", "key", "message"), BAD_JWT)
def test_a_bad_jwt_is_refused_alike_on_both_implementations(platform, jwt, key, message):
    refused = problems(platform, **{"gateway.jwt": jwt})
    assert key in refused and message in refused[key], refused


@pytest.mark.parametrize(("jwt", "key", "message"), BAD_JWT)
def test_the_refusal_reads_the_same_on_both_implementations(jwt, key, message):
    assert problems("hyperpod", **{"gateway.jwt": jwt})[key] == problems("eks", **{"gateway.jwt": jwt})[key]


@pytest.mark.parametrize(("value", "expected"), [(None, ""), ("auto", ""), (ACM, ACM), ("off", None)])
def test_gateway_tls_on_llm_d_means_what_it_means_on_hyperpod(value, expected):
    settings = parse("eks", **({"gateway.tls": value} if value else {}))
    assert settings.gateway.tls_acm_arn == expected
    assert gateway_scheme(settings) == ("http" if value == "off" else "https")
    # TLS with an ACM certificate ends at the NLB: inside the cluster the Gateway speaks HTTP.
    assert service_scheme(settings) == ("http" if value in ("off", ACM) else "https")


def test_tls_off_is_a_lab_setting_that_warns_and_names_the_tokens_it_exposes():
    settings = parse("eks", **{"gateway.tls": "off", "gateway.jwt": JWT})
    (warning,) = [w for w in settings.warnings if w.startswith("gateway.tls is off")]
    assert "the tokens gateway.jwt asks for cross the VPC in clear text" in warning
    assert not any("gateway.tls" in w for w in parse("eks").warnings)


@pytest.mark.parametrize(("platform", "config", "key", "message"), [
    ("hyperpod", {"gateway.tls": "off"}, "gateway.tls", "cannot be off"),
    ("eks", {"gateway.tls": "none"}, "gateway.tls", "must be auto (a certificate cert-manager issues"),
    ("eks", {"gateway.tls": "arn:aws:acm:us-west-2:123:certificate/x"}, "gateway.tls", "or off (llm-d only)"),
    ("eks", {"gateway.tls": ACM, "gateway.loadBalancerController": "false"}, "gateway.tls",
     "which the NLB terminates, and gateway.loadBalancerController is false"),
])
def test_a_bad_tls_value_is_refused_with_the_fix(platform, config, key, message):
    refused = problems(platform, **config)
    assert message in refused[key], refused


def test_without_jwt_both_implementations_warn_the_same_and_with_it_neither_does():
    hyperpod, eks = parse("hyperpod"), parse("eks")
    unauthenticated = [w for w in eks.warnings if "authenticates nobody" in w]
    assert unauthenticated == [w for w in hyperpod.warnings if "authenticates nobody" in w]
    assert unauthenticated[0].startswith("gateway.jwt is not set")
    for platform in PLATFORMS:
        assert not any("authenticates nobody" in w for w in parse(platform, **{"gateway.jwt": JWT}).warnings)


def test_network_policies_are_on_by_default_and_admit_nothing_extra():
    policy = parse("eks").gateway.network_policy
    assert (policy.enabled, policy.monitoring_namespace, policy.api_server_cidrs) == (True, "monitoring", ())


def test_network_policy_keys_are_read_on_both_platforms():
    for platform in PLATFORMS:
        policy = parse(platform, **{"gateway.networkPolicy": {"monitoringNamespace": "observability",
                                                               "apiServerCidrs": ["10.0.96.0/28"]}}).gateway.network_policy
        assert (policy.monitoring_namespace, policy.api_server_cidrs) == ("observability", ("10.0.96.0/28",))


@pytest.mark.parametrize(("policy", "key", "message"), [
    ({"apiServerCidrs": ["10.0.0.0/33"]}, "gateway.networkPolicy.apiServerCidrs[0]", "must be a CIDR block"),
    ({"monitoringNamespace": "Monitoring"}, "gateway.networkPolicy.monitoringNamespace", "must be a DNS label"),
    ({"enabled": "maybe"}, "gateway.networkPolicy.enabled", "true or false"),
    ({"allow": ["0.0.0.0/0"]}, "gateway.networkPolicy.allow", "is not a known key"),
    ({"enabled": False, "apiServerCidrs": ["10.0.96.0/28"]}, "gateway.networkPolicy.apiServerCidrs",
     "gateway.networkPolicy.enabled is false"),
])
def test_a_bad_network_policy_value_is_refused(policy, key, message):
    refused = problems("eks", **{"gateway.networkPolicy": policy})
    assert key in refused and message in refused[key], refused


def test_turning_the_policies_off_warns_that_the_model_pods_are_open():
    settings = parse("hyperpod", **{"gateway.networkPolicy.enabled": "false"})
    assert not settings.gateway.network_policy.enabled
    assert any(w.startswith("gateway.networkPolicy.enabled is false: any pod in the cluster") for w in settings.warnings)


def test_on_an_existing_cluster_the_policies_hold_only_if_its_plugin_enforces_them():
    settings = parse("eks", **{"cluster.existing": "true", "cluster.name": "theirs"})
    assert any(w.startswith("cluster.existing: the stack declares NetworkPolicies") for w in settings.warnings)


def test_cert_manager_outside_its_supported_kubernetes_releases_warns():
    old = parse("eks", **{"cluster.version": "1.30"})
    assert any(f"cert-manager {CERT_MANAGER_VERSION}, which cert-manager supports on Kubernetes 1.33 to 1.36, and "
               "cluster.version is 1.30" in w for w in old.warnings)
    assert not any("cert-manager" in w for w in parse("eks").warnings)
    assert not any("cert-manager" in w for w in parse("eks", **{"cluster.version": "1.30", "gateway.tls": ACM}).warnings)


def test_the_routers_picker_label_carries_the_release_name_as_its_chart_truncates_it():
    long_name = "a-model-name-that-is-longer-than-forty-characters"
    settings = parse("eks", models=[{**SMALL, "name": long_name}])
    assert picker_pod_labels(settings, settings.models[0]) == {"llm-d-router-gateway": f"{long_name[:40]}-epp"}
    assert picker_pods(settings, settings.models[0]).selector == f"llm-d-router-gateway={long_name[:40]}-epp"
    hyperpod = parse("hyperpod", models=[{**SMALL, "name": long_name}])
    assert picker_pods(hyperpod, hyperpod.models[0]).selector == f"app={long_name}-epp"
