"""Redraw a CMI or landscape figure from the numbers saved next to it, without touching a model."""

from __future__ import annotations

from pathlib import Path

from infoprompt.analysis.cmi_report import draw_cmi, read_cmi_values
from infoprompt.analysis.landscape_report import draw_landscape
from infoprompt.analysis.outputs import load_npz
from infoprompt.errors import UserError
from infoprompt.gate import MAX_DOCUMENT_BYTES, parse_json
from infoprompt.io_utils import read_bytes


def redraw(json_path: str | Path) -> Path:
    """Redraw a CMI or landscape figure from the numbers saved next to it; returns the PNG path."""
    json_path = Path(json_path)
    if not json_path.is_file():
        raise UserError(f"{json_path} does not exist")
    record = parse_json(read_bytes(json_path, MAX_DOCUMENT_BYTES), str(json_path), limit=MAX_DOCUMENT_BYTES)
    kind = record.get("analysis") if isinstance(record, dict) else None
    png = json_path.with_suffix(".png")
    if kind == "cmi":
        draw_cmi(record, read_cmi_values(_sibling(json_path, ".csv")), png)
    elif kind == "landscape":
        draw_landscape(record, load_npz(_sibling(json_path, ".npz")), png)
    else:
        raise UserError(
            f"{json_path}: not the record of a cmi or landscape analysis (curves: rerun analyze curves)"
        )
    return png


def _sibling(path: Path, suffix: str) -> Path:
    sibling = path.with_suffix(suffix)
    if not sibling.is_file():
        raise UserError(f"{sibling} (the numbers behind {path.with_suffix('.png').name}) is missing")
    return sibling
