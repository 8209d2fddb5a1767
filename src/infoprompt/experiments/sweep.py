"""Run the cells of a sweep: skip finished ones, record failures and go on, reuse one backbone per process."""

from __future__ import annotations

import datetime as dt
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from infoprompt.backbones import Backbone, load_backbone
from infoprompt.errors import UserError
from infoprompt.experiments.grid import Cell, shots_label
from infoprompt.experiments.store import (
    STATUS_FAILED,
    STATUS_OK,
    claim_path,
    foreign_claim_note,
    is_finished,
    is_stale,
    read_claim,
    read_record,
    record_path,
    release_claim,
    run_dir,
    try_claim,
    write_record,
)
from infoprompt.io_utils import scratch_directory
from infoprompt.pipeline import run_training
from infoprompt.progress import bar_disabled
from infoprompt.training.runtime import process_state

Runner = Callable[..., dict[str, Any]]


@dataclass
class SweepSummary:
    """What one sweep invocation did (cells of this shard only)."""

    cells: int = 0
    skipped: int = 0
    claimed_elsewhere: int = 0
    finished: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        elsewhere = f", {self.claimed_elsewhere} left to other workers" if self.claimed_elsewhere else ""
        return (f"{self.cells} cell(s): {self.skipped} already finished, {self.finished} finished now, "
                f"{len(self.failed)} failed{elsewhere} ({self.seconds:.0f} s)")


def cell_status(results_dir: Path, cells: Sequence[Cell]) -> dict[str, str]:
    """``done`` / ``running`` / ``failed`` / ``todo`` per cell id (``running``: a live worker's claim);
    a finished record made with other settings, or from another version of the user's file, is an error."""
    status: dict[str, str] = {}
    for cell in cells:
        record = read_record(record_path(results_dir, cell))
        if is_finished(record):
            stale = other_data_version(record, cell, record_path(results_dir, cell))
            if stale is not None:
                raise UserError(stale)
            saved = record.get("settings_hash")
            if saved is not None and saved != cell.settings_hash:
                raise UserError(
                    f"{record_path(results_dir, cell)} was produced with other settings ({record.get('settings')}) than "
                    f"this grid's ({cell.settings()}); use a fresh results directory or delete that record"
                )
            status[cell.id] = "done"
        elif (claim := read_claim(claim_path(results_dir, cell))) is not None and not is_stale(claim):
            status[cell.id] = "running"
        else:
            status[cell.id] = "failed" if record is not None else "todo"
    return status


def other_data_version(record: dict[str, Any], cell: Cell, path: Path) -> str | None:
    """The one-line error for a finished record of a cell on the user's file that was made from another version
    of that file (its SHA-256 differs from the file's now); ``None`` when it was not."""
    if cell.files is None:
        return None
    settings = record.get("settings")
    saved = settings.get("data") if isinstance(settings, dict) else None
    if not isinstance(saved, dict):
        return None  # not a record of a file cell: the settings check names the difference
    for role, file, now in cell.files.files():
        then = saved.get(f"{role}_sha256")
        if isinstance(then, str) and then != now:
            return (f"{path}: made from another version of {file} (sha256 {then[:12]} then, {now[:12]} now); "
                    f"restore that file, or sweep the new one into a fresh --results directory")
    return None


def check_data_unchanged(cell: Cell) -> None:
    """Refuse to run a cell on a user's file that changed since the sweep loaded it (its finished cells used
    the earlier version, which the records' hashes name)."""
    if cell.files is None:
        return
    for file, then, now in cell.files.changed():
        raise UserError(f"{file} changed while the sweep ran (sha256 {then[:12]} when it started, {now[:12]} now): "
                        f"the cells finished before used the earlier file; restore it, or sweep the new one into a "
                        f"fresh --results directory")


def failure_record(cell: Cell, error: BaseException, seconds: float) -> dict[str, Any]:
    return {
        "status": STATUS_FAILED,
        "error": f"{type(error).__name__}: {error}",
        "traceback": traceback.format_exc(),
        "cell": cell.id,
        "task": cell.task,
        "method": cell.method,
        "shots": shots_label(cell.shots) if cell.shots is None else cell.shots,
        "n_prompts": cell.n_prompts,
        "seed": cell.seed,
        "backbone": cell.backbone,
        "spec": cell.run_spec().to_json(),
        "settings": cell.settings(),
        "settings_hash": cell.settings_hash,
        "seconds": seconds,
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "recorded_at": time.time(),  # to the sub-second, unlike file times, which lag on coarse kernel clocks
    }


class BackboneCache:
    """Backbones loaded once per sweep process and shared by every cell that names them."""

    def __init__(self, loader: Callable[..., Backbone] = load_backbone):
        self.loader = loader
        self.loaded: dict[tuple[str, str | None], Backbone] = {}

    def get(self, name: str, cache_dir: str | None) -> Backbone:
        key = (name, cache_dir)
        if key not in self.loaded:
            self.loaded[key] = self.loader(name, cache_dir=cache_dir)
        backbone = self.loaded[key]
        backbone.model.eval()  # a failed run may have left dropout on; frozen encoders run in eval mode
        return backbone


def run_sweep(
    cells: Sequence[Cell],
    results_dir: str | Path,
    *,
    save_runs: bool = False,
    runner: Runner = run_training,
    backbones: BackboneCache | None = None,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
    pass_started: float | None = None,
) -> SweepSummary:
    """Run every unfinished cell of ``cells`` and store one record per cell in ``results_dir``.

    A finished cell (record with ``status: ok``) is skipped, so a killed sweep resumes where it stopped; a
    cell that raises is stored with ``status: failed`` and its error, and the sweep goes on (a rerun tries it
    again). ``KeyboardInterrupt`` stops the sweep, and so does a backbone that cannot be loaded (the loader's
    error is raised); the cell in progress leaves no record. Each cell is claimed
    (``<cell>.claim``) while it runs, so sweeps started side by side on one results directory share the work.
    A failure recorded after ``pass_started`` (a ``time.time()``; default: when this call starts) counts as
    taken, so workers of one pass do not each run a failing cell.
    """
    results_dir = Path(results_dir)
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create the results directory {results_dir}: {error.strerror}") from None
    echo = echo or tqdm.write
    backbones = backbones or BackboneCache()
    processes = process_state()
    started = time.perf_counter()
    pass_started = time.time() if pass_started is None else pass_started
    status = cell_status(results_dir, cells)
    todo = [cell for cell in cells if status[cell.id] != "done"]
    claims = processes.num_processes == 1
    summary = SweepSummary(cells=len(cells), skipped=len(cells) - len(todo))
    bar = tqdm(todo, desc="sweep", unit="cell", disable=bar_disabled(progress and processes.is_main_process))
    for number, cell in enumerate(bar, start=1):
        bar.set_postfix_str(cell.id)
        # Several sweeps may share this directory: take the cell only if no live worker holds it and nobody
        # finished it since this sweep started. (The processes of one multi-process sweep are one worker and
        # must all run the same cells, so they do not claim.)
        if claims and (not try_claim(results_dir, cell) or _taken_meanwhile(results_dir, cell, pass_started)):
            summary.claimed_elsewhere += 1
            note = foreign_claim_note(claim_path(results_dir, cell))
            if note is not None:
                echo(f"[{number}/{len(todo)}] {cell.id}: skipped, {note}")
            continue
        try:
            message, seconds = _run_cell(cell, results_dir, runner, backbones, save_runs, processes.is_main_process, summary)
        finally:
            if claims:
                release_claim(results_dir, cell)
        echo(f"[{number}/{len(todo)}] {cell.id}: {message} ({seconds:.1f} s)")
    bar.close()
    summary.seconds = time.perf_counter() - started
    return summary


def _taken_meanwhile(results_dir: Path, cell: Cell, pass_started: float) -> bool:
    """Whether another worker finished the cell, or failed it during this pass (a rerun retries it, but
    every worker of one pass does not)."""
    path = record_path(results_dir, cell)
    record = read_record(path)
    if is_finished(record) or (record is not None and _recorded_since(record, path, pass_started)):
        release_claim(results_dir, cell)
        return True
    return False


def _recorded_since(record: dict[str, Any], path: Path, moment: float) -> bool:
    stamp = record.get("recorded_at")
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return stamp >= moment
    try:
        return path.stat().st_mtime >= moment
    except OSError:
        return False


def _run_cell(
    cell: Cell, results_dir: Path, runner: Runner, backbones: BackboneCache, save_runs: bool, is_main: bool, summary: SweepSummary,
) -> tuple[str, float]:
    """Run one cell and store its record (finished or failed); returns the log message and the seconds taken."""
    started = time.perf_counter()
    # Not the cell's failure but the machine's (a missing package, an unknown name): every cell naming this
    # backbone would fail the same way, so the sweep stops with the loader's one-line error and records nothing.
    # So does a user's file that changed under the sweep: every later cell would train on another version of it.
    check_data_unchanged(cell)
    backbone = backbones.get(cell.backbone, cell.cache_dir)
    scratch = out = None
    if is_main and save_runs:
        out = run_dir(results_dir, cell)
    elif is_main:
        # A cell that keeps no run still saves one, beside its record, so that the record carries the size on
        # disk of the adapter its save_pretrained writes (adapter_bytes); the scratch goes once measured.
        scratch = scratch_directory(record_path(results_dir, cell), "cannot measure the adapter of")
        out = scratch / "run"
    try:
        record = runner(cell.run_spec(), out, overwrite=True, backbone=backbone)
    except KeyboardInterrupt:
        raise
    except Exception as error:  # noqa: BLE001 - one broken cell must not stop the sweep
        record = failure_record(cell, error, time.perf_counter() - started)
        summary.failed.append((cell.id, record["error"]))
        message = f"FAILED {record['error']}"
    else:
        record = {**record, "status": STATUS_OK, "cell": cell.id, "settings": cell.settings(),
                  "settings_hash": cell.settings_hash}
        summary.finished += 1
        metric = record.get("primary_metric")
        value = record.get("metrics", {}).get(metric)
        message = f"{metric}={value:.4f}" if isinstance(value, float) else "ok"
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if is_main:
        write_record(results_dir, cell, record)
    return message, time.perf_counter() - started
