"""End-to-end CMI and landscape analyses on a tiny random encoder: files written, shapes, numbers recorded."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from infoprompt.analysis.cmi import EstimatorConfig
from infoprompt.analysis.cmi_report import CMIConfig, run_cmi
from infoprompt.analysis.landscape_report import LandscapeConfig, run_landscape
from infoprompt.analysis.outputs import load_npz, write_npz
from infoprompt.analysis.redraw import redraw
from infoprompt.analysis.sources import SourceSpec
from infoprompt.errors import UserError
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.prompt.model import PromptClassifier

PNG = b"\x89PNG\r\n\x1a\n"


# Small tensors: a second intra-op thread only adds contention on the shared CPU.
pytestmark = pytest.mark.usefixtures("one_thread")


def assert_written(directory, stem: str, suffixes: tuple[str, ...]) -> None:
    for suffix in suffixes:
        path = directory / f"{stem}{suffix}"
        assert path.is_file() and path.stat().st_size > 100, path
    assert (directory / f"{stem}.png").read_bytes()[:8] == PNG


def test_cmi_report_compares_all_sources_with_both_estimators(bert_backbone, data_dir, tmp_path):
    adapter = tmp_path / "warp-adapter"
    config = ClassifierConfig.create(task="sst2", method="warp", backbone="tiny", n_prompts=2, max_length=48)
    PromptClassifier(bert_backbone, config).save_pretrained(adapter)
    out = tmp_path / "out"
    record = run_cmi(
        CMIConfig(
            task="sst2",
            out=str(out),
            backbone="tiny-bert",
            data_dir=str(data_dir),
            n_examples=24,
            adapters=(SourceSpec(kind="adapter", label="warp", adapter=adapter),),
            estimators=("presence", "swap"),
            swap_negatives=3,
            estimator=EstimatorConfig(n_negatives=4, steps=5, batch_size=8, score_draws=2),
            progress=False,
        ),
        backbone=bert_backbone,
    )
    assert_written(out, "cmi-sst2-tiny-bert", (".png", ".json", ".csv"))
    labels = ["random (n_p=2)", '"this is positive"', '"this is negative"', "warp"]
    assert list(record["summaries"]["presence"]) == labels
    assert record["n_fit"] == 12 and record["n_score"] == 12
    for estimator, cap in record["bound_cap"].items():
        for summary in record["summaries"][estimator].values():
            assert (
                summary["n"] == 12
                and summary["ci_low"] <= summary["mean"] <= summary["ci_high"] <= cap + 1e-6
            )
    with (out / "cmi-sst2-tiny-bert.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * len(labels) * 12
    saved = json.loads((out / "cmi-sst2-tiny-bert.json").read_text(encoding="utf-8"))
    assert saved["seed"] == 1 and saved["examples_scored"] == [r["example"] for r in rows[:12]]
    # The figure can be redrawn from the saved numbers alone.
    png = out / "cmi-sst2-tiny-bert.png"
    png.unlink()
    assert redraw(out / "cmi-sst2-tiny-bert.json") == png and png.read_bytes()[:8] == PNG


def test_cmi_report_refuses_unknown_estimators_and_empty_sources(bert_backbone, data_dir, tmp_path):
    with pytest.raises(UserError, match="unknown estimator"):
        run_cmi(CMIConfig(task="sst2", out=str(tmp_path), estimators=("magic",)), backbone=bert_backbone)
    with pytest.raises(UserError, match="no prompt source"):
        run_cmi(
            CMIConfig(
                task="sst2",
                out=str(tmp_path),
                data_dir=str(data_dir),
                n_examples=8,
                texts=(),
                random=False,
                progress=False,
            ),
            backbone=bert_backbone,
        )


def test_landscape_report_writes_surfaces_trajectories_and_roughness(bert_backbone, data_dir, tmp_path):
    out = tmp_path / "land"
    record = run_landscape(
        LandscapeConfig(
            task="sst2",
            out=str(out),
            backbone="tiny-bert",
            data_dir=str(data_dir),
            shots=8,
            steps=3,
            n_probe=4,
            grid=3,
            roughness_directions=8,
            progress=False,
        ),
        backbone=bert_backbone,
    )
    assert_written(out, "landscape-sst2-tiny-bert", (".png", ".json", ".npz"))
    arrays = load_npz(out / "landscape-sst2-tiny-bert.npz")
    assert arrays["task_loss"].shape == (3, 3) and arrays["rep_loss"].shape == (3, 3)
    assert arrays["trajectory0_xy"].shape == (4, 2) and arrays["trajectory1_prompts"].shape[0] == 4
    assert (
        arrays["trajectory0_loss_head"].max() > 0 and arrays["trajectory1_loss_head"].max() == 0
    )  # γ = 0.05 vs 0
    assert set(record["roughness"]) == {"task", "rep"} and record["roughness"]["task"]["mean"] >= 1.0
    assert abs(arrays["xs"]).max() >= abs(arrays["trajectory0_xy"]).max()  # the grid covers the trajectory
    assert set(record["trajectories"]) == {"0.05", "0"}
    png = out / "landscape-sst2-tiny-bert.png"
    png.unlink()
    assert redraw(out / "landscape-sst2-tiny-bert.json") == png and png.stat().st_size > 100
    (out / "landscape-sst2-tiny-bert.npz").unlink()
    with pytest.raises(UserError, match="is missing"):
        redraw(out / "landscape-sst2-tiny-bert.json")


def test_npz_writer_refuses_object_arrays(tmp_path):
    write_npz(tmp_path / "ok.npz", {"a": np.arange(3), "names": np.array(["x", "y"])})
    assert load_npz(tmp_path / "ok.npz")["names"].tolist() == ["x", "y"]
    with pytest.raises(TypeError, match="pickle"):
        write_npz(tmp_path / "bad.npz", {"a": np.array([{"x": 1}], dtype=object)})
