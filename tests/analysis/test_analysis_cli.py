"""The ``infoprompt analyze`` command group: registration, shared flags, a full curves run, one-line errors."""

from __future__ import annotations

import dataclasses
import json

import pytest

from infoprompt.analysis.target import AnalysisTarget
from infoprompt.cli import build_parser, main


def test_analyze_group_has_three_commands():
    parser = build_parser()
    args = parser.parse_args(
        ["analyze", "landscape", "--task", "sst2", "--out", "x", "--grid", "9", "--steps", "200"]
    )
    assert args.analysis == "landscape" and args.grid == 9 and args.gammas == [0.05, 0.0]
    args = parser.parse_args(
        [
            "analyze",
            "cmi",
            "--task",
            "mrpc",
            "--out",
            "x",
            "--adapter",
            "w=runs/w",
            "--estimators",
            "presence",
            "swap",
        ]
    )
    assert args.adapter == ["w=runs/w"] and args.estimators == ["presence", "swap"]
    assert parser.parse_args(["analyze", "curves", "a", "b", "--out", "x"]).runs == ["a", "b"]


def test_curves_command_end_to_end(tmp_path, capsys):
    run = tmp_path / "run1"
    run.mkdir()
    lines = [{"type": "step", "step": s, "loss_pred": 1.0 / s, "loss_total": 1.0 / s} for s in range(1, 21)]
    (run / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    assert main(["analyze", "curves", str(run), "--out", str(tmp_path / "out"), "--window", "2"]) == 0
    assert "run1: 1 run(s), steps to 95% of final loss" in capsys.readouterr().out
    assert (tmp_path / "out" / "curves.png").is_file()


def test_user_errors_are_one_line(tmp_path, capsys):
    assert main(["analyze", "curves", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("infoprompt: error:") and "does not exist" in err and "\n" not in err


@pytest.mark.parametrize(
    ("analysis", "runner", "record"),
    [
        ("cmi", "infoprompt.analysis.cmi_report.run_cmi", {"summaries": {}}),
        ("landscape", "infoprompt.analysis.landscape_report.run_landscape", {"roughness": {}, "trajectories": {}}),
    ],
)
def test_shared_flags_reach_the_analysis_config(analysis, runner, record, monkeypatch):
    seen = []
    monkeypatch.setattr(runner, lambda config: seen.append(config) or record)
    flags = ["--task", "mrpc", "--out", "o", "--backbone", "mpnet", "--data-dir", "d", "--source", "hub"]
    flags += ["--name", "n", "--seed", "7", "--cache-dir", "c", "--quiet"]
    assert main(["analyze", analysis, *flags]) == 0
    (config,) = seen
    assert isinstance(config, AnalysisTarget)
    shared = {field.name: getattr(config, field.name) for field in dataclasses.fields(AnalysisTarget)}
    assert shared == {
        "task": "mrpc",
        "out": "o",
        "backbone": "mpnet",
        "data_dir": "d",
        "source": "hub",
        "name": "n",
        "seed": 7,
        "cache_dir": "c",
        "progress": False,
    }
    assert config.stem(analysis, "mrpc") == "n"
    assert dataclasses.replace(config, name=None).stem(analysis, "mrpc") == f"{analysis}-mrpc-mpnet"
