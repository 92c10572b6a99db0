"""The README's commands run as written: a renamed option, a moved module or a missing venv step
breaks the build, not a new user's first hour.

Every `python -m routing|settings|dryrun|benchmarks …` command in the README (code blocks and
inline code) is found and checked. Those that need no cloud and finish in seconds run for real
from a scratch copy of the repository's layout (so files they write stay out of the checkout);
those that need a cluster, real vLLM servers or an hour are parsed by the command's own parser,
which refuses an unknown option or subcommand just as a real run would.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from routing.__main__ import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
VENV_PYTHON = ".venv/bin/python"
COMMAND = re.compile(r"[\w./-]*python3? -m (?:routing|settings|dryrun|benchmarks)\b[^`\n]*")
# What a real run of these needs that CI has not: a cluster, GitHub or the charts' registries, or many
# minutes of vLLM.
PARSED_ONLY = {"verify", "calibrate", "demo", "servers", "clone-hyperpod-chart", "bench_under_load", "bench_precise",
               "bench_public_trace", "charts"}
MAX_README_LINES = 300


def readme_commands() -> list[str]:
    """Each command once, continuation lines joined, trailing comments dropped."""
    text = README.read_text().replace("\\\n", " ")
    found = []
    for match in COMMAND.finditer(text):
        command = re.sub(r"\s+#.*$", "", match.group(0)).strip()
        command = re.sub(r"\s+", " ", command.split(" && ")[0])
        if command not in found:
            found.append(command)
    return found


def first_word_after_module(argv: list[str]) -> str:
    module = argv[argv.index("-m") + 1]
    rest = argv[argv.index("-m") + 2:]
    return rest[0] if module in {"routing", "settings"} and rest else module.rpartition(".")[2]


def test_the_readme_is_for_users_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= MAX_README_LINES


def test_the_readme_has_commands_of_every_kind_to_check():
    kinds = {shlex.split(command)[2] for command in readme_commands()}
    assert {"routing", "settings", "dryrun", "benchmarks.bench_under_load"} <= kinds


@pytest.mark.parametrize("command", readme_commands())
def test_a_readme_command_uses_the_project_venv(command):
    # `python -m routing` outside the venv fails on its first import (no prometheus_client).
    assert command.startswith(f"{VENV_PYTHON} -m "), command


@pytest.mark.parametrize("command", readme_commands())
def test_a_readme_command_runs_as_written(command, tmp_path):
    argv = shlex.split(command)
    name = first_word_after_module(argv)
    if name in PARSED_ONLY:
        check_parses(argv, name)
        return
    # The checkout's layout, linked into a scratch directory: the command reads what it would
    # read from the repository root, and what it writes (a plot, a profile) lands here.
    for entry in ROOT.iterdir():
        if entry.name not in {".git", "README.md"}:
            (tmp_path / entry.name).symlink_to(entry)
    result = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr, result.stderr


def check_parses(argv: list[str], name: str) -> None:
    module = argv[argv.index("-m") + 1]
    rest = argv[argv.index("-m") + 2:]
    if module == "routing":
        args = build_parser().parse_args(rest)
        assert args.command == name
    elif module == "settings":
        assert rest[0] == "clone-hyperpod-chart" and len(rest) <= 2
    else:
        result = subprocess.run([sys.executable, "-m", module, *rest, "--help"], cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr


def test_a_command_with_a_renamed_option_is_caught():
    with pytest.raises(SystemExit):
        check_parses(shlex.split(f"{VENV_PYTHON} -m routing verify --stack dev --no-such-option"), "verify")


def test_the_readme_draws_the_request_and_control_paths_with_the_names_and_ports_the_code_deploys():
    from components.gateway.render import KIND as HYPERPOD_PICKER_CONFIG
    from components.gateway_api.render import GATEWAY_CLASS
    from settings import VLLM_PORT
    from settings.endpoints import PICKER_GRPC_PORT
    from settings.picker_config import KIND as LLMD_PICKER_CONFIG

    (diagram,) = re.findall(r"```mermaid\n(.*?)```", README.read_text(), re.S)
    assert diagram.startswith("flowchart ")
    # The request path, on both platforms: load balancer, gateway proxy, picker, pods.
    assert f"gRPC :{PICKER_GRPC_PORT}" in diagram and f":{VLLM_PORT}, to the pod picked" in diagram
    assert f"eks: {GATEWAY_CLASS.capitalize()} · hyperpod: AWS's Envoy" in diagram
    # The control path: what `pulumi up` turns the weights into, per platform.
    assert f"eks: {LLMD_PICKER_CONFIG}<br/>hyperpod: {HYPERPOD_PICKER_CONFIG}" in diagram
    # Where Prometheus, KEDA and the toolkit sit.
    for part in ("Prometheus", "KEDA", "predict", "verify", "calibrate"):
        assert part in diagram
