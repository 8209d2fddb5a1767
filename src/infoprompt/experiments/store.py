"""The results directory: one JSON record per sweep cell at ``<results>/<cell id>.json``, written atomically."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shlex
import socket
import time
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.experiments.grid import Cell
from infoprompt.gate import MAX_DOCUMENT_BYTES, parse_json
from infoprompt.io_utils import atomic_write_json, atomic_write_text, read_bytes, remove_scratch_directories

STATUS_OK = "ok"
STATUS_FAILED = "failed"
RUNS_DIR = "runs"
RECORD_GLOB = "task=*/method=*/shots=*/np=*/seed=*.json"
CLAIM_SUFFIX = ".claim"
TAKEOVER_SUFFIX = ".takeover"
# Seconds after which an empty or unreadable claim (a worker killed between creating and writing it, a full
# disk) counts as abandoned.
CLAIM_GRACE_S = 60.0


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
        record = parse_json(read_bytes(path, MAX_DOCUMENT_BYTES), str(path), limit=MAX_DOCUMENT_BYTES)
    except UserError as error:
        raise UserError(f"{error}: a damaged result record; delete it to rerun the cell") from None
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
            check_record(record, path)
            record.setdefault("cell", path.relative_to(root).with_suffix("").as_posix())
            records.append(record)
    return records


# What a finished record must hold for the tables, by field: a check of its type and the expected kind.
RECORD_FIELDS: dict[str, tuple[Any, str]] = {
    "task": (lambda v: isinstance(v, str), "a task name"),
    "method": (lambda v: isinstance(v, str), "a method name"),
    "backbone": (lambda v: isinstance(v, str), "a backbone name"),
    "shots": (lambda v: v == "full" or (isinstance(v, int) and not isinstance(v, bool) and v > 0), "a count or 'full'"),
    "n_prompts": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "metrics": (lambda v: isinstance(v, dict) and all(_finite(x) for x in v.values()), "an object of finite numbers"),
    "primary_metric": (lambda v: isinstance(v, str), "a metric name"),
    "settings": (lambda v: isinstance(v, dict) and all(isinstance(v.get(k, {}), dict) for k in ("training", "classifier")),
                 "an object"),
}
OPTIONAL_FIELDS = ("primary_metric", "settings")


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_record(record: dict[str, Any], path: Path) -> None:
    """Refuse a record whose fields a report needs are missing or of the wrong type, naming the first."""
    status = record.get("status", STATUS_OK)
    if not isinstance(status, str):
        raise UserError(f"{path}: result record field 'status' must be a string, got {status!r}")
    if status != STATUS_OK:
        return
    for name, (valid, kind) in RECORD_FIELDS.items():
        if name in OPTIONAL_FIELDS and name not in record:
            continue
        if name not in record:
            raise UserError(f"{path}: result record lacks the field {name!r}; delete it to rerun the cell")
        if not valid(record[name]):
            raise UserError(f"{path}: result record field {name!r} must be {kind}, got {record[name]!r}")


def claim_path(results_dir: str | Path, cell: Cell) -> Path:
    return Path(results_dir) / f"{cell.id}{CLAIM_SUFFIX}"


def read_claim(path: Path) -> dict[str, Any] | None:
    """The claim at ``path`` (``{host, pid, started}``); ``None`` when absent. An empty or unreadable claim
    counts as one of an unknown worker, with ``age`` in seconds: it is left alone until that passes
    :data:`CLAIM_GRACE_S` (a worker writes its claim right after creating it)."""
    try:
        text = path.read_text(encoding="utf-8")
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        text, age = "", _age(path)
    try:
        claim = parse_json(text, str(path), limit=MAX_DOCUMENT_BYTES)
    except UserError:
        claim = None
    if isinstance(claim, dict) and isinstance(claim.get("host"), str) and isinstance(claim.get("pid"), int):
        return claim
    return {"host": "?", "pid": -1, "started": "?", "unreadable": True, "age": age}


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def is_stale(claim: dict[str, Any]) -> bool:
    """A claim of this host whose process is gone (a killed worker), or an unreadable claim older than
    :data:`CLAIM_GRACE_S`; readable claims of other hosts are never stale here."""
    if claim.get("unreadable"):
        return claim.get("age", 0.0) > CLAIM_GRACE_S
    return claim.get("host") == socket.gethostname() and isinstance(claim.get("pid"), int) and not _alive(claim["pid"])


def _claim_body() -> str:
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                       "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}, allow_nan=False)


def try_claim(results_dir: str | Path, cell: Cell) -> bool:
    """Create the cell's claim file atomically (``O_EXCL``); ``False`` if a live worker holds it.

    Several sweeps, on one machine or many sharing the results directory, can then work through the same
    grid without running a cell twice; a stale claim (see :func:`is_stale`) is taken over, by one worker only,
    which also removes the working copies the killed worker left beside the cell's record.
    """
    path = claim_path(results_dir, cell)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return _take_over(path, record_path(results_dir, cell))
    except OSError as error:
        raise UserError(f"cannot claim {path}: {error.strerror}") from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(_claim_body())
    except OSError as error:
        path.unlink(missing_ok=True)
        raise UserError(f"cannot write the claim {path}: {error.strerror}") from None
    return True


def _take_over(path: Path, record: Path) -> bool:
    """Replace a stale claim with this worker's. Checking and replacing happen under a takeover lock
    (``<claim>.takeover``, ``O_EXCL``), so of two workers that find the same stale claim only one takes it."""
    claim = read_claim(path)
    if claim is not None and not is_stale(claim):
        return False
    lock = path.with_name(path.name + TAKEOVER_SUFFIX)
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        if _age(lock) > CLAIM_GRACE_S:
            lock.unlink(missing_ok=True)  # a takeover that died half-way; a later try may proceed
        return False
    except OSError as error:
        raise UserError(f"cannot claim {path}: {error.strerror}") from None
    try:
        claim = read_claim(path)
        if claim is None:  # released meanwhile: claim it the ordinary way
            try:
                descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(_claim_body())
            return True
        if not is_stale(claim):
            return False
        atomic_write_text(path, _claim_body())  # an atomic replace: the claim file never disappears
        if not claim.get("unreadable"):
            remove_scratch_directories(record, claim["pid"])  # the killed worker's working copies
        return True
    finally:
        lock.unlink(missing_ok=True)


def foreign_claim_note(path: Path) -> str | None:
    """For a readable claim of another host (which this host cannot tell dead from alive): who holds it, for
    how long, and how to release it if that worker is gone; ``None`` for claims of this host."""
    claim = read_claim(path)
    if claim is None or claim.get("unreadable") or claim.get("host") == socket.gethostname():
        return None
    return (f"held by host {claim['host']} (pid {claim['pid']}) for {_duration(_age(path))}; if that worker is "
            f"gone, release it with: rm {shlex.quote(str(path))}")


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {rest % 60} s"


def release_claim(results_dir: str | Path, cell: Cell) -> None:
    """Remove the cell's claim if it is this process's (a claim taken over by another worker stays)."""
    path = claim_path(results_dir, cell)
    claim = read_claim(path)
    if claim is not None and claim.get("host") == socket.gethostname() and claim.get("pid") == os.getpid():
        path.unlink(missing_ok=True)
