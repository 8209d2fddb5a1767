"""Users' own labelled files (CSV, TSV, JSON lines, Parquet) read into examples, with one-line errors.

What a file becomes:

* Field names are fixed, whatever the file calls its columns: ``"text"``, and ``"text_pair"`` for sentence
  pairs (the names Hugging Face tokenizers use). An adapter trained on one file can then read another whose
  columns are named differently; :class:`FileColumns` says which column feeds which field.
* Labels are the label cells as strings, surrounding whitespace stripped; a JSON or Parquet number becomes
  its Python string form (``3`` -> ``"3"``, ``2.5`` -> ``"2.5"``), a boolean ``"true"``/``"false"``. A CSV or
  TSV cell is text already, so ``1.0`` there stays ``"1.0"``.
* A multi-label cell holds several labels, ``a|b`` (``FileColumns.label_separator``) or a JSON list
  ``["a", "b"]`` (in a text cell, or a list in JSON and Parquet); ``[]`` says explicitly that no label
  applies. Its example's ``label`` is the canonical set encoding of :mod:`infoprompt.tasks.multilabel`.
* Missing labels are errors, never a class: a blank cell, JSON ``null`` or ``NaN``, a Parquet null or NaN, and
  the strings pandas reads as missing (``null``, ``NULL``, ``None``, ``NA``, ``N/A``, ``n/a``, ``NaN``, ``#N/A``
  and the like; ``nan`` and ``<NA>`` in any case).
* A label column mixes no types: JSON ``1`` and ``"1"`` (or ``true`` and ``"true"``) in one column are an error
  naming both rows, not one class.
* More than :data:`MANY_CLASSES` classes, most of them with a single example, is an error (the column is more
  likely an id or a text than a label); more than that many with several examples each, a warning.
* The class order of a task (:func:`collect_labels`) is the label names sorted by code point: it does not
  depend on which rows come first, so a sample of a file and the file give the same order.
* ``source`` of an example is ``"<path>:<line>"`` (``"<path>:row <n>"`` for Parquet, counting data rows).

Formats: ``.csv`` (RFC 4180 quoting, so cells may hold commas, quotes and line breaks), ``.tsv`` (no quoting:
a ``"`` is an ordinary character, as in the GLUE files; a cell cannot hold a tab or a line break), ``.jsonl``
and ``.json`` (one object per line, or one JSON array of objects), ``.parquet`` (needs ``pyarrow``, which the
``datasets`` package brings), and for unlabelled input only ``.txt`` (one text per non-blank line). Text files
are UTF-8 with or without a byte-order mark (UTF-16 and UTF-32 files with a byte-order mark are read too), with
LF, CRLF or CR line ends.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import difflib
import io
import math
import os
import re
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.gate import check_texts, parse_json, parse_json_at
from infoprompt.io_utils import MAX_DATA_FILE_BYTES
from infoprompt.tasks.base import Example
from infoprompt.tasks.multilabel import encode_label_set, label_set

TEXT_FIELD = "text"
PAIR_FIELD = "text_pair"
LABELLED_FORMATS = (".csv", ".tsv", ".jsonl", ".json", ".parquet")
UNLABELLED_FORMATS = (*LABELLED_FORMATS, ".txt")
# Missing values written as text, never a real label: what pandas reads as missing by default (its
# ``na_values``, spelled as pandas spells them), and "nan" and "<NA>" in any case, as pandas writes them.
_MISSING_TEXTS = frozenset({"#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                            "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})
_MISSING_ANY_CASE = frozenset({"nan", "<na>"})
# A label column with more classes than this, most of them with a single example, is no label column (an id or
# a text column): refused before a head of that many classes is fitted for minutes. More classes than this
# with several examples each get a warning.
MANY_CLASSES = 1000
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
# Only these end a line: str.splitlines would also split on U+2028 and others, which JSON strings may hold.
_TEXT_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class FileColumns:
    """Which columns of a user's file hold the text, the optional second text of a pair, and the label.

    ``multi_label``: a label cell holds several labels, separated by ``label_separator`` or as a JSON list.
    """

    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    multi_label: bool = False
    label_separator: str = "|"

    def __post_init__(self) -> None:
        named = {"text_column": self.text_column, "label_column": self.label_column}
        if self.text_pair_column is not None:
            named["text_pair_column"] = self.text_pair_column
        for option, column in named.items():
            if not isinstance(column, str) or not column.strip():
                raise UserError(f"{option} must be a non-empty column name, got {column!r}")
        if len(set(named.values())) < len(named):
            raise UserError(f"the text, pair and label columns must differ, got {', '.join(map(repr, named.values()))}")
        if not isinstance(self.label_separator, str) or not self.label_separator.strip():
            raise UserError(f"label_separator must be a non-blank string, got {self.label_separator!r}")

    @property
    def fields(self) -> tuple[str, ...]:
        """The example fields these columns fill, in template order."""
        return (TEXT_FIELD, PAIR_FIELD) if self.text_pair_column is not None else (TEXT_FIELD,)

    def field_columns(self) -> dict[str, str]:
        """Field name -> column name."""
        pairs = {TEXT_FIELD: self.text_column, PAIR_FIELD: self.text_pair_column}
        return {name: column for name, column in pairs.items() if column is not None}


@dataclass(frozen=True)
class _Row:
    where: str
    cells: dict[str, object]


def read_labelled_file(path: str | Path, columns: FileColumns, *, labelled: bool = True) -> list[Example]:
    """Every row of a user's file as an :class:`Example`; ``labelled=False`` ignores any label column.

    Raises a one-line :class:`UserError` naming the file, line and column for any row that cannot be used,
    before any example is returned. Blank lines are skipped; a file without any row is an error.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    formats = LABELLED_FORMATS if labelled else UNLABELLED_FORMATS
    if suffix not in formats:
        hint = " (a .txt file holds texts without labels)" if suffix == ".txt" else ""
        raise UserError(f"{path}: unknown file format {path.suffix or '(no extension)'!r}{hint}; "
                        f"supported: {', '.join(formats)}")
    if not path.is_file():
        raise UserError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    wanted = [*columns.field_columns().values(), *([columns.label_column] if labelled else [])]
    if suffix == ".txt":
        if columns.text_pair_column is not None:
            raise UserError(f"{path}: a .txt file holds one text per line, so it cannot fill the pair column "
                            f"{columns.text_pair_column!r}; use CSV, TSV or JSON lines")
        rows: Iterator[_Row] = _text_lines(path, columns.text_column)
    elif suffix == ".parquet":
        rows = _parquet_rows(path, wanted)
    elif suffix in (".jsonl", ".json"):
        rows = _json_rows(path, wanted)
    else:
        rows = _delimited_rows(path, "\t" if suffix == ".tsv" else ",", wanted)
    kinds: dict[str, tuple[str, str]] = {}
    examples = [_example(row, columns, labelled, kinds) for row in rows]
    if not examples:
        raise UserError(f"{path}: the file holds no rows")
    return examples


def collect_labels(examples: Sequence[Example], *, multi_label: bool = False, where: str = "") -> tuple[str, ...]:
    """The classes of a training set, sorted by code point; fewer than two is an error naming ``where``."""
    counts: Counter[str] = Counter()
    for example in examples:
        if example.label is None:
            raise UserError(f"{example.source or 'input'}: unlabelled example in training data")
        counts.update(label_set(example) if multi_label else (example.label,))
    where = where or "the training data"
    if len(counts) < 2:
        holds = f"only the class {next(iter(counts))!r}" if counts else "no class at all"
        raise UserError(f"{where}: the labels hold {holds}; a classifier needs at least 2 classes")
    if len(counts) > MANY_CLASSES:
        single = sum(1 for count in counts.values() if count == 1)
        if single > len(counts) / 2:
            raise UserError(f"{where}: the labels hold {len(counts)} classes, {single} of them with a single "
                            f"example: this looks like an id or text column, not labels (more than {MANY_CLASSES} "
                            f"classes, most of them single, are refused); name the label column")
        print(f"infoprompt: warning: {where}: {len(counts)} classes; a head of that many takes long to fit",
              file=sys.stderr)
    return tuple(sorted(counts))


def check_eval_labels(train_labels: Sequence[str], eval_examples: Sequence[Example], *,
                      multi_label: bool = False) -> None:
    """Every label of ``eval_examples`` must be a training class: a class never trained cannot be predicted."""
    known = set(train_labels)
    for example in eval_examples:
        if example.label is None:
            continue
        for label in label_set(example) if multi_label else (example.label,):
            if label not in known:
                close = difflib.get_close_matches(label, list(train_labels), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise UserError(f"{example.source or 'input'}: label {label!r} never occurs in the training data"
                                f"{hint}; training labels: {', '.join(train_labels)}")


# -- rows to examples -----------------------------------------------------------------------------------------

def _example(row: _Row, columns: FileColumns, labelled: bool, kinds: dict[str, tuple[str, str]]) -> Example:
    named = columns.field_columns()
    # The gate names the file's own columns (what the user sees), not the task's field names.
    texts = check_texts({column: _scalar(row, column, _cell(row, column)) for column in named.values()}, row.where)
    label = _label_cell(row, columns, kinds) if labelled else None
    return Example(fields={name: texts[column] for name, column in named.items()}, label=label, source=row.where)


def _cell(row: _Row, column: str) -> object:
    if column not in row.cells:
        raise _missing_column(row.where, column, list(row.cells))
    return row.cells[column]


def _missing_column(where: str, column: str, present: Sequence[str], hint: str = "") -> UserError:
    names = ", ".join(repr(name) for name in present) or "none"
    if len(present) == 1 and any(mark in present[0] for mark in ";\t,|"):
        hint = " (a single column: is the file separated by another character?)"
    return UserError(f"{where}: no column {column!r}; columns present: {names}{hint}")


def _label_cell(row: _Row, columns: FileColumns, kinds: dict[str, tuple[str, str]]) -> str:
    column = columns.label_column
    value = _cell(row, column)
    if columns.multi_label:
        return encode_label_set(_label_list(row, column, value, columns.label_separator, kinds))
    if isinstance(value, list | tuple):
        raise UserError(f"{row.where}: column {column!r}: the label cell holds a list {value!r}; "
                        f"multi-label data needs the multi-label option")
    return _one_label(row, column, value, kinds)


def _label_list(row: _Row, column: str, value: object, separator: str, kinds: dict[str, tuple[str, str]]) -> list[str]:
    """The labels of a multi-label cell: a list, a JSON list in text, or names joined by ``separator``."""
    if isinstance(value, str) and value.strip().startswith("["):
        value = parse_json(value, f"{row.where}: column {column!r}: the label cell, which starts like a JSON list,")
        if not isinstance(value, list):
            raise UserError(f"{row.where}: column {column!r}: expected a JSON list of labels, got {value!r}")
    if isinstance(value, list | tuple):
        return [_one_label(row, column, item, kinds, in_list=True) for item in value]
    text = _one_label(row, column, value, kinds)
    parts = [part.strip() for part in text.split(separator)]
    if not all(parts):
        raise UserError(f"{row.where}: column {column!r}: the label cell {text!r} holds an empty label "
                        f"between {separator!r} separators")
    return parts


def _one_label(row: _Row, column: str, value: object, kinds: dict[str, tuple[str, str]],
               in_list: bool = False) -> str:
    if isinstance(value, list | tuple | dict):
        raise UserError(f"{row.where}: column {column!r}: a label must be a name, got {value!r}")
    text = _scalar(row, column, value)
    what = "a label in the list" if in_list else "label"
    if text is None or not text.strip():
        raise UserError(f"{row.where}: column {column!r}: {what} is blank or missing (NaN/null)")
    name = text.strip()
    if isinstance(value, str) and (name in _MISSING_TEXTS or name.lower() in _MISSING_ANY_CASE):
        raise UserError(f"{row.where}: column {column!r}: {what} is {name!r}, which marks a missing value (as "
                        f"pandas reads it); fill it in or drop the row")
    kind = _KIND_NAMES.get(type(value), type(value).__name__)
    first_kind, first_where = kinds.setdefault(name, (kind, row.where))
    if first_kind != kind:
        raise UserError(f"{row.where}: column {column!r}: label {value!r} is {kind}, but at {first_where} the label "
                        f"{name!r} is {first_kind}; both read as the class {name!r}: write every label the same way "
                        f"(all as text, or all as numbers)")
    return name


_KIND_NAMES = {str: "text", int: "a number", float: "a number", bool: "a boolean"}


def _scalar(row: _Row, column: str, value: object) -> str | None:
    """A cell as a string; None for null or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple | dict):
        raise UserError(f"{row.where}: column {column!r}: expected text, got {type(value).__name__} {value!r}")
    return str(value)  # dates and other Parquet scalars


# -- formats --------------------------------------------------------------------------------------------------



def _check_size(path: Path, size: int) -> None:
    if size > MAX_DATA_FILE_BYTES:
        raise UserError(f"{path}: {size} bytes, more than the {MAX_DATA_FILE_BYTES} bytes ({MAX_DATA_FILE_BYTES >> 20} "
                        "MiB) a training or evaluation file may have; draw a sample of it first")


def _decode(path: Path) -> str:
    """The text of a file: UTF-8 (a byte-order mark skipped) or UTF-16/32 with a byte-order mark; at most
    :data:`MAX_DATA_FILE_BYTES` are read (a FIFO or device included)."""
    try:
        with path.open("rb") as handle:
            if path.is_file():  # refused before a byte is read
                _check_size(path, os.fstat(handle.fileno()).st_size)
            data = handle.read(MAX_DATA_FILE_BYTES + 1)
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    if len(data) > MAX_DATA_FILE_BYTES:
        _check_size(path, path.stat().st_size if path.is_file() else len(data))
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        at = f":{1 + len(_LINE_BREAK.findall(data[: error.start]))}" if encoding == "utf-8" else ""
        raise UserError(f"{path}{at}: not valid {encoding.removesuffix('-sig').upper()} text "
                        f"({error.reason}); re-encode it as UTF-8 (iconv -f <encoding> -t utf-8 {path})") from None


def _delimited_rows(path: Path, delimiter: str, wanted: Sequence[str]) -> Iterator[_Row]:
    quoted = delimiter == ","
    reader = csv.reader(io.StringIO(_decode(path), newline=""), delimiter=delimiter, strict=True,
                        quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE)
    header: list[str] | None = None
    line = 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            unclosed = "a quoted cell starting on this line is never closed; " if "end of data" in str(error) else ""
            raise UserError(f"{path}:{line}: {unclosed}not valid {'CSV' if quoted else 'TSV'} ({error})") from None
        start, line = line, reader.line_num + 1
        if not any(cell.strip() for cell in cells):
            continue
        if header is None:
            header = _header(path, cells, wanted)
            continue
        if len(cells) != len(header):
            raise UserError(f"{path}:{start}: {len(cells)} cells where the header has {len(header)} columns")
        yield _Row(f"{path}:{start}", dict(zip(header, cells, strict=True)))


def _header(path: Path, cells: list[str], wanted: Sequence[str]) -> list[str]:
    names = [cell.strip() for cell in cells]
    seen: set[str] = set()
    for name in names:
        if name and name in seen:
            raise UserError(f"{path}:1: the header names column {name!r} twice")
        seen.add(name)
    for column in wanted:
        if column not in seen:
            raise _missing_column(f"{path}:1", column, names, " (the first line must name the columns)")
    return names


def _text_lines(path: Path, column: str) -> Iterator[_Row]:
    for number, line in enumerate(_TEXT_LINE_BREAK.split(_decode(path)), 1):
        if line.strip():
            yield _Row(f"{path}:{number}", {column: line})


def _json_rows(path: Path, wanted: Sequence[str]) -> Iterator[_Row]:
    text = _decode(path)
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        records = _json_array(path, text)
    else:
        records = _json_lines(path, text)
    for where, record in records:
        for column in wanted:
            if column not in record:
                raise _missing_column(where, column, list(record))
        yield _Row(where, record)


def _json_lines(path: Path, text: str) -> Iterator[tuple[str, dict[str, object]]]:
    for number, line in enumerate(_TEXT_LINE_BREAK.split(text), 1):
        if line.strip():
            where = f"{path}:{number}"
            yield where, _object(parse_json(line, where, object_pairs_hook=_unique_keys(where)), where)


def _json_array(path: Path, text: str) -> Iterator[tuple[str, dict[str, object]]]:
    """The objects of a ``[{...}, {...}]`` file, each named by the line it starts on."""
    lines = _LineCounter(text)
    position = _skip_space(text, text.index("[") + 1)
    while not text.startswith("]", position):
        where = f"{path}:{lines.at(position)}"
        record, position = parse_json_at(text, position, where, _unique_keys(where))
        yield where, _object(record, where)
        position = _skip_space(text, position)
        if text.startswith(",", position):
            position = _skip_space(text, position + 1)
        elif not text.startswith("]", position):
            raise UserError(f"{path}:{lines.at(position)}: expected ',' or ']' in the JSON array")
    if text[position + 1 :].strip():
        raise UserError(f"{path}:{lines.at(position)}: text after the closing ']' of the JSON array")


class _LineCounter:
    """Line numbers of increasing positions in a text, counted once over the whole text."""

    def __init__(self, text: str) -> None:
        self.text, self.position, self.line = text, 0, 1

    def at(self, position: int) -> int:
        self.line += len(_TEXT_LINE_BREAK.findall(self.text, self.position, position))
        self.position = position
        return self.line


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _unique_keys(where: str):
    def build(pairs: list[tuple[str, object]]) -> dict[str, object]:
        record: dict[str, object] = {}
        for key, value in pairs:
            if key in record:
                raise UserError(f"{where}: the object names column {key!r} twice")
            record[key] = value
        return record

    return build


def _object(record: object, where: str) -> dict[str, object]:
    if not isinstance(record, dict):
        raise UserError(f"{where}: expected a JSON object (one row), found {type(record).__name__}")
    return record


def _parquet_rows(path: Path, wanted: Sequence[str]) -> Iterator[_Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    with contextlib.suppress(OSError):  # an unreadable file gets pyarrow's message below
        _check_size(path, path.stat().st_size)
    try:
        names = pq.read_schema(path).names
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise UserError(f"{path}: the file names column {duplicated[0]!r} twice")
        missing = [column for column in wanted if column not in names]
        if missing:
            raise _missing_column(str(path), missing[0], names)
        table = pq.read_table(path, columns=list(dict.fromkeys(wanted)))
    except UserError:
        raise
    except Exception as error:  # pyarrow raises its own error types for broken and non-Parquet files
        raise UserError(f"{path}: not a readable Parquet file ({type(error).__name__}: {error})") from None
    for number, record in enumerate(table.to_pylist(), 1):
        yield _Row(f"{path}:row {number}", record)
