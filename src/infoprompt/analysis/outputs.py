"""Atomic writers for the numbers behind a figure: JSON, CSV and NPZ (never pickle)."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from infoprompt.errors import UserError
from infoprompt.io_utils import atomic_write_bytes, atomic_write_text, finite_json
from infoprompt.io_utils import atomic_write_json as _strict_write_json

__all__ = ["atomic_write_json", "load_npz", "output_path", "write_csv", "write_npz"]


def atomic_write_json(path: str | os.PathLike[str], obj: object) -> None:
    """A figure's numbers as JSON; an undefined statistic (a std of one run) is written as ``"nan"``."""
    _strict_write_json(path, finite_json(obj))


def output_path(out: str | os.PathLike[str], name: str, suffix: str) -> Path:
    """``<out>/<name><suffix>``; ``out`` is a directory, created when missing."""
    directory = Path(out)
    if directory.exists() and not directory.is_dir():
        raise UserError(f"--out {directory} exists and is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{name}{suffix}"


def write_csv(path: str | os.PathLike[str], header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_cell(value) for value in row])
    atomic_write_text(path, buffer.getvalue())


def _cell(value: object) -> object:
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def write_npz(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> None:
    """Write plain numeric / string arrays; object arrays are refused so the file loads without pickle."""
    checked = {}
    for name, value in arrays.items():
        array = np.asarray(value)
        if array.dtype == object:
            raise TypeError(f"array {name!r} has dtype object, which would need pickle")
        checked[name] = array
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **checked)
    atomic_write_bytes(path, buffer.getvalue())


def load_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}
