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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.gate import check_texts, parse_json
from infoprompt.io_utils import bounded_text_lines, iter_lines
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
    kept: list[dict[str, str]] = field(default_factory=list)  # the columns ``keep`` names, per row

    def add(self, row: dict[str, str], line: int, where: str, task: TaskSpec,
            kept: dict[str, str] | None = None) -> None:
        check_texts({name: row[name] for name in task.fields}, where)
        self.rows.append(row)
        self.lines.append(line)
        self.sources.append(where)
        self.kept.append(kept or {})

    def extend(self, other: Inputs) -> None:
        self.rows += other.rows
        self.lines += other.lines
        self.sources += other.sources
        self.kept += other.kept
        self.skipped += other.skipped


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


def _from_json(line: str, where: str, task: TaskSpec) -> tuple[dict[str, str], dict[str, object]]:
    row = parse_json(line, where)
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object with field(s) {', '.join(task.fields)}")
    picked = _pick(row, task) or {}
    missing = [" or ".join(keys) for name, keys in column_names(task).items() if not isinstance(picked.get(name), str)]
    if missing:
        raise UserError(f"{where}: missing text field(s) {', '.join(missing)}")
    return picked, row  # type: ignore[return-value]


def _from_cells(cells: list[str], where: str, task: TaskSpec) -> dict[str, str]:
    if len(cells) != len(task.fields):
        raise UserError(f"{where}: expected {len(task.fields)} tab-separated field(s) ({', '.join(task.fields)}), found {len(cells)}")
    return dict(zip(task.fields, cells, strict=True))


def _kept(record: dict[str, object], keep: Sequence[str], where: str) -> dict[str, str]:
    """The ``keep`` columns of one input record, as text (a JSON value that is no string: its JSON text)."""
    kept = {}
    for column in keep:
        if column not in record:
            raise UserError(f"{where}: no column {column!r} to keep (--keep-columns); columns present: "
                            f"{_short(list(record))}")
        value = record[column]
        kept[column] = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return kept


# A chunk of rows that ``iter_inputs`` hands on: this many rows, or this many bytes of input, whichever comes first.
CHUNK_ROWS = 1024
CHUNK_BYTES = 1 << 20


def read_inputs(source: str, task: TaskSpec, encoding: str = "utf-8", keep: Sequence[str] = (),
                cut_chars: int | None = None) -> Inputs:
    """``source`` is a ``.txt`` file (one text per line), a ``.csv`` or ``.tsv`` file whose header names the
    fields, a ``.jsonl`` file, or ``-`` for stdin.

    On stdin each line is a JSON object or the task's fields separated by tabs (a plain line of text for a
    single-text task). Every row keeps its line number and the columns ``keep`` names (a plain line's column is
    the task's field); empty text is refused, as in training data. All rows at once: see :func:`iter_inputs`
    for chunks.
    """
    whole = Inputs()
    for chunk in iter_inputs(source, task, encoding, chunk_rows=1 << 62, chunk_bytes=1 << 62, keep=keep,
                             cut_chars=cut_chars):
        whole.extend(chunk)
    return whole


def iter_inputs(
    source: str, task: TaskSpec, encoding: str = "utf-8", chunk_rows: int | None = None, chunk_bytes: int | None = None,
    keep: Sequence[str] = (), cut_chars: int | None = None,
) -> Iterator[Inputs]:
    """The rows of ``source`` (as :func:`read_inputs` reads them) in chunks of at most ``chunk_rows`` rows or
    about ``chunk_bytes`` bytes of text (default :data:`CHUNK_ROWS`, :data:`CHUNK_BYTES`), read as they are
    needed: memory does not grow with the input, nor with one line. A line of a ``.txt`` file longer than
    :data:`~infoprompt.io_utils.LINE_PIECE_BYTES` keeps its first and last ``cut_chars`` characters (what the
    model's cut can use: see :func:`~infoprompt.templates.clip_characters`); any other line longer than
    :data:`~infoprompt.io_utils.MAX_LINE_BYTES` is a one-line error."""
    chunk_rows = chunk_rows or CHUNK_ROWS
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    if source == "-":
        yield from _chunks(iter_lines(sys.stdin.buffer, "<stdin>", encoding, ENCODING_HINT), "<stdin>", task,
                           chunk_rows, chunk_bytes, keep=keep)
        return
    path = Path(source)
    if path.suffix not in INPUT_FORMATS:
        raise UserError(f"input file {path}: unknown format {path.suffix or '(no extension)'!r} (use .txt, .csv or "
                        f".tsv with a header, .jsonl, or - for stdin)")
    if path.suffix == ".txt" and len(task.fields) != 1:
        raise UserError(f"input file {path}: a .txt file holds one text per line, but task {task.name} reads "
                        f"{len(task.fields)} fields ({', '.join(task.fields)}); use .csv, .tsv or .jsonl")
    if not path.is_file():
        raise UserError(f"input file {path} not found")
    try:
        handle = path.open("rb")
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    with handle:
        if path.suffix == ".csv":
            yield from _csv_chunks(handle, str(path), task, encoding, chunk_rows, keep)
            return
        lines = iter_lines(handle, str(path), encoding, ENCODING_HINT,
                           cut_chars=cut_chars if path.suffix == ".txt" else None)
        if path.suffix in (".jsonl", ".txt"):
            yield from _chunks(lines, str(path), task, chunk_rows, chunk_bytes, json_only=path.suffix == ".jsonl",
                               plain=path.suffix == ".txt", keep=keep)
            return
        first = next(lines, None)
        header = first[1].split("\t") if first is not None else []
        _check_header(header, str(path), task, keep)
        yield from _chunks(lines, str(path), task, chunk_rows, chunk_bytes, header=header, keep=keep)


def _check_header(header: list[str], name: str, task: TaskSpec, keep: Sequence[str] = ()) -> None:
    if _pick(dict.fromkeys(header, ""), task) is None:
        missing = [" or ".join(keys) for keys in column_names(task).values() if not set(keys) & set(header)]
        raise UserError(f"{name}:1: header {_short(header)} lacks column(s) {', '.join(missing)}")
    repeated = sorted({column for column in header if header.count(column) > 1})
    if repeated:
        raise UserError(f"{name}:1: the header names column(s) {', '.join(repeated)} more than once")
    absent = [column for column in keep if column not in header]
    if absent:
        raise UserError(f"{name}:1: no column {absent[0]!r} to keep (--keep-columns); columns present: "
                        f"{_short(header)}")


def _csv_chunks(handle, name: str, task: TaskSpec, encoding: str, chunk_rows: int,
                keep: Sequence[str] = ()) -> Iterator[Inputs]:
    """A CSV file (RFC 4180 quoting: cells may hold commas, quotes and line breaks) with a header line, read
    record by record."""
    text = io.TextIOWrapper(handle, encoding="utf-8-sig" if encoding == "utf-8" else encoding, newline="")
    reader = csv.reader(bounded_text_lines(text, name), strict=True)
    header: list[str] | None = None
    chunk, line = Inputs(), 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            raise UserError(f"{name}:{line}: not valid CSV ({error})") from None
        except UnicodeError as error:  # a UTF-16 file without a byte-order mark is a plain UnicodeError
            reason = getattr(error, "reason", None) or str(error)
            raise UserError(f"{name}: not valid {encoding} text ({reason}){ENCODING_HINT}") from None
        start, line = line, reader.line_num + 1
        if not any(cell.strip() for cell in cells):
            chunk.skipped += header is not None
            continue
        if header is None:
            header = [cell.strip() for cell in cells]
            _check_header(header, name, task, keep)
            continue
        where = f"{name}:{start}"
        if len(cells) != len(header):
            raise UserError(f"{where}: expected {len(header)} comma-separated columns, found {len(cells)}")
        record = dict(zip(header, cells, strict=True))
        chunk.add(_pick(record, task), start, where, task, _kept(record, keep, where))  # type: ignore[arg-type]
        if len(chunk.rows) >= chunk_rows:
            yield chunk
            chunk = Inputs()
    if header is None:
        raise UserError(f"{name}: the file is empty; the first line must name the columns")
    if chunk.rows or chunk.skipped:
        yield chunk


def _short(header: list[str]) -> str:
    text = repr(header)
    return text if len(text) <= 200 else text[:200] + "…]"


def _chunks(
    lines: Iterator[tuple[int, str, bool]], name: str, task: TaskSpec, chunk_rows: int, chunk_bytes: int,
    header: list[str] | None = None, json_only: bool = False, plain: bool = False, keep: Sequence[str] = (),
) -> Iterator[Inputs]:
    if plain or header is not None:
        known = header if header is not None else list(task.fields)
        _check_keep(keep, known, name)
    chunk, size = Inputs(), 0
    for number, line, terminated in lines:
        if not line.strip():
            chunk.skipped += terminated or bool(line)  # what follows the last line end is no blank line
            continue
        where = f"{name}:{number}"
        row, record = _row(line, where, task, header, json_only, plain)
        chunk.add(row, number, where, task, _kept(record, keep, where))
        size += len(line)
        if len(chunk.rows) >= chunk_rows or size >= chunk_bytes:
            yield chunk
            chunk, size = Inputs(), 0
    if chunk.rows or chunk.skipped:
        yield chunk


def _check_keep(keep: Sequence[str], known: Sequence[str], name: str) -> None:
    absent = [column for column in keep if column not in known]
    if absent:
        raise UserError(f"{name}: no column {absent[0]!r} to keep (--keep-columns); a line of this input holds "
                        f"{_short(list(known))}")


def _row(line: str, where: str, task: TaskSpec, header: list[str] | None, json_only: bool,
         plain: bool = False) -> tuple[dict[str, str], dict[str, object]]:
    """The task's fields of one line, and the whole record they came from (for ``keep``)."""
    if header is not None:
        cells = line.split("\t")
        if len(cells) != len(header):
            raise UserError(f"{where}: expected {len(header)} tab-separated columns, found {len(cells)}")
        record = dict(zip(header, cells, strict=True))
        return _pick(record, task), record  # type: ignore[return-value]
    if plain:
        return {task.fields[0]: line}, {task.fields[0]: line}
    if json_only or line.lstrip().startswith("{"):
        return _from_json(line, where, task)
    cells = _from_cells(line.split("\t"), where, task)
    return cells, dict(cells)
