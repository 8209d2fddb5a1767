"""Paper-style tables from a results directory: mean ± std over seeds per method × (task, n_p or shots)."""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import os
import re
import shutil
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.experiments.diagnostics import information_markdown, selection_markdown
from infoprompt.experiments.paired import Paired, SampleSummary, paired_comparisons, paired_markdown
from infoprompt.experiments.store import STATUS_OK, load_records
from infoprompt.io_utils import check_name_lengths, replace_directory, scratch_directory
from infoprompt.kinds.registry import table_label, table_order
from infoprompt.tasks import TASKS

# Rows in the paper's order (Tables 1-4), then the peers the paper does not have.
# File-name stems of the two table layouts; build_report writes each as .csv and .md, and removes stale ones.
NP_TABLE = "table-np-shots="
SHOTS_TABLE = "table-shots-np="

@dataclass(frozen=True)
class Stat(SampleSummary):
    """One cell over its seeds: the values (mean, sample std and count from :class:`SampleSummary`) and seeds."""

    values: tuple[float, ...]
    seeds: tuple[int, ...]


@dataclass
class Table:
    """One table: ``rows[method][i]`` is the stat under ``columns[i]`` (``None``: not run)."""

    name: str
    title: str
    columns: list[str]
    rows: dict[str, list[Stat | None]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def average(self, method: str) -> float | None:
        """Mean of the row's column means, as the paper's Average column; only for complete rows."""
        stats = self.rows[method]
        if not stats or any(s is None for s in stats):
            return None
        return statistics.fmean(s.mean for s in stats)

    def best(self) -> tuple[list[set[str]], set[str]]:
        """Methods with the highest mean per column (ties share it) and with the highest average."""
        per_column = []
        for i in range(len(self.columns)):
            means = {m: round(s[i].mean, 10) for m, s in self.rows.items() if s[i] is not None}
            top = max(means.values(), default=None)
            per_column.append({m for m, v in means.items() if v == top})
        averages = {m: round(a, 10) for m in self.rows if (a := self.average(m)) is not None}
        top = max(averages.values(), default=None)
        return per_column, {m for m, v in averages.items() if v == top}


def _prune(table: Table) -> Table:
    """Drop the columns no method has a result for (a grid need not cover every task × shots × n_p)."""
    keep = [i for i in range(len(table.columns)) if any(row[i] is not None for row in table.rows.values())]
    table.columns = [table.columns[i] for i in keep]
    table.rows = {m: [row[i] for i in keep] for m, row in table.rows.items()}
    return table


def _order(names: set[str], preferred: Sequence[str]) -> list[str]:
    """``preferred`` order first; a variant ``name[k=v]`` right after its base ``name``; the rest sorted."""
    def key(name: str) -> tuple[int, str]:
        base = name.split("[", 1)[0]
        return (preferred.index(base) if base in preferred else len(preferred), name)

    return sorted(names, key=key)


# Settings that change when or how often a run is measured, not its result.
MEASUREMENT_ONLY = {"eval_every", "eval_every_epochs", "eval_subset", "eval_batch_size", "progress", "feature_store",
                    "feature_store_dir"}


def _settings_of(record: dict[str, Any]) -> dict[str, str]:
    settings = record.get("settings") or {}
    items = {f"{k}": v for k, v in (settings.get("classifier") or {}).items()}
    items.update({k: v for k, v in (settings.get("training") or {}).items() if k not in MEASUREMENT_ONLY})
    if "sampling" in settings:
        items["sampling"] = settings["sampling"]
    return {k: json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else str(v) for k, v in items.items()}


def label_variants(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``records`` whose ``method`` names the variant when one method ran with different settings.

    A setting is shown (``infoprompt[pooling=embeddings]``) when its value, or its absence, differs among the
    finished records of that method in one table cell (backbone, task, shots, n_p), which would otherwise be
    pooled; a setting that only differs between cells (a sampling strategy for one task) and
    measurement-only settings are not.
    """
    by_cell: dict[tuple, list[dict[str, str]]] = defaultdict(list)
    for record in records:
        if record.get("status", STATUS_OK) == STATUS_OK:
            cell = (record["method"], record.get("backbone"), record.get("task"), str(record.get("shots")),
                    record.get("n_prompts"))
            by_cell[cell].append(_settings_of(record))
    varying: dict[str, set[str]] = defaultdict(set)
    for (method, *_), settings in by_cell.items():
        keys = {k for s in settings for k in s}
        varying[method] |= {k for k in keys if len({s.get(k) for s in settings}) > 1}
    labelled = []
    for record in records:
        keys = sorted(varying.get(record.get("method"), ()))
        settings = _settings_of(record)
        shown = [f"{k}={settings[k]}" for k in keys if k in settings]
        labelled.append({**record, "method": f"{record['method']}[{','.join(shown)}]"} if shown else record)
    return labelled


def _shots_key(shots: Any) -> tuple[int, int]:
    return (1, 0) if shots == "full" else (0, int(shots))


def collect(records: Sequence[dict[str, Any]], metric: str | None = None) -> dict[tuple, Stat]:
    """Group finished records by (backbone, method, task, shots, n_prompts) into stats of the metric.

    ``metric=None`` takes each record's primary metric; records lacking the metric are skipped.
    """
    values: dict[tuple, list[tuple[int, float]]] = defaultdict(list)
    for record in records:
        if record.get("status", STATUS_OK) != STATUS_OK:
            continue
        name = metric or record.get("primary_metric")
        value = record.get("metrics", {}).get(name)
        if not isinstance(value, int | float):
            continue
        key = (record["backbone"], record["method"], record["task"], record["shots"], int(record["n_prompts"]))
        values[key].append((int(record["seed"]), float(value)))
    stats = {}
    for key, pairs in values.items():
        pairs.sort()
        stats[key] = Stat(values=tuple(v for _, v in pairs), seeds=tuple(s for s, _ in pairs))
    return stats


def _lookup(stats: dict[tuple, Stat], backbone: str, method: str, task: str, shots: Any, n_prompts: int) -> Stat | None:
    found = stats.get((backbone, method, task, shots, n_prompts))
    if found is None:
        # Methods without prompts ran once per (task, shots) with n_prompts=0; they fill every n_p column.
        found = stats.get((backbone, method, task, shots, 0))
    return found


def build_tables(stats: dict[tuple, Stat], tasks: Sequence[str] | None = None) -> list[Table]:
    """Table 1-style (columns task × n_p, one per shots value) and Table 3-style (task × shots, one per n_p)."""
    tables = []
    for backbone in sorted({k[0] for k in stats}):
        keys = [k for k in stats if k[0] == backbone]
        methods = table_order({k[1] for k in keys})
        present_tasks = {k[2] for k in keys}
        task_order = [t for t in (tasks or _order(present_tasks, list(TASKS))) if t in present_tasks]
        shots_values = sorted({k[3] for k in keys}, key=_shots_key)
        prompt_counts = sorted({k[4] for k in keys if k[4] > 0}) or [0]
        prefix = f"{backbone}: " if len({k[0] for k in stats}) > 1 else ""
        slug = (re.sub(r"[^A-Za-z0-9_.-]+", "_", backbone).strip("_") + "-") if prefix else ""
        note = "methods without prompts (n_p=0) ran once per task and shots; their value fills every n_p column"
        if len(prompt_counts) > 1 or len(shots_values) == 1:
            for shots in shots_values:
                table = Table(
                    name=f"{slug}{NP_TABLE}{shots}",
                    title=f"{prefix}shots={shots}: columns task × n_p (paper Table 1 layout)",
                    columns=[f"{t} (n_p={p})" for t in task_order for p in prompt_counts],
                    notes=[note] if any(k[4] == 0 for k in keys) and prompt_counts != [0] else [],
                )
                for method in methods:
                    row = [_lookup(stats, backbone, method, t, shots, p) for t in task_order for p in prompt_counts]
                    if any(s is not None for s in row):
                        table.rows[method] = row
                tables.append(_prune(table))
        if len(shots_values) > 1:
            for count in prompt_counts:
                table = Table(
                    name=f"{slug}{SHOTS_TABLE}{count}",
                    title=f"{prefix}n_p={count}: columns task × shots (paper Table 3 layout)",
                    columns=[f"{t} ({s})" for t in task_order for s in shots_values],
                    notes=["methods without prompts (n_p=0) are shown with their single run"] if count else [],
                )
                for method in methods:
                    row = [_lookup(stats, backbone, method, t, s, count) for t in task_order for s in shots_values]
                    if any(s is not None for s in row):
                        table.rows[method] = row
                tables.append(_prune(table))
    return tables


def format_stat(stat: Stat | None, digits: int = 4) -> str:
    if stat is None:
        return "—"
    if stat.n == 1:
        return f"{stat.mean:.{digits}f} (1)"
    return f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f} ({stat.n})"


def to_markdown(table: Table, digits: int = 4) -> str:
    best_columns, best_average = table.best()
    header = ["method", *table.columns, "Average"]
    lines = [f"### {table.title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, stats in table.rows.items():
        cells = [table_label(method)]
        for i, stat in enumerate(stats):
            text = format_stat(stat, digits)
            cells.append(f"**{text}**" if stat is not None and method in best_columns[i] else text)
        average = table.average(method)
        text = "—" if average is None else f"{average:.{digits}f}"
        cells.append(f"**{text}**" if method in best_average else text)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Cells: mean ± sample std over seeds (number of seeds in parentheses); **bold**: best in the column; "
                 "Average: mean of the row's column means (only for complete rows).")
    lines.extend(f"Note: {n}." for n in table.notes)
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """Wide CSV in the table's layout: per column ``mean``, ``std`` and ``n`` (number of seeds), then Average."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["method", *[f"{c} {part}" for c in table.columns for part in ("mean", "std", "n")], "average"])
    for method, stats in table.rows.items():
        row: list[Any] = [method]
        for stat in stats:
            if stat is None:
                row += ["", "", 0]
            else:
                row += [f"{stat.mean:.6f}", "" if stat.n == 1 else f"{stat.std:.6f}", stat.n]
        average = table.average(method)
        row.append("" if average is None else f"{average:.6f}")
        writer.writerow(row)
    return buffer.getvalue()


def cells_csv(stats: dict[tuple, Stat]) -> str:
    """Long format: one row per (backbone, method, task, shots, n_p) with mean, std and the seeds behind it."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["backbone", "method", "task", "shots", "n_prompts", "mean", "std", "n_seeds", "seeds", "values"])
    for key in sorted(stats, key=lambda k: (k[0], k[1], k[2], _shots_key(k[3]), k[4])):
        stat = stats[key]
        writer.writerow([*key[:3], key[3], key[4], f"{stat.mean:.6f}", "" if stat.n == 1 else f"{stat.std:.6f}",
                         stat.n, " ".join(map(str, stat.seeds)), " ".join(f"{v:.6f}" for v in stat.values)])
    return buffer.getvalue()


def paired_csv(pairs: Sequence[Paired]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["method", "baseline", "column", "mean_diff", "std_diff", "n_pairs", "wins", "ties", "losses",
                     "p_sign_flip", "diffs"])
    for pair in pairs:
        writer.writerow([pair.method, pair.baseline, pair.column, f"{pair.mean:.6f}",
                         "" if pair.n == 1 else f"{pair.std:.6f}", pair.n, *pair.record, f"{pair.p_value:.6f}",
                         " ".join(f"{d:.6f}" for d in pair.diffs)])
    return buffer.getvalue()


def failures_section(records: Sequence[dict[str, Any]]) -> str:
    failed = [r for r in records if r.get("status", STATUS_OK) != STATUS_OK]
    if not failed:
        return ""
    lines = [f"### Failed cells ({len(failed)})", ""]
    lines += [f"- `{r.get('cell')}`: {r.get('error', 'unknown error')}" for r in failed]
    return "\n".join(lines) + "\n"


def metrics_line(records: Sequence[dict[str, Any]], metric: str | None) -> str:
    if metric:
        return f"Metric: {metric}."
    per_task = {}
    for record in records:
        if record.get("status", STATUS_OK) == STATUS_OK:
            per_task[record["task"]] = record.get("primary_metric")
    ordered = _order(set(per_task), list(TASKS))
    return "Metric: each task's primary metric (" + ", ".join(f"{t} {per_task[t]}" for t in ordered) + ")."


def build_report(
    results_dir: str | Path | Sequence[str | Path], out_dir: str | Path | None = None, *, metric: str | None = None,
    tasks: Sequence[str] | None = None, digits: int = 4, comparisons: Sequence[tuple[str, str]] | None = None,
) -> tuple[str, list[Path]]:
    """Write ``report.md``, one CSV per table, ``cells.csv`` and ``paired.csv`` to ``out_dir`` (default
    ``<first results directory>/report``). Several results directories are read as one; a method run with
    different settings gets one row per variant (see :func:`label_variants`). ``comparisons`` are (method, baseline) pairs for the paired-difference section
    (default: infoprompt against its ablations and the baselines present).

    Returns the Markdown text and the written paths.
    """
    directories = [results_dir] if isinstance(results_dir, str | Path) else list(results_dir)
    out = Path(out_dir) if out_dir is not None else Path(directories[0]) / "report"
    check_report_target(out)
    records = label_variants([record for directory in directories for record in load_records(directory)])
    where = ", ".join(str(d) for d in directories)
    if not records:
        raise UserError(f"results directory {where} holds no result records (task=*/method=*/.../seed=*.json)")
    if tasks:  # every section, the paired tests included, reads only the chosen columns
        records = [record for record in records if record.get("task") in tasks]
        if not records:
            raise UserError(f"--tasks {','.join(tasks)}: no record in {where} is of these tasks")
    stats = collect(records, metric)
    if not stats and not any(r.get("status") != STATUS_OK for r in records):
        raise UserError(f"no record in {where} has the metric {metric!r}")
    tables = build_tables(stats, tasks)
    finished = sum(1 for r in records if r.get("status", STATUS_OK) == STATUS_OK)
    backbones = sorted({r["backbone"] for r in records if "backbone" in r})
    parts = [
        f"## Results from {', '.join(f'`{d}`' for d in directories)}", "",
        f"{finished} finished run(s), {len(records) - finished} failed; backbone(s): {', '.join(backbones)}. "
        + metrics_line(records, metric), "",
    ]
    parts += [to_markdown(table, digits) for table in tables]
    pairs = paired_comparisons(records, comparisons, metric)
    if pairs:
        parts.append(paired_markdown(pairs, digits))
    parts += [section for section in (information_markdown(records), selection_markdown(records)) if section]
    failures = failures_section(records)
    if failures:
        parts.append(failures)
    text = "\n".join(parts)
    files = {"report.md": text}
    for table in tables:
        files[f"{table.name}.csv"] = to_csv(table)
        files[f"{table.name}.md"] = to_markdown(table, digits)
    files["cells.csv"] = cells_csv(stats)
    if pairs:
        files["paired.csv"] = paired_csv(pairs)
    write_report_directory(out, files)
    written = [out / name for name in files]
    return text, written


# What marks a directory as one build_report wrote (and may replace): these files are in it.
REPORT_MARKERS = ("report.md", "cells.csv")
# Names build_report writes; every other file of a report directory is carried over to the new one.
_OWN_OUTPUTS = (*REPORT_MARKERS, "paired.csv",
                *(f"*{stem}*{suffix}" for stem in (NP_TABLE, SHOTS_TABLE) for suffix in (".csv", ".md")))


def is_report_directory(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and all((path / name).is_file() for name in REPORT_MARKERS)


def check_report_target(out: Path) -> None:
    """Refuse, before any work, an output that is not a new or empty directory or an earlier report's."""
    check_name_lengths(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UserError(f"report output {out} exists and is not a directory; name a new or empty directory")
    if out.is_dir() and any(out.iterdir()) and not is_report_directory(out):
        raise UserError(f"report output {out} holds files and is not a report directory (one holding "
                        f"{' and '.join(REPORT_MARKERS)}), so it is left alone; name a new or empty directory")


def write_report_directory(out: Path, files: dict[str, str]) -> None:
    """Write ``files`` into a scratch directory beside ``out`` and swap it in whole: a kill or a full disk
    leaves the earlier report as it was (and no scratch), never half of each. Files of the earlier report
    directory that are not this module's outputs (notes, figures) move to the new one."""
    check_report_target(out)  # another report may have been put there meanwhile
    staging = scratch_directory(out, "cannot write the report")
    try:
        for name, text in files.items():
            with open(staging / name, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
        if out.is_dir():
            _carry_over(out, staging)
        replace_directory(staging, out)
    except OSError as error:
        raise UserError(f"cannot write the report {out}: {error.strerror}; the earlier report is unchanged") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _carry_over(old: Path, new: Path) -> None:
    for entry in old.iterdir():
        if not any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in _OWN_OUTPUTS):
            if entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, new / entry.name, symlinks=True)
            else:
                shutil.copy2(entry, new / entry.name, follow_symlinks=False)
