"""Figure 3: learning curves and information-term saturation over run logs, their numbers and the figure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from infoprompt.analysis import curves as curve_lib
from infoprompt.analysis.outputs import atomic_write_json, output_path, write_csv
from infoprompt.analysis.plotting import plot_curves
from infoprompt.errors import UserError


@dataclass
class CurvesConfig:
    """``infoprompt analyze curves``.

    Attributes:
        runs: run directories or folders holding them (a sweep's results directory).
        out / name: ``<out>/<name>.{png,json,csv}`` (name defaults to ``curves-<task>-<backbone>``).
        loss: which logged term is the training loss (``pred``: the task cross-entropy, comparable across
            methods; ``total``: the optimised objective).
        window: steps of the trailing mean that smooths the losses and the information shares (and defines
            steps-to-95% and the final share).
        metric: eval metric to plot (default: the runs' primary metric).
    """

    runs: tuple[str, ...]
    out: str
    name: str | None = None
    loss: str = "pred"
    window: int = 10
    metric: str | None = None


def run_curves(config: CurvesConfig) -> dict[str, object]:
    """Read the runs' logs, write ``<name>.png/.json/.csv`` and return the record."""
    runs, untrained = _trained_runs(config)
    groups = curve_lib.group_runs(runs)
    metric = config.metric or next((r.metric for r in runs if r.metric), None)
    losses = {
        label: curve_lib.loss_curve(group, config.loss, config.window) for label, group in groups.items()
    }
    metrics = (
        {label: curve_lib.metric_curve(group, metric) for label, group in groups.items()} if metric else {}
    )
    shares = {
        label: {
            term: curve_lib.mi_share_curve(group, term, config.window) for term in curve_lib.mi_terms(group)
        }
        for label, group in groups.items()
    }
    summaries, finals = _summaries(config, groups, metric)
    name, task, backbone = _identity(config, runs)
    record = _curves_record(config, task, backbone, metric, summaries, untrained)
    atomic_write_json(output_path(config.out, name, ".json"), record)
    write_csv(
        output_path(config.out, name, ".csv"),
        ("group", "series", "step", "mean", "std", "n_runs"),
        _csv_rows(config.loss, metric, losses, metrics, shares),
    )
    plot_curves(
        losses,
        metrics,
        finals,
        f"training loss ({config.loss}, trailing mean)",
        metric,
        f"Learning curves — {task}",
        _provenance(config, runs, untrained, summaries, any(shares.values()), task, backbone),
        output_path(config.out, name, ".png"),
        information={
            label: {
                term: (curve, _share_legend(label, term, summaries[label]["information"][term]))
                for term, curve in per_term.items()
            }
            for label, per_term in shares.items()
        },
        saturation=curve_lib.SATURATION,
    )
    return record


def _curves_record(
    config: CurvesConfig,
    task: str,
    backbone: str,
    metric: str | None,
    summaries: dict[str, dict[str, object]],
    untrained: list[curve_lib.RunLog],
) -> dict[str, object]:
    """The JSON record: settings, definitions of the numbers, and the per-group summaries."""
    return {
        "analysis": "curves",
        "task": task,
        "backbone": backbone,
        "loss": config.loss,
        "window": config.window,
        "metric": metric,
        "steps_to_95_definition": (
            "first step s where the trailing mean (window) of the training loss is at most "
            "L_f + 0.05 (L_0 - L_f); L_0 / L_f = mean of the first / last window raw losses"
        ),
        "information_definition": (
            "per information term, bound mi_<term> / cap mi_<term>_cap of the 'train' phase step records; "
            f"saturated_at_step = first step whose raw share is at least {curve_lib.SATURATION:g}; "
            "final_share = mean of the last window raw shares; runs whose log has no bounds are left out"
        ),
        "groups": summaries,
        # Left out of every curve and number above: held-out selection chose 0 epochs, so nothing trained.
        "runs_without_train_steps": [str(r.path) for r in untrained],
    }


def _trained_runs(config: CurvesConfig) -> tuple[list[curve_lib.RunLog], list[curve_lib.RunLog]]:
    """The comparable runs found under ``config.runs``: those with training steps, and those without."""
    if config.window < 1:
        raise UserError(f"window must be at least 1, got {config.window}")
    runs = curve_lib.discover_runs(config.runs)
    curve_lib.check_comparable(runs)
    untrained = [r for r in runs if not r.steps.size]
    runs = [r for r in runs if r.steps.size]
    if not runs:
        raise UserError("no run has a step of a final training pass (every selection chose 0 epochs)")
    return runs, untrained


def _summaries(
    config: CurvesConfig, groups: dict[str, list[curve_lib.RunLog]], metric: str | None
) -> tuple[dict[str, dict[str, object]], dict[str, tuple[float, float, float]]]:
    """Per group, its summary and, when its runs have a final evaluation, (mean final step, mean, std) of it."""
    finals = {}
    summaries = {}
    for label, group in groups.items():
        summaries[label] = curve_lib.group_summary(group, config.loss, config.window, metric)
        values = summaries[label]["final_metric_values"]
        steps = [r.final_step for r in group if r.final_step is not None]
        if values and steps:
            finals[label] = (
                float(np.mean(steps)),
                float(np.mean(values)),
                float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
            )
    return summaries, finals


def _identity(config: CurvesConfig, runs: list[curve_lib.RunLog]) -> tuple[str, str, str]:
    """The output stem, the task and the backbone of the runs (the first run that names them)."""
    task = next((r.task for r in runs if r.task), None)
    backbone = next((r.backbone for r in runs if r.backbone), None)
    name = config.name or (
        "curves" if task is None or backbone is None else f"curves-{task}-{Path(backbone).name}"
    )
    return name, task or "unknown task", backbone or "unknown backbone"


def _csv_rows(
    loss: str,
    metric: str | None,
    losses: dict[str, curve_lib.Curve],
    metrics: dict[str, curve_lib.Curve | None],
    shares: dict[str, dict[str, curve_lib.Curve]],
) -> list[tuple[object, ...]]:
    """Every curve's points, one row per (group, series, step)."""
    rows = []
    for label, curve in losses.items():
        rows += _rows(label, "loss_" + loss, curve)
    for label, curve in metrics.items():
        if curve is not None:
            rows += _rows(label, metric, curve)
    for label, per_term in shares.items():
        for term, curve in per_term.items():
            rows += _rows(label, f"mi_share_{term}", curve)
    return rows


def _provenance(
    config: CurvesConfig,
    runs: list[curve_lib.RunLog],
    untrained: list[curve_lib.RunLog],
    summaries: dict[str, dict[str, object]],
    has_information: bool,
    task: str,
    backbone: str,
) -> str:
    """The figure's provenance line: what was averaged, over which runs, and how it was smoothed."""
    seeds = sorted({r.seed for r in runs if r.seed is not None})
    shots = sorted({str(r.shots) for r in runs if r.shots is not None})
    eval_n = sorted({r.eval_n for r in runs if r.eval_n is not None})
    final_n = sorted({r.final_n for r in runs if r.final_n is not None})
    sizes = f"eval n={'/'.join(map(str, eval_n)) or '—'} periodic, {'/'.join(map(str, final_n)) or '—'} final"
    steps95 = ", ".join(f"{label}: {_fmt(s['steps_to_95_mean'])}" for label, s in summaries.items())
    provenance = (
        f"backbone {backbone} · task {task} · seeds {', '.join(map(str, seeds)) or 'unknown'} · shots "
        f"{', '.join(shots) or 'unknown'} · {len(runs)} runs · {sizes} · "
        f"loss smoothed over {config.window} steps · "
        f"band ±1 std over seeds · steps to 95%: {steps95}"
    )
    if untrained:
        provenance += f" · {len(untrained)} run(s) left out: selection chose 0 training epochs"
    if has_information:
        provenance += (
            f" · information terms: 'train' phase steps, share smoothed over {config.window} steps, "
            f"saturation step = first raw share ≥ {curve_lib.SATURATION:.0%}"
        )
    return provenance


def _rows(label: str, series: str, curve: curve_lib.Curve) -> list[tuple[object, ...]]:
    return [
        (label, series, int(x), float(m), float(s), curve.n)
        for x, m, s in zip(curve.x, curve.mean, curve.std, strict=True)
    ]


def _share_legend(label: str, term: str, summary: dict[str, object]) -> str:
    return (
        f"{label} · {term} (n={summary['n_runs']}): saturated at step "
        f"{_fmt(summary['saturated_at_step_mean'])} ({summary['saturated_runs']}/{summary['n_runs']} runs), "
        f"final {summary['final_share_mean']:.2f}"
    )


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"
