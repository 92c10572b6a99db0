"""`python -m dryrun`: what a stack declares, and what a config change changes, without AWS or the Pulumi CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dryrun.__main__ import main
from dryrun.mocks import Registered
from dryrun.report import SECRET, listing, snapshot
from dryrun.runner import ROOT, ProgramRun
from settings.stackfile import STACKS_DIR
from tests.stack.program import DEPENDENCIES_CLONE, run_program
from tests.test_program import from_stack_file

STACKS = sorted(path.name[len("Pulumi."):-len(".yaml")] for path in STACKS_DIR.glob("Pulumi.*.yaml"))
GATEWAY_CONFIG = "kubernetes:inference.sagemaker.aws.amazon.com/v1alpha1:InferenceGatewayConfig"
CHART = "kubernetes:helm.sh/v4:Chart"


@pytest.fixture
def stacks(tmp_path):
    """The repo's stack files, with AWS's dependencies chart at the repo's stand-in clone (as the
    program tests run them): this machine has no real clone."""
    stacks_dir = tmp_path / "stacks"
    stacks_dir.mkdir()
    for path in STACKS_DIR.glob("Pulumi.*.yaml"):
        text = path.read_text().replace("vendor/sagemaker-hyperpod-cli", str(DEPENDENCIES_CLONE))
        (stacks_dir / path.name).write_text(text)
    return stacks_dir


def dry_run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def dry_run_json(capsys, *argv: str) -> dict:
    status, out, err = dry_run(capsys, *argv, "--json")
    assert status == 0, err
    return json.loads(out)


@pytest.mark.parametrize("stack", STACKS)
def test_the_dry_run_shows_exactly_what_the_program_registers(capsys, stacks, stack):
    shown = dry_run_json(capsys, "--stack", stack, "--stacks-dir", str(stacks))
    config, secrets = from_stack_file(stack)
    run = run_program(config, stack=stack, secret_keys=secrets)
    assert sorted((e["type"], e["name"]) for e in shown["resources"]) == sorted((r.type, r.name) for r in run.resources)
    objects = sorted((e["kind"], e["namespace"], e["objectName"])
                     for e in shown["resources"] if e["section"] == "kubernetes")
    assert objects == sorted((r.inputs["kind"], r.inputs["metadata"].get("namespace"), r.inputs["metadata"]["name"])
                             for r in run.resources if r.type.startswith("kubernetes:") and "kind" in r.inputs)
    assert set(shown["outputs"]) == set(run.outputs)
    assert shown["warnings"] == run.warnings


def test_the_listing_groups_what_a_person_reviews_and_marks_what_only_aws_knows(capsys):
    status, out, _ = dry_run(capsys, "--stack", "eks")
    assert status == 0
    headings = [line for line in out.splitlines() if line.startswith("== ")]
    assert [h.split(" (")[0] for h in headings] == [
        "== Warnings the program logs", "== AWS resources", "== Helm charts", "== Kubernetes manifests from files",
        "== Kubernetes objects", "== Providers", "== Components", "== Other resources", "== Stack outputs"]
    assert "  warning: gateway.jwt is not set: the gateway authenticates nobody" in out
    assert "  Deployment inference/vllm-qwen-small  (kubernetes:apps/v1:Deployment" in out
    assert ("  oci://ghcr.io/llm-d/charts/llm-d-router-gateway v0.10.0 from its OCI registry, "
            "release inference/qwen-small") in out
    # What the mocks would invent (account, ids, ARNs) is never printed as if it were real.
    assert "123456789012" not in out and "-id\n" not in out
    assert "    vpcId: <known after apply>" in out and "  gatewayName: <known after apply>" in out


def test_weights_prefix_0_on_dev_changes_only_the_inference_gateway_config(capsys, stacks):
    change = dry_run_json(capsys, "--stack", "dev", "--stacks-dir", str(stacks), "--set", "weights.prefix=0")
    assert (change["added"], change["removed"]) == ([], [])
    assert [(c["type"], c["name"]) for c in change["changed"]] == [(GATEWAY_CONFIG, "gateway-config")]
    assert "+    weights:\n+      prefix: 0\n" in change["changed"][0]["diff"]
    assert [o["name"] for o in change["outputs"]] == ["effectiveWeights"]


def test_weights_prefix_0_on_eks_changes_only_each_pickers_config_and_its_hash(capsys):
    change = dry_run_json(capsys, "--stack", "eks", "--set", "weights.prefix=0")
    assert (change["added"], change["removed"]) == ([], [])
    assert sorted((c["type"], c["name"]) for c in change["changed"]) == [(CHART, "router-qwen-router"),
                                                                       (CHART, "router-qwen-small-router")]
    for changed in change["changed"]:
        removed = [line for line in changed["diff"].splitlines() if line.startswith("-") and not line.startswith("---")]
        added = [line for line in changed["diff"].splitlines() if line.startswith("+") and not line.startswith("+++")]
        assert any("pluginRef: prefix-cache-scorer" in line for line in removed)
        assert [line.split(":")[0].strip() for line in added] == ["+        inference-gateway/picker-config-sha256"]


def test_a_change_that_changes_nothing_says_so(capsys):
    status, out, _ = dry_run(capsys, "--stack", "eks", "--set", "weights.prefix=3")
    assert status == 0
    assert out == ("Dry run of stack eks (stacks/Pulumi.eks.yaml) with --set weights.prefix=3, against the stack as "
                   "filed: no changes to the resources, their inputs, the outputs or the warnings.\n")


def test_a_path_into_a_list_sets_one_models_field_as_pulumi_config_set_path_would(capsys):
    status, out, _ = dry_run(capsys, "--stack", "eks", "--set", "models[1].replicas=3")
    assert status == 0
    assert "~ Deployment inference/vllm-qwen-small" in out and "-  replicas: 2\n    +  replicas: 3\n" in out
    assert "+ warning: the models use all 4 GPUs" in out


def test_unset_removes_a_key_so_a_model_on_a_shipped_stack_can_autoscale(capsys):
    change = dry_run_json(capsys, "--stack", "eks", "--unset", "models[1].replicas",
                          "--set", "models[1].autoscaling.minReplicas=2", "--set", "models[1].autoscaling.maxReplicas=3")
    assert change["unset"] == ["models[1].replicas"]
    added = [(c["type"], c["name"]) for c in change["added"]]
    assert ("kubernetes:keda.sh/v1alpha1:ScaledObject", "autoscaling-qwen-small") in added
    (deployment,) = [c for c in change["changed"] if c["name"] == "model-qwen-small-deployment"]
    assert "-  replicas: 2\n" in deployment["diff"]


def test_unset_applies_in_the_order_given(capsys):
    # Set, then removed: the stack as filed, so nothing changes.
    status, out, _ = dry_run(capsys, "--stack", "eks", "--set", "weights.prefix=0", "--unset", "weights.prefix")
    assert status == 0 and "no changes to the resources" in out


def test_a_secret_in_the_stack_file_is_never_printed(capsys, tmp_path):
    ciphertext = "v1:KnownSecretCiphertext0123456789=="
    text = (STACKS_DIR / "Pulumi.eks.yaml").read_text() + f"  inference-gateway:hfToken:\n    secure: {ciphertext}\n"
    (tmp_path / "Pulumi.secret.yaml").write_text(text)
    status, out, err = dry_run(capsys, "--stack", "secret", "--stacks-dir", str(tmp_path))
    assert status == 0 and ciphertext not in out + err
    shown = dry_run_json(capsys, "--stack", "secret", "--stacks-dir", str(tmp_path))
    assert ciphertext not in json.dumps(shown)
    (token,) = [e for e in shown["resources"] if e.get("kind") == "Secret" and e["objectName"] == "hf-token"]
    assert token["inputs"]["stringData"] == SECRET and shown["outputs"]["kubeconfig"] == SECRET


def test_a_secret_config_value_the_program_copies_in_plain_is_hidden_too():
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "copied"},
                  "data": {"url": "https://x/hf_abc123"}}
    run = ProgramRun([Registered("kubernetes:core/v1:ConfigMap", "copied", config_map, provider=None)],
                     outputs={"token": "hf_abc123"}, exported=["token"], warnings=["token hf_abc123 is old"])
    text = listing("test", "here", snapshot(run, secret_values=["hf_abc123"]), show=None)
    assert "hf_abc123" not in text and "url: https://x/[secret]" in text and "token: '[secret]'" in text


@pytest.mark.parametrize(("argv", "expected"), [
    (["--stack", "eks", "--set", "weights.prefix=-1"],
     ("dryrun: stack eks with --set weights.prefix=-1: 1 problem in the stack configuration; nothing was deployed: "
      "inference-gateway:weights.prefix = '-1': is out of range")),
    (["--stack", "eks", "--set", "weights.prefix"], "dryrun: --set weights.prefix: write KEY=VALUE"),
    (["--stack", "eks", "--set", "models[5].replicas=1"],
     "dryrun: --set models[5].replicas=1: index 5 is past the end"),
    (["--stack", "nope"], (f"dryrun: --stack nope: there is no stack file {STACKS_DIR / 'Pulumi.nope.yaml'}; "
                           "stacks there: dev, eks, eks-karpenter, existing")),
    (["--stack", "../stacks/dev"], "dryrun: --stack '../stacks/dev': give the stack's short name"),
    (["--stack", "eks", "--unset", "models[1].replica"],
     ("dryrun: --unset models[1].replica: the stack does not set models[1].replica, so there is nothing to remove. "
      "Did you mean 'replicas'? models[1] holds maxModelLen, model, name, pickerReplicas, replicas")),
    (["--stack", "eks", "--unset", "weights.prefix"],
     "dryrun: --unset weights.prefix: the stack does not set weights.prefix, so there is nothing to remove."),
    (["--stack", "eks", "--unset", "models[2]"], "dryrun: --unset models[2]: models is a list of 2 entries; there is no "
                                                 "models[2] to remove"),
    (["--stack", "eks", "--unset", "weights.prefix=0"], "dryrun: --unset weights.prefix=0: write the KEY alone"),
])
def test_a_mistake_is_one_line_and_exit_2(capsys, argv, expected):
    status, out, err = dry_run(capsys, *argv)
    assert status == 2 and out == ""
    assert err.startswith(expected) and err.count("\n") == 1


def test_a_hyperpod_stack_without_the_dependencies_chart_says_how_to_clone_it(capsys, tmp_path):
    clone = tmp_path / "sagemaker-hyperpod-cli"
    text = (STACKS_DIR / "Pulumi.dev.yaml").read_text().replace("vendor/sagemaker-hyperpod-cli", str(clone))
    (tmp_path / "Pulumi.dev.yaml").write_text(text)
    status, out, err = dry_run(capsys, "--stack", "dev", "--stacks-dir", str(tmp_path))
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "no Chart.yaml" in err and f"`.venv/bin/python -m settings clone-hyperpod-chart {clone}` (or by hand: `git clone " in err


def test_it_runs_with_no_aws_credentials_and_no_pulumi_cli(tmp_path):
    # No AWS_* variable, a HOME without ~/.aws or ~/.pulumi, a PATH without the Pulumi CLI, and a
    # proxy that refuses every connection: nothing here may reach out.
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HTTPS_PROXY": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9"}
    assert not any(key.startswith("AWS_") for key in env)
    done = subprocess.run([sys.executable, "-m", "dryrun", "--stack", "eks", "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["resources"]) > 0
    assert os.listdir(tmp_path) == []
