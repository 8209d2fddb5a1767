"""Figure 1: estimate the per-example CMI of prompt sources, store the numbers and draw the violins."""

from __future__ import annotations

import csv
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from infoprompt.analysis.cmi import Estimate, EstimatorConfig, Inputs, estimate, summarise
from infoprompt.analysis.outputs import atomic_write_json, output_path, write_csv
from infoprompt.analysis.plotting import plot_cmi
from infoprompt.analysis.sources import DEFAULT_TEXTS, SourceSpec, SourceStates, StateCollector
from infoprompt.analysis.target import AnalysisTarget
from infoprompt.backbones import Backbone, load_backbone
from infoprompt.errors import UserError
from infoprompt.experiments.grid import shots_label
from infoprompt.io_utils import adapter_config_file
from infoprompt.kinds.config import read_adapter_config
from infoprompt.pipeline import RunSpec, read_split, run_training
from infoprompt.tasks import Example, get_task
from infoprompt.training.config import TrainConfig

ESTIMATORS = ("presence", "swap")
ESTIMATOR_TITLES = {
    "presence": "negatives: no-prompt state of the same input (paper §3.2)",
    "swap": "negatives: same input under other inputs' prompts",
}
CMI_CSV_HEADER = ("estimator", "source", "example", "cmi_lower_bound")


@dataclass
class CMIConfig(AnalysisTarget):
    """``infoprompt analyze cmi``: the :class:`AnalysisTarget` fields (outputs ``<out>/<name>.{png,json,csv}``,
    default name ``cmi-<task>-<backbone>``) and these.

    Attributes:
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
    """

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
    batch_size: int = 32


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
        out = runs_dir / f"{method}-shots{shots_label(config.shots)}-np{config.n_prompts}-s{config.seed}"
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
    # One generator draws the examples, then the swap partners: the order of the draws is part of the seed.
    generator = torch.Generator().manual_seed(config.seed)
    examples, n_fit = _draw_examples(config, pool, generator)
    sources = _prompt_sources(config, task.name, backbone)
    partners = _swap_partners(config, n_fit, len(examples) - n_fit, generator)
    collector = StateCollector(backbone, task, examples, config.batch_size, config.seed, config.progress)
    estimates = _estimate_sources(config, collector, sources, partners, n_fit, len(examples))

    name = config.stem("cmi", task.name)
    record = _cmi_record(config, task.name, split, examples, n_fit, estimates)
    rows = [
        (est, label, examples[n_fit + i].source, float(v))
        for est in config.estimators
        for label, vals in estimates.values[est].items()
        for i, v in enumerate(vals)
    ]
    write_csv(output_path(config.out, name, ".csv"), CMI_CSV_HEADER, rows)
    atomic_write_json(output_path(config.out, name, ".json"), record)
    draw_cmi(record, estimates.values, output_path(config.out, name, ".png"))
    return record


@dataclass
class _Estimates:
    """Per estimator, then per source label: the scored examples' bounds, their summary and the fit bound at the
    end of critic training; and a description of every source."""

    values: dict[str, dict[str, np.ndarray]]
    summaries: dict[str, dict[str, dict[str, float]]]
    fit_end: dict[str, dict[str, float]]
    described: list[dict[str, object]]


def _draw_examples(
    config: CMIConfig, pool: list[Example], generator: torch.Generator
) -> tuple[list[Example], int]:
    """``n_examples`` of ``pool`` in a seeded order and how many of them (the first) fit the critics."""
    order = torch.randperm(len(pool), generator=generator)[: config.n_examples].tolist()
    examples = [pool[i] for i in order]
    n_fit = int(round(len(examples) * config.fit_fraction))
    n_score = len(examples) - n_fit
    if n_fit < 2 or n_score < 1:
        raise UserError(
            f"{len(examples)} examples leave {n_fit} to fit and {n_score} to score; raise n_examples"
        )
    return examples, n_fit


def _prompt_sources(config: CMIConfig, task_name: str, backbone: Backbone) -> list[SourceSpec]:
    """Random vectors, handcrafted texts, then the given and the freshly trained adapters."""
    adapters = list(config.adapters) + train_adapters(config, backbone)
    sources: list[SourceSpec] = []
    if config.random:
        n_random = config.n_random_prompts
        if n_random is None:
            n_random = _adapter_prompts(adapters) or 4
        sources.append(SourceSpec(kind="random", label=f"random (n_p={n_random})", n_prompts=n_random))
    texts = config.texts if config.texts is not None else DEFAULT_TEXTS.get(task_name, ())
    sources += [SourceSpec(kind="text", label=f'"{text}"', text=text) for text in texts]
    sources += adapters
    if not sources:
        raise UserError(
            "no prompt source to analyse: give --adapter, --train, --text or keep the random source"
        )
    return sources


def _swap_partners(
    config: CMIConfig, n_fit: int, n_score: int, generator: torch.Generator
) -> torch.Tensor | None:
    """The swap estimator's partners of every example, fit and scored examples apart (``None``: no swap)."""
    if "swap" not in config.estimators:
        return None
    return torch.cat(
        [
            _partners(n_fit, config.swap_negatives, 0, generator),
            _partners(n_score, config.swap_negatives, n_fit, generator),
        ]
    )


def _estimate_sources(
    config: CMIConfig,
    collector: StateCollector,
    sources: list[SourceSpec],
    partners: torch.Tensor | None,
    n_fit: int,
    n_examples: int,
) -> _Estimates:
    """Collect each source's states and estimate its CMI with every estimator (fresh critics each time)."""
    estimates = _Estimates(
        values={name: {} for name in config.estimators},
        summaries={name: {} for name in config.estimators},
        fit_end={name: {} for name in config.estimators},
        described=[],
    )
    for spec in sources:
        states = collector.collect(spec, partners)
        label = states.spec.label
        if any(label == d["label"] for d in estimates.described):
            raise UserError(
                f"two prompt sources are both labelled {label!r}; give adapters distinct LABEL=DIR names"
            )
        estimates.described.append(
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
            result = _estimate_one(config, name, states, n_fit, n_examples)
            estimates.values[name][label] = result.values
            estimates.summaries[name][label] = summarise(result.values, seed=config.seed).as_dict()
            tail = max(1, len(result.fit_curve) // 10)
            estimates.fit_end[name][label] = float(result.fit_curve[-tail:].mean())
    return estimates


def _estimate_one(config: CMIConfig, name: str, states: SourceStates, n_fit: int, n_examples: int) -> Estimate:
    """Fit critics of estimator ``name`` on the first ``n_fit`` examples, score the rest."""
    negatives = states.z_plain if name == "presence" else states.z_swapped
    estimator = config.estimator
    if name == "swap":
        estimator = dataclasses.replace(estimator, n_negatives=config.swap_negatives)
    estimator = dataclasses.replace(estimator, progress=config.progress)
    whole = Inputs(states.prompt_mean, states.z, negatives)
    fit_index, score_index = torch.arange(n_fit), torch.arange(n_fit, n_examples)
    return estimate(
        whole.subset(fit_index), whole.subset(score_index), estimator, desc=f"critic {states.spec.label}"
    )


def _cmi_record(
    config: CMIConfig, task_name: str, split: str, examples: list[Example], n_fit: int, estimates: _Estimates
) -> dict[str, object]:
    """The JSON record: the settings, every source, and the summaries per estimator and source."""
    k_of = {"presence": config.estimator.n_negatives, "swap": config.swap_negatives}
    return {
        "analysis": "cmi",
        "task": task_name,
        "backbone": config.backbone,
        "split": split,
        "n_examples": len(examples),
        "n_fit": n_fit,
        "n_score": len(examples) - n_fit,
        "seed": config.seed,
        "estimator": {**dataclasses.asdict(config.estimator), "swap_negatives": config.swap_negatives},
        "bound_cap": {est: math.log(k_of[est] + 1) for est in config.estimators},
        "interval": "95% percentile bootstrap of the mean over scored examples (2000 resamples, run seed)",
        "sources": estimates.described,
        "summaries": estimates.summaries,
        "fit_bound_last_10pct": estimates.fit_end,
        "examples_scored": [e.source for e in examples[n_fit:]],
    }


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
        directory = Path(spec.adapter or "")
        if adapter_config_file(directory) is not None:
            try:
                return read_adapter_config(directory).n_prompts or None
            except UserError:  # not JSON, not a config: the adapter's own reader names it when it loads
                return None
    return None
