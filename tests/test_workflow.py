"""The pull-request workflow, linted by real linters (it only runs on GitHub, so this is our check)."""

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

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


def test_the_hyperpod_chart_is_cloned_before_the_preview_that_needs_it():
    preview = yaml.safe_load(WORKFLOW.read_text())["jobs"]["preview"]
    names = [step.get("name", step.get("uses", "")) for step in preview["steps"]]
    clone = next(i for i, step in enumerate(preview["steps"]) if "settings clone-hyperpod-chart" in step.get("run", ""))
    run = next(i for i, name in enumerate(names) if name.startswith("pulumi/actions@"))
    assert clone < run
    # The path the dev stack reads the chart from.
    dev = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())["config"]["inference-gateway:hyperpod"]
    assert preview["steps"][clone]["run"].endswith(dev["dependenciesChart"])
