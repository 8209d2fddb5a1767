"""The results directory: one JSON record per sweep cell at ``<results>/<cell id>.json``, written atomically."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.experiments.grid import Cell
from infoprompt.io_utils import atomic_write_json

STATUS_OK = "ok"
STATUS_FAILED = "failed"
RUNS_DIR = "runs"
RECORD_GLOB = "task=*/method=*/shots=*/np=*/seed=*.json"
CLAIM_SUFFIX = ".claim"


def record_path(results_dir: str | Path, cell: Cell) -> Path:
    return Path(results_dir) / f"{cell.id}.json"


def run_dir(results_dir: str | Path, cell: Cell) -> Path:
    """Where ``--save-runs`` keeps a cell's adapter and training log."""
    return Path(results_dir) / RUNS_DIR / cell.id


def read_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path``; ``None`` when it is absent. A damaged file is a user-visible error."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: damaged result record ({error}); delete it to rerun the cell") from None
    if not isinstance(record, dict):
        raise UserError(f"{path}: a result record must be a JSON object")
    return record


def is_finished(record: dict[str, Any] | None) -> bool:
    return record is not None and record.get("status") == STATUS_OK


def write_record(results_dir: str | Path, cell: Cell, record: dict[str, Any]) -> Path:
    path = record_path(results_dir, cell)
    atomic_write_json(path, record)
    return path


def load_records(results_dir: str | Path) -> list[dict[str, Any]]:
    """Every record below ``results_dir`` (finished and failed), in path order."""
    root = Path(results_dir)
    if not root.is_dir():
        raise UserError(f"results directory {root} does not exist")
    records = []
    for path in sorted(root.glob(RECORD_GLOB)):
        record = read_record(path)
        if record is not None:
            record.setdefault("cell", path.relative_to(root).with_suffix("").as_posix())
            records.append(record)
    return records


def claim_path(results_dir: str | Path, cell: Cell) -> Path:
    return Path(results_dir) / f"{cell.id}{CLAIM_SUFFIX}"


def read_claim(path: Path) -> dict[str, Any] | None:
    """The claim at ``path`` (``{host, pid, started}``); ``None`` when absent. An unreadable claim counts as
    one of an unknown worker, so it is left alone rather than run twice."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        claim = json.loads(text)
    except json.JSONDecodeError:
        claim = None
    return claim if isinstance(claim, dict) else {"host": "?", "pid": -1, "started": "?"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(claim: dict[str, Any]) -> bool:
    """A claim of this host whose process is gone (a killed worker); claims of other hosts are never stale here."""
    return claim.get("host") == socket.gethostname() and isinstance(claim.get("pid"), int) and not _alive(claim["pid"])


def try_claim(results_dir: str | Path, cell: Cell) -> bool:
    """Create the cell's claim file atomically (``O_EXCL``); ``False`` if a live worker holds it.

    Several sweeps, on one machine or many sharing the results directory, can then work through the same
    grid without running a cell twice; the claim of a killed worker on this host is taken over.
    """
    path = claim_path(results_dir, cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                       "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
    for _ in range(2):
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            claim = read_claim(path)
            if claim is not None and not is_stale(claim):
                return False
            path.unlink(missing_ok=True)  # a dead worker's claim: take it over
            continue
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(body)
        return True
    return False


def release_claim(results_dir: str | Path, cell: Cell) -> None:
    claim_path(results_dir, cell).unlink(missing_ok=True)
