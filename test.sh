#!/usr/bin/env bash
# The project's one test command, for users and CI alike:
#   ./test.sh            everything, including the end-to-end tests on two real vLLM CPU servers
#   ./test.sh --unit     everything but those (no vLLM install; what the PR workflow runs)
# Extra arguments go to pytest. Virtual environments are created on first use and reused.
set -euo pipefail
cd "$(dirname "$0")"

unit_only=false
if [[ "${1:-}" == "--unit" ]]; then
  unit_only=true
  shift
fi

# The venvs are set up as ./demo.sh sets them up: one definition for both.
source .ci/venvs.sh
setup_program_venv

# The Gateway API object schemas the program's tests validate rendered Gateways and HTTPRoutes with.
echo "== installing the Gateway API schemas (npm)"
(cd tests/gateway_api && npm ci --silent --no-audit --no-fund)

if $unit_only; then
  exec .venv/bin/python -m pytest -m "not e2e" "$@"
fi

# The observability tests run Debian's Prometheus against the vLLM servers and check the alerts with promtool.
source .ci/prometheus.sh
ensure_prometheus || exit 2
setup_vllm_venv
export VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
# vLLM is installed now, so the end-to-end tests must run: a skip would be a failure.
export ROUTING_E2E_REQUIRED=1
exec .venv/bin/python -m pytest "$@"
