"""The frontier figure: points from a report's cells.csv, the Pareto line, and one-line errors on bad input."""

from __future__ import annotations

import json

import pytest

from infoprompt.analysis.frontier import FrontierPoint, main, pareto, read_points
from infoprompt.errors import UserError

HEADER = "backbone,method,task,shots,n_prompts,mean,std,n_seeds,seeds,values,adapter_bytes,train_s\n"


def write_cells(path, rows):
    path.write_text(HEADER + "".join(f"mpnet,{m},{t},{s},0,{v},0,3,1 2 3,,{b},{sec}\n" for m, t, s, v, b, sec in rows))
    return path


def test_a_method_needs_every_task_and_its_numbers_are_averaged(tmp_path):
    cells = write_cells(tmp_path / "cells.csv", [
        ("probe", "sst2", 64, 0.8, 7000, 20), ("probe", "cola", 64, 0.0, 7040, 40),
        ("big", "sst2", 64, 0.9, 4e8, 600), ("big", "cola", 64, 0.2, 4e8, 1800),
        ("half", "sst2", 64, 0.99, 10, 1),  # no CoLA cell: no point
        ("probe", "sst2", 256, 0.1, 7000, 20),  # another shot count: ignored
    ])
    points = read_points([cells], "mpnet", "64", ("sst2", "cola"))
    assert [p.method for p in points] == ["probe", "big"]
    assert points[0] == FrontierPoint("probe", pytest.approx(0.4), 30.0, 7040)
    assert points[1].average == pytest.approx(0.55)


def test_the_pareto_line_keeps_only_points_nothing_beats_on_both_axes():
    points = [FrontierPoint("a", 0.5, 10, 1), FrontierPoint("b", 0.4, 20, 1), FrontierPoint("c", 0.6, 30, 1)]
    assert [p.method for p in pareto(points)] == ["a", "c"]


def test_the_command_writes_the_figure_and_its_points(tmp_path, capsys):
    cells = write_cells(tmp_path / "cells.csv", [("probe", "sst2", 64, 0.8, 7000, 20), ("big", "sst2", 64, 0.9, 4e8, 600)])
    out = tmp_path / "f.png"
    assert main([str(cells), "--tasks", "sst2", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {p["method"] for p in json.loads(out.with_suffix(".json").read_text())["points"]} == {"probe", "big"}


def test_a_file_that_is_not_a_report_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit) as exit_:
        main([str(bad), "--out", str(tmp_path / "f.png")])
    assert exit_.value.code == 2 and "not a report's cells.csv" in capsys.readouterr().err
    with pytest.raises(UserError, match="no such file"):
        read_points([tmp_path / "missing.csv"], "mpnet", "64", ("sst2",))
    assert not (tmp_path / "f.png").exists()
