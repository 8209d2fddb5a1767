"""Readers and specs for the four GLUE tasks (SST-2, MRPC, RTE, CoLA) as staged in the data directory."""

from __future__ import annotations

from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.tasks.base import Example, TaskSpec

SINGLE_TEMPLATE = "<cls> <p> {sentence} <p> <mask> <p> <sep>"
PAIR_TEMPLATE = "<cls> <p> {sentence1} <p> <mask> <p> {sentence2} <p> <sep>"


def read_tsv(
    path: Path,
    *,
    columns: dict[str, int],
    label_column: int,
    n_columns: int,
    header: bool,
    label_names: dict[str, str] | None = None,
) -> list[Example]:
    """Read a quote-free GLUE TSV file; every malformed row is reported with its file and line number.

    The files hold bare ``"`` characters, so no CSV quoting is applied, and MRPC starts with a byte-order
    mark, hence ``utf-8-sig``.
    """
    examples: list[Example] = []
    try:
        handle = path.open(encoding="utf-8-sig", newline="")
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    with handle:
        for line_number, raw in enumerate(handle, start=1):
            if header and line_number == 1:
                continue
            line = raw.rstrip("\r\n")
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
            fields = {name: cells[index].strip() for name, index in columns.items()}
            empty = [name for name, text in fields.items() if not text]
            if empty:
                raise UserError(f"{path}:{line_number}: empty text field(s) {', '.join(empty)}")
            examples.append(Example(fields=fields, label=label, source=f"{path}:{line_number}"))
    return examples


def _read_sst2(path: Path) -> list[Example]:
    return read_tsv(
        path, columns={"sentence": 0}, label_column=1, n_columns=2, header=True,
        label_names={"0": "negative", "1": "positive"},
    )


def _read_mrpc(path: Path) -> list[Example]:
    return read_tsv(
        path, columns={"sentence1": 3, "sentence2": 4}, label_column=0, n_columns=5, header=True,
        label_names={"0": "not_equivalent", "1": "equivalent"},
    )


def _read_rte(path: Path) -> list[Example]:
    return read_tsv(
        path, columns={"sentence1": 1, "sentence2": 2}, label_column=3, n_columns=4, header=True,
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
