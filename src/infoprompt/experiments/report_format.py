"""Markdown and CSV text of a report's tables, cells and paired differences."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from infoprompt.experiments.paired import Paired
from infoprompt.experiments.tables import Stat, Table, shots_key
from infoprompt.kinds.registry import table_label
from infoprompt.prediction_format import csv_cell

SIZE_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def format_stat(stat: Stat | None, digits: int = 4) -> str:
    if stat is None:
        return "—"
    if stat.n == 1:
        return f"{stat.mean:.{digits}f} (1)"
    return f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f} ({stat.n})"


def format_bytes(size: float) -> str:
    """Decimal units, three significant digits: ``796 kB``, ``9.5 kB``, ``90.9 MB``."""
    for unit, scale in SIZE_UNITS:
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:.0f} B"


def format_seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def size_text(sizes: Sequence[float]) -> str:
    """One size, or the range of a row whose cells' adapters differ (another n_p, another label count)."""
    if not sizes:
        return "—"
    low, high = format_bytes(min(sizes)), format_bytes(max(sizes))
    return low if low == high else f"{low} – {high}"


def to_markdown(table: Table, digits: int = 4) -> str:
    best_columns, best_average = table.best()
    header = ["method", *table.columns, "Average", "adapter", "time / cell"]
    lines = [f"### {table.title}", ""]
    if table.header:
        lines += [*table.header, ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, stats in table.rows.items():
        cells = [table_label(method)]
        for i, stat in enumerate(stats):
            text = format_stat(stat, digits)
            cells.append(f"**{text}**" if stat is not None and method in best_columns[i] else text)
        average = table.average(method)
        text = "—" if average is None else f"{average:.{digits}f}"
        cells.append(f"**{text}**" if method in best_average else text)
        seconds = table.mean_train_s(method)
        cells += [size_text(table.adapter_sizes(method)), "—" if seconds is None else format_seconds(seconds)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Cells: mean ± sample std over seeds (number of seeds in parentheses); **bold**: best in the column; "
                 "Average: mean of the row's column means (only for complete rows); adapter: size on disk of the "
                 "saved adapter (a range where the row's cells differ); time / cell: mean training time of one "
                 "cell of the row (timings.total_s less its evaluations).")
    lines.extend(f"Note: {n}." for n in table.notes)
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """Wide CSV in the table's layout: per column ``mean``, ``std`` and ``n`` (number of seeds), then Average,
    the row's mean adapter size in bytes and its mean training seconds per cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    # Task, method and backbone names are user text (a file's stem, --task-name): each such cell passes csv_cell,
    # so that no spreadsheet runs one as a formula; numbers are written as they are (a negative one included).
    writer.writerow(["method", *[csv_cell(f"{c} {part}") for c in table.columns for part in ("mean", "std", "n")],
                     "average", "adapter_bytes", "train_s"])
    for method, stats in table.rows.items():
        row: list[Any] = [csv_cell(method)]
        for stat in stats:
            if stat is None:
                row += ["", "", 0]
            else:
                row += [f"{stat.mean:.6f}", "" if stat.n == 1 else f"{stat.std:.6f}", stat.n]
        average = table.average(method)
        sizes, seconds = table.adapter_sizes(method), table.mean_train_s(method)
        row += ["" if average is None else f"{average:.6f}", round(sum(sizes) / len(sizes)) if sizes else "",
                "" if seconds is None else f"{seconds:.3f}"]
        writer.writerow(row)
    return buffer.getvalue()


def cells_csv(stats: dict[tuple, Stat]) -> str:
    """Long format: one row per (backbone, method, task, shots, n_p) with mean, std and the seeds behind it, the
    mean adapter size in bytes, the mean training seconds, and the largest share of the evaluation that one class
    took on any seed beside the majority class's share (empty where the records lack them)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["backbone", "method", "task", "shots", "n_prompts", "mean", "std", "n_seeds", "seeds", "values",
                     "adapter_bytes", "train_s", "top_share", "majority_share"])
    for key in sorted(stats, key=lambda k: (k[0], k[1], k[2], shots_key(k[3]), k[4])):
        stat = stats[key]
        writer.writerow([*map(csv_cell, key[:3]), key[3], key[4], f"{stat.mean:.6f}", "" if stat.n == 1 else f"{stat.std:.6f}",
                         stat.n, " ".join(map(str, stat.seeds)), " ".join(f"{v:.6f}" for v in stat.values),
                         "" if stat.adapter_bytes is None else round(stat.adapter_bytes),
                         "" if stat.train_s is None else f"{stat.train_s:.3f}",
                         "" if stat.top_share is None else f"{stat.top_share:.4f}",
                         "" if stat.majority_share is None else f"{stat.majority_share:.4f}"])
    return buffer.getvalue()


def paired_csv(pairs: Sequence[Paired]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["method", "baseline", "column", "mean_diff", "std_diff", "n_pairs", "wins", "ties", "losses",
                     "p_sign_flip", "diffs"])
    for pair in pairs:
        writer.writerow([csv_cell(pair.method), csv_cell(pair.baseline), csv_cell(pair.column), f"{pair.mean:.6f}",
                         "" if pair.n == 1 else f"{pair.std:.6f}", pair.n, *pair.record, f"{pair.p_value:.6f}",
                         " ".join(f"{d:.6f}" for d in pair.diffs)])
    return buffer.getvalue()
