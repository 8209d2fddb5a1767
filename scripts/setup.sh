#!/usr/bin/env bash
# Create .venv and install infoprompt with its test tools. Idempotent: a second run installs nothing new.
# torch is pinned first to the CPU build on this machine's disk; a bare `torch` requirement would
# otherwise pull a multi-GB CUDA build. The setfit extra (sentence-transformers, datasets) is installed
# too: its tests run in CI, and it leaves the pinned torch as it is; so are the extras ray and mlflow (Ray
# sweeps, MLflow tracking; about 250 MB and 100 MB), serve (FastAPI, uvicorn, prometheus-client, httpx) and
# onnx (onnx, onnxscript, onnxruntime: about 40 MB of wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python -m pip install --quiet --disable-pip-version-check -e ".[dev,setfit,ray,mlflow,serve,onnx]"
