"""Read prediction inputs (TSV with a header, JSONL, or stdin lines) into task field dicts."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.io_utils import iter_lines
from infoprompt.tasks import TaskSpec
from infoprompt.validation import check_encodable, is_blank

ENCODING_HINT = ", or pass --encoding"


@dataclass
class Inputs:
    """Rows to predict, with the input line each came from (blank lines are skipped and counted)."""

    rows: list[dict[str, str]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    skipped: int = 0

    def add(self, row: dict[str, str], line: int, where: str, task: TaskSpec) -> None:
        empty = [name for name in task.fields if is_blank(row[name])]
        if empty:
            raise UserError(f"{where}: empty text field(s) {', '.join(empty)}")
        for name in task.fields:
            check_encodable(row[name], f"{where}: field {name}")
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


# A chunk of rows that ``iter_inputs`` hands on: this many rows, or this many bytes of input, whichever comes first.
CHUNK_ROWS = 1024
CHUNK_BYTES = 1 << 20


def read_inputs(source: str, task: TaskSpec, encoding: str = "utf-8") -> Inputs:
    """``source`` is a ``.jsonl`` file, a ``.tsv`` file whose header names the fields, or ``-`` for stdin.

    On stdin each line is a JSON object or the task's fields separated by tabs. Every row keeps its line
    number; empty text is refused, as in training data. All rows at once: see :func:`iter_inputs` for chunks.
    """
    whole = Inputs()
    for chunk in iter_inputs(source, task, encoding, chunk_rows=1 << 62, chunk_bytes=1 << 62):
        whole.rows += chunk.rows
        whole.lines += chunk.lines
        whole.sources += chunk.sources
        whole.skipped += chunk.skipped
    return whole


def iter_inputs(
    source: str, task: TaskSpec, encoding: str = "utf-8", chunk_rows: int | None = None, chunk_bytes: int | None = None,
) -> Iterator[Inputs]:
    """The rows of ``source`` (as :func:`read_inputs` reads them) in chunks of at most ``chunk_rows`` rows or
    about ``chunk_bytes`` bytes of text (default :data:`CHUNK_ROWS`, :data:`CHUNK_BYTES`), read as they are
    needed: memory does not grow with the input."""
    chunk_rows = chunk_rows or CHUNK_ROWS
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    if source == "-":
        yield from _chunks(iter_lines(sys.stdin.buffer, "<stdin>", encoding, ENCODING_HINT), "<stdin>", task,
                           chunk_rows, chunk_bytes)
        return
    path = Path(source)
    if path.suffix not in (".jsonl", ".tsv"):
        raise UserError(f"input file {path}: unknown format (use .tsv with a header, .jsonl, or - for stdin)")
    if not path.is_file():
        raise UserError(f"input file {path} not found")
    try:
        handle = path.open("rb")
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    with handle:
        lines = iter_lines(handle, str(path), encoding, ENCODING_HINT)
        if path.suffix == ".jsonl":
            yield from _chunks(lines, str(path), task, chunk_rows, chunk_bytes, json_only=True)
            return
        first = next(lines, None)
        header = first[1].split("\t") if first is not None else []
        missing = [name for name in task.fields if name not in header]
        if missing:
            raise UserError(f"{path}:1: header {_short(header)} lacks column(s) {', '.join(missing)}")
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise UserError(f"{path}:1: the header names column(s) {', '.join(repeated)} more than once")
        yield from _chunks(lines, str(path), task, chunk_rows, chunk_bytes, header=header)


def _short(header: list[str]) -> str:
    text = repr(header)
    return text if len(text) <= 200 else text[:200] + "…]"


def _chunks(
    lines: Iterator[tuple[int, str, bool]], name: str, task: TaskSpec, chunk_rows: int, chunk_bytes: int,
    header: list[str] | None = None, json_only: bool = False,
) -> Iterator[Inputs]:
    chunk, size = Inputs(), 0
    for number, line, terminated in lines:
        if not line.strip():
            chunk.skipped += terminated or bool(line)  # what follows the last line end is no blank line
            continue
        chunk.add(_row(line, f"{name}:{number}", task, header, json_only), number, f"{name}:{number}", task)
        size += len(line)
        if len(chunk.rows) >= chunk_rows or size >= chunk_bytes:
            yield chunk
            chunk, size = Inputs(), 0
    if chunk.rows or chunk.skipped:
        yield chunk


def _row(line: str, where: str, task: TaskSpec, header: list[str] | None, json_only: bool) -> dict[str, str]:
    if header is not None:
        cells = line.split("\t")
        if len(cells) != len(header):
            raise UserError(f"{where}: expected {len(header)} tab-separated columns, found {len(cells)}")
        return {field: cells[header.index(field)] for field in task.fields}
    if json_only or line.lstrip().startswith("{"):
        return _from_json(line, where, task)
    return _from_cells(line.split("\t"), where, task)
