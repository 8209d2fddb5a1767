"""Figure 2: record prompt trajectories, evaluate the loss surfaces around them, store and draw them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from infoprompt.analysis.embeddings import Plane, ordinary_rows, principal_plane
from infoprompt.analysis.landscape import LandscapeEvaluator, Surfaces, auto_extent, grid_axis
from infoprompt.analysis.outputs import atomic_write_json, output_path, write_npz
from infoprompt.analysis.plotting import plot_landscape
from infoprompt.analysis.roughness import Roughness, roughness_index
from infoprompt.analysis.target import AnalysisTarget
from infoprompt.analysis.trajectory import Trajectory, TrajectoryConfig, record_trajectory
from infoprompt.backbones import Backbone, load_backbone
from infoprompt.errors import UserError
from infoprompt.experiments.grid import shots_label
from infoprompt.kinds.registry import get_method
from infoprompt.pipeline import RunSpec, build_classifier, read_split
from infoprompt.tasks import Example, get_task, sample_few_shot


@dataclass
class LandscapeConfig(AnalysisTarget):
    """``infoprompt analyze landscape``: the :class:`AnalysisTarget` fields (outputs
    ``<out>/<name>.{png,json,npz}``, default name ``landscape-<task>-<backbone>``) and these.

    Attributes:
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
    probe = _draw_probe(shots, config)

    runs, models = [], []
    for gamma in config.gammas:
        model = build_classifier(_trajectory_spec(config, task.name, gamma, backbone), backbone)
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
    landscape = _Landscape(
        plane=plane,
        extent=extent,
        xs=xs,
        ys=ys,
        surfaces=surfaces,
        roughness=_roughness(surfaces, config),
        coordinates=coordinates,
        descent=_descent(runs, evaluator, plane),
    )

    name = config.stem("landscape", task.name)
    arrays = _landscape_arrays(config, landscape, runs)
    write_npz(output_path(config.out, name, ".npz"), arrays)
    record = _landscape_record(
        config,
        task.name,
        landscape,
        probe,
        beta=float(reference.options.beta),
        lr=config.lr if config.lr is not None else reference.preset.lr,
        generated=reference.options.prompt_source == "generated",
    )
    atomic_write_json(output_path(config.out, name, ".json"), record)
    draw_landscape(record, arrays, output_path(config.out, name, ".png"))
    return record


@dataclass
class _Landscape:
    """What the figure shows: the plane, the grid, both surfaces, their roughness and each run's path."""

    plane: Plane
    extent: float
    xs: np.ndarray
    ys: np.ndarray
    surfaces: Surfaces
    roughness: dict[str, Roughness]
    coordinates: list[np.ndarray]  # per run, its prompts projected on the plane
    descent: dict[str, dict[str, float | None]]  # per gamma, see _descent


def _draw_probe(shots: list[Example], config: LandscapeConfig) -> list[Example]:
    """The ``n_probe`` training examples the surfaces average over, drawn with the run seed."""
    if config.n_probe < 1 or config.n_probe > len(shots):
        raise UserError(
            f"n_probe must be between 1 and the {len(shots)} training examples, got {config.n_probe}"
        )
    generator = torch.Generator().manual_seed(config.seed)
    return [shots[i] for i in torch.randperm(len(shots), generator=generator)[: config.n_probe].tolist()]


def _trajectory_spec(config: LandscapeConfig, task_name: str, gamma: float, backbone: Backbone) -> RunSpec:
    """The one-token run of ``config.method`` whose trajectory is recorded with head-loss weight ``gamma``."""
    overrides: dict[str, object] = {"gamma": gamma, "max_length": min(128, backbone.max_positions)}
    if config.beta is not None:
        overrides["beta"] = config.beta
    return RunSpec(
        task=task_name,
        method=config.method,
        shots=config.shots,
        n_prompts=1,
        seed=config.seed,
        backbone=config.backbone,
        classifier=overrides,
    )


def _roughness(surfaces: Surfaces, config: LandscapeConfig) -> dict[str, Roughness]:
    """The roughness index of each surface there is."""
    xs, ys = surfaces.xs, surfaces.ys
    roughness = {
        "task": roughness_index(surfaces.task, xs, ys, config.roughness_directions, seed=config.seed)
    }
    if surfaces.rep is not None:
        roughness["rep"] = roughness_index(
            surfaces.rep, xs, ys, config.roughness_directions, seed=config.seed
        )
    return roughness


def _descent(
    runs: list[tuple[float, Trajectory]], evaluator: LandscapeEvaluator, plane: Plane
) -> dict[str, dict[str, float | None]]:
    """Reference losses at the real (unprojected) first and last prompt of each run: the descent along it."""
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
    return descent


def _landscape_arrays(
    config: LandscapeConfig, landscape: _Landscape, runs: list[tuple[float, Trajectory]]
) -> dict[str, np.ndarray]:
    """The NPZ arrays: grid, surfaces, plane, every run's path and losses, the roughness lines."""
    surfaces, plane = landscape.surfaces, landscape.plane
    arrays: dict[str, np.ndarray] = {
        "xs": landscape.xs,
        "ys": landscape.ys,
        "task_loss": surfaces.task,
        "plane_origin": plane.origin.numpy(),
        "plane_axes": plane.axes.numpy(),
        "gammas": np.asarray(config.gammas, dtype=float),
    }
    if surfaces.rep is not None:
        arrays["rep_loss"] = surfaces.rep
    for index, ((_gamma, trajectory), coords) in enumerate(zip(runs, landscape.coordinates, strict=True)):
        arrays[f"trajectory{index}_xy"] = coords
        arrays[f"trajectory{index}_prompts"] = trajectory.prompts
        for loss_name, series in trajectory.losses.items():
            arrays[f"trajectory{index}_loss_{loss_name}"] = series
    for surface_name, result in landscape.roughness.items():
        arrays[f"roughness_{surface_name}_values"] = result.values
        arrays[f"roughness_{surface_name}_angles"] = result.angles
    return arrays


def _landscape_record(
    config: LandscapeConfig,
    task_name: str,
    landscape: _Landscape,
    probe: list[Example],
    *,
    beta: float,
    lr: float,
    generated: bool,
) -> dict[str, object]:
    """The JSON record; ``beta``, ``lr`` and ``generated`` (its prompt source) are the reference model's."""
    surfaces, plane = landscape.surfaces, landscape.plane
    reference_gamma = config.gammas[config.reference]
    return {
        "analysis": "landscape",
        "task": task_name,
        "backbone": config.backbone,
        "method": config.method,
        "gammas": list(config.gammas),
        "beta": beta,
        "seed": config.seed,
        "shots": shots_label(config.shots),
        "steps": config.steps,
        "n_probe": config.n_probe,
        "grid": config.grid,
        "extent": landscape.extent,
        "lr": lr,
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
        "roughness": {k: v.as_dict() for k, v in landscape.roughness.items()},
        "roughness_definition": "mean/variance over random lines through the grid centre of TV / range",
        "trajectories": landscape.descent,
        "probe_examples": [e.source for e in probe],
        "reference_index": config.reference,
        "prompt_kind": "mean generated prompt over the probe" if generated else "static prompt",
    }


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
    generated = get_method(record["method"]).options.prompt_source == "generated"
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


def _range(surface: np.ndarray) -> dict[str, float]:
    return {"min": float(surface.min()), "max": float(surface.max()), "mean": float(surface.mean())}


def _in_plane_fraction(prompts: np.ndarray, axes: np.ndarray) -> float:
    """Share of the squared start-to-end displacement that lies in the plotted plane."""
    move = prompts[-1] - prompts[0]
    total = float(move @ move)
    return float(((axes @ move) ** 2).sum() / total) if total > 0 else 0.0
