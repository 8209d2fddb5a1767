"""How ``infoprompt predict`` writes its records: JSON lines or CSV, optionally with the K most probable labels."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence

from infoprompt.errors import UserError

FORMATS = ("jsonl", "csv")
MULTI_LABEL_SEPARATOR = "|"  # how a label cell holds several labels, in training files and in this CSV
# A text cell that starts with one of these is a formula to a spreadsheet (OWASP's list: =, +, -, @, tab, CR), or
# starts with the quote that marks an escaped cell: such a cell is written with one more ' in front.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")


def output_format(requested: str | None, output: str | os.PathLike[str]) -> str:
    """``--format``, else ``csv`` for an output file named ``*.csv``, else ``jsonl`` (stdout included)."""
    if requested is not None:
        return requested
    return "csv" if os.fspath(output).lower().endswith(".csv") else "jsonl"


def csv_cell(text: object) -> object:
    """``text`` as a CSV cell no spreadsheet evaluates: one ``'`` in front when it starts with a character of
    :data:`FORMULA_STARTS` (a label ``=cmd|' /C calc'!A0`` is written ``'=cmd|' /C calc'!A0``); a value that is
    no string (a number, ``None``) as it is. Every CSV writer of user text (labels, column, task, method and
    backbone names) passes its text cells through this."""
    return "'" + text if isinstance(text, str) and text.startswith(FORMULA_STARTS) else text


def csv_text(cell: str) -> str:
    """The text a :func:`csv_cell` holds: the cell without its first ``'``, if it has one."""
    return cell[1:] if cell.startswith("'") else cell


def top_labels(probabilities: Mapping[str, float], k: int) -> list[tuple[str, float]]:
    """The ``k`` most probable labels with their probabilities, most probable first (a tie in label order)."""
    ranked = sorted(enumerate(probabilities.items()), key=lambda item: (-item[1][1], item[0]))
    return [pair for _, pair in ranked[:k]]


class PredictionWriter:
    """Text for the records of :func:`~infoprompt.training.inference.predict`, one per input line.

    JSON lines: ``{"line", "label" (multi-label: "labels"), "probabilities", "top_k"?}`` per input, where
    ``top_k`` is ``[{"label", "probability"}, ...]``, most probable first, and with ``keep`` columns ``input``
    is ``{column: text}``. CSV: a header, then a row per input: ``line``, the ``keep`` columns, ``label``
    (multi-label: ``labels``, joined by ``|``), ``probability_<label>`` for every label and, with ``top_k``,
    ``top1_label``, ``top1_probability``, ... ``topK_probability``. Every text cell of the CSV (header included)
    passes :func:`csv_cell`.
    """

    def __init__(self, output_format: str, labels: Sequence[str], *, multi_label: bool, top_k: int | None = None,
                 keep: Sequence[str] = ()):
        if output_format not in FORMATS:
            raise ValueError(f"unknown output format {output_format!r}; known: {', '.join(FORMATS)}")
        self.format = output_format
        self.labels = list(labels)
        self.label_key = "labels" if multi_label else "label"
        self.top_k = None if top_k is None else min(top_k, len(self.labels))  # K over the label count: every label
        self.keep: list[str] = []
        taken = set(self._columns())  # the columns written without ``keep``
        self.keep = list(keep)
        clash = [column for column in self.keep if column in taken]
        if clash:
            raise UserError(f"--keep-columns: column {clash[0]!r} is also a column predict writes; rename it in "
                            "the input")

    def _columns(self) -> list[str]:
        columns = ["line", *self.keep, self.label_key, *(f"probability_{label}" for label in self.labels)]
        for rank in range(1, (self.top_k or 0) + 1):
            columns += [f"top{rank}_label", f"top{rank}_probability"]
        return columns

    def header(self) -> str:
        """The CSV header line ("" for JSON lines)."""
        if self.format != "csv":
            return ""
        return self._csv([self._columns()])

    def lines(self, line_numbers: Sequence[int], records: Sequence[Mapping[str, object]],
              kept: Sequence[Mapping[str, str]] | None = None) -> str:
        """The records of one chunk; ``kept`` holds each input's ``keep`` columns."""
        kept = kept if kept is not None else [{}] * len(records)
        rows = zip(line_numbers, records, kept, strict=True)
        if self.format == "jsonl":
            return "".join(json.dumps(self._json(line, record, columns), sort_keys=True, allow_nan=False) + "\n"
                           for line, record, columns in rows)
        return self._csv([self._row(line, record, columns) for line, record, columns in rows])

    def _json(self, line: int, record: Mapping[str, object], kept: Mapping[str, str]) -> dict[str, object]:
        out = {"line": line, **record}
        if self.keep:
            out["input"] = {column: kept[column] for column in self.keep}
        if self.top_k is not None:
            out["top_k"] = [{"label": label, "probability": p} for label, p in top_labels(self._probabilities(record),
                                                                                          self.top_k)]
        return out

    def _row(self, line: int, record: Mapping[str, object], kept: Mapping[str, str]) -> list[object]:
        probabilities = self._probabilities(record)
        chosen = record[self.label_key]
        label = MULTI_LABEL_SEPARATOR.join(chosen) if isinstance(chosen, list) else chosen
        row: list[object] = [line, *(kept[column] for column in self.keep), label,
                             *(probabilities[name] for name in self.labels)]
        if self.top_k is not None:
            row += [value for pair in top_labels(probabilities, self.top_k) for value in pair]
        return row

    @staticmethod
    def _probabilities(record: Mapping[str, object]) -> Mapping[str, float]:
        probabilities = record["probabilities"]
        assert isinstance(probabilities, Mapping)
        return probabilities

    @staticmethod
    def _csv(rows: list[list[object]]) -> str:
        # "\n" line ends, as the JSON lines have. A row is written with the csv module's "\r\n" and that end is
        # then cut to "\n": so a cell holding a lone "\r" is quoted too (with lineterminator="\n" it is not).
        out = []
        for row in rows:
            buffer = io.StringIO()
            csv.writer(buffer, lineterminator="\r\n").writerow([csv_cell(cell) for cell in row])
            out.append(buffer.getvalue()[:-2] + "\n")
        return "".join(out)


class SeveralPredictionWriter:
    """Text for the records of several adapters on the same inputs, one column set per adapter.

    JSON lines: ``{"line", "adapters": {name: {"label", "probabilities", "top_k"?}}}`` per input. CSV: ``line``,
    then each adapter's columns of :class:`PredictionWriter` (``label``, ``probability_<label>``, ...) prefixed
    with ``<name>:``, adapters in the order given.
    """

    def __init__(self, output_format: str, writers: Mapping[str, PredictionWriter]):
        self.format = output_format
        self.writers = dict(writers)

    def header(self) -> str:
        if self.format != "csv":
            return ""
        columns = ["line"]
        for name, writer in self.writers.items():
            columns += [f"{name}:{column}" for column in next(csv.reader([writer.header()]))[1:]]
        return PredictionWriter._csv([columns])

    def lines(self, line_numbers: Sequence[int], records: Mapping[str, Sequence[Mapping[str, object]]]) -> str:
        """``records``: per adapter name, its records of the inputs at ``line_numbers``."""
        rows = []
        for index, line in enumerate(line_numbers):
            if self.format == "jsonl":
                per_adapter = {}
                for name, writer in self.writers.items():
                    record = writer._json(line, records[name][index], {})
                    del record["line"]
                    per_adapter[name] = record
                rows.append(json.dumps({"line": line, "adapters": per_adapter}, sort_keys=True, allow_nan=False) + "\n")
            else:
                cells: list[object] = [line]
                for name, writer in self.writers.items():
                    cells += writer._row(line, records[name][index], {})[1:]
                rows.append(PredictionWriter._csv([cells]))
        return "".join(rows)
