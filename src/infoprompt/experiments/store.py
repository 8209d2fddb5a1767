"""The results directory: one JSON record per sweep cell at ``<results>/<cell id>.json``, written atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.experiments.grid import Cell
from infoprompt.io_utils import atomic_write_json

STATUS_OK = "ok"
STATUS_FAILED = "failed"
RUNS_DIR = "runs"
RECORD_GLOB = "task=*/method=*/shots=*/np=*/seed=*.json"


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
