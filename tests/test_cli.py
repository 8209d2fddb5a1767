"""The command line: one-line errors with exit status 2, and train → eval → predict on MiniLM."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from infoprompt.cli import main


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infoprompt.cli", *args], capture_output=True, text=True, input=stdin,
                          timeout=600)


@pytest.mark.parametrize("args,message", [
    (["train", "--task", "sst3", "--out", "x", "--data-dir", "."], "unknown task 'sst3'; did you mean 'sst2'? valid tasks:"),
    (["train", "--task", "sst2", "--out", "x", "--data-dir", "/no/such/dir"], "data directory /no/such/dir does not exist"),
    (["eval", "--adapter", "/no/such/adapter"], "adapter directory /no/such/adapter does not exist"),
])
def test_user_errors_are_one_line(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_unknown_method_and_backbone(capsys, tmp_path, data_dir):
    assert main(["train", "--task", "sst2", "--method", "wrap", "--out", str(tmp_path / "a"), "--data-dir", str(data_dir),
                 "--quiet"]) == 2
    assert "valid methods: infoprompt" in capsys.readouterr().err
    assert main(["train", "--task", "sst2", "--backbone", "no-such-encoder", "--out", str(tmp_path / "b"),
                 "--data-dir", str(data_dir), "--quiet"]) == 2
    assert "unknown backbone 'no-such-encoder'" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_bad_shots_is_an_argument_error(capsys):
    # A usage error is one line and exit status 2, returned by main like every other user error.
    assert main(["train", "--task", "sst2", "--shots", "lots", "--out", "x"]) == 2
    assert "expected a number of examples or 'full'" in capsys.readouterr().err


@pytest.mark.slow
def test_train_eval_predict_on_minilm(tmp_path, data_dir):
    out = tmp_path / "run"
    trained = run_cli("train", "--task", "sst2", "--method", "infoprompt", "--shots", "16", "--n-prompts", "4",
                      "--seed", "1", "--backbone", "minilm", "--data-dir", str(data_dir), "--out", str(out),
                      "--epochs", "1", "--eval-every-epochs", "0", "--quiet")
    assert trained.returncode == 0, trained.stderr
    record = json.loads((out / "metrics.json").read_text())
    assert record["seed"] == 1 and record["n_train"] == 16 and record["steps"] == 2 and record["backbone"] == "minilm"
    assert 0.0 <= record["metrics"]["accuracy"] <= 1.0 and record["parameters"]["frozen"] > 20_000_000
    assert {"infoprompt_adapter.json", "adapter_model.safetensors", "train_log.jsonl"} <= {p.name for p in out.iterdir()}

    evaluated = run_cli("eval", "--adapter", str(out), "--data-dir", str(data_dir), "--quiet")
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["metrics"]["accuracy"] == pytest.approx(record["metrics"]["accuracy"])

    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"sentence": "a gorgeous , witty film"}\n{"sentence": "dull and lifeless"}\n')
    predicted = run_cli("predict", "--adapter", str(out), "--input", str(inputs))
    assert predicted.returncode == 0, predicted.stderr
    rows = [json.loads(line) for line in predicted.stdout.splitlines()]
    assert len(rows) == 2 and all(r["label"] in ("negative", "positive") for r in rows)
    assert all(abs(sum(r["probabilities"].values()) - 1) < 1e-4 for r in rows)

    from_stdin = run_cli("predict", "--adapter", str(out), "--input", "-", stdin="a gorgeous , witty film\n")
    assert from_stdin.returncode == 0 and json.loads(from_stdin.stdout) == rows[0]

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sentence": "fine"}\n{"text": "no field"}\n')
    failed = run_cli("predict", "--adapter", str(out), "--input", str(bad))
    assert failed.returncode == 2 and "bad.jsonl:2: missing text field(s) sentence" in failed.stderr

    again = run_cli("train", "--task", "sst2", "--data-dir", str(data_dir), "--out", str(out), "--quiet")
    assert again.returncode == 2 and "already exists" in again.stderr
