"""One front door on both platforms, under mocks on every stack file: TLS and JWT at the gateway
(the same gateway.jwt giving the same issuer, audiences and claims on HyperPod and on the llm-d
Gateway), NetworkPolicies whose selectors match the pods the stack runs, hardened vLLM containers,
and every object valid against the schema of its pinned release."""

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from components.cert_manager import render as cert_manager
from components.gateway_api import render as gateway_api
from settings.security import CERT_MANAGER_VERSION
from tests.stack.program import comparable, run_program
from tests.test_program import (STACKS, as_kubernetes_json, changed_resources, dependency_names, from_stack_file,
                                registered_before_refusal)

ACM = "arn:aws:acm:us-west-2:123456789012:certificate/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
JWT = {"name": "corp", "issuer": "https://idp.example.com/realms/inference",
       "jwksUri": "https://idp.example.com/realms/inference/certs", "audiences": ["inference-api", "batch"],
       "requiredClaims": [{"name": "groups", "valueType": "StringArray", "values": ["ml-team", "ops"]},
                          {"name": "tier", "values": ["gold"]}]}
# What every platform must enforce for JWT: issuer, JWKS, audiences, and each claim with its values.
EXPECTED_JWT = (JWT["issuer"], JWT["jwksUri"], ("inference-api", "batch"),
                (("groups", ("ml-team", "ops")), ("tier", ("gold",))))


def merged(config, changes):
    """The stack file's config with `changes`; a gateway.<field> goes inside the stack's gateway
    object when it has one (a key set both flat and inside it is refused)."""
    config = dict(config)
    for key, value in changes.items():
        field = key.removeprefix("gateway.")
        if key.startswith("gateway.") and "." not in field and isinstance(config.get("gateway"), dict):
            config["gateway"] = {**config["gateway"], field: json.loads(value) if value[:1] in "[{" else value}
        else:
            config[key] = value
    return config


def stack_run(stack, **changes):
    config, secrets = from_stack_file(stack)
    return run_program(merged(config, changes), stack=stack, secret_keys=secrets)


def objects(run, kind):
    return [r.inputs for r in run.resources if r.inputs.get("kind") == kind]


# -- JWT: one meaning on both implementations ------------------------------------------------------

def enforced_jwt(run):
    """(issuer, JWKS URI, audiences, required claims) as the deployed gateway enforces them."""
    configs = objects(run, "InferenceGatewayConfig")
    if configs:
        (config,) = configs
        provider = config["spec"]["auth"]["jwt"]["provider"]
        return (provider["issuer"], provider["remoteJWKS"]["uri"], tuple(provider.get("audiences", ())),
                tuple((c["name"], tuple(c["values"])) for c in provider.get("requiredClaims", ())))
    (authentication,) = objects(run, "RequestAuthentication")
    (authorization,) = objects(run, "AuthorizationPolicy")
    (gateway,) = objects(run, "Gateway")
    target = [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway["metadata"]["name"]}]
    # Both apply to the stack's Gateway, in its namespace, and nothing else.
    for policy in (authentication, authorization):
        assert policy["spec"]["targetRefs"] == target and "selector" not in policy["spec"]
        assert policy["metadata"]["namespace"] == gateway["metadata"]["namespace"]
    (rule,) = authentication["spec"]["jwtRules"]
    assert authorization["spec"]["action"] == "ALLOW"
    (allowed,) = authorization["spec"]["rules"]
    # Only requests carrying a valid token from this issuer are allowed at all.
    assert allowed["from"] == [{"source": {"requestPrincipals": [f"{rule['issuer']}/*"]}}]
    claims = tuple((re.fullmatch(r"request\.auth\.claims\[(.+)\]", w["key"])[1], tuple(w["values"]))
                   for w in allowed.get("when", ()))
    return rule["issuer"], rule["jwksUri"], tuple(rule.get("audiences", ())), claims


@pytest.mark.parametrize("stack", STACKS)
def test_the_same_gateway_jwt_is_enforced_alike_on_every_stack_file(stack):
    run = stack_run(stack, **{"gateway.jwt": json.dumps(JWT)})
    assert enforced_jwt(run) == EXPECTED_JWT
    assert not any("authenticates nobody" in w for w in run.warnings)


def test_on_eks_the_jwt_objects_come_after_istio_and_only_when_asked():
    run = stack_run("eks", **{"gateway.jwt": json.dumps(JWT)})
    for name in ("gateway-api-jwt", "gateway-api-jwt-required"):
        assert {"gateway-api-istio-base", "gateway-api-istiod"} <= dependency_names(run, run.named(name))
    assert run.kubernetes_object("RequestAuthentication", "inference-gateway-corp")
    assert not objects(stack_run("eks"), "RequestAuthentication") and not objects(stack_run("eks"), "AuthorizationPolicy")


def test_a_jwt_with_only_required_claims_checks_no_audience_on_either_platform():
    claims_only = {k: v for k, v in JWT.items() if k != "audiences"}
    for stack in ("dev", "eks"):
        issuer, jwks, audiences, claims = enforced_jwt(stack_run(stack, **{"gateway.jwt": json.dumps(claims_only)}))
        assert (audiences, claims) == ((), EXPECTED_JWT[3])


# -- TLS: auto, an ACM certificate, off ----------------------------------------------------------

def test_tls_auto_on_eks_issues_the_gateways_certificate_from_the_stacks_private_ca():
    run = stack_run("eks")
    chart = run.named("gateway-api-ca-cert-manager").inputs
    assert (chart["chart"], chart["version"], chart["namespace"]) == (
        "oci://quay.io/jetstack/charts/cert-manager", CERT_MANAGER_VERSION, "cert-manager")
    assert chart["values"]["crds"] == {"enabled": True} and chart["values"]["startupapicheck"] == {"enabled": False}
    selfsigned, ca_issuer = (run.kubernetes_object("ClusterIssuer", name) for name in
                             ("inference-inference-gateway-selfsigned", "inference-inference-gateway-ca"))
    assert selfsigned["spec"] == {"selfSigned": {}}
    ca = run.kubernetes_object("Certificate", "inference-inference-gateway-ca")
    assert ca["spec"]["isCA"] is True and ca["metadata"]["namespace"] == "cert-manager"
    assert ca["spec"]["issuerRef"]["name"] == selfsigned["metadata"]["name"]
    # The CA issuer signs with the CA certificate's key, kept in cert-manager's namespace.
    assert ca_issuer["spec"] == {"ca": {"secretName": ca["spec"]["secretName"]}}
    certificate = run.kubernetes_object("Certificate", "inference-gateway-tls")
    assert certificate["metadata"]["namespace"] == "inference"
    assert certificate["spec"]["issuerRef"] == {"group": "cert-manager.io", "kind": "ClusterIssuer",
                                                "name": ca_issuer["metadata"]["name"]}
    # Valid for the NLB's name (known only once AWS made it) and the in-cluster Service's.
    assert certificate["spec"]["dnsNames"] == ["inference-gateway-istio.inference.svc.cluster.local",
                                               "inference-gateway-istio.inference.svc", "*.elb.us-west-2.amazonaws.com"]
    (listener,) = run.kubernetes_object("Gateway", "inference-gateway")["spec"]["listeners"]
    assert (listener["port"], listener["protocol"], listener["tls"]["mode"]) == (443, "HTTPS", "Terminate")
    assert listener["tls"]["certificateRefs"] == [{"group": "", "kind": "Secret",
                                                   "name": certificate["spec"]["secretName"]}]
    # `pulumi up` waits for each certificate to be issued, and the Gateway for its own.
    assert all(c["metadata"]["annotations"]["pulumi.com/waitFor"] == "condition=Ready" for c in (ca, certificate))
    assert "gateway-api-certificate" in dependency_names(run, run.named("gateway-api-gateway"))
    assert "gateway-api-ca-ca" in dependency_names(run, run.named("gateway-api-certificate"))
    assert run.outputs["gatewayUrlCommand"].startswith("kubectl get gateway inference-gateway -n inference -o "
                                                       "jsonpath='https://")
    assert run.outputs["gatewayCaCommand"] == ("kubectl get secret inference-gateway-tls -n inference "
                                               "-o jsonpath='{.data.ca\\.crt}' | base64 -d")


STARTUP_CHECK_RENDERED = Path(__file__).parent / "fixtures" / "cert-manager-startupapicheck.yaml"
# What Helm adds to what it manages; the stack's own objects are not Helm's.
HELM_ONLY_LABELS = ("app.kubernetes.io/managed-by", "helm.sh/chart")


def test_the_issuers_wait_for_cert_managers_startup_check_which_pulumi_awaits():
    run = stack_run("eks")
    (check,) = [r for r in run.of_type("kubernetes:batch/v1:Job") if r.name == "gateway-api-ca-startup-check"]
    # The check starts once cert-manager's chart is up and it may create what it tests with.
    assert {"gateway-api-ca-cert-manager", "gateway-api-ca-startup-check"} <= dependency_names(run, check)
    assert sorted(r.type for r in run.resources if r.name == "gateway-api-ca-startup-check") == [
        "kubernetes:batch/v1:Job", "kubernetes:core/v1:ServiceAccount", "kubernetes:rbac.authorization.k8s.io/v1:Role",
        "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"]
    for issuer in ("gateway-api-ca-selfsigned", "gateway-api-ca-ca-certificate", "gateway-api-ca-ca"):
        assert "gateway-api-ca-startup-check" in dependency_names(run, run.named(issuer)), issuer
    # Awaited until it completes (pulumi-kubernetes' default for a Job; skipAwait would end that),
    # and replaced by deleting first: a Job's template cannot change, and its name is fixed.
    assert "pulumi.com/skipAwait" not in check.inputs["metadata"].get("annotations", {})
    assert check.options["deleteBeforeReplace"] is True
    # No NetworkPolicy of the stack's stands between the check, the API server and the webhook.
    assert not [p for p in objects(run, "NetworkPolicy") if p["metadata"]["namespace"] == "cert-manager"]


def test_the_startup_check_is_the_charts_own_as_helm_renders_it_at_the_pin():
    values, *rendered = yaml.safe_load_all(STARTUP_CHECK_RENDERED.read_text())
    # Rendered from the chart at the version the stack installs, with the values it passes.
    assert rendered[-1]["spec"]["template"]["spec"]["containers"][0]["image"].endswith(f":{CERT_MANAGER_VERSION}")
    assert values == {**cert_manager.chart_values(), "startupapicheck": {"enabled": True,
                                                                          "resources": cert_manager.RESOURCES}}
    run = stack_run("eks")
    ours = {(o["kind"], o["metadata"]["name"]): o for o in (r.inputs for r in run.resources)
            if o.get("metadata", {}).get("namespace") == "cert-manager" and "startupapicheck" in o["metadata"]["name"]}
    for chart_object in rendered:
        key = (chart_object["kind"], chart_object["metadata"]["name"])
        assert key in ours, key
        expected = json.loads(json.dumps(chart_object))
        for metadata in (expected["metadata"], expected.get("spec", {}).get("template", {}).get("metadata", {})):
            metadata.pop("annotations", None)  # Helm's hook annotations: the stack orders the Job itself
            for label in HELM_ONLY_LABELS:
                metadata.get("labels", {}).pop(label, None)
        assert as_kubernetes_json(ours[key]) == as_kubernetes_json(expected), key


def test_an_acm_certificate_on_eks_is_terminated_at_the_nlb_and_needs_no_cert_manager():
    run = stack_run("eks", **{"gateway.tls": ACM})
    gateway = run.kubernetes_object("Gateway", "inference-gateway")["spec"]
    annotations = gateway["infrastructure"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-ssl-cert"] == ACM
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-ssl-ports"] == "443"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    # TLS ends at the NLB, which passes plain HTTP on to the Gateway on the same port.
    assert gateway["listeners"] == [{"name": "https", "port": 443, "protocol": "HTTP",
                                     "allowedRoutes": {"namespaces": {"from": "Same"}}}]
    assert not objects(run, "Certificate") and not any("cert-manager" in r.name for r in run.resources)
    assert "jsonpath='https://" in run.outputs["gatewayUrlCommand"] and "gatewayCaCommand" not in run.exported


def test_tls_off_on_eks_is_plain_http_and_warns():
    run = stack_run("eks", **{"gateway.tls": "off"})
    (listener,) = run.kubernetes_object("Gateway", "inference-gateway")["spec"]["listeners"]
    assert (listener["port"], listener["protocol"], "tls" in listener) == (80, "HTTP", False)
    assert not objects(run, "Certificate") and "jsonpath='http://" in run.outputs["gatewayUrlCommand"]
    assert any(w.startswith("gateway.tls is off") for w in run.warnings)


@pytest.mark.parametrize("stack", ["dev", "existing"])
def test_hyperpod_stacks_keep_their_gateways_tls(stack):
    run = stack_run(stack)
    (config,) = objects(run, "InferenceGatewayConfig")
    assert config["spec"]["tls"] == {}
    # AWS does not document which CA signs a tls: {} certificate: the stack offers none to trust.
    assert "gatewayCaCommand" not in run.exported
    assert not any("cert-manager" in r.name and r.type.startswith("kubernetes:helm") for r in run.resources)


REFUSED_ON_BOTH = [
    ({"gateway.jwt": json.dumps({**JWT, "jwksUri": "http://idp.example.com/certs"})},
     "inference-gateway:gateway.jwt.jwksUri = 'http://idp.example.com/certs': must be an https:// URL."),
    ({"gateway.jwt": json.dumps({"issuer": JWT["issuer"], "jwksUri": JWT["jwksUri"]})},
     "gateway.jwt.audiences = (not set): JWT authentication needs at least one of audiences or requiredClaims"),
    ({"gateway.tls": "self-signed"}, "inference-gateway:gateway.tls = 'self-signed': must be auto"),
    ({"gateway.networkPolicy": json.dumps({"apiServerCidrs": ["10.0.0.0/8", "all"]})},
     "gateway.networkPolicy.apiServerCidrs[1] = 'all': must be a CIDR block"),
]


@pytest.mark.parametrize(("stack", "changes", "expected"), [
    *((stack, changes, expected) for stack in ("eks", "dev") for changes, expected in REFUSED_ON_BOTH),
    ("eks", {"gateway.tls": ACM, "gateway.loadBalancerController": "false"},
     "which the NLB terminates, and gateway.loadBalancerController is false"),
])
def test_a_bad_jwt_tls_or_policy_value_declares_nothing(stack, changes, expected):
    config, _ = from_stack_file(stack)
    resources, message = registered_before_refusal(merged(config, changes))
    assert resources == [] and expected in message and "nothing was deployed" in message


def test_a_weight_toggle_with_tls_and_jwt_on_still_changes_only_the_pickers():
    secured = {"gateway.jwt": json.dumps(JWT)}
    before = stack_run("eks", **secured, **{"weights.prefix": "3"})
    after = stack_run("eks", **secured, **{"weights.prefix": "0"})
    assert sorted(name for _, name in changed_resources(before, after)) == ["router-qwen-router",
                                                                             "router-qwen-small-router"]


# -- NetworkPolicies: selectors cross-checked against the pods the stack runs ---------------------

# Pods that charts and controllers render, not the program; their labels and ports as upstream
# renders them (test vectors, with their sources):
# - llm-d router chart, config/charts/routerlib/templates/_helpers.tpl and _deployment.yaml@v0.10.0:
#   pod labels llm-d-router-gateway: <release truncated to 40>-epp and llm-d.ai/igw-mode:
#   llm-d-router-gateway; container ports 9002 (grpc), 9003 (grpc-health), 9090 (metrics).
# - Istio's gateway Deployment, manifests/charts/istio-control/istio-discovery/files/kube-gateway.yaml@1.30.1:
#   pod labels gateway.networking.k8s.io/gateway-name: <Gateway>, gateway.networking.k8s.io/gateway-class-name:
#   <class>, gateway.istio.io/managed: istio.io-gateway-controller, sidecar.istio.io/inject: "false",
#   service.istio.io/canonical-name: <Gateway>-<class>, service.istio.io/canonical-revision: latest;
#   ports 15020, 15021, 15090 and the listeners'.
# - body-based-routing chart, config/charts/body-based-routing/templates/bbr.yaml and values.yaml@v1.5.0
#   (gateway-api-inference-extension): pod labels app: <bbr.name>; container ports 9004 (bbr.port, the
#   ext_proc gRPC the Istio gateway's EnvoyFilter calls) and 9005 (bbr.healthCheckPort).
# - HyperPod (AWS's inference-gateway documentation): picker pods in the gateway's namespace with
#   app=<scheduler>-epp, on the endpoint picker's default ports; Envoy and BBR in
#   hyperpod-inference-system, labels not documented.
EPP_PORTS = {9002, 9003, 9090}
BBR_PORTS = {9004, 9005}
HYPERPOD_SYSTEM = "hyperpod-inference-system"


def rendered_pods(run):
    """(namespace, labels, container ports, what) of every pod the stack runs, as rendered."""
    pods = []
    for deployment in objects(run, "Deployment"):
        template = deployment["spec"]["template"]
        ports = {int(p["containerPort"]) for c in template["spec"]["containers"] for p in c.get("ports", ())}
        pods.append((deployment["metadata"]["namespace"], template["metadata"]["labels"], ports,
                     f"Deployment {deployment['metadata']['name']}"))
    for chart in (r.inputs for r in run.resources if r.type == "kubernetes:helm.sh/v4:Chart"):
        if chart["chart"] == "oci://ghcr.io/llm-d/charts/llm-d-router-gateway" and chart["version"] == "v0.10.0":
            labels = {"llm-d-router-gateway": f"{chart['name'][:40]}-epp", "llm-d.ai/igw-mode": "llm-d-router-gateway"}
            pods.append((chart["namespace"], labels, EPP_PORTS, f"llm-d router {chart['name']}"))
        body_based = "oci://registry.k8s.io/gateway-api-inference-extension/charts/body-based-routing"
        if chart["chart"] == body_based and chart["version"] == "v1.5.0":
            pods.append((chart["namespace"], {"app": chart["values"]["bbr"]["name"]}, BBR_PORTS,
                         f"body-based router {chart['name']}"))
    for gateway in objects(run, "Gateway"):
        name, klass = gateway["metadata"]["name"], gateway["spec"]["gatewayClassName"]
        labels = {"sidecar.istio.io/inject": "false", "service.istio.io/canonical-name": f"{name}-{klass}",
                  "service.istio.io/canonical-revision": "latest",
                  **gateway["spec"].get("infrastructure", {}).get("labels", {}),
                  "gateway.networking.k8s.io/gateway-name": name,
                  "gateway.networking.k8s.io/gateway-class-name": klass,
                  "gateway.istio.io/managed": "istio.io-gateway-controller"}
        ports = {15020, 15021, 15090} | {int(listener["port"]) for listener in gateway["spec"]["listeners"]}
        pods.append((gateway["metadata"]["namespace"], labels, ports, f"Istio gateway {name}"))
    for config in objects(run, "InferenceGatewayConfig"):
        for scheduler in config["spec"]["schedulers"]:
            pods.append((config["metadata"]["namespace"], {"app": f"{scheduler['name']}-epp"}, EPP_PORTS,
                         f"HyperPod picker {scheduler['name']}"))
    return pods


def selected(pods, namespace, match_labels):
    return [pod for pod in pods if pod[0] == namespace and match_labels.items() <= pod[1].items()]


def selector_problems(run, policies, monitoring="monitoring") -> list[str]:
    """What in the policies matches none of the pods or namespaces the stack runs."""
    pods = rendered_pods(run)
    namespaces = {pod[0] for pod in pods} | {monitoring} | ({HYPERPOD_SYSTEM} if objects(run, "InferenceGatewayConfig")
                                                          else set())
    problems = []
    for policy in policies:
        name, namespace = policy["metadata"]["name"], policy["metadata"]["namespace"]
        targets = selected(pods, namespace, policy["spec"]["podSelector"]["matchLabels"])
        if not targets:
            problems.append(f"{name}: its podSelector matches no pod")
        for rule in policy["spec"]["ingress"]:
            ports = {int(port["port"]) for port in rule["ports"]}
            if targets and not all(ports <= pod[2] for pod in targets):
                problems.append(f"{name}: ports {sorted(ports)} are not all ports of the pods it selects")
            for source in rule["from"]:
                if "ipBlock" in source:
                    continue
                peer_namespace = namespace
                if "namespaceSelector" in source:
                    (key, value), = source["namespaceSelector"]["matchLabels"].items()
                    if key != "kubernetes.io/metadata.name" or value not in namespaces:
                        problems.append(f"{name}: namespaceSelector {key}={value} names no namespace the stack uses")
                        continue
                    peer_namespace = value
                if "podSelector" in source and not selected(pods, peer_namespace, source["podSelector"]["matchLabels"]):
                    problems.append(f"{name}: from podSelector {source['podSelector']['matchLabels']} matches no pod")
    return problems


@pytest.mark.parametrize("stack", STACKS)
def test_every_policy_selector_matches_pods_the_stack_renders(stack):
    run = stack_run(stack)
    policies = objects(run, "NetworkPolicy")
    assert len(policies) == 2 * len(run.outputs["podSelectors"]) + (stack == "eks")
    assert selector_problems(run, policies) == []
    # Every model pod and every picker pod is under a policy: none is left open.
    pods = rendered_pods(run)
    covered = {id(pod) for policy in policies for pod in
               selected(pods, policy["metadata"]["namespace"], policy["spec"]["podSelector"]["matchLabels"])}
    guarded = [pod[3] for pod in pods if "vllm" in pod[3] or "picker" in pod[3] or "router" in pod[3]]
    assert stack != "eks" or any("body-based router" in what for what in guarded)
    assert guarded and all(id(pod) in covered for pod in pods if pod[3] in guarded)


def test_a_typo_in_a_label_leaves_a_policy_matching_nothing_and_the_check_says_so():
    run = stack_run("eks")
    policies = json.loads(json.dumps(objects(run, "NetworkPolicy")))
    model = next(p for p in policies if p["metadata"]["name"] == "vllm-qwen-small-ingress")
    model["spec"]["podSelector"]["matchLabels"] = {"app": "vllm-qwen-smal"}
    sources = model["spec"]["ingress"][0]["from"]
    sources[0]["podSelector"]["matchLabels"] = {"gateway.networking.k8s.io/gateway-name": "inference-gw"}
    sources[2]["namespaceSelector"]["matchLabels"] = {"kubernetes.io/metadata.name": "hyperpod-inference-sytem"}
    assert selector_problems(run, policies) == [
        "vllm-qwen-small-ingress: its podSelector matches no pod",
        "vllm-qwen-small-ingress: from podSelector {'gateway.networking.k8s.io/gateway-name': 'inference-gw'} "
        "matches no pod",
        "vllm-qwen-small-ingress: namespaceSelector kubernetes.io/metadata.name=hyperpod-inference-sytem names no "
        "namespace the stack uses"]


@pytest.mark.parametrize(("stack", "gateway_peer", "picker"), [
    ("eks", {"podSelector": {"matchLabels": {"gateway.networking.k8s.io/gateway-name": "inference-gateway"}}},
     {"llm-d-router-gateway": "qwen-small-epp"}),
    # AWS documents the namespace HyperPod's Envoy runs in, not its pods' labels: the namespace is admitted.
    ("dev", {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": HYPERPOD_SYSTEM}}},
     {"app": "qwen-small-epp"}),
])
def test_model_pods_admit_only_the_gateway_their_pickers_and_monitoring(stack, gateway_peer, picker):
    run = stack_run(stack)
    model = run.kubernetes_object("NetworkPolicy", "vllm-qwen-small-ingress")["spec"]
    assert model["podSelector"] == {"matchLabels": {"app": "vllm-qwen-small"}} and model["policyTypes"] == ["Ingress"]
    assert model["ingress"] == [{"from": [
        gateway_peer, {"podSelector": {"matchLabels": picker}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "ports": [{"protocol": "TCP", "port": 8000}]}]
    pickers = run.kubernetes_object("NetworkPolicy", "qwen-small-picker-ingress")["spec"]
    assert pickers["podSelector"] == {"matchLabels": picker}
    assert pickers["ingress"] == [
        {"from": [gateway_peer], "ports": [{"protocol": "TCP", "port": 9002}]},
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
         "ports": [{"protocol": "TCP", "port": 9090}]}]


def test_body_based_routing_pods_admit_only_the_gateway_on_their_grpc_port():
    run = stack_run("eks")
    policy = run.kubernetes_object("NetworkPolicy", "inference-gateway-bbr-ingress")
    assert policy["metadata"]["namespace"] == "inference"
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {"app": "inference-gateway-bbr"}}, "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {
            "gateway.networking.k8s.io/gateway-name": "inference-gateway"}}}],
            "ports": [{"protocol": "TCP", "port": 9004}]}]}
    # With one model there is no body-based router, and no policy for one.
    config, secrets = from_stack_file("eks")
    one_model = stack_run("eks", models=json.dumps(config["models"][:1]))
    assert not [p for p in objects(one_model, "NetworkPolicy") if p["metadata"]["name"].endswith("-bbr-ingress")]


def test_api_server_cidrs_admit_the_pod_proxy_to_vllm_only():
    run = stack_run("eks", **{"gateway.networkPolicy": json.dumps({"apiServerCidrs": ["10.0.96.0/28"]})})
    model = run.kubernetes_object("NetworkPolicy", "vllm-qwen-ingress")["spec"]["ingress"][0]["from"]
    assert model[-1] == {"ipBlock": {"cidr": "10.0.96.0/28"}}
    picker = run.kubernetes_object("NetworkPolicy", "qwen-picker-ingress")["spec"]["ingress"]
    assert "ipBlock" not in json.dumps(picker)


@pytest.mark.parametrize("stack", ["eks", "dev"])
def test_the_stack_owned_vpc_cni_enforces_the_policies_unless_they_are_off(stack):
    assert stack_run(stack).named("cluster-eks").inputs["vpcCniOptions"] == {
        "enableNetworkPolicy": True, "resolveConflictsOnCreate": "OVERWRITE", "resolveConflictsOnUpdate": "OVERWRITE"}
    off = stack_run(stack, **{"gateway.networkPolicy.enabled": "false"})
    assert "vpcCniOptions" not in off.named("cluster-eks").inputs and not objects(off, "NetworkPolicy")


# -- vLLM containers --------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", STACKS)
def test_vllm_runs_without_privileges_on_a_read_only_root(stack):
    for deployment in objects(stack_run(stack), "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False, "privileged": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}, "readOnlyRootFilesystem": True}
        assert pod["automountServiceAccountToken"] is False
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        # HOME (every cache vLLM and its libraries keep), /tmp (vLLM's IPC sockets), /dev/shm.
        assert {"/root", "/tmp", "/dev/shm", "/root/.cache/huggingface"} <= mounts.keys()
        assert all("emptyDir" in volumes[name] for name in mounts.values())


# -- schemas ----------------------------------------------------------------------------------------

CRD_SCHEMAS = json.loads((Path(__file__).parent / "schemas" / "gateway-security-crds.schema.json").read_text())


def strict(schema):
    """A CRD's schema as the object's: apiVersion, kind and metadata added, and unknown fields
    refused where the CRD lists its fields (the API server would silently drop them)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {key: strict(value) for key, value in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"):
        schema["additionalProperties"] = False
    return schema


def crd_problems(obj) -> list[str]:
    schema = strict(CRD_SCHEMAS["kinds"][f"{obj['apiVersion']}/{obj['kind']}"])
    schema["properties"] = {**schema["properties"], "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                            "metadata": {"type": "object"}}
    return [error.message for error in jsonschema.Draft7Validator(schema).iter_errors(as_kubernetes_json(obj))]


def test_the_vendored_crd_schemas_are_the_pinned_releases():
    assert CRD_SCHEMAS["versions"] == {"istio": gateway_api.ISTIO_VERSION, "cert-manager": cert_manager.VERSION}


@pytest.mark.parametrize("stack", STACKS)
def test_the_istio_and_cert_manager_objects_validate_against_their_crds(stack):
    run = stack_run(stack, **{"gateway.jwt": json.dumps(JWT)})
    declared = [r.inputs for r in run.resources if f"{r.inputs.get('apiVersion')}/{r.inputs.get('kind')}"
                in CRD_SCHEMAS["kinds"]]
    kinds = sorted(o["kind"] for o in declared)
    assert kinds == ([] if stack != "eks" else ["AuthorizationPolicy", "Certificate", "Certificate", "ClusterIssuer",
                                                  "ClusterIssuer", "RequestAuthentication"])
    for obj in declared:
        assert crd_problems(obj) == [], obj["metadata"]["name"]


@pytest.mark.parametrize(("kind", "change", "expected"), [
    ("AuthorizationPolicy", lambda spec: spec.update(action="PERMIT"), "'PERMIT' is not one of"),
    ("RequestAuthentication", lambda spec: spec["jwtRules"][0].update(jwksURI="https://x"),
     "Additional properties are not allowed ('jwksURI' was unexpected)"),
    ("Certificate", lambda spec: spec["privateKey"].update(algorithm="DSA"), "'DSA' is not one of"),
])
def test_the_crd_check_refuses_what_the_api_server_would_refuse_or_drop(kind, change, expected):
    run = stack_run("eks", **{"gateway.jwt": json.dumps(JWT)})
    obj = json.loads(json.dumps(comparable(objects(run, kind)[-1])))
    change(obj["spec"])
    assert any(expected in problem for problem in crd_problems(obj))


@pytest.mark.parametrize("stack", STACKS)
def test_network_policies_validate_against_kubernetes_1_34(stack):
    from kubernetes_validate import utils as kubernetes_schemas

    policies = objects(stack_run(stack, **{"gateway.networkPolicy": json.dumps({"apiServerCidrs": ["10.0.96.0/28"]})}),
                       "NetworkPolicy")
    assert policies
    for policy in policies:
        kubernetes_schemas.validate(as_kubernetes_json(policy), "1.34.0", strict=True)


@pytest.mark.parametrize("tls", ["auto", ACM, "off"])
def test_the_gateway_validates_against_the_gateway_api_schemas_in_every_tls_mode(tls):
    from tests.test_program_eks import gateway_api_problems

    gateway = as_kubernetes_json(stack_run("eks", **{"gateway.tls": tls}).kubernetes_object("Gateway", "inference-gateway"))
    assert gateway_api_problems([gateway]) == ""
