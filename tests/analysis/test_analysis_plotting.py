"""The three figures are written as non-empty PNGs from synthetic numbers."""

from __future__ import annotations

import numpy as np

from infoprompt.analysis.curves import Curve
from infoprompt.analysis.plotting import plot_cmi, plot_curves, plot_landscape

PNG = b"\x89PNG\r\n\x1a\n"


def assert_png(path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 5000


def test_cmi_figure(tmp_path):
    rng = np.random.default_rng(0)
    values = {"presence": {"random": rng.normal(1, 0.5, 50), "warp": rng.normal(3, 0.2, 50)}}
    summaries = {
        "presence": {
            k: {
                "mean": float(v.mean()),
                "median": float(np.median(v)),
                "ci_low": float(v.mean() - 0.1),
                "ci_high": float(v.mean() + 0.1),
            }
            for k, v in values["presence"].items()
        }
    }
    plot_cmi(
        values,
        summaries,
        {"presence": np.log(33)},
        ["panel"],
        "title",
        "backbone x · task y",
        tmp_path / "c.png",
    )
    assert_png(tmp_path / "c.png")


def test_landscape_figure(tmp_path):
    xs = ys = np.linspace(-1, 1, 9)
    gx, gy = np.meshgrid(xs, ys)
    path = np.stack([np.linspace(0, 0.5, 20), np.linspace(0, -0.3, 20)], axis=1)
    plot_landscape(
        xs,
        ys,
        [("task", gx**2 + gy**2), ("rep", gx + gy)],
        [("γ=0.05", path), ("γ=0", path / 2)],
        "title",
        "backbone x",
        tmp_path / "l.png",
    )
    assert_png(tmp_path / "l.png")


def test_curves_figure_with_and_without_metric(tmp_path):
    x = np.arange(1.0, 21.0)
    loss = {"a": Curve(x, 1 / x, 0.1 / x, 2), "b": Curve(x, 2 / x, np.zeros(20), 1)}
    metric = {"a": Curve(np.array([10.0, 20.0]), np.array([0.6, 0.7]), np.array([0.01, 0.02]), 2), "b": None}
    plot_curves(loss, metric, {"a": (20.0, 0.72, 0.01)}, "loss", "accuracy", "t", "p", tmp_path / "m.png")
    plot_curves(loss, {}, {}, "loss", None, "t", "p", tmp_path / "n.png")
    assert_png(tmp_path / "m.png")
    assert_png(tmp_path / "n.png")
