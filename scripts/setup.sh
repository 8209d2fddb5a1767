#!/usr/bin/env bash
# Create .venv and install infoprompt with its test tools. Idempotent: a second run installs nothing new.
# Every dependency is installed at the version CI tested, from constraints/lock.txt (refresh it with
# scripts/refresh-lock.sh); pyproject.toml keeps the ranges the library supports. torch is installed first and
# alone, pinned to the CPU build on this machine's disk: resolved with the rest, pip could pull a multi-GB CUDA
# build. The setfit extra (sentence-transformers, datasets) is installed too: its tests run in CI, and it leaves
# the pinned torch as it is; so are the extras ray and mlflow (Ray sweeps, MLflow tracking; about 250 MB and
# 100 MB), serve (FastAPI, uvicorn, prometheus-client, httpx) and onnx (onnx, onnxscript, onnxruntime: about
# 40 MB of wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip=(python -m pip install --quiet --disable-pip-version-check -c constraints/lock.txt)
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" -e ".[dev,setfit,ray,mlflow,serve,onnx]"
