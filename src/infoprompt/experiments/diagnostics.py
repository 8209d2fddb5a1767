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


def selection_markdown(records: Sequence[dict[str, Any]]) -> str:
    """Per method and task: the epoch counts picked on held-out slices of the few-shot draws."""
    grouped: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for record in _finished(records):
        selection = record.get("selection")
        if selection:
            grouped[(record["method"], record["task"], str(record.get("shots")))].append(int(selection["epochs"]))
    if not grouped:
        return ""
    lines = [
        "### Selection",
        "",
        "Epochs picked on a held-out slice of each few-shot draw (never on the evaluation split), one per seed.",
        "",
        "| method | task | shots | epochs picked |",
        "|---|---|---|---|",
    ]
    for (method, task, shots), epochs in sorted(grouped.items()):
        lines.append(f"| {method} | {task} | {shots} | {', '.join(str(e) for e in epochs)} |")
    return "\n".join(lines) + "\n"
