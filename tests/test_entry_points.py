"""Every `python -m` command ends quietly when the reader of its output goes away first (`| head`):
no traceback, and the status a shell gives a command whose pipe broke (141)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BROKEN_PIPE = 141

COMMANDS = {
    "dryrun": ["dryrun", "--stack", "eks", "--json"],
    "dryrun.charts": ["dryrun.charts", "--stack", "eks", "--list"],
    "routing": ["routing", "predict", "--pods", "2", "--workload", "seed-shared"],
    # With a git that does nothing, so the command prints what it did without a network.
    "settings": ["settings", "clone-hyperpod-chart"],
}


@pytest.fixture
def env_with_a_git_that_does_nothing(tmp_path):
    git = tmp_path / "bin" / "git"
    git.parent.mkdir()
    git.write_text("#!/bin/sh\nexit 0\n")
    git.chmod(0o755)
    return {**os.environ, "PATH": f"{git.parent}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_a_command_whose_reader_is_gone_ends_quietly(module, env_with_a_git_that_does_nothing):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command prints a byte
    try:
        done = subprocess.run([sys.executable, "-m", *COMMANDS[module]], stdout=write_end, stderr=subprocess.PIPE,
                              cwd=ROOT, env=env_with_a_git_that_does_nothing, timeout=300, check=False)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr.decode()) == (BROKEN_PIPE, "")

