"""The three figures (CMI distributions, loss landscapes, learning curves), drawn on matplotlib's Agg canvas.

Figures are built on :class:`matplotlib.figure.Figure` with an explicit Agg canvas, so no interactive backend
or global pyplot state is touched, and written atomically. Every figure carries a footer naming the backbone,
task, seeds and sample sizes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.ticker import ScalarFormatter

from infoprompt.figures import drawn_literally, footer, new_figure, save_png

PALETTE = ("#1b9e77", "#7570b3", "#d95f02", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")


# -- Figure 1 ------------------------------------------------------------------------------------------------
@drawn_literally
def plot_cmi(
    values: Mapping[str, Mapping[str, np.ndarray]],
    summaries: Mapping[str, Mapping[str, Mapping[str, float]]],
    caps: Mapping[str, float],
    titles: Sequence[str],
    title: str,
    provenance: str,
    path: str | os.PathLike[str],
) -> None:
    """One panel per estimator: a violin per source of its per-example values, mean ± 95% CI and median.

    The numbers are repeated under each violin. A long negative tail (an over-confident critic on a few
    held-out examples) is cut at the 2nd percentile of the panel so the other sources stay readable; the
    count of values below the axis is printed.
    """
    estimators = list(values)
    labels = list(values[estimators[0]])
    width = max(5.5, 1.5 * len(labels) + 1.5)
    figure = new_figure(width * len(estimators), 5.2)
    panels = figure.subplots(1, len(estimators), squeeze=False)[0]
    positions = np.arange(1, len(labels) + 1)
    for axes, estimator, panel_title in zip(panels, estimators, titles, strict=True):
        data = [np.asarray(values[estimator][label], float) for label in labels]
        parts = axes.violinplot(data, positions=positions, showextrema=False, widths=0.8)
        for body, colour in zip(parts["bodies"], PALETTE * 4, strict=False):
            body.set_facecolor(colour)
            body.set_edgecolor("black")
            body.set_alpha(0.55)
        ticks = []
        for position, label, colour in zip(positions, labels, PALETTE * 4, strict=False):
            summary = summaries[estimator][label]
            axes.errorbar(
                [position],
                [summary["mean"]],
                yerr=[[summary["mean"] - summary["ci_low"]], [summary["ci_high"] - summary["mean"]]],
                fmt="o",
                color="black",
                markerfacecolor=colour,
                capsize=4,
                zorder=3,
            )
            axes.plot([position + 0.12], [summary["median"]], "^", color="black", markersize=5, zorder=3)
            ticks.append(
                f"{_wrap(label)}\n{summary['mean']:.3f} [{summary['ci_low']:.3f}, {summary['ci_high']:.3f}]"
                f"\nmedian {summary['median']:.3f}"
            )
        cap = caps[estimator]
        everything = np.concatenate(data)
        low = min(0.0, float(np.quantile(everything, 0.02)))
        span = max(cap - low, 1e-3)
        axes.set_ylim(low - 0.05 * span, cap + 0.08 * span)
        hidden = int((everything < low - 0.05 * span).sum())
        if hidden:
            axes.text(
                0.01,
                0.01,
                f"{hidden} value(s) below the axis (min {everything.min():.2f})",
                transform=axes.transAxes,
                fontsize=7,
                color="#444444",
            )
        axes.axhline(cap, color="grey", linestyle="--", linewidth=1)
        axes.text(
            0.01,
            cap,
            f" cap log(K+1) = {cap:.2f}",
            transform=axes.get_yaxis_transform(),
            va="bottom",
            fontsize=7,
            color="grey",
        )
        axes.axhline(0.0, color="black", linewidth=0.6)
        axes.set_xlim(0.4, len(labels) + 0.6)
        axes.set_xticks(positions, ticks, fontsize=7.5)
        axes.set_ylabel("per-example CMI lower bound (nats)")
        axes.set_title(panel_title, fontsize=10)
    figure.suptitle(title, fontsize=11)
    footer(figure, provenance)
    save_png(figure, path)


def _wrap(label: str, width: int = 16) -> str:
    words, lines, line = label.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    return "\n".join(lines)


# -- Figure 2 ------------------------------------------------------------------------------------------------
@drawn_literally
def plot_landscape(
    xs: np.ndarray,
    ys: np.ndarray,
    panels: Sequence[tuple[str, np.ndarray]],
    trajectories: Sequence[tuple[str, np.ndarray]],
    title: str,
    provenance: str,
    path: str | os.PathLike[str],
    levels: int = 20,
) -> None:
    """Filled contours of each surface on the same axes, with every trajectory (start marked ★) on each."""
    figure = new_figure(5.6 * len(panels), 5.4)
    grid = figure.subplots(1, len(panels), squeeze=False)[0]
    extent = (xs[0], xs[-1], ys[0], ys[-1])
    for axes, (name, surface) in zip(grid, panels, strict=True):
        filled = axes.contourf(xs, ys, surface, levels=levels, cmap="viridis")
        axes.contour(xs, ys, surface, levels=levels, colors="white", linewidths=0.3, alpha=0.5)
        bar = figure.colorbar(
            filled, ax=axes, fraction=0.06, pad=0.02, format=ScalarFormatter(useOffset=False)
        )
        bar.ax.tick_params(labelsize=8)
        for (label, coordinates), colour in zip(
            trajectories, ("#00d26a", "#b04ce0", "#ff7f0e", "#e7298a"), strict=False
        ):
            axes.plot(coordinates[:, 0], coordinates[:, 1], color=colour, linewidth=1.6, label=label)
            axes.plot(coordinates[-1, 0], coordinates[-1, 1], "o", color=colour, markersize=4)
            axes.plot(
                coordinates[0, 0],
                coordinates[0, 1],
                "*",
                color=colour,
                markersize=15,
                markeredgecolor="black",
                markeredgewidth=0.8,
            )
        axes.set_xlim(extent[0], extent[1])
        axes.set_ylim(extent[2], extent[3])
        axes.set_xlabel("offset from the mean token embedding along PC1")
        axes.set_ylabel("offset along PC2")
        axes.set_title(name, fontsize=10)
        axes.legend(loc="best", fontsize=7, framealpha=0.8)
    figure.suptitle(title, fontsize=11)
    footer(figure, provenance)
    save_png(figure, path)


# -- Figure 3 ------------------------------------------------------------------------------------------------
@drawn_literally
def plot_curves(
    loss_curves: Mapping[str, object],
    metric_curves: Mapping[str, object],
    finals: Mapping[str, object],
    loss_label: str,
    metric: str | None,
    title: str,
    provenance: str,
    path: str | os.PathLike[str],
    information: Mapping[str, Mapping[str, tuple[object, str]]] | None = None,
    saturation: float | None = None,
) -> None:
    """Training loss (left) and eval metric (right) against steps: mean line with a ±1 std band over seeds.

    ``information`` (group → term → (curve, legend text)) adds a last panel: each information term's bound as
    a share of its cap, in the group's colour and one line style per term, with a dotted line at the
    ``saturation`` share.
    """
    has_metric = metric is not None and any(curve is not None for curve in metric_curves.values())
    has_information = bool(information) and any(information.values())
    n_panels = 1 + has_metric + has_information
    figure = new_figure({1: 6, 2: 11, 3: 16}[n_panels], 4.4)
    panels = figure.subplots(1, n_panels, squeeze=False)[0]
    colours = dict(zip(loss_curves, PALETTE * 4, strict=False))
    for (label, curve), colour in zip(loss_curves.items(), PALETTE * 4, strict=False):
        _band(panels[0], curve, colour, f"{label} (n={curve.n})")
    panels[0].set_xlabel("training step")
    panels[0].set_ylabel(loss_label)
    panels[0].set_title("training loss", fontsize=10)
    panels[0].legend(fontsize=8)
    if has_metric:
        for (label, curve), colour in zip(metric_curves.items(), PALETTE * 4, strict=False):
            if curve is not None:
                _band(panels[1], curve, colour, label, marker="o")
            final = finals.get(label)
            if final is not None:
                panels[1].errorbar(
                    [final[0]],
                    [final[1]],
                    yerr=[final[2]],
                    fmt="s",
                    color=colour,
                    capsize=3,
                    markeredgecolor="black",
                )
        panels[1].set_xlabel("training step")
        panels[1].set_ylabel(metric)
        panels[1].set_title(f"eval {metric} (lines: periodic subset; squares: final eval)", fontsize=10)
        panels[1].legend(fontsize=8)
    if has_information:
        _plot_information(panels[-1], information, colours, saturation)
    figure.suptitle(title, fontsize=11)
    footer(figure, provenance)
    save_png(figure, path)


def _plot_information(
    axes,
    information: Mapping[str, Mapping[str, tuple[object, str]]],
    colours: Mapping[str, str],
    saturation: float | None,
) -> None:
    styles = ("-", "--", "-.")  # dotted is the saturation line
    terms = list(dict.fromkeys(term for per_term in information.values() for term in per_term))
    lowest = 0.0
    for label, per_term in information.items():
        for term, (curve, legend) in per_term.items():
            axes.plot(
                curve.x,
                curve.mean,
                color=colours.get(label, "black"),
                label=legend,
                linestyle=styles[terms.index(term) % len(styles)],
            )
            lowest = min(lowest, float(np.nanmin(curve.mean)))
    if saturation is not None:
        axes.axhline(saturation, color="grey", linestyle=":", linewidth=1.2)
        axes.text(
            0.01,
            saturation,
            f" saturated: {saturation:.0%} of cap",
            transform=axes.get_yaxis_transform(),
            va="bottom",
            fontsize=7,
            color="grey",
        )
    # A bound can start below 0; past one cap under 0 the axis is cut so the approach to the cap stays readable.
    axes.set_ylim(max(lowest, -1.0) - 0.05, 1.05)
    axes.set_xlabel("training step")
    axes.set_ylabel("InfoNCE bound / cap log(K+1)")
    axes.set_title("information terms: bound as a share of its cap", fontsize=10)
    axes.legend(fontsize=7)


def _band(axes, curve, colour: str, label: str, marker: str | None = None) -> None:
    axes.plot(curve.x, curve.mean, color=colour, label=label, marker=marker, markersize=3)
    if curve.n > 1 and np.isfinite(curve.std).all() and not math.isclose(float(np.abs(curve.std).sum()), 0.0):
        axes.fill_between(
            curve.x, curve.mean - curve.std, curve.mean + curve.std, color=colour, alpha=0.2, linewidth=0
        )
