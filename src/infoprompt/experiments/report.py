"""A report from results directories: paper-style tables, paired tests and diagnostics, written as one directory."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.experiments.diagnostics import information_markdown, selection_markdown
from infoprompt.experiments.full_vs_few import full_vs_few, full_vs_few_csv, full_vs_few_markdown
from infoprompt.experiments.paired import paired_comparisons, paired_markdown
from infoprompt.experiments.report_format import cells_csv, paired_csv, to_csv, to_markdown
from infoprompt.experiments.store import STATUS_OK, load_records
from infoprompt.experiments.tables import build_tables, collect, order_names
from infoprompt.io_utils import (
    atomic_write_json,
    check_name_lengths,
    read_json_object,
    replace_directory,
    scratch_directory,
)
from infoprompt.tasks import TASKS

FULL_VS_FEW_CSV = "full-vs-few.csv"
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
    ordered = order_names(set(per_task), list(TASKS))
    return "Metric: each task's primary metric (" + ", ".join(f"{t} {per_task[t]}" for t in ordered) + ")."


def build_report(
    results_dir: str | Path | Sequence[str | Path], out_dir: str | Path | None = None, *, metric: str | None = None,
    tasks: Sequence[str] | None = None, digits: int = 4, comparisons: Sequence[tuple[str, str]] | None = None,
    full_vs_few_comparisons: Sequence[tuple[str, str]] | None = None,
) -> tuple[str, list[Path]]:
    """Write ``report.md``, one CSV per table, ``cells.csv``, ``paired.csv`` and ``full-vs-few.csv`` to
    ``out_dir`` (default ``<first results directory>/report``). Several results directories are read as one; a
    method run with different settings gets one row per variant (see :func:`label_variants`). ``comparisons``
    are (method, baseline) pairs for the paired-difference section (default: infoprompt against its ablations
    and the baselines present); ``full_vs_few_comparisons`` those whose gain at few shots is set against their
    gain with the full training split (default: ``comparisons``, where both data sizes ran; see
    :func:`~infoprompt.experiments.full_vs_few.full_vs_few`).

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
        if metric is None:  # the task's primary metric: what cells trained without an evaluation lack
            raise UserError(f"no record in {where} has metrics to tabulate (a sweep on your own file evaluates "
                            f"its cells only with --eval-file)")
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
    explicit = full_vs_few_comparisons is not None
    shifts = full_vs_few(records, full_vs_few_comparisons if explicit else comparisons, metric, explicit=explicit)
    if shifts:
        parts.append(full_vs_few_markdown(shifts, digits))
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
    if shifts:
        files[FULL_VS_FEW_CSV] = full_vs_few_csv(shifts)
    write_report_directory(out, files)
    written = [out / name for name in (*files, MANIFEST_NAME)]
    return text, written


# What marks a directory as one build_report wrote: its manifest, naming every file the report wrote with its
# SHA-256. Only those files are ever replaced or removed; every other file of the directory is carried over.
MANIFEST_NAME = "report-manifest.json"
MANIFEST_FORMAT = 1
# How the report.md and cells.csv of a report written before the manifest begin: such a directory is adopted.
LEGACY_STARTS = {"report.md": "## Results from `", "cells.csv": "backbone,method,task,shots,n_prompts,mean,std,"}


def read_manifest(out: Path) -> dict[str, str] | None:
    """The files (name -> SHA-256) an earlier report wrote into ``out``; ``None`` when it has no manifest."""
    path = out / MANIFEST_NAME
    if not path.is_file():
        return None
    data = read_json_object(path)
    files = data.get("files")
    if (data.get("format") != MANIFEST_FORMAT or not isinstance(files, dict)
            or not all(isinstance(name, str) and _plain_name(name) and isinstance(digest, str)
                       for name, digest in files.items())):
        raise UserError(f"{path}: not a report manifest this version wrote (format {MANIFEST_FORMAT}, 'files' "
                        "mapping names to SHA-256), so the directory is left alone; name a new directory")
    return files


def _is_legacy_report(out: Path) -> bool:
    """Whether ``out`` holds a report.md and a cells.csv that begin as a report wrote them before manifests."""
    for name, start in LEGACY_STARTS.items():
        path = out / name
        if path.is_symlink() or not path.is_file():
            return False
        with path.open("rb") as handle:
            if handle.read(len(start)).decode("utf-8", "replace") != start:
                return False
    return True


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..", MANIFEST_NAME) and "/" not in name and "\\" not in name


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_report_target(out: Path, writing: Sequence[str] = ()) -> dict[str, str]:
    """Refuse, before any work, an output that is not a new or empty directory or an earlier report's, and a
    report that would replace a file it did not write: a file the manifest names but that was changed since,
    or one of ``writing`` (this report's file names) that no report wrote. Returns the old manifest's files."""
    check_name_lengths(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UserError(f"report output {out} exists and is not a directory; name a new or empty directory")
    if not out.is_dir() or not any(out.iterdir()):
        return {}
    written = read_manifest(out)
    if written is None and _is_legacy_report(out):
        # A report of a version before the manifest: this report's files replace theirs, all else is kept.
        return {name: _digest(out / name) for name in writing if (out / name).is_file()}
    if written is None:
        raise UserError(f"report output {out} holds files and is not a report directory (one holding the "
                        f"{MANIFEST_NAME} a report writes), so it is left alone; name a new or empty directory")
    for name, digest in written.items():
        path = out / name
        if path.is_symlink() or (path.exists() and (not path.is_file() or _digest(path) != digest)):
            raise UserError(f"report output {out}: {name} was changed since the report wrote it, so it is left "
                            f"alone; move it away or name a new directory")
    for name in writing:
        if name not in written and (out / name).exists():
            raise UserError(f"report output {out} holds {name}, which this report would write but no report "
                            f"wrote there, so it is left alone; move it away or name a new directory")
    return written


def write_report_directory(out: Path, files: dict[str, str]) -> None:
    """Write ``files`` and their manifest into a scratch directory beside ``out`` and swap it in whole: a kill or
    a full disk leaves the earlier report as it was (and no scratch), never half of each. Files of the earlier
    report directory that its manifest does not name (notes, figures) move to the new one."""
    written = check_report_target(out, list(files))  # another report may have been put there meanwhile
    staging = scratch_directory(out, "cannot write the report")
    try:
        for name, text in files.items():
            with open(staging / name, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
        manifest = {"format": MANIFEST_FORMAT, "written_by": "infoprompt report",
                    "files": {name: _digest(staging / name) for name in sorted(files)}}
        atomic_write_json(staging / MANIFEST_NAME, manifest)
        if out.is_dir():
            _carry_over(out, staging, {*written, MANIFEST_NAME})
        replace_directory(staging, out)
    except OSError as error:
        raise UserError(f"cannot write the report {out}: {error.strerror}; the earlier report is unchanged") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _carry_over(old: Path, new: Path, written: set[str]) -> None:
    """Every entry of ``old`` that no report wrote (``written``), copied into ``new``."""
    for entry in old.iterdir():
        if entry.name not in written:
            if entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, new / entry.name, symlinks=True)
            else:
                shutil.copy2(entry, new / entry.name, follow_symlinks=False)
