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

python=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "== creating .venv"
  "$python" -m venv .venv
fi
echo "== installing the program's, the routing toolkit's and the test tools' requirements"
# This machine's pip config names package folders that may be absent; its warnings are noise.
.venv/bin/pip install --quiet --disable-pip-version-check \
  -r requirements.txt -r requirements-routing.txt -r requirements-dev.txt 2>&1 \
  | { grep -v "^WARNING: Location" || true; }

# The Gateway API object schemas the program's tests validate rendered Gateways and HTTPRoutes with.
echo "== installing the Gateway API schemas (npm)"
(cd tests/gateway_api && npm ci --silent --no-audit --no-fund)

if $unit_only; then
  exec .venv/bin/python -m pytest -m "not e2e" "$@"
fi

# vLLM lives in its own venv: it pins torch and friends that the Pulumi SDKs need not share.
echo "== installing vLLM (CPU build) into .venv-vllm"
bash .ci/setup-vllm.sh .venv-vllm
export VLLM_PYTHON="$PWD/.venv-vllm/bin/python"
# vLLM is installed now, so the end-to-end tests must run: a skip would be a failure.
export ROUTING_E2E_REQUIRED=1
exec .venv/bin/python -m pytest "$@"
