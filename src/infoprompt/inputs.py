"""Read prediction inputs (plain text lines, CSV or TSV with a header, JSONL, or stdin lines) into task field dicts.

A column or key names a task field by the field's name (``sentence``, ``text``) or, for an adapter trained on
the user's own file, also by that file's column name (``utterance``), so the file an adapter was trained on
can be fed to ``predict`` as it is (its label column is ignored).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.io_utils import decode_lines
from infoprompt.tasks import TaskSpec, UserTask

ENCODING_HINT = ", or pass --encoding"
INPUT_FORMATS = (".txt", ".csv", ".tsv", ".jsonl")


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


def column_names(task: TaskSpec) -> dict[str, tuple[str, ...]]:
    """Field -> the column or key names that may hold it, in order of preference: a user file's column (the one
    the adapter was trained on), then the field's own name."""
    columns = task.columns.field_columns() if isinstance(task, UserTask) else {}
    return {name: tuple(dict.fromkeys((columns.get(name, name), name))) for name in task.fields}


def _pick(record: dict[str, object], task: TaskSpec) -> dict[str, object] | None:
    """``record``'s cell for each field under one of its names; ``None`` if a field has none."""
    row: dict[str, object] = {}
    for name, keys in column_names(task).items():
        key = next((key for key in keys if key in record), None)
        if key is None:
            return None
        row[name] = record[key]
    return row


def _from_json(line: str, where: str, task: TaskSpec) -> dict[str, str]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise UserError(f"{where}: not valid JSON ({error.msg})") from None
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply") from None
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object with field(s) {', '.join(task.fields)}")
    picked = _pick(row, task) or {}
    missing = [" or ".join(keys) for name, keys in column_names(task).items() if not isinstance(picked.get(name), str)]
    if missing:
        raise UserError(f"{where}: missing text field(s) {', '.join(missing)}")
    return picked  # type: ignore[return-value]


def _from_cells(cells: list[str], where: str, task: TaskSpec) -> dict[str, str]:
    if len(cells) != len(task.fields):
        raise UserError(f"{where}: expected {len(task.fields)} tab-separated field(s) ({', '.join(task.fields)}), found {len(cells)}")
    return dict(zip(task.fields, cells, strict=True))


def read_inputs(source: str, task: TaskSpec, encoding: str = "utf-8") -> Inputs:
    """``source`` is a ``.txt`` file (one text per line), a ``.csv`` or ``.tsv`` file whose header names the
    fields, a ``.jsonl`` file, or ``-`` for stdin.

    On stdin each line is a JSON object or the task's fields separated by tabs (a plain line of text for a
    single-text task). Every row keeps its line number; empty text is refused, as in training data.
    """
    if source == "-":
        return _read_lines(decode_lines(sys.stdin.buffer.read(), "<stdin>", encoding, ENCODING_HINT), "<stdin>", task)
    path = Path(source)
    if path.suffix not in INPUT_FORMATS:
        raise UserError(f"input file {path}: unknown format {path.suffix or '(no extension)'!r} (use .txt, .csv or "
                        f".tsv with a header, .jsonl, or - for stdin)")
    if not path.is_file():
        raise UserError(f"input file {path} not found")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    lines = decode_lines(data, str(path), encoding, ENCODING_HINT)
    if path.suffix == ".jsonl":
        return _read_lines(lines, str(path), task, json_only=True)
    if path.suffix == ".txt":
        if len(task.fields) != 1:
            raise UserError(f"input file {path}: a .txt file holds one text per line, but task {task.name} reads "
                            f"{len(task.fields)} fields ({', '.join(task.fields)}); use .csv, .tsv or .jsonl")
        return _read_lines(lines, str(path), task, plain=True)
    if path.suffix == ".csv":
        return _read_csv("\n".join(line for _, line in lines), str(path), task)
    header = lines[0][1].split("\t") if lines else []
    _check_header(header, str(path), task)
    return _read_lines(lines[1:], str(path), task, header=header)


def _check_header(header: list[str], name: str, task: TaskSpec) -> None:
    if _pick(dict.fromkeys(header, ""), task) is None:
        missing = [" or ".join(keys) for keys in column_names(task).values() if not set(keys) & set(header)]
        raise UserError(f"{name}:1: header {header} lacks column(s) {', '.join(missing)}")


def _read_csv(text: str, name: str, task: TaskSpec) -> Inputs:
    """A CSV file (RFC 4180 quoting: cells may hold commas, quotes and line breaks) with a header line."""
    inputs = Inputs()
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    line = 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            raise UserError(f"{name}:{line}: not valid CSV ({error})") from None
        start, line = line, reader.line_num + 1
        if not any(cell.strip() for cell in cells):
            inputs.skipped += header is not None
            continue
        if header is None:
            header = [cell.strip() for cell in cells]
            _check_header(header, name, task)
            continue
        where = f"{name}:{start}"
        if len(cells) != len(header):
            raise UserError(f"{where}: expected {len(header)} comma-separated columns, found {len(cells)}")
        inputs.add(_pick(dict(zip(header, cells, strict=True)), task), start, where, task)  # type: ignore[arg-type]
    if header is None:
        raise UserError(f"{name}: the file is empty; the first line must name the columns")
    return inputs


def _read_lines(
    lines: list[tuple[int, str]], name: str, task: TaskSpec, header: list[str] | None = None, json_only: bool = False,
    plain: bool = False,
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
            row = _pick(dict(zip(header, cells, strict=True)), task)  # type: ignore[assignment]
        elif plain:
            row = {task.fields[0]: line}
        elif json_only or line.lstrip().startswith("{"):
            row = _from_json(line, where, task)
        else:
            row = _from_cells(line.split("\t"), where, task)
        inputs.add(row, number, where, task)
    return inputs
