#!/usr/bin/env bash
# The seed's experiment on this machine, from a fresh clone, in one command:
#   ./demo.sh              sets up .venv and .venv-vllm as ./test.sh does, then runs the demo
#   ./demo.sh --seed 3     arguments go to the demo (`.venv/bin/python -m routing demo --help`)
# Needs Python 3.11+. Each step shows the time so far; the demo ends with its three comparisons.
set -euo pipefail
cd "$(dirname "$0")"

source .ci/venvs.sh
announce() {
  echo "== [${SECONDS}s] $*"
}

setup_program_venv
setup_vllm_venv
announce "running the demo: .venv/bin/python -m routing demo${*:+ $*}"
exec .venv/bin/python -m routing demo "$@"
