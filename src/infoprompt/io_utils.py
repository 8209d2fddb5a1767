"""Atomic file writes: a reader never sees a half-written result, config or adapter."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a JSON file that must hold an object; a broken file is a :class:`UserError` naming it."""
    from infoprompt.errors import UserError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and rename it into place."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes owner-only files; results should read like any other
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


@contextmanager
def staged_directory(final: str | os.PathLike[str], overwrite: bool = False) -> Iterator[Path]:
    """Yield a scratch directory that replaces ``final`` only when the block finishes without error.

    A run that fails or is interrupted leaves ``final`` untouched (or absent) and removes its scratch
    directory ``.<name>.partial``, so that nothing half-written is left behind or taken for a finished run.
    """
    final_path = Path(final)
    if final_path.exists() and not overwrite:
        from infoprompt.errors import UserError

        raise UserError(f"output directory {final_path} already exists (pass --overwrite to replace it)")
    final_path.parent.mkdir(parents=True, exist_ok=True)
    staging = final_path.parent / f".{final_path.name}.partial"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if final_path.exists():
        backup = final_path.parent / f".{final_path.name}.old"
        if backup.exists():
            shutil.rmtree(backup)
        os.replace(final_path, backup)
        os.replace(staging, final_path)
        shutil.rmtree(backup)
    else:
        os.replace(staging, final_path)
