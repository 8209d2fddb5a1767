#!/usr/bin/env bash
# Refresh constraints/lock.txt to the newest versions pyproject.toml admits, tested: a fresh virtual environment
# installed without the lock (torch stays 2.13.0, the tested build), ruff, then the fast tests (or the pytest
# arguments given, e.g. `-m "not heavy"` for all of CI's); the lock is rewritten only when they pass. Commit the
# new lock with the versions it names in CHANGELOG.md. Usage: bash scripts/refresh-lock.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONPATH  # the fresh environment alone decides what is installed
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
echo "torch==2.13.0" > "$work/torch.txt"  # the one pin: without it pip may take a multi-GB CUDA build of a newer torch
pip=("$py" -m pip install --quiet --disable-pip-version-check -c "$work/torch.txt")
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" -e ".[dev,setfit,ray,mlflow,serve,onnx]"
"$work/venv/bin/ruff" check .
if [ "$#" -eq 0 ]; then set -- -m "not slow and not heavy"; fi
"$py" -m pytest -q -p no:cacheprovider "$@"
{
    echo "# The exact versions CI tested: \`pip freeze --exclude-editable\` of a fresh environment that"
    echo "# scripts/refresh-lock.sh installed with the registry's newest versions ($(date -u +%Y-%m-%d)) and tested,"
    echo "# torch as 2.13.0 (the CPU build, \`2.13.0+cpu\`, matches it). scripts/setup.sh and so .ci/run install"
    echo "# through it (\`pip install -c constraints/lock.txt ...\`); the README's install lines do too."
    "$py" -m pip freeze --exclude-editable | sed -E 's/^torch==([0-9.]+)\+.*$/torch==\1/'
} > constraints/.lock.txt.new
mv constraints/.lock.txt.new constraints/lock.txt  # whole or not at all
echo "constraints/lock.txt refreshed:" >&2
grep -iE '^(torch|transformers|peft|sentence-transformers|setfit|accelerate)==' constraints/lock.txt >&2
