"""The README's Python example runs as written (with the data and output paths pointed at test locations)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- readme-example[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert match, "README.md lost its marked Python example"
    return match.group(1)


def test_readme_commands_are_the_ci_commands():
    text = README.read_text(encoding="utf-8")
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    test_command = "bash scripts/setup.sh && .venv/bin/ruff check . && .venv/bin/python -m pytest"
    assert test_command in text and ci.rstrip().endswith(test_command)  # the lint runs before the tests
    assert "set -euo pipefail" in ci and "|| true" not in ci  # every failure fails CI, pytest's status stands
    assert "infoprompt train --task sst2 --method infoprompt --shots 64" in text


def test_every_method_has_a_row_in_the_readme_method_table():
    from infoprompt.kinds.registry import METHODS

    text = README.read_text(encoding="utf-8")
    header = text.index("| name | prompts | placed | head on | trained | defaults |")
    rows = text[header:text.index("\n\n", header)].splitlines()[2:]
    named = {name for row in rows for name in re.findall(r"`([a-z0-9-]+)`", row.split("|")[1])}
    assert set(METHODS) <= named, f"methods missing from the README table: {sorted(set(METHODS) - named)}"


@pytest.mark.slow
def test_readme_example_runs(data_dir, tmp_path, capsys):
    code = readme_example().replace("../shared/data", str(data_dir)).replace("runs/readme-adapter", str(tmp_path / "a"))
    exec(compile(code, str(README), "exec"), {})
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "'label':" in printed
    assert (tmp_path / "a" / "adapter_model.safetensors").is_file()


def test_public_api_names_stay_what_they_say():
    """A submodule must never shadow an API name (``ip.train`` is the function, even once modules are loaded)."""
    import importlib

    import infoprompt as ip

    for module in ("training", "pipeline", "tasks", "backbones", "kinds", "kinds.factory", "kinds.registry"):
        importlib.import_module(f"infoprompt.{module}")
    assert callable(ip.train) and ip.train.__module__ == "infoprompt.kinds.factory"  # trains a model of any kind
    for name in ip.__all__:
        assert not isinstance(getattr(ip, name), type(ip)), name


@pytest.mark.slow
def test_own_data_example_runs_and_beats_chance(data_dir, tmp_path, capsys):
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- own-data-example[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert match, "README.md lost its marked own-data example"
    code = match.group(1).replace("../shared/data", str(data_dir)).replace("runs/my-classifier", str(tmp_path / "c"))
    exec(compile(code, str(README), "exec"), {})
    printed = capsys.readouterr().out
    assert "[False, True]" in printed
    accuracy = float(re.search(r"accuracy ([0-9.]+)", printed).group(1))
    assert accuracy > 0.6, printed
