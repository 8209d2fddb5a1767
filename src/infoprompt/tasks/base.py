"""Task specification and example records shared by every task reader."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.gate import check_texts

DATA_DIR_ENV = "INFOPROMPT_DATA_DIR"
# A split may be a row range of a file, e.g. ``train.jsonl[:-800]`` (SemEval cuts its dev split from train).
_ROW_RANGE = re.compile(r"^(?P<path>.+)\[(?P<start>-?\d*):(?P<stop>-?\d*)\]$")


@dataclass(frozen=True)
class Example:
    """One labelled (or unlabelled) input: named text fields plus a label name.

    ``spans`` holds optional character spans per field name (used by span-aware tasks such as entity
    typing and relation extraction); ``source`` says where the example came from, for error messages.
    """

    fields: dict[str, str]
    label: str | None = None
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    source: str = ""


Reader = Callable[[Path], list[Example]]


@dataclass(frozen=True)
class TaskSpec:
    """Everything the library needs to know about a classification task.

    Attributes:
        name: CLI name, e.g. ``"sst2"``.
        fields: text fields of an example, in template order.
        labels: label names; the class index is the position in this tuple.
        label_words: per label, words whose embeddings may initialise the head row (verbalizer init).
        metrics: metric names, primary first (see :mod:`infoprompt.metrics`).
        template: default template string (see :mod:`infoprompt.templates`).
        splits: split name -> file path relative to the data directory, optionally followed by a Python
            slice of the file's examples, e.g. ``"semeval2010_task8/train.jsonl[-800:]"``.
        reader: function reading one split file into examples.
        train_split / eval_split: which of ``splits`` trains and which evaluates.
        positive_label: the class that counts as positive for F1.
        hub: optional ``(dataset, config)`` for the Hugging Face ``datasets`` source.
    """

    name: str
    fields: tuple[str, ...]
    labels: tuple[str, ...]
    label_words: dict[str, tuple[str, ...]]
    metrics: tuple[str, ...]
    template: str
    splits: dict[str, str]
    reader: Reader
    train_split: str = "train"
    eval_split: str = "dev"
    positive_label: str | None = None
    hub: tuple[str, str] | None = None
    description: str = ""

    @property
    def primary_metric(self) -> str:
        return self.metrics[0]

    def label_index(self, label: str, where: str = "") -> int:
        try:
            return self.labels.index(label)
        except ValueError:
            at = f" ({where})" if where else ""
            raise UserError(
                f"unknown label {label!r} for task {self.name}{at}; valid labels: {', '.join(self.labels)}"
            ) from None


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    """The data directory from the argument, else from ``$INFOPROMPT_DATA_DIR``; it must exist."""
    chosen = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV)
    if chosen is None:
        raise UserError(f"no data directory: pass --data-dir or set {DATA_DIR_ENV}")
    path = Path(chosen).expanduser()
    if not path.is_dir():
        raise UserError(f"data directory {path} does not exist or is not a directory")
    return path


def load_split(task: TaskSpec, split: str, data_dir: str | os.PathLike[str] | None = None) -> list[Example]:
    """Read one split of ``task`` from the data directory, checking every label."""
    if split not in task.splits:
        raise UserError(f"task {task.name} has no split {split!r}; splits: {', '.join(task.splits)}")
    location, rows = split_location(task.splits[split])
    path = resolve_data_dir(data_dir) / location
    if not path.is_file():
        raise UserError(f"data file {path} for task {task.name} ({split}) not found")
    every = task.reader(path)
    examples = every[rows]
    for example in examples:
        check_texts(example.fields, example.source or str(path), every_field=False)  # whatever the reader
        if example.label is not None:
            task.label_index(example.label, where=example.source)
    if not examples and every:
        raise UserError(
            f"the {split} split of task {task.name} is rows [{task.splits[split].rsplit('[', 1)[1]} of {path}, "
            f"which holds only {len(every)} example(s): that range is empty"
        )
    if not examples:
        raise UserError(f"data file {path} holds no examples")
    return examples


def split_location(entry: str) -> tuple[str, slice]:
    """A ``splits`` entry as (file path, slice of its examples); the whole file unless a range is given."""
    match = _ROW_RANGE.match(entry)
    if match is None:
        return entry, slice(None)
    start, stop = (int(value) if value else None for value in (match["start"], match["stop"]))
    return match["path"], slice(start, stop)


def load_hub_split(task: TaskSpec, split: str) -> list[Example]:
    """Read one split through Hugging Face ``datasets`` (online users only; optional dependency)."""
    if task.hub is None:
        raise UserError(f"task {task.name} has no Hugging Face datasets source")
    try:
        import datasets
    except ImportError:
        raise UserError("the 'hub' source needs the optional dependency: pip install 'infoprompt[hub]'") from None
    hub_split = {"dev": "validation"}.get(split, split)
    try:
        rows = datasets.load_dataset(*task.hub, split=hub_split)
    except Exception as error:  # the datasets library raises many unrelated types when offline
        raise UserError(f"could not load {task.hub} split {hub_split} from the Hub: {error}") from None
    names = rows.features["label"].names
    label_map = dict(zip(names, task.labels, strict=False)) if set(names) != set(task.labels) else None
    examples = []
    for index, row in enumerate(rows):
        label = names[row["label"]]
        where = f"{task.hub[0]}/{task.hub[1]}:{hub_split}:{index}"
        examples.append(
            Example(
                fields=check_texts({name: row[name] for name in task.fields}, where),
                label=label_map[label] if label_map else label,
                source=where,
            )
        )
    return examples


def check_fields(task: TaskSpec, examples: Sequence[Example]) -> None:
    for example in examples:
        missing = [name for name in task.fields if name not in example.fields]
        if missing:
            raise UserError(f"{example.source or 'input'}: missing field(s) {', '.join(missing)} for task {task.name}")
