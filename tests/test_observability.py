"""Watch it and scale it, under mocks on every stack file: the monitoring stack, monitors that select
exactly each model's pods and pickers, a dashboard and alerts per model, scalers for the models that
autoscale, every custom resource valid against its pinned chart's CRD, and each bad `observability`
or `autoscaling` value refused before anything is declared."""

import json
import re
from pathlib import Path

import jsonschema
import pytest

from components.autoscaling import render as autoscaling
from components.llmd_router import render as router
from components.observability import dashboard
from components.observability import render as observability
from routing.live.verify import counted_since
from settings import load_stack
from tests.stack.program import HYPERPOD_ARN, comparable, run_program
from tests.test_program import STACKS, as_kubernetes_json, changed_resources, from_stack_file, registered_before_refusal
from tests.test_program_security import merged, objects, strict

SCHEMAS = Path(__file__).parent / "schemas"
CRD_SCHEMAS = json.loads((SCHEMAS / "observability-crds.schema.json").read_text())
ROUTER_METRICS = json.loads((Path(__file__).parent / "fixtures" / "llm-d-router-v0.10.0-metrics.json").read_text())
WORKSPACE = "arn:aws:aps:us-east-1:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"


def autoscaled(config, index=-1, **block):
    """The stack's config with models[index] autoscaling (and no fixed replica count)."""
    models = [dict(model) for model in config["models"]]
    models[index].pop("replicas", None)
    models[index]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2, **block}
    return {**config, "models": models}


def stack_run(stack, config_change=None, **changes):
    config, secrets = from_stack_file(stack)
    config = merged(config, changes)
    return run_program(config_change(config) if config_change else config, stack=stack, secret_keys=secrets)


def crd_problems(obj) -> list[str]:
    schema = strict(CRD_SCHEMAS["kinds"][f"{obj['apiVersion']}/{obj['kind']}"])
    schema["properties"] = {**schema["properties"], "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                            "metadata": {"type": "object"}}
    return [error.message for error in jsonschema.Draft7Validator(schema).iter_errors(as_kubernetes_json(obj))]


# -- the stack on every stack file ------------------------------------------------------------------

@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_gets_the_pinned_monitoring_stack_with_persistent_volumes(stack):
    run = stack_run(stack)
    chart = run.named("observability-kube-prometheus-stack").inputs
    assert (chart["chart"], chart["version"], chart["namespace"]) == ("kube-prometheus-stack", "88.5.3", "monitoring")
    assert chart["repositoryOpts"]["repo"] == observability.REPO
    spec = chart["values"]["prometheus"]["prometheusSpec"]
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["resources"]["requests"]["storage"] == "20Gi" and spec["retention"] == "15d"
    grafana = chart["values"]["grafana"]
    assert grafana["persistence"]["enabled"] is True and grafana["admin"]["existingSecret"] == "grafana-admin"
    if stack == "existing":
        # A cluster the stack does not own keeps its add-ons: its default StorageClass, and a warning.
        assert "storageClassName" not in claim and not run.of_type("aws:eks/addon:Addon")
        assert any("observability on an existing cluster" in w for w in run.warnings)
    else:
        assert claim["storageClassName"] == grafana["persistence"]["storageClassName"] == "monitoring-gp3"
        storage = run.kubernetes_object("StorageClass", "monitoring-gp3")
        assert (storage["provisioner"], storage["parameters"]) == ("ebs.csi.aws.com", {"type": "gp3", "encrypted": "true"})
        (csi,) = [r.inputs for r in run.of_type("aws:eks/addon:Addon") if r.inputs["addonName"] == "aws-ebs-csi-driver"]
        trust = json.loads(run.named("observability-ebs-csi-role").inputs["assumeRolePolicy"])
        assert trust["Statement"][0]["Condition"]["StringEquals"]["oidc.eks.us-west-2.amazonaws.com/id/ABC:sub"] == (
            "system:serviceaccount:kube-system:ebs-csi-controller-sa")
    assert run.outputs["grafanaCommand"] == "kubectl port-forward -n monitoring svc/grafana 3000:80"
    assert "grafanaAdminPassword" in run.secret_outputs
    assert run.outputs["prometheusCommand"] == "kubectl port-forward -n monitoring svc/monitoring-prometheus 9090:9090"


def test_on_hyperpod_the_ebs_csi_driver_may_attach_volumes_to_the_clusters_nodes_only():
    run = stack_run("dev")
    policy = json.loads(run.named("observability-ebs-csi-policy").inputs["policy"])
    (statement,) = policy["Statement"]
    assert statement["Action"] == ["sagemaker:AttachClusterNodeVolume", "sagemaker:DetachClusterNodeVolume"]
    assert statement["Resource"] == [HYPERPOD_ARN]


@pytest.mark.parametrize("stack", STACKS)
def test_each_models_monitor_selects_exactly_its_pods_on_vllms_port_and_path(stack):
    run = stack_run(stack)
    settings = load_stack(stack)
    for model in settings.models:
        monitor = run.kubernetes_object("PodMonitor", model.deployment)
        deployment = run.kubernetes_object("Deployment", model.deployment)
        template = deployment["spec"]["template"]
        assert monitor["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"] == {
            "app": model.deployment}
        # The selector matches these pods and no other model's.
        others = [m for m in settings.models if m is not model]
        assert all(run.kubernetes_object("Deployment", o.deployment)["spec"]["template"]["metadata"]["labels"]["app"]
                   != model.deployment for o in others)
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        (port,) = [p for c in template["spec"]["containers"] for p in c["ports"] if p["name"] == endpoint["port"]]
        assert port["containerPort"] == model.port and endpoint["path"] == "/metrics"
        assert monitor["spec"]["podTargetLabels"] == ["app"] and monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@pytest.mark.parametrize("stack", STACKS)
def test_each_picker_is_scraped_where_its_metrics_endpoint_is_documented(stack):
    run = stack_run(stack)
    settings = load_stack(stack)
    for model in settings.models:
        if settings.gateway.implementation == "llm-d":
            # The router chart's own ServiceMonitor, authenticated with the picker's token Secret,
            # one Secret per release (the chart's default name is one per namespace).
            monitoring = run.named(f"router-{model.name}-router").inputs["values"]["router"]["monitoring"]
            assert monitoring["prometheus"] == {"enabled": True, "extraLabels": {"release": "kube-prometheus-stack"},
                                                "auth": {"enabled": True, "secretName": f"{model.name}-epp-metrics-reader"}}
            assert not [m for m in objects(run, "PodMonitor") if m["metadata"]["name"].endswith("-picker")]
        else:
            monitor = run.kubernetes_object("PodMonitor", f"{model.name}-picker")
            assert monitor["spec"]["selector"]["matchLabels"] == {"app": f"{model.name}-epp"}
            assert monitor["spec"]["podMetricsEndpoints"][0]["portNumber"] == 9090


@pytest.mark.parametrize("stack", STACKS)
def test_each_model_gets_a_dashboard_and_the_three_routing_alerts(stack):
    run = stack_run(stack)
    for model in load_stack(stack).models:
        board = run.kubernetes_object("ConfigMap", f"routing-{model.name}")
        assert board["metadata"]["namespace"] == "monitoring" and board["metadata"]["labels"]["grafana_dashboard"] == "1"
        built = json.loads(board["data"][f"routing-{model.name}.json"])
        assert [p["title"] for p in built["panels"]][:3] == [
            "Requests per pod", "Share of the model's traffic", "Prefix-cache hit rate per pod"]
        assert built["annotations"]["list"][0]["name"] == "Picker (re)started"
        rule = run.kubernetes_object("PrometheusRule", f"{model.name}-routing")
        alerts = [r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]]
        assert alerts == ["RoutingModelNotScraped", "RoutingAffinityCostsLatency", "RoutingHitRateHalved"]


def test_the_dashboard_reads_only_metrics_vllm_or_the_pinned_router_export():
    # The vLLM names are checked against a real server's /metrics in tests/e2e/test_prometheus_on_real_vllm.py.
    families = set(ROUTER_METRICS["families"])
    for stack in ("eks", "dev"):
        settings = load_stack(stack)
        for model in settings.models:
            names = {name for expr in dashboard.every_expression(settings, model)
                     for name in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr)}
            picker = {n for n in names if not n.startswith("vllm:")}
            assert picker and {re.sub(r"_bucket$", "", n) for n in picker} <= families, picker - families


# -- autoscaling -------------------------------------------------------------------------------------

def test_on_eks_an_autoscaling_model_gets_a_scaled_object_and_keda_from_its_pinned_chart():
    run = stack_run("eks", autoscaled, **{})
    keda = run.named("autoscaling-keda").inputs
    assert (keda["chart"], keda["version"], keda["repositoryOpts"]["repo"]) == ("keda", "2.20.2", autoscaling.REPO)
    scaled = run.kubernetes_object("ScaledObject", "vllm-qwen-small")["spec"]
    assert scaled["scaleTargetRef"] == {"name": "vllm-qwen-small"}
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (1, 2)
    (trigger,) = scaled["triggers"]
    assert trigger["metadata"] == {
        "serverAddress": "http://monitoring-prometheus.monitoring.svc:9090",
        "query": 'sum(vllm:num_requests_waiting{namespace="inference", app="vllm-qwen-small"})', "threshold": "2"}
    assert trigger["metricType"] == "AverageValue"
    # The scaler owns the replica count: the Deployment names none, and `pulumi up` resets nothing.
    assert "replicas" not in run.kubernetes_object("Deployment", "vllm-qwen-small")["spec"]
    assert run.kubernetes_object("Deployment", "vllm-qwen")["spec"]["replicas"] == 1
    assert [o["metadata"]["name"] for o in objects(run, "ScaledObject")] == ["vllm-qwen-small"]


def test_on_hyperpod_keda_is_the_addons_own_option():
    run = stack_run("dev", lambda c: autoscaled(c, metric="kvCache", maxReplicas=3))
    values = json.loads(run.named("inference-addon-addon").inputs["configurationValues"])
    assert values["keda"]["enabled"] is True and values["keda"]["auth"]["aws"]["irsa"]["enabled"] is True
    assert not [r for r in run.resources if r.name == "autoscaling-keda"]
    trigger = run.kubernetes_object("ScaledObject", "vllm-qwen-small")["spec"]["triggers"][0]["metadata"]
    assert trigger["query"].startswith("sum(vllm:kv_cache_usage_perc{") and trigger["threshold"] == "0.8"


def test_without_autoscaling_there_is_no_keda_and_no_scaler():
    for stack in STACKS:
        run = stack_run(stack)
        assert not objects(run, "ScaledObject") and not [r for r in run.resources if r.name == "autoscaling-keda"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_monitor_rule_and_scaler_validates_against_its_pinned_crd(stack):
    run = stack_run(stack, autoscaled)
    declared = [r.inputs for r in run.resources
                if f"{r.inputs.get('apiVersion')}/{r.inputs.get('kind')}" in CRD_SCHEMAS["kinds"]]
    assert {o["kind"] for o in declared} == {"PodMonitor", "PrometheusRule", "ScaledObject"}
    for obj in declared:
        assert crd_problems(obj) == [], obj["metadata"]["name"]


def test_the_vendored_crd_schemas_are_the_pinned_charts():
    assert CRD_SCHEMAS["versions"] == {"kube-prometheus-stack": observability.VERSION, "keda": autoscaling.VERSION}


@pytest.mark.parametrize(("kind", "change", "expected"), [
    ("PodMonitor", lambda spec: spec["podMetricsEndpoints"][0].update(portNumber=0), "is less than the minimum of 1"),
    ("PodMonitor", lambda spec: spec["podMetricsEndpoints"][0].update(metricsPath="/m"), "'metricsPath' was unexpected"),
    ("ScaledObject", lambda spec: spec.pop("scaleTargetRef"), "'scaleTargetRef' is a required property"),
    ("PrometheusRule", lambda spec: spec["groups"][0]["rules"][0].update(alerts="x"), "'alerts' was unexpected"),
])
def test_the_crd_check_refuses_what_the_api_server_would_refuse_or_drop(kind, change, expected):
    run = stack_run("dev", autoscaled)
    obj = json.loads(json.dumps(comparable(objects(run, kind)[0])))
    change(obj["spec"])
    assert any(expected in problem for problem in crd_problems(obj))


# -- a weight change touches the picker side only ---------------------------------------------------

def watch_and_scale(run):
    """Every monitor, rule, dashboard and scaler the run declares, by name, as plain data."""
    kinds = ("PodMonitor", "PrometheusRule", "ScaledObject")
    found = {(r.type, r.name): comparable(r.inputs) for r in run.resources
             if r.inputs.get("kind") in kinds or r.name.startswith(("observability-", "autoscaling-"))}
    assert {name for _, name in found if "dashboard" in name} and any(k[1] == "autoscaling-qwen-small" for k in found)
    return found


def test_a_weight_change_on_eks_leaves_monitors_dashboards_and_scalers_as_they_are():
    before = stack_run("eks", autoscaled, **{"weights.prefix": "3"})
    after = stack_run("eks", autoscaled, **{"weights.prefix": "0"})
    assert watch_and_scale(before) == watch_and_scale(after)
    assert sorted(name for _, name in changed_resources(before, after)) == ["router-qwen-router",
                                                                          "router-qwen-small-router"]
    # The router chart's own ServiceMonitor values are among what stayed.
    assert (before.named("router-qwen-router").inputs["values"]["router"]["monitoring"]
            == after.named("router-qwen-router").inputs["values"]["router"]["monitoring"])


def test_a_weight_change_on_hyperpod_leaves_monitors_dashboards_and_scalers_as_they_are():
    before = stack_run("dev", autoscaled, **{"weights.prefix": "3"})
    after = stack_run("dev", autoscaled, **{"weights.prefix": "0"})
    assert watch_and_scale(before) == watch_and_scale(after)
    assert [name for _, name in changed_resources(before, after)] == ["gateway-config"]


# -- secrets, remote write ---------------------------------------------------------------------------

def test_a_grafana_password_given_as_a_secret_is_used_and_none_is_generated():
    config, secrets = from_stack_file("eks")
    run = run_program({**config, "observability.grafanaAdminPassword": "correct-horse-battery"}, stack="eks",
                      secret_keys=[*secrets, "observability.grafanaAdminPassword"])
    assert not [r for r in run.resources if r.type == "random:index/randomPassword:RandomPassword"]
    assert "grafanaAdminPassword" in run.secret_outputs
    generated = stack_run("eks")
    (password,) = [r.inputs for r in generated.resources if r.type == "random:index/randomPassword:RandomPassword"]
    assert password["length"] == 32 and password["special"] is False


def test_remote_write_to_a_workspace_the_stack_creates_with_a_role_for_prometheus_alone():
    run = stack_run("eks", **{"observability.remoteWrite": "create"})
    assert run.of_type("aws:amp/workspace:Workspace")
    trust = json.loads(run.named("observability-remote-write-role").inputs["assumeRolePolicy"])
    (statement,) = trust["Statement"]
    assert statement["Condition"]["StringEquals"] == {
        "oidc.eks.us-west-2.amazonaws.com/id/ABC:aud": "sts.amazonaws.com",
        "oidc.eks.us-west-2.amazonaws.com/id/ABC:sub": "system:serviceaccount:monitoring:monitoring-prometheus"}
    policy = json.loads(run.named("observability-remote-write-policy").inputs["policy"])
    assert [s["Action"] for s in policy["Statement"]] == [["aps:RemoteWrite"]]
    values = run.named("observability-kube-prometheus-stack").inputs["values"]["prometheus"]
    assert values["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"].endswith("observability-remote-write-role")
    (remote,) = values["prometheusSpec"]["remoteWrite"]
    assert remote["url"].endswith("/api/v1/remote_write") and remote["sigv4"] == {"region": "us-west-2"}
    assert "managedPrometheusWorkspaceArn" in run.outputs


def test_remote_write_to_a_given_workspace_writes_there_in_its_region():
    run = stack_run("existing", **{"observability.remoteWrite": WORKSPACE})
    assert not run.of_type("aws:amp/workspace:Workspace")
    policy = json.loads(run.named("observability-remote-write-policy").inputs["policy"])
    assert policy["Statement"][0]["Resource"] == [WORKSPACE]
    (remote,) = run.named("observability-kube-prometheus-stack").inputs["values"]["prometheus"]["prometheusSpec"][
        "remoteWrite"]
    assert remote == {"url": "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/"
                             "ws-0123abcd-4567-89ef-0123-456789abcdef/api/v1/remote_write", "sigv4": {"region": "us-east-1"}}


def test_turning_observability_off_declares_none_of_it():
    run = stack_run("eks", **{"observability.enabled": "false"})
    assert not [r for r in run.resources if r.name.startswith("observability")]
    assert "monitoring" not in run.named("router-qwen-router").inputs["values"]["router"]
    assert "grafanaCommand" not in run.outputs


def test_on_eks_each_router_chart_waits_for_the_monitoring_chart_whose_crd_its_service_monitor_needs():
    def chart_dependencies(run):
        return {urn.rsplit("::", 1)[-1] for urn in run.named("router-qwen-router").options["dependencies"]}

    # Created after the monitoring chart (its ServiceMonitor CRD), and so destroyed before it.
    on = chart_dependencies(stack_run("eks"))
    assert {"observability-kube-prometheus-stack", "gateway-api-inference-pool-crd"} <= on
    off = chart_dependencies(stack_run("eks", **{"observability.enabled": "false"}))
    assert off == on - {"observability-kube-prometheus-stack"}


# -- refused before anything is declared ---------------------------------------------------------------

def with_model(config, **fields):
    """The config with the last model's fields set (None removes one)."""
    models = [dict(m) for m in config["models"]]
    models[-1] = {k: v for k, v in {**models[-1], **fields}.items() if v is not None}
    return {**config, "models": models}


@pytest.mark.parametrize(("stack", "change", "expected"), [
    ("eks", {"observability.scrapeInterval": "0s"}, "observability.scrapeInterval = '0s': must be a Prometheus duration"),
    ("eks", {"observability.retention": "36h"}, "observability.retention = '36h': must be whole days"),
    ("eks", {"observability.prometheusStorageGiB": "2"}, "observability.prometheusStorageGiB = '2': is out of range"),
    ("eks", {"observability.storageClass": "GP3"}, "observability.storageClass = 'GP3': must be a StorageClass name"),
    ("eks", {"observability.storageClass": "gp3..fast"}, "observability.storageClass = 'gp3..fast': must be a "
                                                         "StorageClass name"),
    ("eks", {"observability.remoteWrite": "yes"}, "observability.remoteWrite = 'yes': must be create"),
    ("eks", {"observability.grafanaAdminPassword": "hunter2hunter2"},
     "observability.grafanaAdminPassword = <secret>: is stored in plain text"),
    ("eks", {"observability.retentio": "15d"}, "observability.retentio = '15d': is not a known key of observability. "
                                               "Did you mean 'retention'?"),
    ("eks", {"observability": {"enabled": False, "retention": "30d"}},
     "observability.retention = '30d': configures the monitoring stack, and observability.enabled is false"),
    ("eks", {"gateway.networkPolicy.monitoringNamespace": "inference"},
     "gateway.networkPolicy.monitoringNamespace = 'inference': is where observability runs Prometheus"),
    ("eks", lambda c: with_model(c, autoscaling={"minReplicas": 0, "maxReplicas": 2}),
     "models[1].autoscaling.minReplicas = 0: is out of range: must be a whole number from 1 to 100"),
    ("eks", lambda c: with_model(c, replicas=None, autoscaling={"minReplicas": 3, "maxReplicas": 2}),
     "models[1].autoscaling.maxReplicas = 2: is below models[1].autoscaling.minReplicas (3): 0 < minReplicas <= maxReplicas"),
    ("eks", lambda c: with_model(c, autoscaling={"minReplicas": 1, "maxReplicas": 2}),
     "models[1].replicas = 2: is set by the scaler between autoscaling.minReplicas and maxReplicas"),
    ("eks", lambda c: with_model(autoscaled(c), autoscaling={"minReplicas": 1, "maxReplicas": 2, "metric": "running"}),
     "models[1].autoscaling.target = (not set): is required with metric running"),
    ("eks", lambda c: with_model(autoscaled(c), autoscaling={"maxReplicas": 2, "metric": "queue"}),
     "models[1].autoscaling.metric = 'queue': must be 'waiting' or 'running' or 'kvCache'"),
    ("eks", lambda c: with_model(autoscaled(c), autoscaling={"minReplicas": 1, "maxReplicas": 2, "metric": "kvCache",
                                                             "target": 80}),
     "models[1].autoscaling.target = 80: must be a number greater than 0 and at most 1"),
    ("eks", lambda c: {**autoscaled(c), "observability": {"enabled": False}},
     "models[1].autoscaling: queries the stack's Prometheus, and observability.enabled is false"),
    ("dev", lambda c: {**autoscaled(c), "gateway": {**c["gateway"], "keda": False}},
     "gateway.keda = False: is false, and models[1].autoscaling needs KEDA"),
    # max x gpus against the GPUs HyperPod provides: refused, as the capacity check refuses replicas.
    ("dev", lambda c: autoscaled(c, maxReplicas=4),
     "they ask for 5 GPUs (replicas, or autoscaling.maxReplicas, x gpus, each replica on one instance) and the "
     "groups have 4"),
])
def test_each_bad_observability_or_autoscaling_value_is_refused_with_nothing_declared(stack, change, expected):
    config, _ = from_stack_file(stack)
    config = change(config) if callable(change) else merged(config, {k: v if isinstance(v, str) else json.dumps(v)
                                                                     for k, v in change.items()})
    resources, message = registered_before_refusal(config)
    assert resources == [] and expected in message and "nothing was deployed" in message


def test_on_eks_gpus_for_max_replicas_are_warned_about_as_replicas_are():
    run = stack_run("eks", lambda c: autoscaled(c, maxReplicas=4))
    assert any("the models ask for 5 GPUs at autoscaling.maxReplicas but gpuNodes.desired=4" in w for w in run.warnings)


# -- verify --prometheus's arithmetic ------------------------------------------------------------------

@pytest.mark.parametrize(("samples", "after", "counted"), [
    ([(1, 5), (2, 5), (3, 9), (4, 12)], 2, 7),
    # A restart: the counter starts from zero again, so what it shows after is what it counted.
    ([(1, 5), (2, 8), (3, 2), (4, 6)], 1, 3 + 6),
    # A series new since the baseline (a new pod) counts from zero.
    ([(3, 4), (4, 6)], None, 6),
    ([(1, 5), (2, 5)], 2, 0),
])
def test_counts_since_a_baseline_survive_a_restart(samples, after, counted):
    assert counted_since(samples, after) == counted


# -- what the stack asks of the system nodes -------------------------------------------------------------

def requests_cpu_millis(resources) -> int:
    cpu = resources["requests"]["cpu"]
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)


# components/observability/render.py's sizing note: 2 x m6i.large allocate about 1930m each, and what
# runs there before the monitoring (kube-system's pods, istiod, the load-balancer controller,
# cert-manager, two pickers, BBR, the EBS CSI driver) asks for about 1690m.
SYSTEM_NODES, ALLOCATABLE_MILLICPU, BEFORE_MONITORING_MILLICPU = 2, 1930, 1690


def test_monitoring_and_keda_fit_the_eks_system_nodes_beside_the_data_plane():
    run = stack_run("eks", autoscaled)
    values = run.named("observability-kube-prometheus-stack").inputs["values"]
    assert run.named("gateway-api-istiod").inputs["values"]["resources"]["requests"]["cpu"] == "200m"
    assert router.PICKER_RESOURCES["requests"]["cpu"] == "250m"
    asked = [values["prometheus"]["prometheusSpec"]["resources"], values["prometheusOperator"]["resources"],
             values["grafana"]["resources"], values["kube-state-metrics"]["resources"],
             values["alertmanager"]["alertmanagerSpec"]["resources"],
             *[values["prometheus-node-exporter"]["resources"]] * SYSTEM_NODES,
             *run.named("autoscaling-keda").inputs["values"]["resources"].values()]
    total = BEFORE_MONITORING_MILLICPU + sum(map(requests_cpu_millis, asked))
    assert total <= SYSTEM_NODES * ALLOCATABLE_MILLICPU, f"{total}m asked of {SYSTEM_NODES * ALLOCATABLE_MILLICPU}m"


def test_a_refused_grafana_password_is_never_echoed():
    config, secrets = from_stack_file("eks")
    key = "observability.grafanaAdminPassword"
    for change, secret_keys, why in (({key: "short-pw"}, [key], "must be at least 12 characters"),
                                     ({key: "long-enough-pw-1", "observability": {"grafanaAdminPassword": "other-pw-2"}},
                                      [key, "observability"], "is set twice with different values")):
        resources, message = registered_before_refusal({**config, **change}, secret_keys=[*secrets, *secret_keys])
        assert resources == [] and why in message
        assert not any(password in message for password in ("short-pw", "long-enough-pw-1", "other-pw-2"))


@pytest.mark.parametrize(("argv", "expected"), [
    (["--pod-url", "a=http://127.0.0.1:1", "--prometheus", "http://127.0.0.1:1"], "both say where the counters are"),
    (["--prometheus", "http://127.0.0.1:1"], "--prometheus http://127.0.0.1:1: which pods?"),
    (["--prometheus", "http://127.0.0.1:1", "--namespace", "inference", "--label", "vllm-qwen-small"],
     "--prometheus http://127.0.0.1:1: cannot query it"),
])
def test_verify_prometheus_refuses_what_it_cannot_read_in_one_line(argv, expected, capsys):
    from routing import __main__ as cli

    status = cli.main(["verify", *argv, "--gateway-url", "http://127.0.0.1:1", "--model-id", "m"])
    err = capsys.readouterr().err
    assert status == 2 and expected in err and len(err.strip().splitlines()) == 1, err
