"""Learning curves from run logs: reading, grouping, averaging, steps to 95% and the figure."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from infoprompt.analysis.curves import (
    discover_runs,
    group_runs,
    loss_curve,
    mean_curve,
    read_run,
    steps_to_fraction,
    trailing_mean,
)
from infoprompt.analysis.curves_report import CurvesConfig, run_curves
from infoprompt.errors import UserError


def write_run(
    directory,
    method: str,
    seed: int,
    steps: int = 40,
    rate: float = 0.1,
    task: str = "sst2",
    metrics_json: bool = True,
) -> None:
    directory.mkdir(parents=True)
    lines = []
    for step in range(1, steps + 1):
        loss = 0.2 + 0.5 * math.exp(-rate * step) + 0.01 * seed
        lines.append(
            {
                "type": "step",
                "step": step,
                "epoch": 1,
                "lr": 1e-3,
                "loss_total": loss + 0.1,
                "loss_pred": loss,
                "loss_rep": 0.0,
                "loss_head": 2.0,
                "loss_kl": 0.0,
            }
        )
        if step % 10 == 0:
            lines.append(
                {"type": "eval", "step": step, "epoch": 1, "n_eval": 16, "accuracy": 0.5 + step / 100}
            )
    lines.append({"type": "final_eval", "step": steps, "n_eval": 32, "accuracy": 0.9})
    (directory / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    if metrics_json:
        record = {
            "method": method,
            "task": task,
            "seed": seed,
            "shots": 64,
            "backbone": "minilm",
            "n_prompts": 4,
            "primary_metric": "accuracy",
        }
        (directory / "metrics.json").write_text(json.dumps(record), encoding="utf-8")


def test_trailing_mean_and_steps_to_95():
    np.testing.assert_allclose(trailing_mean(np.array([1.0, 3.0, 5.0, 7.0]), 2), [1.0, 2.0, 4.0, 6.0])
    steps = np.arange(1, 101)
    losses = np.where(steps <= 30, 1.0 - steps / 30.0, 0.0)  # linear drop to 0 at step 30, then flat
    # Window 1: L0 = 1 - 1/30, Lf = 0, threshold 0.05 * L0 -> first step with 1 - s/30 <= 0.0483 is 29.
    assert steps_to_fraction(steps, losses, window=1) == 29
    assert steps_to_fraction(steps, np.linspace(0, 1, 100), window=5) is None  # the loss went up
    assert steps_to_fraction(steps, np.full(100, np.nan)) is None


def test_runs_are_found_in_a_sweep_folder_and_grouped_by_method(tmp_path):
    for method in ("warp", "infoprompt"):
        for seed in (2, 1):
            write_run(tmp_path / "sweep" / f"{method}-{seed}", method, seed)
    write_run(tmp_path / "sweep" / ".warp-3.partial", "warp", 3)  # an unfinished run: ignored
    runs = discover_runs([tmp_path / "sweep"])
    assert len(runs) == 4
    groups = group_runs(runs)
    assert sorted(groups) == ["infoprompt", "warp"]
    assert [r.seed for r in groups["warp"]] == [1, 2]
    run = groups["warp"][0]
    assert (
        run.metric == "accuracy" and run.final == {"accuracy": 0.9} and run.final_n == 32 and run.eval_n == 16
    )
    np.testing.assert_array_equal(run.eval_steps, [10, 20, 30, 40])
    curve = loss_curve(groups["warp"], "pred", window=1)
    assert curve.n == 2 and curve.x.shape == (40,)
    assert curve.std[0] == pytest.approx(
        0.01 / math.sqrt(2), rel=1e-3
    )  # the two seeds' losses differ by 0.01


def test_mean_curve_cuts_to_the_shared_steps():
    curve = mean_curve(
        [np.array([1, 2, 3]), np.array([1, 2])], [np.array([1.0, 2.0, 3.0]), np.array([3.0, 4.0])]
    )
    np.testing.assert_array_equal(curve.x, [1, 2])
    np.testing.assert_allclose(curve.mean, [2.0, 3.0])


def test_method_falls_back_to_the_folder_name_and_errors_name_the_file(tmp_path):
    write_run(tmp_path / "lonely", "x", 1, metrics_json=False)
    assert read_run(tmp_path / "lonely").method == "lonely"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train_log.jsonl").write_text(
        '{"type": "step", "step": 1, "loss_pred": 1}\nnot json\n', encoding="utf-8"
    )
    with pytest.raises(UserError, match=r"train_log.jsonl:2"):
        read_run(bad)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no run directory"):
        discover_runs([tmp_path / "empty"])
    with pytest.raises(UserError, match="does not exist"):
        discover_runs([tmp_path / "missing"])


def test_report_writes_figure_and_numbers_and_refuses_mixed_tasks(tmp_path):
    write_run(tmp_path / "runs" / "a1", "infoprompt", 1, rate=0.3)
    write_run(tmp_path / "runs" / "a2", "infoprompt", 2, rate=0.3)
    write_run(tmp_path / "runs" / "b1", "warp", 1, rate=0.05)
    record = run_curves(CurvesConfig(runs=(str(tmp_path / "runs"),), out=str(tmp_path / "out"), window=3))
    for suffix in (".png", ".json", ".csv"):
        path = tmp_path / "out" / f"curves-sst2-minilm{suffix}"
        assert path.is_file() and path.stat().st_size > 100
    assert (tmp_path / "out" / "curves-sst2-minilm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    groups = record["groups"]
    assert groups["infoprompt"]["steps_to_95_mean"] < groups["warp"]["steps_to_95_mean"]  # faster decay
    assert groups["infoprompt"]["final_metric_mean"] == pytest.approx(0.9)
    write_run(tmp_path / "runs" / "c1", "warp", 1, task="mrpc")
    with pytest.raises(UserError, match="mix tasks"):
        run_curves(CurvesConfig(runs=(str(tmp_path / "runs"),), out=str(tmp_path / "out")))
