"""End-to-end analyses: compute the numbers, store them (JSON/CSV/NPZ) and draw the figure next to them."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from infoprompt.analysis import curves as curve_lib
from infoprompt.analysis.cmi import EstimatorConfig, Inputs, estimate, summarise
from infoprompt.analysis.embeddings import ordinary_rows, principal_plane
from infoprompt.analysis.landscape import LandscapeEvaluator, auto_extent, grid_axis
from infoprompt.analysis.outputs import atomic_write_json, load_npz, output_path, write_csv, write_npz
from infoprompt.analysis.plotting import plot_cmi, plot_curves, plot_landscape
from infoprompt.analysis.roughness import roughness_index
from infoprompt.analysis.sources import DEFAULT_TEXTS, SourceSpec, StateCollector
from infoprompt.analysis.trajectory import TrajectoryConfig, record_trajectory
from infoprompt.backbones import Backbone, load_backbone
from infoprompt.errors import UserError
from infoprompt.methods import get_method
from infoprompt.model import CONFIG_NAME
from infoprompt.pipeline import RunSpec, build_classifier, read_split, run_training
from infoprompt.tasks import get_task, sample_few_shot
from infoprompt.training import TrainConfig

ESTIMATORS = ("presence", "swap")
ESTIMATOR_TITLES = {
    "presence": "negatives: no-prompt state of the same input (paper §3.2)",
    "swap": "negatives: same input under other inputs' prompts",
}


def _shots_text(shots: int | None) -> str:
    return "full" if shots is None else str(shots)


# -- CMI (Figure 1) ------------------------------------------------------------------------------------------
@dataclass
class CMIConfig:
    """``infoprompt analyze cmi``.

    Attributes:
        task / backbone / data_dir / source: what to analyse (as for ``infoprompt train``).
        out / name: the PNG, JSON and CSV are ``<out>/<name>.{png,json,csv}`` (default name
            ``cmi-<task>-<backbone>``).
        split: split the examples come from (default: the task's eval split, which no adapter trained on).
        n_examples: examples drawn with ``seed``; the first ``fit_fraction`` fit the critics, the rest are
            scored.
        fit_fraction: share of the examples that fit the critics.
        texts: handcrafted prompts (``None``: the paper's for the task, see ``DEFAULT_TEXTS``).
        random: include the random-embedding source.
        n_random_prompts: prompt vectors of the random source (``None``: the first adapter's n_p, else 4).
        adapters: trained adapters to compare (``SourceSpec(kind="adapter", ...)``).
        train_methods: methods to train first (with ``shots``, ``epochs``, ``n_prompts``, ``seed``) into
            ``runs_dir``; an existing run there is reused.
        shots / epochs / n_prompts: budget of those training runs.
        runs_dir: where trained adapters go (default ``runs/analysis-<task>-<backbone>``).
        estimators: ``presence`` (paper negatives) and/or ``swap`` (other prompts on the same input).
        swap_negatives: K of the ``swap`` estimator (one prompted pass per negative per example).
        estimator: critic budget of the ``presence`` estimator (``swap`` uses it with K = ``swap_negatives``).
        seed: seeds the example draw, the random prompts, the swap partners and the training runs.
        batch_size: batch size of the encoder passes.
        progress: progress bars.
    """

    task: str
    out: str
    backbone: str = "minilm"
    data_dir: str | None = None
    source: str = "files"
    name: str | None = None
    split: str | None = None
    n_examples: int = 512
    fit_fraction: float = 0.5
    texts: tuple[str, ...] | None = None
    random: bool = True
    n_random_prompts: int | None = None
    adapters: tuple[SourceSpec, ...] = ()
    train_methods: tuple[str, ...] = ()
    shots: int | None = 64
    epochs: int = 30
    n_prompts: int = 4
    runs_dir: str | None = None
    estimators: tuple[str, ...] = ("presence",)
    swap_negatives: int = 7
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)
    seed: int = 1
    batch_size: int = 32
    cache_dir: str | None = None
    progress: bool = True


def _partners(size: int, k: int, offset: int, generator: torch.Generator) -> torch.Tensor:
    """K distinct partners j ≠ i per example, drawn within the same split (indices shifted by ``offset``)."""
    if size <= k:
        raise UserError(f"the swap estimator needs more than K={k} examples per split, got {size}")
    rows = []
    for i in range(size):
        order = torch.randperm(size - 1, generator=generator)[:k]
        rows.append(order + (order >= i).long())  # skip i itself
    return torch.stack(rows) + offset


def train_adapters(config: CMIConfig, backbone: Backbone) -> list[SourceSpec]:
    runs_dir = Path(config.runs_dir or f"runs/analysis-{config.task}-{Path(config.backbone).name}")
    specs = []
    for method in config.train_methods:
        out = runs_dir / f"{method}-shots{_shots_text(config.shots)}-np{config.n_prompts}-s{config.seed}"
        if not (out / "metrics.json").is_file():
            spec = RunSpec(
                task=config.task,
                method=method,
                shots=config.shots,
                n_prompts=config.n_prompts,
                seed=config.seed,
                backbone=config.backbone,
                data_dir=config.data_dir,
                source=config.source,
                classifier={"max_length": min(128, backbone.max_positions)},
                training=TrainConfig(epochs=config.epochs, seed=config.seed, progress=config.progress),
                cache_dir=config.cache_dir,
            )
            run_training(spec, out, overwrite=True, backbone=backbone)
        specs.append(SourceSpec(kind="adapter", label=method, adapter=out))
    return specs


def run_cmi(config: CMIConfig, backbone: Backbone | None = None) -> dict[str, object]:
    """Estimate the per-example CMI of every source, write ``<name>.png/.json/.csv``, return the record."""
    unknown = sorted(set(config.estimators) - set(ESTIMATORS))
    if unknown or not config.estimators:
        raise UserError(f"unknown estimator(s) {unknown}; choose from {', '.join(ESTIMATORS)}")
    if not 0.0 < config.fit_fraction < 1.0:
        raise UserError(f"fit_fraction must be between 0 and 1, got {config.fit_fraction}")
    task = get_task(config.task)
    backbone = backbone or load_backbone(config.backbone, cache_dir=config.cache_dir)
    split = config.split or task.eval_split
    pool = read_split(task, split, config.data_dir, config.source)
    generator = torch.Generator().manual_seed(config.seed)
    order = torch.randperm(len(pool), generator=generator)[: config.n_examples].tolist()
    examples = [pool[i] for i in order]
    n_fit = int(round(len(examples) * config.fit_fraction))
    n_score = len(examples) - n_fit
    if n_fit < 2 or n_score < 1:
        raise UserError(
            f"{len(examples)} examples leave {n_fit} to fit and {n_score} to score; raise n_examples"
        )

    adapters = list(config.adapters) + train_adapters(config, backbone)
    sources: list[SourceSpec] = []
    if config.random:
        n_random = config.n_random_prompts
        if n_random is None:
            n_random = _adapter_prompts(adapters) or 4
        sources.append(SourceSpec(kind="random", label=f"random (n_p={n_random})", n_prompts=n_random))
    texts = config.texts if config.texts is not None else DEFAULT_TEXTS.get(task.name, ())
    sources += [SourceSpec(kind="text", label=f'"{text}"', text=text) for text in texts]
    sources += adapters
    if not sources:
        raise UserError(
            "no prompt source to analyse: give --adapter, --train, --text or keep the random source"
        )

    partners = None
    if "swap" in config.estimators:
        partners = torch.cat(
            [
                _partners(n_fit, config.swap_negatives, 0, generator),
                _partners(n_score, config.swap_negatives, n_fit, generator),
            ]
        )
    collector = StateCollector(backbone, task, examples, config.batch_size, config.seed, config.progress)
    values: dict[str, dict[str, np.ndarray]] = {name: {} for name in config.estimators}
    summaries: dict[str, dict[str, dict[str, float]]] = {name: {} for name in config.estimators}
    fit_end: dict[str, dict[str, float]] = {name: {} for name in config.estimators}
    described = []
    for spec in sources:
        states = collector.collect(spec, partners)
        label = states.spec.label
        if any(label == d["label"] for d in described):
            raise UserError(
                f"two prompt sources are both labelled {label!r}; give adapters distinct LABEL=DIR names"
            )
        described.append(
            {
                "label": label,
                "kind": spec.kind,
                "n_prompts": states.n_prompts,
                "template": states.template,
                "static": states.static,
                **states.details,
            }
        )
        for name in config.estimators:
            negatives = states.z_plain if name == "presence" else states.z_swapped
            estimator = config.estimator
            if name == "swap":
                estimator = dataclasses.replace(estimator, n_negatives=config.swap_negatives)
            estimator = dataclasses.replace(estimator, progress=config.progress)
            whole = Inputs(states.prompt_mean, states.z, negatives)
            fit_index, score_index = torch.arange(n_fit), torch.arange(n_fit, len(examples))
            result = estimate(
                whole.subset(fit_index), whole.subset(score_index), estimator, desc=f"critic {label}"
            )
            values[name][label] = result.values
            summaries[name][label] = summarise(result.values, seed=config.seed).as_dict()
            tail = max(1, len(result.fit_curve) // 10)
            fit_end[name][label] = float(result.fit_curve[-tail:].mean())

    name = config.name or f"cmi-{task.name}-{Path(config.backbone).name}"
    k_of = {"presence": config.estimator.n_negatives, "swap": config.swap_negatives}
    record = {
        "analysis": "cmi",
        "task": task.name,
        "backbone": config.backbone,
        "split": split,
        "n_examples": len(examples),
        "n_fit": n_fit,
        "n_score": n_score,
        "seed": config.seed,
        "estimator": {**dataclasses.asdict(config.estimator), "swap_negatives": config.swap_negatives},
        "bound_cap": {est: math.log(k_of[est] + 1) for est in config.estimators},
        "interval": "95% percentile bootstrap of the mean over scored examples (2000 resamples, run seed)",
        "sources": described,
        "summaries": summaries,
        "fit_bound_last_10pct": fit_end,
        "examples_scored": [e.source for e in examples[n_fit:]],
    }
    rows = [
        (est, label, examples[n_fit + i].source, float(v))
        for est in config.estimators
        for label, vals in values[est].items()
        for i, v in enumerate(vals)
    ]
    write_csv(output_path(config.out, name, ".csv"), CMI_CSV_HEADER, rows)
    atomic_write_json(output_path(config.out, name, ".json"), record)
    draw_cmi(record, values, output_path(config.out, name, ".png"))
    return record


CMI_CSV_HEADER = ("estimator", "source", "example", "cmi_lower_bound")


def draw_cmi(record: dict[str, object], values: dict[str, dict[str, np.ndarray]], path: Path) -> None:
    """The CMI figure from its saved numbers (the JSON record and the per-example values of the CSV)."""
    estimators = list(record["summaries"])
    est = record["estimator"]
    k_of = {"presence": est["n_negatives"], "swap": est["swap_negatives"]}
    provenance = (
        f"backbone {record['backbone']} · task {record['task']} ({record['split']}) · "
        f"seed {record['seed']} · "
        f"{record['n_fit']} fit / {record['n_score']} scored examples · critic {est['steps']} steps, "
        f"fresh per source · marker: mean [95% bootstrap CI], ▲ median"
    )
    titles = [f"{ESTIMATOR_TITLES.get(e, e)}, K={k_of.get(e, '?')}" for e in estimators]
    plot_cmi(
        values,
        record["summaries"],
        record["bound_cap"],
        titles,
        f"CMI I(P; Z | X) per example, InfoNCE lower bound on held-out examples — {record['task']}",
        provenance,
        path,
    )


def read_cmi_values(csv_path: Path) -> dict[str, dict[str, np.ndarray]]:
    values: dict[str, dict[str, list[float]]] = {}
    with csv_path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != CMI_CSV_HEADER:
            raise UserError(f"{csv_path}: expected the columns {', '.join(CMI_CSV_HEADER)}")
        for row in reader:
            values.setdefault(row["estimator"], {}).setdefault(row["source"], []).append(
                float(row["cmi_lower_bound"])
            )
    return {e: {s: np.asarray(v) for s, v in per.items()} for e, per in values.items()}


def _adapter_prompts(adapters: list[SourceSpec]) -> int | None:
    """n_p of the first adapter, read from its config (the adapters are loaded later, once)."""
    for spec in adapters:
        path = Path(spec.adapter or "") / CONFIG_NAME
        if path.is_file():
            try:
                return int(json.loads(path.read_text(encoding="utf-8")).get("n_prompts") or 0) or None
            except (ValueError, json.JSONDecodeError):
                return None
    return None


# -- Landscape (Figure 2) ------------------------------------------------------------------------------------
@dataclass
class LandscapeConfig:
    """``infoprompt analyze landscape``.

    Attributes:
        task / backbone / data_dir / source / out / name: as for :class:`CMIConfig` (default name
            ``landscape-<task>-<backbone>``).
        method: method of the trajectory runs (one prompt token): ``infoprompt`` (generated), ``warp``
            (static).
        gammas: head-loss weights of the runs whose trajectories are drawn (the paper: 0.05 and 0).
        beta: representation-loss weight of every run (``None``: the method's; the representation surface
            needs a run with β > 0).
        reference: index into ``gammas`` of the run whose final head and critics define both surfaces.
        shots: training examples drawn with ``seed``; the probe examples are drawn from them.
        steps: recorded optimiser steps per run (the paper: 500).
        lr: learning rate (``None``: the method's).
        n_probe: examples the surfaces average over (the paper: 20).
        grid: points per axis.
        extent: half-width of the grid in embedding units (``None``: cover the trajectories and ±2 token
            stds).
        roughness_directions: random lines per surface for the roughness index.
        seed: seeds the draw of shots and probe, the initialisation, training and the surfaces' noise.
    """

    task: str
    out: str
    backbone: str = "minilm"
    data_dir: str | None = None
    source: str = "files"
    name: str | None = None
    method: str = "infoprompt"
    gammas: tuple[float, ...] = (0.05, 0.0)
    beta: float | None = None
    reference: int = 0
    shots: int | None = 64
    steps: int = 500
    lr: float | None = None
    n_probe: int = 20
    grid: int = 25
    extent: float | None = None
    roughness_directions: int = 64
    seed: int = 1
    cache_dir: str | None = None
    progress: bool = True


def run_landscape(config: LandscapeConfig, backbone: Backbone | None = None) -> dict[str, object]:
    """Record the trajectories, evaluate both surfaces on the grid, then write ``<name>.png/.json/.npz``."""
    if not config.gammas:
        raise UserError("give at least one gamma for the trajectories")
    if not 0 <= config.reference < len(config.gammas):
        raise UserError(f"reference must index the {len(config.gammas)} gamma(s), got {config.reference}")
    task = get_task(config.task)
    backbone = backbone or load_backbone(config.backbone, cache_dir=config.cache_dir)
    train_split = read_split(task, task.train_split, config.data_dir, config.source)
    shots = sample_few_shot(train_split, config.shots, config.seed)
    if config.n_probe < 1 or config.n_probe > len(shots):
        raise UserError(
            f"n_probe must be between 1 and the {len(shots)} training examples, got {config.n_probe}"
        )
    generator = torch.Generator().manual_seed(config.seed)
    probe = [shots[i] for i in torch.randperm(len(shots), generator=generator)[: config.n_probe].tolist()]

    runs, models = [], []
    for gamma in config.gammas:
        overrides: dict[str, object] = {"gamma": gamma, "max_length": min(128, backbone.max_positions)}
        if config.beta is not None:
            overrides["beta"] = config.beta
        spec = RunSpec(
            task=task.name,
            method=config.method,
            shots=config.shots,
            n_prompts=1,
            seed=config.seed,
            backbone=config.backbone,
            classifier=overrides,
        )
        model = build_classifier(spec, backbone)
        trajectory = record_trajectory(
            model,
            shots,
            probe,
            TrajectoryConfig(steps=config.steps, lr=config.lr, seed=config.seed, progress=config.progress),
            label=f"γ={gamma:g}",
        )
        runs.append((gamma, trajectory))
        models.append(model)
    reference = models[config.reference]

    plane = principal_plane(ordinary_rows(backbone))
    coordinates = [plane.project(torch.from_numpy(t.prompts)).numpy() for _, t in runs]
    extent = config.extent or auto_extent(np.concatenate(coordinates), float(plane.variance[0].sqrt()))
    xs = grid_axis(extent, config.grid)
    ys = grid_axis(extent, config.grid)
    evaluator = LandscapeEvaluator(reference, probe, noise_seed=config.seed)
    surfaces = evaluator.surfaces(
        plane.points(torch.from_numpy(xs), torch.from_numpy(ys)), xs, ys, config.progress
    )
    roughness = {
        "task": roughness_index(surfaces.task, xs, ys, config.roughness_directions, seed=config.seed)
    }
    if surfaces.rep is not None:
        roughness["rep"] = roughness_index(
            surfaces.rep, xs, ys, config.roughness_directions, seed=config.seed
        )

    # Reference losses at the real (unprojected) first and last prompt of each run: the descent along it.
    descent = {}
    for gamma, trajectory in runs:
        ends = torch.from_numpy(trajectory.prompts[[0, -1]])
        task_loss, rep_loss = evaluator.losses(ends)
        descent[f"{gamma:g}"] = {
            "task_start": float(task_loss[0]),
            "task_end": float(task_loss[1]),
            "rep_start": None if rep_loss is None else float(rep_loss[0]),
            "rep_end": None if rep_loss is None else float(rep_loss[1]),
            "train_pred_first10": float(trajectory.losses["pred"][:10].mean()),
            "train_pred_last10": float(trajectory.losses["pred"][-10:].mean()),
            "distance_travelled": float(np.linalg.norm(np.diff(trajectory.prompts, axis=0), axis=1).sum()),
            "displacement": float(np.linalg.norm(trajectory.prompts[-1] - trajectory.prompts[0])),
            "in_plane_fraction_of_displacement": _in_plane_fraction(trajectory.prompts, plane.axes.numpy()),
        }

    name = config.name or f"landscape-{task.name}-{Path(config.backbone).name}"
    reference_gamma = config.gammas[config.reference]
    arrays: dict[str, np.ndarray] = {
        "xs": xs,
        "ys": ys,
        "task_loss": surfaces.task,
        "plane_origin": plane.origin.numpy(),
        "plane_axes": plane.axes.numpy(),
        "gammas": np.asarray(config.gammas, dtype=float),
    }
    if surfaces.rep is not None:
        arrays["rep_loss"] = surfaces.rep
    for index, ((_gamma, trajectory), coords) in enumerate(zip(runs, coordinates, strict=True)):
        arrays[f"trajectory{index}_xy"] = coords
        arrays[f"trajectory{index}_prompts"] = trajectory.prompts
        for loss_name, series in trajectory.losses.items():
            arrays[f"trajectory{index}_loss_{loss_name}"] = series
    for surface_name, result in roughness.items():
        arrays[f"roughness_{surface_name}_values"] = result.values
        arrays[f"roughness_{surface_name}_angles"] = result.angles
    write_npz(output_path(config.out, name, ".npz"), arrays)
    record = {
        "analysis": "landscape",
        "task": task.name,
        "backbone": config.backbone,
        "method": config.method,
        "gammas": list(config.gammas),
        "beta": float(reference.config.beta),
        "seed": config.seed,
        "shots": _shots_text(config.shots),
        "steps": config.steps,
        "n_probe": config.n_probe,
        "grid": config.grid,
        "extent": extent,
        "lr": config.lr if config.lr is not None else reference.preset.lr,
        "reference": (
            f"final head and representation critics of the γ={reference_gamma:g} run "
            f"after {config.steps} steps"
        ),
        "plane": {
            "origin": "mean of the ordinary token embeddings",
            "explained_variance": plane.explained.tolist(),
            "std_along_axes": plane.variance.sqrt().tolist(),
        },
        "surfaces": {
            "task": _range(surfaces.task),
            **({"rep": _range(surfaces.rep)} if surfaces.rep is not None else {}),
        },
        "roughness": {k: v.as_dict() for k, v in roughness.items()},
        "roughness_definition": "mean/variance over random lines through the grid centre of TV / range",
        "trajectories": descent,
        "probe_examples": [e.source for e in probe],
        "reference_index": config.reference,
        "prompt_kind": (
            "mean generated prompt over the probe"
            if reference.preset.prompt_source == "generated"
            else "static prompt"
        ),
    }
    atomic_write_json(output_path(config.out, name, ".json"), record)
    draw_landscape(record, arrays, output_path(config.out, name, ".png"))
    return record


def draw_landscape(record: dict[str, object], arrays: dict[str, np.ndarray], path: Path) -> None:
    """The landscape figure from its saved numbers (the JSON record and the NPZ arrays)."""
    roughness = record["roughness"]

    def heading(title: str, surface: str) -> str:
        r = roughness[surface]
        return (
            f"{title}\nroughness index {r['mean']:.2f} (std {math.sqrt(r['variance']):.2f}, "
            f"{r['n_directions']} lines)"
        )

    panels = [(heading("(a) task loss: cross-entropy", "task"), arrays["task_loss"])]
    if "rep_loss" in arrays:
        panels.append((heading("(b) representation loss: InfoNCE nce_rep", "rep"), arrays["rep_loss"]))
    generated = get_method(record["method"]).prompt_source == "generated"
    kind = record.get("prompt_kind") or (
        "mean generated prompt over the probe" if generated else "static prompt"
    )
    trajectories = [
        (f"γ={gamma:g} ({kind})", arrays[f"trajectory{i}_xy"]) for i, gamma in enumerate(record["gammas"])
    ]
    reference_gamma = record["gammas"][record.get("reference_index", 0)]
    provenance = (
        f"backbone {record['backbone']} · task {record['task']} · {record['method']} n_p=1, "
        f"β={record['beta']:g} · seed {record['seed']} · {record['shots']} shots · {record['steps']} steps · "
        f"surfaces: mean of {record['n_probe']} examples, {record['grid']}×{record['grid']} grid, head + "
        f"critics of the γ={reference_gamma:g} run · ★ start, ● end"
    )
    plot_landscape(
        arrays["xs"],
        arrays["ys"],
        panels,
        trajectories,
        f"Loss landscapes over one prompt token (top-2 PCs of the token embeddings) — {record['task']}",
        provenance,
        path,
    )


def redraw(json_path: str | Path) -> Path:
    """Redraw a CMI or landscape figure from the numbers saved next to it; returns the PNG path."""
    json_path = Path(json_path)
    if not json_path.is_file():
        raise UserError(f"{json_path} does not exist")
    try:
        record = json.loads(json_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{json_path}: not valid JSON ({error})") from None
    kind = record.get("analysis") if isinstance(record, dict) else None
    png = json_path.with_suffix(".png")
    if kind == "cmi":
        draw_cmi(record, read_cmi_values(_sibling(json_path, ".csv")), png)
    elif kind == "landscape":
        draw_landscape(record, load_npz(_sibling(json_path, ".npz")), png)
    else:
        raise UserError(
            f"{json_path}: not the record of a cmi or landscape analysis (curves: rerun analyze curves)"
        )
    return png


def _sibling(path: Path, suffix: str) -> Path:
    sibling = path.with_suffix(suffix)
    if not sibling.is_file():
        raise UserError(f"{sibling} (the numbers behind {path.with_suffix('.png').name}) is missing")
    return sibling


def _range(surface: np.ndarray) -> dict[str, float]:
    return {"min": float(surface.min()), "max": float(surface.max()), "mean": float(surface.mean())}


def _in_plane_fraction(prompts: np.ndarray, axes: np.ndarray) -> float:
    """Share of the squared start-to-end displacement that lies in the plotted plane."""
    move = prompts[-1] - prompts[0]
    total = float(move @ move)
    return float(((axes @ move) ** 2).sum() / total) if total > 0 else 0.0


# -- Curves (Figure 3) ---------------------------------------------------------------------------------------
@dataclass
class CurvesConfig:
    """``infoprompt analyze curves``.

    Attributes:
        runs: run directories or folders holding them (a sweep's results directory).
        out / name: ``<out>/<name>.{png,json,csv}`` (name defaults to ``curves-<task>-<backbone>``).
        loss: which logged term is the training loss (``pred``: the task cross-entropy, comparable across
            methods; ``total``: the optimised objective).
        window: steps of the trailing mean that smooths the losses (and defines steps-to-95%).
        metric: eval metric to plot (default: the runs' primary metric).
    """

    runs: tuple[str, ...]
    out: str
    name: str | None = None
    loss: str = "pred"
    window: int = 10
    metric: str | None = None


def run_curves(config: CurvesConfig) -> dict[str, object]:
    if config.window < 1:
        raise UserError(f"window must be at least 1, got {config.window}")
    runs = curve_lib.discover_runs(config.runs)
    curve_lib.check_comparable(runs)
    groups = curve_lib.group_runs(runs)
    metric = config.metric or next((r.metric for r in runs if r.metric), None)
    losses = {
        label: curve_lib.loss_curve(group, config.loss, config.window) for label, group in groups.items()
    }
    metrics = (
        {label: curve_lib.metric_curve(group, metric) for label, group in groups.items()} if metric else {}
    )
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
    task = next((r.task for r in runs if r.task), None)
    backbone = next((r.backbone for r in runs if r.backbone), None)
    name = config.name or (
        "curves" if task is None or backbone is None else f"curves-{task}-{Path(backbone).name}"
    )
    task = task or "unknown task"
    backbone = backbone or "unknown backbone"
    record = {
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
        "groups": summaries,
    }
    atomic_write_json(output_path(config.out, name, ".json"), record)
    rows = []
    for label, curve in losses.items():
        rows += [
            (label, "loss_" + config.loss, int(x), float(m), float(s), curve.n)
            for x, m, s in zip(curve.x, curve.mean, curve.std, strict=True)
        ]
    for label, curve in metrics.items():
        if curve is not None:
            rows += [
                (label, metric, int(x), float(m), float(s), curve.n)
                for x, m, s in zip(curve.x, curve.mean, curve.std, strict=True)
            ]
    write_csv(
        output_path(config.out, name, ".csv"), ("group", "series", "step", "mean", "std", "n_runs"), rows
    )
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
    plot_curves(
        losses,
        metrics,
        finals,
        f"training loss ({config.loss}, trailing mean)",
        metric,
        f"Learning curves — {task}",
        provenance,
        output_path(config.out, name, ".png"),
    )
    return record


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"
