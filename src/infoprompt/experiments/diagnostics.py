"""Report sections on how runs trained: whether the information terms saturated, and what selection picked."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from infoprompt.experiments.store import STATUS_OK

TERMS = (("mi_rep", r"I(P; Z \| X)"), ("mi_head", r"I(P; θ \| X)"))  # pipes escaped for Markdown tables


def _finished(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("status", STATUS_OK) == STATUS_OK]


def information_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method and term: runs, the mean last-epoch bound as a share of its cap log(K+1), how many runs
    reached 95% of the cap, and the median step at which they did."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in _finished(records):
        for term, summary in (record.get("information") or {}).items():
            grouped[(record["method"], term)].append(summary)
    rows = []
    for (method, term), summaries in sorted(grouped.items()):
        shares = [s["last_epoch_share_of_cap"] for s in summaries if s.get("last_epoch_share_of_cap") is not None]
        steps = [s["saturated_at_step"] for s in summaries if s.get("saturated_at_step") is not None]
        rows.append({
            "method": method, "term": term, "runs": len(summaries),
            "cap": statistics.mean(s["cap"] for s in summaries),
            "share_of_cap": statistics.mean(shares) if shares else None,
            "saturated_runs": len(steps),
            "median_saturation_step": statistics.median(steps) if steps else None,
        })
    return rows


def information_markdown(records: Sequence[dict[str, Any]]) -> str:
    rows = information_rows(records)
    if not rows:
        return ""
    names = dict(TERMS)
    lines = [
        "### Information terms",
        "",
        "Each term's InfoNCE lower bound over the last training epoch, as a share of its cap log(K+1). A bound at "
        "its cap (≥ 95%) means the critic separates every negative, and the term gives no more gradient.",
        "",
        "| method | term | runs | cap | last-epoch bound / cap | runs saturated | median step saturated |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        share = "—" if row["share_of_cap"] is None else f"{row['share_of_cap']:.2f}"
        step = "—" if row["median_saturation_step"] is None else f"{row['median_saturation_step']:g}"
        lines.append(f"| {row['method']} | {names.get(row['term'], row['term'])} | {row['runs']} | {row['cap']:.3f} | "
                     f"{share} | {row['saturated_runs']}/{row['runs']} | {step} |")
    return "\n".join(lines) + "\n"


# What a held-out or cross-validated selection can pick (a key of a record's ``selection``), and how it reads.
SELECTED = {"epochs": ("Epochs picked on a held-out slice of each few-shot draw", "epochs picked"),
            "head_c": ("The logistic head's C picked by cross-validation on each few-shot draw", "head C picked")}


def selection_markdown(records: Sequence[dict[str, Any]]) -> str:
    """Per method and task: what was picked on the few-shot draws (epoch counts, the head's C), one per seed."""
    grouped: dict[str, dict[tuple[str, str, str], list[str]]] = {name: defaultdict(list) for name in SELECTED}
    for record in _finished(records):
        for name, picks in grouped.items():
            value = (record.get("selection") or {}).get(name)
            if value is not None:
                picks[(record["method"], record["task"], str(record.get("shots")))].append(f"{value:g}")
    lines: list[str] = []
    for name, picks in grouped.items():
        if not picks:
            continue
        what, column = SELECTED[name]
        lines += ["### Selection" if not lines else "", "",
                  f"{what} (never on the evaluation split), one per seed.", "",
                  f"| method | task | shots | {column} |", "|---|---|---|---|"]
        lines += [f"| {method} | {task} | {shots} | {', '.join(values)} |"
                  for (method, task, shots), values in sorted(picks.items())]
    return "\n".join(lines) + "\n" if lines else ""
