"""Whether a method's gain over a baseline at few shots holds with the full training split: the per-seed gains at
both data sizes, and the sign-flip test of their difference."""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from infoprompt.errors import UserError
from infoprompt.experiments.paired import (
    SampleSummary,
    check_present,
    default_comparisons,
    metric_values,
    record_key,
    sign_flip_p_value,
)
from infoprompt.experiments.protocol import PAPER_BATCH_SIZE, PAPER_EPOCHS, Training, trainings_phrase
from infoprompt.prediction_format import csv_cell

FULL = "full"
OPTION = "--full-vs-few"


@dataclass(frozen=True)
class GainShift(SampleSummary):
    """Per (task, seed) pair: the gain ``method - baseline`` at ``few_shots`` shots and with the full split, in
    one column (a task and n_p) or pooled over columns; the summary (mean, std, n) is of ``few - full``.
    ``full_training``: how the full-split cells of the pairs were trained, in a few words (a step budget and the
    epochs it amounts to, or the epochs), the baseline's named where it differs from the method's."""

    method: str
    baseline: str
    few_shots: int
    column: str
    few: tuple[float, ...]
    full: tuple[float, ...]
    full_training: str = ""

    @property
    def values(self) -> tuple[float, ...]:  # type: ignore[override]
        return tuple(f - u for f, u in zip(self.few, self.full, strict=True))

    @property
    def mean_few(self) -> float:
        return statistics.fmean(self.few)

    @property
    def mean_full(self) -> float:
        return statistics.fmean(self.full)

    @property
    def record(self) -> tuple[int, int, int]:
        """Pairs whose gain is larger at few shots, equal, and larger with the full split."""
        wins = sum(d > 0 for d in self.values)
        losses = sum(d < 0 for d in self.values)
        return wins, self.n - wins - losses, losses

    @property
    def p_value(self) -> float:
        return sign_flip_p_value(self.values)


def _pair(values: dict[tuple, float], method: str, baseline: str, backbone: str, task: str, shots: str,
          n_prompts: int, seed: int) -> tuple[tuple, tuple] | None:
    """The keys of the method's and the baseline's values for one (task, shots, n_p, seed); ``None``: one lacks it."""
    mine = (backbone, method, task, shots, n_prompts, seed)
    # Methods without prompts ran once (n_prompts=0) and pair with every n_p, as in the paired section.
    other = next((key for key in ((backbone, baseline, task, shots, count, seed) for count in (n_prompts, 0))
                  if key in values), None)
    return None if mine not in values or other is None else (mine, other)


def _training_text(method: str, baseline: str, pairs: list[tuple[tuple, tuple]],
                   trainings: dict[tuple, Training]) -> str:
    mine = trainings_phrase([trainings[key] for key, _ in pairs])
    other = trainings_phrase([trainings[key] for _, key in pairs])
    return mine if other == mine else f"{mine}; {baseline}: {other}"


def full_vs_few(
    records: Sequence[dict[str, Any]], comparisons: Sequence[tuple[str, str]] | None = None,
    metric: str | None = None, *, explicit: bool = False,
) -> list[GainShift]:
    """For each comparison (method, baseline) and each few-shot count run alongside the full split: per
    (backbone, task, n_p, seed) where both ran at both sizes, the gain at few shots and the gain with the full
    split, per column and pooled over columns.

    ``comparisons=None`` takes each method's table-row baselines present. With ``explicit`` (the user named
    the comparisons), a comparison that finds no such pair is an error rather than left out.
    """
    values = metric_values(records, metric)
    trainings = {record_key(r): Training.of(r) for r in records if r.get("status", "ok") == "ok"}
    methods = {key[1] for key in values}
    if comparisons is None:
        comparisons = default_comparisons(methods)
    check_present(comparisons, methods, OPTION)
    few_counts = sorted({int(key[3]) for key in values if key[3] != FULL})
    several_backbones = len({key[0] for key in values}) > 1
    results = []
    for method, baseline in comparisons:
        found = False
        for count in few_counts:
            columns: dict[str, tuple[list[float], list[float], list[tuple[tuple, tuple]]]] = {}
            for backbone, name, task, shots, n_prompts, seed in sorted(values):
                if name != method or shots != FULL:
                    continue
                full = _pair(values, method, baseline, backbone, task, FULL, n_prompts, seed)
                few = _pair(values, method, baseline, backbone, task, str(count), n_prompts, seed)
                if full is None or few is None:
                    continue
                prefix = f"{backbone}: " if several_backbones else ""
                gains = columns.setdefault(f"{prefix}{task} (n_p={n_prompts})", ([], [], []))
                gains[0].append(values[few[0]] - values[few[1]])
                gains[1].append(values[full[0]] - values[full[1]])
                gains[2].append(full)
            for column, (few, full, pairs) in columns.items():
                results.append(GainShift(method, baseline, count, column, tuple(few), tuple(full),
                                         _training_text(method, baseline, pairs, trainings)))
            if len(columns) > 1:
                results.append(GainShift(method, baseline, count, f"all {len(columns)} columns pooled",
                                         tuple(d for few, _, _ in columns.values() for d in few),
                                         tuple(d for _, full, _ in columns.values() for d in full),
                                         _training_text(method, baseline,
                                                        [p for *_, pairs in columns.values() for p in pairs], trainings)))
            found = found or bool(columns)
        if explicit and not found:
            raise UserError(f"{OPTION} {method}:{baseline}: no task and seed where both ran with the full training "
                            f"split and at a few-shot count")
    return results


def full_vs_few_markdown(shifts: Sequence[GainShift], digits: int = 4) -> str:
    if not shifts:
        return ""
    lines = [
        "### Gain at few shots against gain with the full training split", "",
        "| method − baseline | few shots | column | Δ few | Δ full | Δ few − Δ full ± std (pairs) "
        "| few larger / tie / full larger | p (sign-flip, exact) | full split trained |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for shift in shifts:
        spread = "" if shift.n == 1 else f" ± {shift.std:.{digits}f}"
        wins, ties, losses = shift.record
        lines.append(f"| {shift.method} − {shift.baseline} | {shift.few_shots} | {shift.column} "
                     f"| {shift.mean_few:+.{digits}f} | {shift.mean_full:+.{digits}f} "
                     f"| {shift.mean:+.{digits}f}{spread} ({shift.n}) | {wins} / {ties} / {losses} | {shift.p_value:.3f} "
                     f"| {shift.full_training} |")
    lines += ["", "Δ few: the method's metric minus the baseline's on the same seed at the few-shot count; Δ full: "
              "the same with the full training split. The test asks whether Δ few − Δ full, per (task, seed), "
              "could come from random signs: a small p says the gain depends on the data size. Full split "
              "trained: steps of a batch size where a step budget stopped training, with the epochs that is of "
              "the task's training split, or the epochs run (the paper: "
              f"{PAPER_EPOCHS} epochs of batch {PAPER_BATCH_SIZE}); the baseline's where it differs."]
    return "\n".join(lines) + "\n"


def full_vs_few_csv(shifts: Sequence[GainShift]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["method", "baseline", "few_shots", "column", "mean_gain_few", "mean_gain_full", "mean_diff",
                     "std_diff", "n_pairs", "few_larger", "ties", "full_larger", "p_sign_flip", "gains_few",
                     "gains_full", "full_training"])
    for shift in shifts:
        writer.writerow([csv_cell(shift.method), csv_cell(shift.baseline), shift.few_shots, csv_cell(shift.column),
                         f"{shift.mean_few:.6f}",
                         f"{shift.mean_full:.6f}", f"{shift.mean:.6f}", "" if shift.n == 1 else f"{shift.std:.6f}",
                         shift.n, *shift.record, f"{shift.p_value:.6f}", " ".join(f"{d:.6f}" for d in shift.few),
                         " ".join(f"{d:.6f}" for d in shift.full), shift.full_training])
    return buffer.getvalue()
