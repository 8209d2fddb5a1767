"""Learning curves from run logs: reading, grouping, averaging, steps to 95% and the figure."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from infoprompt.analysis.curves import (
    SATURATION,
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
from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.training import SATURATION as TRAINING_SATURATION
from infoprompt.training import TrainConfig, train


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


def test_a_kinds_own_loss_terms_are_read_and_a_term_no_run_logged_is_named(tmp_path):
    run = tmp_path / "top-lora-1"
    write_run(run, "top-lora", 1, steps=4)
    lines = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    for line in lines:
        if line["type"] == "step":
            for term in ("pred", "rep", "head", "kl"):
                del line[f"loss_{term}"]
            line["loss_supcon"] = line["loss_total"] - 0.1
    (run / "train_log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    group = discover_runs([run])
    np.testing.assert_allclose(loss_curve(group, "supcon", window=1).mean, group[0].losses["total"] - 0.1)
    with pytest.raises(UserError, match="logged no loss 'pred'; they logged: supcon, total"):
        loss_curve(group, "pred", window=1)


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


def write_mi_run(directory, method: str, seed: int, saturate_at: int, steps: int = 30) -> None:
    """A run whose ``rep`` bound climbs linearly to its cap, passing 95% of it at ``saturate_at``; its ``head``
    bound stays at half its cap. A selection pass (already saturated) comes first and must not count."""
    directory.mkdir(parents=True)
    cap = math.log(33)
    lines = [
        {"type": "step", "phase": "select", "step": s, "loss_pred": 0.5, "mi_rep": cap, "mi_rep_cap": cap}
        for s in range(1, 6)
    ]
    for step in range(1, steps + 1):
        share = min(1.0, 0.96 * step / saturate_at)
        lines.append(
            {
                "type": "step",
                "phase": "train",
                "step": step,
                "loss_pred": 1.0 / step,
                "loss_rep": cap - share * cap,
                "mi_rep": share * cap,
                "mi_rep_cap": cap,
                "mi_head": 0.5 * math.log(2),
                "mi_head_cap": math.log(2),
            }
        )
    lines.append({"type": "final_eval", "step": steps, "n_eval": 32, "accuracy": 0.8})
    (directory / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    record = {
        "method": method,
        "task": "sst2",
        "seed": seed,
        "backbone": "minilm",
        "primary_metric": "accuracy",
    }
    (directory / "metrics.json").write_text(json.dumps(record), encoding="utf-8")


def test_information_shares_come_from_the_train_phase_and_give_saturation_steps(tmp_path):
    write_mi_run(tmp_path / "runs" / "p1", "infoprompt-plus", 1, saturate_at=12)
    write_mi_run(tmp_path / "runs" / "p2", "infoprompt-plus", 2, saturate_at=16)
    write_run(tmp_path / "runs" / "w1", "warp", 1, steps=30)  # an older log: no bounds
    write_mi_run(tmp_path / "runs" / "p3", "infoprompt-plus", 3, saturate_at=12, steps=0)  # selected 0 epochs
    run = read_run(tmp_path / "runs" / "p1")
    np.testing.assert_array_equal(run.steps, np.arange(1, 31))  # the selection pass is skipped
    assert list(run.mi_bounds) == ["rep", "head"]
    assert read_run(tmp_path / "runs" / "w1").mi_bounds == {}

    record = run_curves(CurvesConfig(runs=(str(tmp_path / "runs"),), out=str(tmp_path / "out"), window=5))
    rep = record["groups"]["infoprompt-plus"]["information"]["rep"]
    assert rep["saturated_at_step"] == [12, 16] and rep["saturated_runs"] == 2
    assert rep["saturated_at_step_mean"] == pytest.approx(14.0)
    assert rep["final_share"] == pytest.approx([1.0, 1.0]) and rep["cap_max"] == pytest.approx(math.log(33))
    head = record["groups"]["infoprompt-plus"]["information"]["head"]
    assert head["saturated_at_step"] == [None, None] and head["saturated_at_step_mean"] is None
    assert head["final_share_mean"] == pytest.approx(0.5)
    assert record["groups"]["warp"]["information"] == {}
    assert record["runs_without_train_steps"] == [str(tmp_path / "runs" / "p3")]
    # The selection pass no longer shifts the loss numbers: they are those of the train pass alone.
    assert record["groups"]["infoprompt-plus"]["steps"] == [30, 30]

    with (tmp_path / "out" / "curves-sst2-minilm.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    shares = [r for r in rows if r["series"] == "mi_share_rep"]
    assert {r["group"] for r in shares} == {"infoprompt-plus"} and len(shares) == 30
    assert float(shares[-1]["mean"]) == pytest.approx(1.0)
    assert not [r for r in rows if r["group"] == "warp" and r["series"].startswith("mi_share")]
    assert (tmp_path / "out" / "curves-sst2-minilm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_one_example_batch_has_no_bound_and_never_counts_as_saturated(tmp_path):
    """An in-batch term on a one-example batch logs bound 0 against cap 0: that step carries no bound."""
    directory = tmp_path / "runs" / "p1"
    directory.mkdir(parents=True)
    cap = math.log(8)
    lines = []
    for step in range(1, 11):
        last_of_epoch = step % 5 == 0  # 17 shots, batch 4: every epoch ends on one example
        lines.append(
            {"type": "step", "phase": "train", "step": step, "loss_pred": 1.0,
             "mi_rep": 0.0 if last_of_epoch else 0.5 * cap, "mi_rep_cap": 0.0 if last_of_epoch else cap}
        )
    lines.append({"type": "final_eval", "step": 10, "n_eval": 32, "accuracy": 0.8})
    (directory / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    record = {"method": "infoprompt-plus", "task": "sst2", "seed": 1, "backbone": "minilm",
              "primary_metric": "accuracy"}
    (directory / "metrics.json").write_text(json.dumps(record), encoding="utf-8")

    run = read_run(directory)
    assert np.isnan(run.mi_share("rep")[4]) and run.mi_share("rep")[0] == pytest.approx(0.5)
    result = run_curves(CurvesConfig(runs=(str(tmp_path / "runs"),), out=str(tmp_path / "out"), window=3))
    rep = result["groups"]["infoprompt-plus"]["information"]["rep"]
    assert rep["saturated_at_step"] == [None] and rep["saturated_runs"] == 0
    assert rep["final_share"] == pytest.approx([0.5])


def test_trailing_mean_leaves_out_missing_values():
    values = np.array([1.0, np.nan, 3.0, np.nan, np.nan])
    np.testing.assert_allclose(trailing_mean(values, 2)[:4], [1.0, 1.0, 3.0, 3.0])
    assert np.isnan(trailing_mean(values, 2)[4])


def test_a_log_without_bounds_gives_no_information_curve(tmp_path):
    write_run(tmp_path / "runs" / "w1", "warp", 1)
    record = run_curves(CurvesConfig(runs=(str(tmp_path / "runs"),), out=str(tmp_path / "out")))
    assert record["groups"]["warp"]["information"] == {}
    text = (tmp_path / "out" / "curves-sst2-minilm.csv").read_text(encoding="utf-8")
    assert "mi_share" not in text and (tmp_path / "out" / "curves-sst2-minilm.png").is_file()


@pytest.mark.parametrize("n_examples", [16, 17], ids=["full-batches", "one-example-last-batch"])
def test_curves_of_a_trained_run_match_its_own_saturation_summary(bert_backbone, toy_examples, n_examples, tmp_path):
    """17 examples in batches of 4 end every epoch on a one-example batch, whose in-batch bound has cap 0:
    the run's own summary and the curves read from its log must both leave that step out."""
    examples = toy_examples + [replace(toy_examples[0], source="toy:17")][: n_examples - len(toy_examples)]
    model = build_classifier(
        RunSpec(task="sst2", method="infoprompt-plus", seed=6, classifier={"max_length": 48}), bert_backbone
    )
    directory = tmp_path / "infoprompt-plus"
    directory.mkdir()
    config = TrainConfig(epochs=3, batch_size=4, seed=6, progress=False, select="holdout")  # keeps >= 1 epoch at both sizes
    result = train(model, examples, examples[:4], config, directory / "train_log.jsonl")
    assert result.steps > 0  # precondition: selection kept at least one epoch
    kinds = {
        json.loads(line).get("phase") for line in (directory / "train_log.jsonl").read_text().splitlines()
    }
    assert {"select", "train"} <= kinds
    steps_per_epoch = -(-n_examples // 4)  # a window of one epoch makes the final share the last epoch's
    caps = [
        json.loads(line).get("mi_rep_cap") for line in (directory / "train_log.jsonl").read_text().splitlines()
    ]
    assert (0.0 in caps) == (n_examples % 4 == 1)  # precondition: the 17-example run has cap-0 steps
    record = run_curves(
        CurvesConfig(runs=(str(directory),), out=str(tmp_path / "out"), window=steps_per_epoch)
    )
    summary = record["groups"]["infoprompt-plus"]
    assert summary["steps"] == [result.steps]
    assert set(summary["information"]) == {"rep", "head"}
    for term, info in summary["information"].items():
        expected = result.information[f"mi_{term}"]
        assert info["saturated_at_step"] == [expected["saturated_at_step"]]
        assert info["final_share"] == pytest.approx([expected["last_epoch_share_of_cap"]])
    assert SATURATION == TRAINING_SATURATION


def test_initial_and_final_loss_both_leave_out_a_step_that_lacks_the_loss(tmp_path):
    write_run(tmp_path / "runs" / "w1", "warp", 1, steps=20)
    log = tmp_path / "runs" / "w1" / "train_log.jsonl"
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    steps = [r for r in records if r["type"] == "step"]
    del steps[0]["loss_pred"]  # the first step of the window lacks the loss
    del steps[-1]["loss_pred"]  # and so does the last one
    log.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    losses = [r["loss_pred"] for r in steps if "loss_pred" in r]

    record = run_curves(CurvesConfig(runs=(str(tmp_path / "runs"),), out=str(tmp_path / "out"), window=4))
    summary = record["groups"]["warp"]
    assert summary["initial_loss_mean"] == pytest.approx(np.mean(losses[:3]))
    assert summary["final_loss_mean"] == pytest.approx(np.mean(losses[-3:]))
