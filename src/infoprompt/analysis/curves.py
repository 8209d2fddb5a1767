"""Learning curves from run logs: per-method mean and spread over seeds, and steps to 95% of the final loss.

A run is a directory holding ``train_log.jsonl`` (as :func:`infoprompt.training.train` writes it) and, when the
runner or ``infoprompt train`` made it, ``metrics.json`` / ``infoprompt_adapter.json`` naming its method, task,
seed, shots and backbone. A path given by the user is either such a directory or a folder searched
recursively for them (a sweep results directory).

Steps to 95%: with ``L̃(s)`` the trailing mean of the raw training loss over the last ``window`` steps
(fewer at the start), ``L_0`` the mean of the first ``window`` raw losses and ``L_f`` the mean of the last
``window``, it is the first step ``s`` with ``L̃(s) ≤ L_f + 0.05 (L_0 − L_f)``; it is undefined (``None``)
when the loss did not go down (``L_0 ≤ L_f``).

Information terms: a step record of a method with InfoNCE terms carries each term's bound ``mi_<term>`` =
log(K+1) − nce and its cap ``mi_<term>_cap`` = log(K+1). Their ratio is the term's share of its cap; a term
is saturated from the first step whose raw share reaches :data:`SATURATION`, the definition of the run's own
``information`` summary (:class:`infoprompt.training.loop.Saturation`). Older logs carry no bounds, and no share
is made up for them. Only the final training pass counts: step records of another ``phase`` (the held-out
selection pass, whose adapter is thrown away) are skipped, so a run whose selection chose 0 epochs has no
steps at all.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from infoprompt.errors import UserError
from infoprompt.gate import parse_json
from infoprompt.io_utils import adapter_config_file, read_json_object

LOG_NAME = "train_log.jsonl"
# Every run's logs hold these (NaN where a kind has no such term); a kind's own terms (``loss_<name>``: the probe's
# ``logistic``, SetFit's ``embedding``, top-lora's objective) are read as they come.
LOSS_KEYS = ("total", "pred", "rep", "head", "kl")
TRAIN_PHASE = "train"
# Same value as infoprompt.training.loop.SATURATION (a test keeps them equal); importing it would load torch just to
# read logs.
SATURATION = 0.95
_RECORD_KEYS = {"type", "step", "epoch", "n_eval", "lr"}


@dataclass
class RunLog:
    """One run's log: per-step loss terms, periodic evaluations and the final evaluation."""

    path: Path
    method: str
    task: str | None
    backbone: str | None
    seed: int | None
    shots: object
    n_prompts: int | None
    steps: np.ndarray
    losses: dict[str, np.ndarray]
    eval_steps: np.ndarray
    evals: dict[str, np.ndarray]
    final: dict[str, float] = field(default_factory=dict)
    final_step: int | None = None
    primary_metric: str | None = None
    eval_n: int | None = None  # examples of the periodic evaluations
    final_n: int | None = None  # examples of the final evaluation
    # Per information term, its bound and cap at every step; only terms that every step record carries.
    mi_bounds: dict[str, np.ndarray] = field(default_factory=dict)
    mi_caps: dict[str, np.ndarray] = field(default_factory=dict)

    def mi_share(self, term: str) -> np.ndarray:
        """The term's bound as a share of its cap at every step (the cap can change with the batch size).

        NaN where the cap is 0: an in-batch term on a one-example batch has no negative, hence no bound.
        """
        caps = self.mi_caps[term]
        return np.divide(self.mi_bounds[term], caps, out=np.full(caps.shape, np.nan), where=caps > 0)

    @property
    def metric(self) -> str | None:
        """The primary metric: from ``metrics.json``, else the first metric the evaluations report."""
        if self.primary_metric:
            return self.primary_metric
        names = list(self.evals) or list(self.final)
        return names[0] if names else None


def read_run(directory: str | os.PathLike[str]) -> RunLog:
    """Read one run directory; its method comes from metrics.json, the adapter config or the folder name."""
    directory = Path(directory)
    log_path = directory / LOG_NAME
    if not log_path.is_file():
        raise UserError(f"{directory}: no {LOG_NAME}")
    meta: dict[str, object] = {}
    config_file = adapter_config_file(directory)
    for path in (config_file, directory / "metrics.json"):  # metrics.json (the run record) wins
        if path is not None and path.is_file():
            meta.update(read_json_object(path))
    log = _read_log(log_path)
    metric_names = sorted({name for _, values in log.eval_rows for name in values})
    evals = {
        name: np.array([values.get(name, math.nan) for _, values in log.eval_rows]) for name in metric_names
    }
    seed = meta.get("seed", meta.get("init_seed"))
    complete = [term for term, values in log.mi_bounds.items() if len(values) == len(log.steps)]
    return RunLog(
        path=directory,
        method=str(meta.get("method") or directory.name),
        task=_opt_str(meta.get("task")),
        backbone=_opt_str(meta.get("backbone")),
        seed=int(seed) if isinstance(seed, int) else None,
        shots=meta.get("shots"),
        n_prompts=meta.get("n_prompts") if isinstance(meta.get("n_prompts"), int) else None,
        steps=np.asarray(log.steps),
        losses={k: np.asarray(v) for k, v in log.losses.items()},
        eval_steps=np.asarray([s for s, _ in log.eval_rows], dtype=int),
        evals=evals,
        final=log.final,
        final_step=log.final_step,
        primary_metric=_opt_str(meta.get("primary_metric")),
        eval_n=log.eval_n,
        final_n=log.final_n,
        mi_bounds={term: np.asarray(log.mi_bounds[term]) for term in complete},
        mi_caps={term: np.asarray(log.mi_caps[term]) for term in complete},
    )


@dataclass
class _LogRecords:
    """The records of one ``train_log.jsonl`` in file order, as :func:`_read_log` gathers them."""

    steps: list[int] = field(default_factory=list)
    losses: dict[str, list[float]] = field(default_factory=lambda: {key: [] for key in LOSS_KEYS})
    mi_bounds: dict[str, list[float]] = field(default_factory=dict)
    mi_caps: dict[str, list[float]] = field(default_factory=dict)
    eval_rows: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)
    final_step: int | None = None
    eval_n: int | None = None
    final_n: int | None = None
    other_phases: int = 0  # step records of another phase (the selection pass), skipped

    def add_step(self, record: dict[str, object]) -> None:
        """A ``step`` record of the final training pass; a malformed one raises KeyError/TypeError/ValueError."""
        self.steps.append(int(record["step"]))
        named = {key.removeprefix("loss_") for key in record if key.startswith("loss_")}
        for key in named - set(self.losses):
            self.losses[key] = [math.nan] * (len(self.steps) - 1)
        for key, values in self.losses.items():
            values.append(float(record.get(f"loss_{key}", math.nan)))
        for term, bound, cap in _mi_fields(record):
            self.mi_bounds.setdefault(term, []).append(bound)
            self.mi_caps.setdefault(term, []).append(cap)

    def add_eval(self, kind: str, record: dict[str, object]) -> None:
        """An ``eval`` (periodic) or ``final_eval`` record: its numeric fields are the metrics."""
        values = {
            k: float(v)
            for k, v in record.items()
            if k not in _RECORD_KEYS and isinstance(v, int | float)
        }
        n_eval = record.get("n_eval")
        if kind == "eval":
            self.eval_rows.append((int(record.get("step", 0)), values))
            self.eval_n = int(n_eval) if isinstance(n_eval, int) else self.eval_n
        else:
            self.final, self.final_step = values, int(record.get("step", 0))
            self.final_n = int(n_eval) if isinstance(n_eval, int) else None


def _read_log(log_path: Path) -> _LogRecords:
    """Parse ``log_path``; errors name the file and line."""
    log = _LogRecords()
    with log_path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record = parse_json(line, f"{log_path}:{number}")
            if not isinstance(record, dict) or "type" not in record:
                raise UserError(f"{log_path}:{number}: expected an object with a 'type' field")
            kind = record["type"]
            if kind == "step":
                if record.get("phase", TRAIN_PHASE) != TRAIN_PHASE:
                    log.other_phases += 1
                    continue
                try:
                    log.add_step(record)
                except (KeyError, TypeError, ValueError):
                    raise UserError(
                        f"{log_path}:{number}: a step record needs 'step' and numeric loss_* / mi_* fields"
                    ) from None
            elif kind in ("eval", "final_eval"):
                log.add_eval(kind, record)
    if not log.steps and not log.other_phases:
        raise UserError(f"{log_path}: no step records")
    return log


def _mi_fields(record: dict[str, object]) -> list[tuple[str, float, float]]:
    """``(term, bound, cap)`` of every ``mi_<term>`` that comes with its ``mi_<term>_cap``."""
    return [
        (key[3:], float(value), float(record[f"{key}_cap"]))
        for key, value in record.items()
        if key.startswith("mi_") and not key.endswith("_cap") and f"{key}_cap" in record
    ]


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def discover_runs(paths: Sequence[str | os.PathLike[str]]) -> list[RunLog]:
    """Every run under ``paths`` (run directories, or folders searched recursively), in a stable order."""
    directories: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise UserError(f"run path {path} does not exist")
        if (path / LOG_NAME).is_file():
            directories.append(path)
            continue
        # Skip the runner's hidden scratch directories (.name.<pid>.….partial / .old): they are not finished runs.
        found = sorted(
            p.parent
            for p in path.rglob(LOG_NAME)
            if not any(part.startswith(".") for part in p.parent.relative_to(path).parts)
        )
        if not found:
            raise UserError(f"{path}: no run directory ({LOG_NAME}) found in it")
        directories.extend(found)
    unique: dict[Path, Path] = {}
    for directory in directories:
        unique.setdefault(directory.resolve(), directory)  # keep the path as the user spelled it
    return [read_run(d) for d in unique.values()]


def check_comparable(runs: Sequence[RunLog]) -> None:
    """Curves on one figure must share task and backbone."""
    for attribute in ("task", "backbone"):
        values = sorted({str(getattr(r, attribute)) for r in runs if getattr(r, attribute) is not None})
        if len(values) > 1:
            raise UserError(
                f"the runs mix {attribute}s ({', '.join(values)}); plot one {attribute} per figure"
            )


def group_runs(runs: Sequence[RunLog]) -> dict[str, list[RunLog]]:
    """Runs grouped by method; shots and n_p join the label when they differ between runs of one method."""
    by_method: dict[str, list[RunLog]] = {}
    for run in runs:
        by_method.setdefault(run.method, []).append(run)
    groups: dict[str, list[RunLog]] = {}
    for method, members in by_method.items():
        vary_shots = len({str(r.shots) for r in members}) > 1
        vary_np = len({r.n_prompts for r in members}) > 1
        for run in members:
            label = (
                method
                + (f" shots={run.shots}" if vary_shots else "")
                + (f" n_p={run.n_prompts}" if vary_np else "")
            )
            groups.setdefault(label, []).append(run)
    for members in groups.values():
        members.sort(key=lambda r: (r.seed is None, r.seed or 0, str(r.path)))
    return groups


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each position (of all values so far at the start); NaN values
    are left out of the mean, and a window of NaN alone gives NaN."""
    values = np.asarray(values, dtype=np.float64)
    window = max(1, int(window))
    present = ~np.isnan(values)
    sums = np.cumsum(np.insert(np.where(present, values, 0.0), 0, 0.0))
    counts = np.cumsum(np.insert(present.astype(np.int64), 0, 0))
    index = np.arange(1, values.size + 1)
    start = np.maximum(index - window, 0)
    n = counts[index] - counts[start]
    return np.divide(sums[index] - sums[start], n, out=np.full(values.size, np.nan), where=n > 0)


def steps_to_fraction(
    steps: np.ndarray, losses: np.ndarray, window: int = 10, fraction: float = 0.95
) -> int | None:
    """First step at which the smoothed loss has covered ``fraction`` of its initial-to-final drop."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.size == 0 or not np.isfinite(losses).all():
        return None
    w = max(1, min(int(window), losses.size))
    initial, final = losses[:w].mean(), losses[-w:].mean()
    if initial <= final:
        return None
    threshold = final + (1.0 - fraction) * (initial - final)
    smoothed = trailing_mean(losses, w)
    hits = np.nonzero(smoothed <= threshold)[0]
    return int(np.asarray(steps)[hits[0]]) if hits.size else None


def saturation_step(
    steps: np.ndarray, bounds: np.ndarray, caps: np.ndarray, level: float = SATURATION
) -> int | None:
    """First step whose raw bound reaches ``level`` of its cap (``None``: never); a step whose cap is 0 (a
    one-example in-batch batch) has no bound and never counts."""
    # bound >= level * cap, not bound / cap >= level: the same float comparison as the run's own summary.
    caps = np.asarray(caps, dtype=np.float64)
    hits = np.nonzero((caps > 0) & (np.asarray(bounds, dtype=np.float64) >= level * caps))[0]
    return int(np.asarray(steps)[hits[0]]) if hits.size else None


def _first_mean(values: np.ndarray, window: int) -> float:
    """Mean of the first ``window`` values, NaN ones left out, as ``_last_mean`` counts the end."""
    return float(trailing_mean(values, window)[max(1, min(int(window), values.size)) - 1])


def _last_mean(values: np.ndarray, window: int) -> float:
    """Mean of the last ``window`` values, NaN ones left out (the trailing mean's last point)."""
    return float(trailing_mean(values, window)[-1])


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _std(values: Sequence[float]) -> float | None:
    """Sample standard deviation; 0 for one value, ``None`` for none."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else (0.0 if values else None)


@dataclass
class Curve:
    """A group's curve: common x values, mean and standard deviation over its runs, and how many runs."""

    x: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    n: int


def mean_curve(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray]) -> Curve:
    """Average curves over the x values all of them share (a longer run is cut to the shortest)."""
    common = xs[0]
    for x in xs[1:]:
        common = np.intersect1d(common, x)
    if common.size == 0:
        raise UserError("the runs of a group share no logged step; they cannot be averaged")
    stack = np.stack([np.asarray(y, float)[np.searchsorted(x, common)] for x, y in zip(xs, ys, strict=True)])
    std = stack.std(0, ddof=1) if len(ys) > 1 else np.zeros(common.size)
    return Curve(x=common.astype(float), mean=stack.mean(0), std=std, n=len(ys))


def loss_curve(group: Sequence[RunLog], loss: str, window: int) -> Curve:
    logged = {name for r in group for name, values in r.losses.items() if np.isfinite(values).any()}
    if loss not in logged:
        raise UserError(f"the runs logged no loss {loss!r}; they logged: {', '.join(sorted(logged)) or 'none'}")
    return mean_curve([r.steps for r in group], [trailing_mean(r.losses[loss], window) for r in group])


def metric_curve(group: Sequence[RunLog], metric: str) -> Curve | None:
    with_evals = [r for r in group if metric in r.evals and r.eval_steps.size]
    if not with_evals:
        return None
    return mean_curve([r.eval_steps for r in with_evals], [r.evals[metric] for r in with_evals])


def group_summary(group: Sequence[RunLog], loss: str, window: int, metric: str | None) -> dict[str, object]:
    """Numbers of one group: steps to 95% per run and their mean/std, final loss and final metric."""
    per_run = [steps_to_fraction(r.steps, r.losses[loss], window) for r in group]
    reached = [s for s in per_run if s is not None]
    finals = [r.final.get(metric) for r in group if metric and metric in r.final]
    first_w = [_first_mean(r.losses[loss], window) for r in group]
    last_w = [_last_mean(r.losses[loss], window) for r in group]
    raw = mean_curve([r.steps for r in group], [r.losses[loss] for r in group])
    return {
        "runs": [str(r.path) for r in group],
        "seeds": [r.seed for r in group],
        "n_runs": len(group),
        "steps": [int(r.steps[-1]) for r in group],
        "steps_to_95": per_run,
        "steps_to_95_mean": _mean(reached),
        "steps_to_95_std": _std(reached),
        "steps_to_95_of_mean_curve": steps_to_fraction(raw.x, raw.mean, window),
        "initial_loss_mean": float(np.mean(first_w)),
        "final_loss_mean": float(np.mean(last_w)),
        "loss_drop_fraction": float(1.0 - np.mean(last_w) / np.mean(first_w)) if np.mean(first_w) else None,
        "final_metric": metric,
        "final_metric_values": finals,
        "final_metric_mean": float(np.mean(finals)) if finals else None,
        "final_metric_std": float(np.std(finals, ddof=1)) if len(finals) > 1 else None,
        "eval_n": sorted({r.eval_n for r in group if r.eval_n is not None}),
        "final_eval_n": sorted({r.final_n for r in group if r.final_n is not None}),
        "information": information_summary(group, window),
    }


def mi_terms(group: Sequence[RunLog]) -> list[str]:
    """Information terms that at least one run of the group logged, in log order."""
    return list(dict.fromkeys(term for r in group for term in r.mi_bounds))


def mi_share_curve(group: Sequence[RunLog], term: str, window: int) -> Curve:
    """Trailing mean of the term's share of its cap, averaged over the runs that logged the term."""
    carrying = [r for r in group if term in r.mi_bounds]
    return mean_curve(
        [r.steps for r in carrying], [trailing_mean(r.mi_share(term), window) for r in carrying]
    )


def information_summary(group: Sequence[RunLog], window: int) -> dict[str, dict[str, object]]:
    """Per information term: each run's saturation step and final share of the cap, and their means."""
    summary: dict[str, dict[str, object]] = {}
    for term in mi_terms(group):
        carrying = [r for r in group if term in r.mi_bounds]
        per_run = [saturation_step(r.steps, r.mi_bounds[term], r.mi_caps[term]) for r in carrying]
        reached = [s for s in per_run if s is not None]
        finals = [_last_mean(r.mi_share(term), window) for r in carrying]
        caps = np.concatenate([r.mi_caps[term] for r in carrying])
        summary[term] = {
            "runs": [str(r.path) for r in carrying],
            "seeds": [r.seed for r in carrying],
            "n_runs": len(carrying),
            "cap_min": float(caps.min()),
            "cap_max": float(caps.max()),
            "saturated_at_step": per_run,
            "saturated_runs": len(reached),
            "saturated_at_step_mean": _mean(reached),
            "saturated_at_step_std": _std(reached),
            "final_share": finals,
            "final_share_mean": _mean(finals),
            "final_share_std": _std(finals),
        }
    return summary
