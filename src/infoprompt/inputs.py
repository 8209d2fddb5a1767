"""Read prediction inputs (TSV with a header, JSONL, or stdin lines) into task field dicts."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.tasks import TaskSpec


def _from_json(line: str, where: str, task: TaskSpec) -> dict[str, str]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise UserError(f"{where}: not valid JSON ({error.msg})") from None
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object with field(s) {', '.join(task.fields)}")
    missing = [name for name in task.fields if not isinstance(row.get(name), str)]
    if missing:
        raise UserError(f"{where}: missing text field(s) {', '.join(missing)}")
    return {name: row[name] for name in task.fields}


def _from_cells(cells: list[str], where: str, task: TaskSpec) -> dict[str, str]:
    if len(cells) != len(task.fields):
        raise UserError(f"{where}: expected {len(task.fields)} tab-separated field(s) ({', '.join(task.fields)}), found {len(cells)}")
    return dict(zip(task.fields, cells, strict=True))


def read_inputs(source: str, task: TaskSpec) -> list[dict[str, str]]:
    """``source`` is a ``.jsonl`` file, a ``.tsv`` file whose header names the fields, or ``-`` for stdin.

    On stdin each line is a JSON object or the task's fields separated by tabs.
    """
    if source == "-":
        return _read_lines(sys.stdin, "<stdin>", task, header=None)
    path = Path(source)
    if not path.is_file():
        raise UserError(f"input file {path} not found")
    with path.open(encoding="utf-8-sig") as handle:
        if path.suffix == ".jsonl":
            return [_from_json(line, f"{path}:{n}", task) for n, line in enumerate(handle, 1) if line.strip()]
        if path.suffix == ".tsv":
            header_line = handle.readline().rstrip("\r\n")
            header = header_line.split("\t")
            missing = [name for name in task.fields if name not in header]
            if missing:
                raise UserError(f"{path}:1: header {header} lacks column(s) {', '.join(missing)}")
            return _read_lines(handle, str(path), task, header=header, first_line=2)
    raise UserError(f"input file {path}: unknown format (use .tsv with a header, .jsonl, or - for stdin)")


def _read_lines(lines: Iterable[str], name: str, task: TaskSpec, header: list[str] | None, first_line: int = 1) -> list[dict[str, str]]:
    rows = []
    for number, raw in enumerate(lines, first_line):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        where = f"{name}:{number}"
        if header is not None:
            cells = line.split("\t")
            if len(cells) != len(header):
                raise UserError(f"{where}: expected {len(header)} tab-separated columns, found {len(cells)}")
            rows.append({field: cells[header.index(field)] for field in task.fields})
        elif line.lstrip().startswith("{"):
            rows.append(_from_json(line, where, task))
        else:
            rows.append(_from_cells(line.split("\t"), where, task))
    return rows
