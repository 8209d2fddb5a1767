"""The ``infoprompt analyze`` command group: registration, a full curves run, one-line user errors."""

from __future__ import annotations

import json

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
