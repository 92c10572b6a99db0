"""The pull-request workflow, linted by real linters (it only runs on GitHub, so this is our check)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from settings import SettingsError, parse_settings
from tests.stack.program import DEPENDENCIES_CLONE

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "pull-request.yml"


def linter(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"{name} is not installed; install requirements-dev.txt"
    return found


def test_actionlint_finds_nothing():
    result = subprocess.run([linter("actionlint"), "-no-color", str(WORKFLOW)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_misspelled_input(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("comment-on-pr: true", "coment-on-pr: true"))
    result = subprocess.run([linter("actionlint"), "-no-color", str(broken)], capture_output=True, text=True)
    assert result.returncode != 0 and "coment-on-pr" in result.stdout


def test_workflow_matches_the_github_schema():
    result = subprocess.run([linter("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_preview_runs_for_every_stack_file_and_comments_the_diff():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    stacks = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
    preview = workflow["jobs"]["preview"]
    assert sorted(preview["strategy"]["matrix"]["stack"]) == stacks
    step = next(s for s in preview["steps"] if s.get("uses", "").startswith("pulumi/actions@"))
    assert step["with"]["command"] == "preview" and step["with"]["comment-on-pr"] is True
    assert preview["permissions"]["pull-requests"] == "write"


def test_project_config_declarations_are_valid_and_never_required():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "inference-gateway" and project["stackConfigDir"] == "stacks"
    assert project["runtime"]["name"] == "python"
    for key, declaration in project["config"].items():
        # Pulumi's project schema: a simple type, arrays need items; a key without a default is
        # required in every stack, which none of ours is.
        assert declaration["type"] in ("string", "integer", "boolean", "array"), key
        assert declaration["type"] != "array" or "items" in declaration, key
        assert "default" in declaration, key


def test_the_project_file_lists_every_top_level_key_settings_accepts():
    commented = re.findall(r"^#   (\w+) ", (ROOT / "Pulumi.yaml").read_text(), re.MULTILINE)
    # What settings accepts, as a user learns it: the keys a refused unknown key is told to choose from.
    with pytest.raises(SettingsError) as caught:
        parse_settings({"notAKey": "1"}, stack="test")
    (unknown,) = [problem for problem in caught.value.problems if problem.key == "notAKey"]
    valid = re.search(r"Valid keys: (.*)\. Remove", unknown.message)[1].split(", ")
    for key in commented:
        with pytest.raises(SettingsError) as caught:
            parse_settings({key: "{"}, stack="test")
        assert not any(problem.key == key and "is not a key" in problem.message for problem in caught.value.problems)
    assert sorted(commented) == sorted(valid)


def test_the_unit_job_installs_promtool_before_the_tests_that_require_it_in_ci():
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["unit"]["steps"]
    runs = [step.get("run", "") for step in steps]
    # The one definition ./test.sh uses too: it installs Debian's package.
    install = next(i for i, run in enumerate(runs) if "source .ci/prometheus.sh && ensure_prometheus" in run)
    assert re.search(r"apt-get install .*\bprometheus\b", (ROOT / ".ci" / "prometheus.sh").read_text())
    assert install < next(i for i, run in enumerate(runs) if "./test.sh --unit" in run)


def test_the_hyperpod_chart_is_cloned_before_the_preview_that_needs_it():
    preview = yaml.safe_load(WORKFLOW.read_text())["jobs"]["preview"]
    names = [step.get("name", step.get("uses", "")) for step in preview["steps"]]
    clone = next(i for i, step in enumerate(preview["steps"]) if "settings clone-hyperpod-chart" in step.get("run", ""))
    run = next(i for i, name in enumerate(names) if name.startswith("pulumi/actions@"))
    assert clone < run
    # The path the dev stack reads the chart from.
    dev = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())["config"]["inference-gateway:hyperpod"]
    assert preview["steps"][clone]["run"].endswith(dev["dependenciesChart"])


def test_every_stack_files_charts_are_rendered_with_a_pinned_helm():
    charts = yaml.safe_load(WORKFLOW.read_text())["jobs"]["charts"]
    stacks = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
    assert sorted(charts["strategy"]["matrix"]["stack"]) == stacks
    helm = next(step for step in charts["steps"] if step.get("uses", "").startswith("azure/setup-helm@"))
    assert re.fullmatch(r"v3\.\d+\.\d+", helm["with"]["version"])
    runs = [step.get("run", "") for step in charts["steps"]]
    render = next(i for i, run in enumerate(runs) if "-m dryrun.charts" in run)
    assert '--stack "${{ matrix.stack }}"' in runs[render] and "--list" not in runs[render]
    clone = next(i for i, run in enumerate(runs) if "settings clone-hyperpod-chart" in run)
    assert clone < render


# Each stack file's Helm releases: chart and pinned version, as docs/configuration.md's units give
# them (dev's dependencies chart is a local clone, at the commit settings pins, without a version).
CHARTS = {
    "dev": {("hyperpod-dependencies", "HyperPodHelmChart", "-"), ("kube-prometheus-stack", "kube-prometheus-stack",
                                                                  "88.5.3")},
    "eks": {("gpu-nodes-device-plugin", "nvidia-device-plugin", "0.17.4"),
            ("aws-load-balancer-controller", "aws-load-balancer-controller", "3.5.0"),
            ("istio-base", "base", "1.30.1"), ("istiod", "istiod", "1.30.1"),
            ("cert-manager", "cert-manager", "v1.21.1"), ("kube-prometheus-stack", "kube-prometheus-stack", "88.5.3"),
            ("inference-gateway-bbr", "body-based-routing", "v1.5.0"),
            ("qwen", "llm-d-router-gateway", "v0.10.0"), ("qwen-small", "llm-d-router-gateway", "v0.10.0")},
    "existing": {("kube-prometheus-stack", "kube-prometheus-stack", "88.5.3")},
}
# The eks stack's releases, and Karpenter's; qwen-small scales, so KEDA's too.
CHARTS["eks-karpenter"] = CHARTS["eks"] | {("karpenter", "karpenter", "1.14.1"), ("keda", "keda", "2.20.2")}


def test_the_render_step_covers_every_chart_each_stack_installs(tmp_path):
    # What the workflow's command renders, against the releases each stack file installs (dev with
    # the repository's stand-in of AWS's chart).
    stacks = tmp_path / "stacks"
    shutil.copytree(ROOT / "stacks", stacks)
    dev = stacks / "Pulumi.dev.yaml"
    dev.write_text(dev.read_text().replace("vendor/sagemaker-hyperpod-cli", str(DEPENDENCIES_CLONE)))
    assert sorted(p.name[len("Pulumi."):-len(".yaml")] for p in stacks.glob("Pulumi.*.yaml")) == sorted(CHARTS)
    for stack, releases in CHARTS.items():
        listed = subprocess.run([sys.executable, "-m", "dryrun.charts", "--stack", stack, "--stacks-dir", str(stacks),
                                 "--list"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        rendered = {(release, chart.rpartition("/")[2], version)
                    for release, chart, version, _ in (line.split("\t") for line in listed.splitlines())}
        assert rendered == releases, stack


def test_a_chart_that_fails_to_render_fails_the_step(tmp_path):
    # A fake helm that refuses to template: the step must exit non-zero, naming the release.
    helm = tmp_path / "helm"
    helm.write_text("#!/bin/sh\n[ \"$1\" = template ] && { echo 'Error: template: bad value' >&2; exit 1; }\nexit 0\n")
    helm.chmod(0o755)
    result = subprocess.run([sys.executable, "-m", "dryrun.charts", "--stack", "eks", "--helm", str(helm)], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert "istiod (istiod 1.30.1): FAILED" in result.stderr and "Error: template: bad value" in result.stderr
