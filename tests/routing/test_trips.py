"""Mistakes a new user makes with the toolkit's commands (issue 25), and the one line each gets
back: which command could not do what, with the option, the value and the fix, never a
traceback nor a word about deploying from a command that only reads a stack."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from aiohttp import web
from fake_http import FakeModelServer

from routing import __main__ as cli
from routing.live.serve import ThreadedApp

# Each command that takes --stack, with what else it needs to get as far as reading the stack.
STACK_COMMANDS = {
    "predict": [],
    "verify": [],
    "serve": ["--backend", "a=http://127.0.0.1:1"],
    "calibrate": [],
}
# A stack file of each kind a command can meet: none, not YAML, config the stack's rules refuse.
STACK_FILES = {
    "missing": (None, "stack 'missing' has no file {dir}/Pulumi.missing.yaml; stacks here: broken, invalid"),
    "broken": ("config: {a: [", "stack 'broken': {dir}/Pulumi.broken.yaml is not valid YAML: line 1, column 14: "),
    "invalid": ("config:\n  inference-gateway:models: 5\n",
                "stack 'invalid' ({dir}/Pulumi.invalid.yaml): inference-gateway:models = 5: must be a list"),
}


@pytest.mark.parametrize("command", STACK_COMMANDS)
@pytest.mark.parametrize("stack", STACK_FILES)
def test_a_stack_a_command_cannot_read_is_told_for_that_command_without_deploying(tmp_path, capsys, command, stack):
    for name, (text, _) in STACK_FILES.items():
        if text is not None:
            (tmp_path / f"Pulumi.{name}.yaml").write_text(text)
    expected = STACK_FILES[stack][1].format(dir=tmp_path)
    argv = [command, *STACK_COMMANDS[command], "--stack", stack, "--model", "qwen-small",
            "--stacks-dir", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{command}: {expected}"), err
    assert "deploy" not in err and err.count("\n") == 1


def test_predict_names_the_repositorys_stack_file_as_a_user_here_would_type_it(capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    assert cli.main(["predict", "--stack", "prod"]) == 2
    assert capsys.readouterr().err == ("predict: stack 'prod' has no file stacks/Pulumi.prod.yaml; stacks here: "
                                       "dev, eks, eks-karpenter, existing\n")


@pytest.fixture
def pod():
    server = FakeModelServer("pod-a").start()
    yield server
    server.stop()


@pytest.mark.parametrize("out, problem", [
    ("{tmp}/missing/profile.json", "there is no folder {tmp}/missing; create it (mkdir -p {tmp}/missing) or write "
                                   "elsewhere"),
    ("{tmp}", "is a folder; name the file, e.g. --out {tmp}/latency-profile.json"),
])
def test_calibrate_refuses_an_out_it_could_not_write_before_it_measures(tmp_path, capsys, pod, out, problem):
    out = out.format(tmp=tmp_path)
    assert cli.main(["calibrate", "--pod-url", f"a={pod.url}", "--out", out]) == 2
    assert capsys.readouterr().err == f"calibrate: --out {out}: {problem.format(tmp=tmp_path)}\n"
    assert pod.bodies == []


def test_calibrate_reaches_the_gateway_before_the_phases_and_names_gateway_url(tmp_path, capsys, pod):
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    assert cli.main(["calibrate", "--pod-url", f"a={pod.url}", "--gateway-url", f"http://127.0.0.1:{port}",
                     "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    url = f"http://127.0.0.1:{port}"
    assert err.startswith(f"calibrate: --gateway-url {url}: POST {url}/v1/completions failed (")
    assert err.endswith("is the gateway up (the stack's Gateway, or `python -m routing serve`) and the URL its base "
                        "address?\n")
    assert pod.bodies == []  # no phase ran


@pytest.mark.parametrize("page, content_type", [("<html>a web page</html>", "text/html"),
                                                ('{"object": "list"}', "application/json")])
def test_calibrate_on_a_url_that_is_not_vllm_names_the_pod_url(tmp_path, capsys, page, content_type):
    async def answer(_request: web.Request) -> web.Response:
        return web.Response(text=page, content_type=content_type)

    async def make_app() -> web.Application:
        app = web.Application()
        app.router.add_get("/{path:.*}", answer)
        return app

    with ThreadedApp(make_app) as server:
        code = cli.main(["calibrate", "--pod-url", f"a={server.url}", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"calibrate: --pod-url a={server.url}: /v1/models is not vLLM's list of served models (")
    assert err.endswith("is it a vLLM server?\n")


def test_calibrate_names_a_kubeconfig_it_cannot_load_as_verify_does(capsys):
    assert cli.main(["calibrate", "--stack", "dev", "--model", "qwen-small", "--kubeconfig", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("calibrate: cannot load --kubeconfig /nonexistent (the current context): ")
