# The project's two virtual environments, set up one way for ./test.sh and ./demo.sh alike
# (source it from the repository root; it defines functions and runs nothing):
#   setup_program_venv   .venv: the program's, the routing toolkit's and the test tools' requirements,
#                        then the simulator's compiled core (.ci/build_core.py)
#   setup_vllm_venv      .venv-vllm: vLLM's CPU build (.ci/setup-vllm.sh)
# Each step is announced with `announce`, which a script may redefine after sourcing this.
# Both are idempotent: created on first use, then only checked.

announce() {
  echo "== $*"
}

setup_program_venv() {
  local python=${PYTHON:-python3}
  if [[ ! -x .venv/bin/python ]]; then
    announce "creating .venv"
    "$python" -m venv .venv
  fi
  announce "installing the program's, the routing toolkit's and the test tools' requirements"
  # This machine's pip config names package folders that may be absent; its warnings are noise.
  .venv/bin/pip install --quiet --disable-pip-version-check \
    -r requirements.txt -r requirements-routing.txt -r requirements-dev.txt 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
  announce "compiling the simulator's core (Cython; only what changed)"
  .venv/bin/python .ci/build_core.py
}

# vLLM lives in its own venv: it pins torch and friends that the Pulumi SDKs need not share.
setup_vllm_venv() {
  announce "installing vLLM (CPU build) into .venv-vllm"
  bash .ci/setup-vllm.sh .venv-vllm
}
