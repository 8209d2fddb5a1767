#!/usr/bin/env bash
# Lower bounds that are tested: a fresh virtual environment with the lowest versions pyproject.toml admits for
# transformers, peft, sentence-transformers, setfit and accelerate (constraints/lowest.txt, which
# tests/test_install.py holds to pyproject's bounds; torch is 2.13.0, the one build tested; every other
# dependency resolves to the registry's newest), then the fast tests.
# Usage: bash scripts/check-lowest.sh [pytest args...]; the environment is made anew in a temporary folder and
# removed afterwards (LOWEST_VENV=DIR keeps it there instead).
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONPATH  # the fresh environment alone decides what is installed
if [ -n "${LOWEST_VENV:-}" ]; then
    venv="$LOWEST_VENV"
    rm -rf "$venv"
else
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    venv="$work/venv"
fi
python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: -c constraints/lowest.txt)
# torch first, alone: the pin keeps pip from replacing it with a multi-GB CUDA build while resolving the rest.
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" -e ".[dev,setfit,serve,onnx]"
"$venv/bin/python" -m pip freeze --exclude-editable \
    | grep -iE '^(torch|transformers|peft|sentence-transformers|setfit|accelerate)==' | tr '\n' ' '
echo
"$venv/bin/python" -m pytest -m "not slow and not heavy" -q -p no:cacheprovider "$@"
