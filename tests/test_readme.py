"""The README's commands and examples run as written (data and output paths pointed at test locations), and the
docs it sends a newcomer to keep their own runnable examples."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide.md"
METHODS_DOC = ROOT / "docs" / "methods.md"
README_LIMIT_BYTES = 15_000  # a newcomer's README: long material lives in docs/


def marked_block(path: Path, marker: str, language: str = "python") -> str:
    text = path.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {marker}[^>]*-->\s*```{language}\n(.*?)```", text, re.S)
    assert match, f"{path.name} lost its marked block {marker!r}"
    return match.group(1)


def test_readme_commands_are_the_ci_commands():
    text = README.read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = "bash scripts/setup.sh && .venv/bin/ruff check . && .venv/bin/python -m pytest"
    assert test_command in text and ci.rstrip().endswith(test_command)  # the lint runs before the tests
    assert "set -euo pipefail" in ci and "|| true" not in ci  # every failure fails CI, pytest's status stands
    assert "infoprompt train --task sst2 --method infoprompt --shots 64" in text


def test_the_readme_stays_short_and_its_links_resolve():
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= README_LIMIT_BYTES
    for target in re.findall(r"\]\(((?:docs|configs|results)/[^)#]+)", text):
        assert (ROOT / target).exists(), target


def test_the_readme_names_the_recommended_method_and_its_numbers_come_from_the_results():
    from infoprompt.recommended import RECOMMENDED_METHOD

    text = README.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if "recommended default" in line)
    assert f"`{RECOMMENDED_METHOD}`" in row
    # the MPNet 64-shot GLUE cells of the users' benchmark, whose report reads the older MPNet grids beside it
    cells = (ROOT / "results" / "users-mpnet" / "report" / "cells.csv").read_text(encoding="utf-8").splitlines()
    means = [float(line.split(",")[5]) for line in cells[1:]
             if line.split(",")[1] == RECOMMENDED_METHOD and line.split(",")[3] == "64"
             and line.split(",")[2] in ("sst2", "mrpc", "rte", "cola")]
    assert len(means) == 4 and f"{sum(means) / 4:.3f}" in row


def test_every_method_has_a_row_in_the_method_table():
    from infoprompt.kinds.registry import METHODS

    text = METHODS_DOC.read_text(encoding="utf-8")
    header = text.index("| name | prompts | placed | head on | trained | defaults |")
    rows = text[header:text.index("\n\n", header)].splitlines()[2:]
    named = {name for row in rows for name in re.findall(r"`([a-z0-9-]+)`", row.split("|")[1])}
    assert set(METHODS) <= named, f"methods missing from docs/methods.md: {sorted(set(METHODS) - named)}"


def write_rows(path: Path, rows) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows((row.fields["sentence"], row.label) for row in rows)
    return path


def logical_lines(block: str) -> list[str]:
    """A shell block's commands: continuation lines joined, blank lines dropped (comments stay: the shell reads them)."""
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def write_own_data(data_dir: Path, where: Path) -> None:
    """SST-2 sentences as a newcomer's ``text,label`` CSV files, named as the README names them."""
    import infoprompt as ip

    task = ip.get_task("sst2")
    write_rows(where / "tickets.csv", ip.load_split(task, "train", data_dir)[:400])
    write_rows(where / "tickets-dev.csv", ip.load_split(task, "dev", data_dir)[:100])
    write_rows(where / "new-tickets.csv", ip.load_split(task, "dev", data_dir)[100:110])


def readme_port(lines: list[str]) -> int:
    """The port the README's serve line names, or a free one in its place when that one is taken here; the test
    is skipped only where no loopback port can be bound at all."""
    import socket

    (port,) = {int(match) for line in lines for match in re.findall(r"(?:--port |localhost:)(\d+)", line)}
    for candidate in (port, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return sock.getsockname()[1]
    pytest.skip("no loopback port can be bound here")


def wait_until_serving(server, port: int, log: Path, timeout_s: float = 300) -> None:
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the server did not answer in {timeout_s} s: {log.read_text()}")


@pytest.mark.slow
def test_readme_own_data_serve_and_export_lines_run_in_order(data_dir, tmp_path, monkeypatch, capsys):
    """The three command lines on SST-2 sentences written as a newcomer's `text,label` CSV, then the serving
    section's lines in order (its pip line aside: this environment has the extras): the server serves the adapter
    the first block made, curl gets its answer, and the probe trained from the same file exports to ONNX."""
    import signal
    import subprocess
    import sys

    from infoprompt.cli import main

    write_own_data(data_dir, tmp_path)
    monkeypatch.chdir(tmp_path)
    for line in marked_block(README, "readme-cli-example", "bash").strip().splitlines():
        argv = shlex.split(line)
        assert argv[0] == "infoprompt"
        assert main([*argv[1:], "--quiet"] if argv[1] != "eval" else argv[1:]) == 0, line
    out = capsys.readouterr().out
    predictions = out.strip().splitlines()[-11:]  # the csv header and one row per input
    assert predictions[0].startswith("line,label"), out
    assert len(predictions) == 11 and (tmp_path / "runs" / "tickets" / "README.md").is_file()

    pip, serve, curl, train, export = logical_lines(marked_block(README, "readme-serve-export", "bash"))
    assert pip.startswith("pip install ") and "[serve,onnx]" in pip
    port = readme_port([serve, curl])
    serve, curl = (line.replace("8080", str(port)) for line in (serve, curl))  # the same, unless 8080 is taken
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:
        server = subprocess.Popen([sys.executable, "-m", "infoprompt.cli", *shlex.split(serve, comments=True)[1:]],
                                  stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_until_serving(server, port, log)
        answer = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=120, check=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    reply = json.loads(answer.stdout)
    assert reply["adapter"] == "tickets" and len(reply["predictions"]) == 1, reply
    assert log.read_text().splitlines()[-1] == "infoprompt: terminated (SIGTERM); server stopped"
    for line in (train, export):
        assert main(shlex.split(line, comments=True)[1:]) == 0, line
    assert (tmp_path / "runs" / "tickets-onnx").is_dir()


@pytest.mark.slow
def test_readme_own_data_example_runs(data_dir, tmp_path, monkeypatch, capsys):
    import infoprompt as ip

    task = ip.get_task("sst2")
    train = ip.sample_few_shot(ip.load_split(task, "train", data_dir), 64, seed=1)
    test = ip.load_split(task, "dev", data_dir)[:200]
    given = {"texts": [row.fields["sentence"] for row in train], "labels": [row.label for row in train],
             "test_texts": [row.fields["sentence"] for row in test], "test_labels": [row.label for row in test]}
    monkeypatch.chdir(tmp_path)
    exec(compile(marked_block(README, "own-data-example"), str(README), "exec"), given)
    printed = capsys.readouterr().out
    assert re.search(r"\['(positive|negative)'\] ", printed), printed
    assert float(printed.split()[-1]) > 0.6, printed
    assert (tmp_path / "runs" / "my-classifier").is_dir()


@pytest.mark.slow
def test_guide_api_example_runs(data_dir, tmp_path, capsys):
    code = (marked_block(GUIDE, "guide-api-example").replace("../shared/data", str(data_dir))
            .replace("runs/readme-adapter", str(tmp_path / "a")))
    exec(compile(code, str(GUIDE), "exec"), {})
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
def test_guide_classifier_example_runs_and_beats_chance(data_dir, tmp_path, capsys):
    code = (marked_block(GUIDE, "guide-classifier-example").replace("../shared/data", str(data_dir))
            .replace("runs/my-classifier", str(tmp_path / "c")))
    exec(compile(code, str(GUIDE), "exec"), {})
    printed = capsys.readouterr().out
    assert "[False  True]" in printed  # classes_ is a NumPy array, as scikit-learn's classifiers give it
    accuracy = float(re.search(r"accuracy ([0-9.]+)", printed).group(1))
    assert accuracy > 0.6, printed
