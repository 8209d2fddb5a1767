"""How ``infoprompt predict`` writes its records: JSON lines or CSV, optionally with the K most probable labels."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence

FORMATS = ("jsonl", "csv")
MULTI_LABEL_SEPARATOR = "|"  # how a label cell holds several labels, in training files and in this CSV


def output_format(requested: str | None, output: str | os.PathLike[str]) -> str:
    """``--format``, else ``csv`` for an output file named ``*.csv``, else ``jsonl`` (stdout included)."""
    if requested is not None:
        return requested
    return "csv" if os.fspath(output).lower().endswith(".csv") else "jsonl"


def top_labels(probabilities: Mapping[str, float], k: int) -> list[tuple[str, float]]:
    """The ``k`` most probable labels with their probabilities, most probable first (a tie in label order)."""
    ranked = sorted(enumerate(probabilities.items()), key=lambda item: (-item[1][1], item[0]))
    return [pair for _, pair in ranked[:k]]


class PredictionWriter:
    """Text for the records of :func:`~infoprompt.training.inference.predict`, one per input line.

    JSON lines: ``{"line", "label" (multi-label: "labels"), "probabilities", "top_k"?}`` per input, where
    ``top_k`` is ``[{"label", "probability"}, ...]``, most probable first. CSV: a header, then a row per input:
    ``line``, ``label`` (multi-label: ``labels``, joined by ``|``), ``probability_<label>`` for every label and,
    with ``top_k``, ``top1_label``, ``top1_probability``, ... ``topK_probability``.
    """

    def __init__(self, output_format: str, labels: Sequence[str], *, multi_label: bool, top_k: int | None = None):
        if output_format not in FORMATS:
            raise ValueError(f"unknown output format {output_format!r}; known: {', '.join(FORMATS)}")
        self.format = output_format
        self.labels = list(labels)
        self.label_key = "labels" if multi_label else "label"
        self.top_k = None if top_k is None else min(top_k, len(self.labels))  # K over the label count: every label

    def header(self) -> str:
        """The CSV header line ("" for JSON lines)."""
        if self.format != "csv":
            return ""
        columns = ["line", self.label_key, *(f"probability_{label}" for label in self.labels)]
        for rank in range(1, (self.top_k or 0) + 1):
            columns += [f"top{rank}_label", f"top{rank}_probability"]
        return self._csv([columns])

    def lines(self, line_numbers: Sequence[int], records: Sequence[Mapping[str, object]]) -> str:
        if self.format == "jsonl":
            return "".join(json.dumps(self._json(line, record), sort_keys=True, allow_nan=False) + "\n"
                           for line, record in zip(line_numbers, records, strict=True))
        return self._csv([self._row(line, record) for line, record in zip(line_numbers, records, strict=True)])

    def _json(self, line: int, record: Mapping[str, object]) -> dict[str, object]:
        out = {"line": line, **record}
        if self.top_k is not None:
            out["top_k"] = [{"label": label, "probability": p} for label, p in top_labels(self._probabilities(record),
                                                                                          self.top_k)]
        return out

    def _row(self, line: int, record: Mapping[str, object]) -> list[object]:
        probabilities = self._probabilities(record)
        chosen = record[self.label_key]
        label = MULTI_LABEL_SEPARATOR.join(chosen) if isinstance(chosen, list) else chosen
        row: list[object] = [line, label, *(probabilities[name] for name in self.labels)]
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
        # "\n" line ends, as the JSON lines have (the csv module's default is "\r\n"); fields are quoted as needed.
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        return buffer.getvalue()


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
                    record = writer._json(line, records[name][index])
                    del record["line"]
                    per_adapter[name] = record
                rows.append(json.dumps({"line": line, "adapters": per_adapter}, sort_keys=True, allow_nan=False) + "\n")
            else:
                cells: list[object] = [line]
                for name, writer in self.writers.items():
                    cells += writer._row(line, records[name][index])[1:]
                rows.append(PredictionWriter._csv([cells]))
        return "".join(rows)
