"""Paired comparisons of two methods over the seeds they share, with an exact sign-flip permutation test.

Cells with the same seed share the few-shot draw, so the per-seed difference ``a_s - b_s`` removes the
variance of the draw; overlapping mean ± std columns cannot show that. The test asks whether the mean
difference could come from random signs: with n pairs there are 2^n sign patterns, all enumerated (n <= 20),
so the p-value is exact, needs no normality, and shows plainly how little 3 seeds can prove (the smallest
two-sided p with 3 pairs is 0.25).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from infoprompt.errors import UserError
from infoprompt.kinds.registry import METHODS

EXACT_LIMIT = 20
MONTE_CARLO_DRAWS = 200_000


class SampleSummary:
    """Count, mean and sample standard deviation (``nan`` for one value) of ``values``."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if self.n > 1 else math.nan


@dataclass(frozen=True)
class Paired(SampleSummary):
    """Per-seed differences ``method - baseline`` in one column (task, shots, n_p), or pooled over columns."""

    method: str
    baseline: str
    column: str
    diffs: tuple[float, ...]

    @property
    def values(self) -> tuple[float, ...]:  # type: ignore[override]
        return self.diffs

    @property
    def record(self) -> tuple[int, int, int]:
        """Wins, ties and losses of ``method`` over the pairs."""
        wins = sum(d > 0 for d in self.diffs)
        losses = sum(d < 0 for d in self.diffs)
        return wins, self.n - wins - losses, losses

    @property
    def p_value(self) -> float:
        return sign_flip_p_value(self.diffs)


def sign_flip_p_value(diffs: Sequence[float], seed: int = 0) -> float:
    """Two-sided p-value of the paired sign-flip permutation test of ``mean(diffs) = 0``.

    Exact for up to 20 pairs (every sign pattern), else a seeded Monte Carlo estimate.
    """
    values = np.asarray(diffs, dtype=np.float64)
    if values.size == 0:
        return math.nan
    observed = abs(values.mean())
    if values.size <= EXACT_LIMIT:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=values.size)))
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(MONTE_CARLO_DRAWS, values.size))
    means = np.abs(signs @ values) / values.size
    # A tolerance so that the observed pattern itself always counts despite rounding.
    return float(np.mean(means >= observed - 1e-12 * max(1.0, observed)))


def parse_comparison(text: str, option: str = "--compare") -> tuple[str, str]:
    """``METHOD:BASELINE`` (as given to ``infoprompt report --compare`` or ``option``)."""
    method, sep, baseline = text.partition(":")
    if not sep or not method or not baseline or method == baseline:
        raise UserError(f"{option} expects METHOD:BASELINE with two different methods, got {text!r}")
    return method, baseline


def record_key(record: dict[str, Any]) -> tuple[str, str, str, str, int, int]:
    """(backbone, method, task, shots as text, n_prompts, seed): a record's key in the paired sections."""
    return (record["backbone"], record["method"], record["task"], str(record["shots"]), int(record["n_prompts"]),
            int(record["seed"]))


def metric_values(records: Sequence[dict[str, Any]], metric: str | None = None) -> dict[tuple, float]:
    """The metric (default: each record's primary one) of every finished record, keyed by :func:`record_key`."""
    values: dict[tuple, float] = {}
    for record in records:
        if record.get("status", "ok") != "ok":
            continue
        value = record.get("metrics", {}).get(metric or record.get("primary_metric"))
        if isinstance(value, int | float):
            values[record_key(record)] = float(value)
    return values


def default_comparisons(methods: Collection[str]) -> list[tuple[str, str]]:
    """Each method of ``methods`` against each of its table row's ``baselines`` among them."""
    return [(row.name, baseline) for row in METHODS.values() if row.name in methods
            for baseline in row.baselines if baseline in methods]


def check_present(comparisons: Sequence[tuple[str, str]], methods: Collection[str], option: str) -> None:
    """Refuse a comparison naming a method without finished results, listing the methods present."""
    for method, baseline in comparisons:
        missing = [m for m in (method, baseline) if m not in methods]
        if missing:
            raise UserError(f"{option} {method}:{baseline}: no finished results for {', '.join(missing)}; "
                            f"methods present: {', '.join(sorted(methods))}")


def paired_comparisons(
    records: Sequence[dict[str, Any]], comparisons: Sequence[tuple[str, str]] | None = None, metric: str | None = None,
) -> list[Paired]:
    """Per column and pooled over columns, for each comparison with at least one shared seed.

    Records are finished result records; methods without prompts (``n_prompts=0``) pair with every n_p.
    ``comparisons=None`` compares each method present with each of its table row's ``baselines`` present
    (:class:`~infoprompt.kinds.registry.Method`).
    """
    values = metric_values(records, metric)
    methods = {key[1] for key in values}
    comparisons = default_comparisons(methods) if comparisons is None else comparisons
    check_present(comparisons, methods, "--compare")
    results = []
    for method, baseline in comparisons:
        columns: dict[str, list[float]] = {}
        for (backbone, name, task, shots, n_prompts, seed), value in sorted(values.items()):
            if name != method:
                continue
            other = values.get((backbone, baseline, task, shots, n_prompts, seed))
            if other is None:
                other = values.get((backbone, baseline, task, shots, 0, seed))
            if other is None:
                continue
            prefix = f"{backbone}: " if len({k[0] for k in values}) > 1 else ""
            columns.setdefault(f"{prefix}{task} ({shots} shots, n_p={n_prompts})", []).append(value - other)
        for column, diffs in columns.items():
            results.append(Paired(method, baseline, column, tuple(diffs)))
        if len(columns) > 1:
            pooled = tuple(d for diffs in columns.values() for d in diffs)
            results.append(Paired(method, baseline, f"all {len(columns)} columns pooled", pooled))
    return results


def paired_markdown(pairs: Sequence[Paired], digits: int = 4) -> str:
    if not pairs:
        return ""
    lines = [
        "### Paired differences over shared seeds", "",
        "| method − baseline | column | Δ mean ± std (pairs) | wins / ties / losses | p (sign-flip, exact) |",
        "|---|---|---|---|---|",
    ]
    for pair in pairs:
        spread = "" if pair.n == 1 else f" ± {pair.std:.{digits}f}"
        wins, ties, losses = pair.record
        lines.append(f"| {pair.method} − {pair.baseline} | {pair.column} | {pair.mean:+.{digits}f}{spread} ({pair.n}) "
                     f"| {wins} / {ties} / {losses} | {pair.p_value:.3f} |")
    lines += ["", "Δ: the method's metric minus the baseline's on the same seed (same few-shot draw). p: share of the "
              "2^n sign patterns of the differences whose |mean| is at least the observed one; with 3 seeds it "
              "cannot go below 0.25, so single columns only show a direction, the pooled row can show more."]
    return "\n".join(lines) + "\n"
