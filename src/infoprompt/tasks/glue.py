"""Readers and specs for the four GLUE tasks (SST-2, MRPC, RTE, CoLA) as staged in the data directory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.gate import check_texts
from infoprompt.io_utils import MAX_DATA_FILE_BYTES, read_lines
from infoprompt.tasks.base import Example, TaskSpec

SINGLE_TEMPLATE = "<cls> <p> {sentence} <p> <mask> <p> <sep>"
PAIR_TEMPLATE = "<cls> <p> {sentence1} <p> <mask> <p> {sentence2} <p> <sep>"


def read_tsv(
    path: Path,
    *,
    columns: dict[str, int],
    label_column: int,
    n_columns: int,
    header: bool | Sequence[str],
    label_names: dict[str, str] | None = None,
) -> list[Example]:
    """Read a quote-free GLUE TSV file; every malformed row is reported with its file and line number.

    The files hold bare ``"`` characters, so no CSV quoting is applied; a UTF-8 byte-order mark (MRPC has
    one) is skipped. ``header``: the column names the first line must hold, ``True`` for a header of any
    names (which must not look like a data row), ``False`` for none.
    """
    examples: list[Example] = []
    lines = read_lines(path, limit=MAX_DATA_FILE_BYTES)
    if header is not False:
        _check_header(path, lines, header, n_columns, label_column, label_names)
        lines = lines[1:]
    for line_number, line in lines:
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != n_columns:
            raise UserError(
                f"{path}:{line_number}: expected {n_columns} tab-separated columns, found {len(cells)}"
            )
        raw_label = cells[label_column].strip()
        if label_names is not None:
            if raw_label not in label_names:
                raise UserError(
                    f"{path}:{line_number}: unknown label {raw_label!r}; expected one of "
                    f"{', '.join(label_names)}"
                )
            label = label_names[raw_label]
        else:
            label = raw_label
        fields = check_texts({name: cells[index].strip() for name, index in columns.items()}, f"{path}:{line_number}")
        examples.append(Example(fields=fields, label=label, source=f"{path}:{line_number}"))
    return examples


def _check_header(
    path: Path, lines: list[tuple[int, str]], header: bool | Sequence[str], n_columns: int, label_column: int,
    label_names: dict[str, str] | None,
) -> None:
    """The first line must be the header: a data row there would silently be lost, a wrong one misread."""
    first = lines[0][1] if lines else ""
    cells = [cell.strip() for cell in first.split("\t")]
    expected = "\t".join(header) if header is not True else f"{n_columns} column names"
    if len(cells) == n_columns and label_names is not None and cells[label_column] in label_names:
        raise UserError(f"{path}:1: the file has no header line (expected {expected!r} before the data rows)")
    if header is True:
        if len(cells) != n_columns:
            raise UserError(f"{path}:1: header has {len(cells)} tab-separated columns, expected {n_columns}")
    elif cells != list(header):
        shown = first if len(first) <= 200 else first[:200] + "…"
        raise UserError(f"{path}:1: header {shown!r} is not the expected {expected!r}")
def _read_sst2(path: Path) -> list[Example]:
    return read_tsv(
        path, columns={"sentence": 0}, label_column=1, n_columns=2, header=("sentence", "label"),
        label_names={"0": "negative", "1": "positive"},
    )


def _read_mrpc(path: Path) -> list[Example]:
    return read_tsv(
        path, columns={"sentence1": 3, "sentence2": 4}, label_column=0, n_columns=5,
        header=("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
        label_names={"0": "not_equivalent", "1": "equivalent"},
    )


def _read_rte(path: Path) -> list[Example]:
    return read_tsv(
        path, columns={"sentence1": 1, "sentence2": 2}, label_column=3, n_columns=4,
        header=("index", "sentence1", "sentence2", "label"),
        label_names={"entailment": "entailment", "not_entailment": "not_entailment"},
    )


def _read_cola(path: Path) -> list[Example]:
    return read_tsv(
        path, columns={"sentence": 3}, label_column=1, n_columns=4, header=False,
        label_names={"0": "unacceptable", "1": "acceptable"},
    )


SST2 = TaskSpec(
    name="sst2",
    fields=("sentence",),
    labels=("negative", "positive"),
    label_words={"negative": ("terrible",), "positive": ("great",)},
    metrics=("accuracy",),
    template=SINGLE_TEMPLATE,
    splits={"train": "SST-2/train.tsv", "dev": "SST-2/dev.tsv"},
    reader=_read_sst2,
    hub=("glue", "sst2"),
    description="GLUE SST-2 binary sentiment",
)

MRPC = TaskSpec(
    name="mrpc",
    fields=("sentence1", "sentence2"),
    labels=("not_equivalent", "equivalent"),
    label_words={"not_equivalent": ("no",), "equivalent": ("yes",)},
    metrics=("accuracy", "f1"),
    template=PAIR_TEMPLATE,
    splits={"train": "MRPC/train.tsv", "dev": "MRPC/dev.tsv"},
    reader=_read_mrpc,
    positive_label="equivalent",
    hub=("glue", "mrpc"),
    description="GLUE MRPC paraphrase detection",
)

RTE = TaskSpec(
    name="rte",
    fields=("sentence1", "sentence2"),
    labels=("entailment", "not_entailment"),
    label_words={"entailment": ("yes",), "not_entailment": ("no",)},
    metrics=("accuracy",),
    template=PAIR_TEMPLATE,
    splits={"train": "RTE/train.tsv", "dev": "RTE/dev.tsv"},
    reader=_read_rte,
    hub=("glue", "rte"),
    description="GLUE RTE textual entailment",
)

COLA = TaskSpec(
    name="cola",
    fields=("sentence",),
    labels=("unacceptable", "acceptable"),
    label_words={"unacceptable": ("wrong",), "acceptable": ("correct",)},
    metrics=("mcc", "accuracy"),
    template=SINGLE_TEMPLATE,
    splits={"train": "CoLA/train.tsv", "dev": "CoLA/dev.tsv"},
    reader=_read_cola,
    hub=("glue", "cola"),
    description="GLUE CoLA linguistic acceptability",
)

GLUE_TASKS = (SST2, MRPC, RTE, COLA)
