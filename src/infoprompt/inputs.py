"""Read prediction inputs (TSV with a header, JSONL, or stdin lines) into task field dicts."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.io_utils import decode_lines
from infoprompt.tasks import TaskSpec

ENCODING_HINT = ", or pass --encoding"


@dataclass
class Inputs:
    """Rows to predict, with the input line each came from (blank lines are skipped and counted)."""

    rows: list[dict[str, str]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    skipped: int = 0

    def add(self, row: dict[str, str], line: int, where: str, task: TaskSpec) -> None:
        empty = [name for name in task.fields if not row[name].strip()]
        if empty:
            raise UserError(f"{where}: empty text field(s) {', '.join(empty)}")
        self.rows.append(row)
        self.lines.append(line)
        self.sources.append(where)


def _from_json(line: str, where: str, task: TaskSpec) -> dict[str, str]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise UserError(f"{where}: not valid JSON ({error.msg})") from None
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply") from None
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


def read_inputs(source: str, task: TaskSpec, encoding: str = "utf-8") -> Inputs:
    """``source`` is a ``.jsonl`` file, a ``.tsv`` file whose header names the fields, or ``-`` for stdin.

    On stdin each line is a JSON object or the task's fields separated by tabs. Every row keeps its line
    number; empty text is refused, as in training data.
    """
    if source == "-":
        return _read_lines(decode_lines(sys.stdin.buffer.read(), "<stdin>", encoding, ENCODING_HINT), "<stdin>", task)
    path = Path(source)
    if path.suffix not in (".jsonl", ".tsv"):
        raise UserError(f"input file {path}: unknown format (use .tsv with a header, .jsonl, or - for stdin)")
    if not path.is_file():
        raise UserError(f"input file {path} not found")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    lines = decode_lines(data, str(path), encoding, ENCODING_HINT)
    if path.suffix == ".jsonl":
        return _read_lines(lines, str(path), task, json_only=True)
    header = lines[0][1].split("\t") if lines else []
    missing = [name for name in task.fields if name not in header]
    if missing:
        raise UserError(f"{path}:1: header {header} lacks column(s) {', '.join(missing)}")
    return _read_lines(lines[1:], str(path), task, header=header)


def _read_lines(
    lines: list[tuple[int, str]], name: str, task: TaskSpec, header: list[str] | None = None, json_only: bool = False,
) -> Inputs:
    inputs = Inputs()
    last = lines[-1][0] if lines else 0
    for number, line in lines:
        if not line.strip():
            inputs.skipped += number < last or bool(line)  # what follows the last line end is no blank line
            continue
        where = f"{name}:{number}"
        if header is not None:
            cells = line.split("\t")
            if len(cells) != len(header):
                raise UserError(f"{where}: expected {len(header)} tab-separated columns, found {len(cells)}")
            row = {field: cells[header.index(field)] for field in task.fields}
        elif json_only or line.lstrip().startswith("{"):
            row = _from_json(line, where, task)
        else:
            row = _from_cells(line.split("\t"), where, task)
        inputs.add(row, number, where, task)
    return inputs
