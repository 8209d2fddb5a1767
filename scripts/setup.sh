#!/usr/bin/env bash
# Create .venv and install infoprompt with its test tools. Idempotent: a second run installs nothing new.
# torch is pinned first to the CPU build on this machine's disk; a bare `torch` requirement would
# otherwise pull a multi-GB CUDA build. The setfit extra (sentence-transformers, datasets) and the onnx
# extra (onnx, onnxscript, onnxruntime: about 40 MB of wheels) are installed too: their tests run in CI,
# and they leave the pinned torch as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python -m pip install --quiet --disable-pip-version-check -e ".[dev,setfit,onnx]"
