"""``theory newton``: the command through ``python -m infoprompt.theory`` and its handler, incl. bad input."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from infoprompt.errors import UserError
from infoprompt.theory.__main__ import build_parser, main
from infoprompt.theory.cli import add_theory_commands, load_instance, run_newton


def _module(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "infoprompt.theory", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _write_instance(path: Path, n: int = 40, d: int = 3, **overrides: object) -> Path:
    rng = np.random.default_rng(0)
    arrays = {"A": rng.standard_normal((n, d)), "b": rng.random(n), "w": np.full(n, 3.0)}
    arrays.update(overrides)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def test_module_runs_exact_and_sketched_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    completed = _module("newton", "--n", "3000", "--d", "4", "--sketch", "--seed", "3", "--json", str(out))
    assert completed.returncode == 0, completed.stderr
    text = completed.stdout
    for expected in ("exact Newton", "sketched Newton", "|x-x*|", "time ratio exact/sketched", "conditions"):
        assert expected in text
    payload = json.loads(out.read_text())
    assert set(payload["runs"]) == {"exact", "sketched"}
    exact, sketched = payload["runs"]["exact"], payload["runs"]["sketched"]
    assert exact["converged"] and sketched["converged"]
    assert sketched["history"][-1]["dist_to_opt"] <= 1e-7
    assert 0 < max(r["rows_used"] for r in sketched["history"]) < 3000
    assert payload["conditions"]["meets_sufficient"] is True
    assert payload["ratios"]["per_iteration_exact_over_sketched"] > 0


def test_module_reports_bad_input_as_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    _write_instance(bad, b=np.ones(7))
    completed = _module("newton", "--input", str(bad))
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("infoprompt: error: ")
    assert str(bad) in lines[0] and "'b'" in lines[0]


def test_handler_on_an_input_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write_instance(tmp_path / "ok.npz")
    args = build_parser().parse_args(["newton", "--input", str(path), "--eps", "1e-10"])
    assert run_newton(args) == 0
    output = capsys.readouterr().out
    assert "instance " + str(path) in output and "exact:" in output and "sketched" not in output


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"w": None}, "missing array(s) w"),
        ({"b": np.ones(5)}, "field 'b' has shape (5,)"),
        ({"w": np.ones((40, 1))}, "field 'w' has shape (40, 1)"),
        ({"A": np.ones(40)}, "field 'A' must be a non-empty n x d matrix"),
        ({"A": np.ones((2, 3)), "b": np.ones(2), "w": np.ones(2)}, "n=2 rows < d=3"),
        ({"A": np.full((40, 3), np.nan)}, "field 'A' contains NaN"),
        ({"b": np.array(["x"] * 40)}, "field 'b' is not numeric"),
    ],
)
def test_bad_instances_raise_user_errors_naming_the_field(tmp_path: Path, overrides, fragment: str) -> None:
    path = _write_instance(tmp_path / "instance.npz", **overrides)
    with pytest.raises(UserError) as caught:
        load_instance(str(path))
    message = str(caught.value)
    assert fragment in message and str(path) in message and "\n" not in message


def test_unreadable_files_raise_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        load_instance(str(tmp_path / "missing.npz"))
    text = tmp_path / "text.npz"
    text.write_text("not an archive")
    with pytest.raises(UserError, match="not a readable .npz"):
        load_instance(str(text))
    single = tmp_path / "single.npy"
    np.save(single, np.ones(3))
    with pytest.raises(UserError, match="expected an .npz archive"):
        load_instance(str(single))


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["newton", "--n", "3", "--d", "5"], "--n 3 < --d 5"),
        (["newton", "--d", "5"], "give --n and --d"),
        (["newton", "--n", "10", "--d", "2", "--eps", "0"], "--eps must be positive"),
        (["newton", "--n", "10", "--d", "2", "--max-iter", "0"], "--max-iter must be at least 1"),
        (["newton", "--n", "10", "--d", "2", "--sketch-accuracy", "1.5"], "--sketch-accuracy"),
    ],
)
def test_bad_options_raise_user_errors(argv: list[str], fragment: str) -> None:
    with pytest.raises(UserError, match=fragment.replace("(", r"\(")):
        run_newton(build_parser().parse_args(argv))


def test_input_contradicting_n_is_rejected(tmp_path: Path) -> None:
    path = _write_instance(tmp_path / "ok.npz")
    with pytest.raises(UserError, match="--n 41 contradicts"):
        run_newton(build_parser().parse_args(["newton", "--input", str(path), "--n", "41"]))


def test_main_returns_2_and_prints_the_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["newton", "--n", "2", "--d", "3"]) == 2
    assert capsys.readouterr().err.startswith("infoprompt: error: --n 2 < --d 3")


def test_unwritable_json_is_a_user_error(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["newton", "--n", "30", "--d", "2", "--json", str(tmp_path / "no" / "x.json")]
    )
    with pytest.raises(UserError, match="cannot write the JSON report"):
        run_newton(args)


def test_not_converging_within_max_iter_returns_1(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["newton", "--n", "300", "--d", "3", "--sketch", "--max-iter", "1"])
    assert run_newton(args) == 1
    assert "not converged within --max-iter 1" in capsys.readouterr().out


def test_add_theory_commands_registers_theory_newton_on_a_main_parser() -> None:
    parser = argparse.ArgumentParser(prog="infoprompt")
    add_theory_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["theory", "newton", "--n", "50", "--d", "3", "--sketch", "--seed", "2"])
    assert args.handler is run_newton and args.sketch and args.seed == 2 and args.n == 50
    with pytest.raises(SystemExit):
        parser.parse_args(["theory"])  # the sub-command is required
