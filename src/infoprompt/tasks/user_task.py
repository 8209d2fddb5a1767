"""Tasks made from a user's own labels and columns, and tasks as JSON so a saved adapter carries its own.

A user task needs no registration: :func:`user_task` builds it from the file's columns and the labels found
in the training data, :func:`task_to_json` writes it into an adapter's config and :func:`task_from_json` reads
it back, in a fresh process, with the same labels in the same order. The reader is not written: a
:class:`UserTask` rebuilds it from its columns, and a built-in task read back from JSON has none (its data is
found by name through the registry). No task read from JSON has splits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.tasks.base import Example, TaskSpec
from infoprompt.tasks.files import PAIR_FIELD, TEXT_FIELD, FileColumns, read_labelled_file
from infoprompt.tasks.multilabel import register_multilabel_metrics

TASK_JSON_FORMAT = 1
# The GLUE templates (SST-2 for one text, MRPC for pairs) over the user-task field names.
USER_SINGLE_TEMPLATE = f"<cls> <p> {{{TEXT_FIELD}}} <p> <mask> <p> <sep>"
USER_PAIR_TEMPLATE = f"<cls> <p> {{{TEXT_FIELD}}} <p> <mask> <p> {{{PAIR_FIELD}}} <p> <sep>"
SINGLE_LABEL_METRICS = ("accuracy", "macro_f1")
MULTI_LABEL_METRICS = ("multilabel_micro_f1", "multilabel_macro_f1")  # micro-F1 primary
_TASK_NAME = re.compile(r"^\w[\w.-]*$")
_JSON_KEYS = ("format", "name", "fields", "labels", "label_words", "metrics", "template", "positive_label",
              "description", "columns")


@dataclass(frozen=True)
class ColumnReader:
    """The reader of a user task: a labelled file read through the task's columns (comparable, unlike a lambda)."""

    columns: FileColumns

    def __call__(self, path: Path) -> list[Example]:
        return read_labelled_file(path, self.columns)


@dataclass(frozen=True)
class UserTask(TaskSpec):
    """A :class:`TaskSpec` over a user's file; ``columns`` also says whether it is multi-label."""

    columns: FileColumns = field(default_factory=FileColumns)

    @property
    def multi_label(self) -> bool:
        return self.columns.multi_label


def is_multi_label(task: TaskSpec) -> bool:
    """Whether examples of ``task`` carry label sets (see :mod:`infoprompt.tasks.multilabel`)."""
    return isinstance(task, UserTask) and task.multi_label


def user_task(
    name: str,
    columns: FileColumns,
    labels: Sequence[str],
    *,
    template: str | None = None,
    metrics: Sequence[str] | None = None,
    description: str = "",
) -> UserTask:
    """A task for a user's data: fields ``text`` (and ``text_pair``), ``labels`` in the given order.

    ``labels`` is usually :func:`infoprompt.tasks.files.collect_labels` of the training file. The template
    defaults to the SST-2 one for single texts and the MRPC one for pairs; metrics default to accuracy and
    macro-F1 (single label, primary first) or micro- and macro-F1 over labels (multi-label). Each label's own
    words initialise its head row where the method uses verbalizer initialisation.
    """
    _check_name(name, "task name")
    if name in _builtin_names():
        raise UserError(f"task name {name!r} is a built-in task; give your data another name")
    labels = _check_labels(list(labels), "labels")
    task = UserTask(
        name=name,
        fields=columns.fields,
        labels=labels,
        label_words={label: label_words(label) for label in labels},
        metrics=tuple(metrics) if metrics is not None else
        (MULTI_LABEL_METRICS if columns.multi_label else SINGLE_LABEL_METRICS),
        template=template or (USER_PAIR_TEMPLATE if columns.text_pair_column is not None else USER_SINGLE_TEMPLATE),
        splits={},
        reader=ColumnReader(columns),
        description=description or f"user data, {len(labels)} {'labels' if columns.multi_label else 'classes'}",
        columns=columns,
    )
    _check_task(task, "user task")
    return task


def task_from_file(path: str | Path, columns: FileColumns, *, name: str | None = None,
                   template: str | None = None) -> tuple[UserTask, list[Example]]:
    """Read a training file and build its task: the labels are those the file holds, sorted.

    ``name`` defaults to the file's stem made a valid task name (``user-`` in front if a built-in task has
    it). Fewer than two classes is an error naming the file.
    """
    from infoprompt.tasks.files import collect_labels

    examples = read_labelled_file(path, columns)
    labels = collect_labels(examples, multi_label=columns.multi_label, where=f"{path}: column {columns.label_column!r}")
    return user_task(file_task_name(path) if name is None else name, columns, labels, template=template), examples


def file_task_name(path: str | Path) -> str:
    """The task name a file gives when none is named: its stem made a valid task name, with ``user-`` in front
    if a built-in task has it (``support tickets.csv`` -> ``support-tickets``, ``sst2.csv`` -> ``user-sst2``)."""
    name = re.sub(r"[^\w.-]+", "-", Path(path).stem).lstrip(".-") or "user-task"
    return f"user-{name}" if name in _builtin_names() else name


def _builtin_names() -> set[str]:
    from infoprompt.tasks.entity import ENTITY_TASKS  # not at module level: the package imports this module
    from infoprompt.tasks.glue import GLUE_TASKS
    from infoprompt.tasks.relation import RELATION_TASKS

    return {task.name for task in (*GLUE_TASKS, *RELATION_TASKS, *ENTITY_TASKS)}


def label_words(label: str) -> tuple[str, ...]:
    """The words of a label name ('réserver vol' -> réserver, vol; 'Cause-Effect(e1,e2)' -> Cause, Effect, e1, e2)."""
    return tuple(re.findall(r"[^\W_]+", label))


# -- JSON -----------------------------------------------------------------------------------------------------

def task_to_json(task: TaskSpec) -> dict[str, object]:
    """``task`` as a JSON object: everything prediction needs, not the reader, splits or Hub source."""
    columns = task.columns if isinstance(task, UserTask) else None
    return {
        "format": TASK_JSON_FORMAT,
        "name": task.name,
        "fields": list(task.fields),
        "labels": list(task.labels),
        "label_words": {label: list(words) for label, words in task.label_words.items()},
        "metrics": list(task.metrics),
        "template": task.template,
        "positive_label": task.positive_label,
        "description": task.description,
        "columns": None if columns is None else {f.name: getattr(columns, f.name) for f in fields(FileColumns)},
    }


def task_from_json(data: object, where: str) -> TaskSpec:
    """The task :func:`task_to_json` wrote; anything malformed is a one-line error naming ``where`` and the key.

    With ``columns`` the result is a :class:`UserTask` reading files through them; without, a plain
    :class:`TaskSpec` whose reader refuses to read (its data comes from the registry by name).
    """
    data = _mapping(data, where, "the task")
    _exact_keys(data, _JSON_KEYS, where, "task")
    if data["format"] != TASK_JSON_FORMAT or isinstance(data["format"], bool):
        raise UserError(f"{where}: task 'format' is {data['format']!r}; this version reads format {TASK_JSON_FORMAT}")
    name = _string(data["name"], where, "name")
    _check_name(name, f"{where}: task 'name'")
    labels = _check_labels(data["labels"], "labels", where)
    words = _mapping(data["label_words"], where, "task 'label_words'")
    if unknown := sorted(set(words) - set(labels)):
        raise UserError(f"{where}: task 'label_words' names {unknown[0]!r}, which is not one of the labels")
    spec = {
        "name": name,
        "fields": tuple(_strings(data["fields"], where, "fields", minimum=1)),
        "labels": labels,
        "label_words": {label: tuple(_strings(value, where, f"label_words[{label!r}]", minimum=0))
                        for label, value in words.items()},
        "metrics": tuple(_strings(data["metrics"], where, "metrics", minimum=1)),
        "template": _string(data["template"], where, "template"),
        "splits": {},
        "positive_label": None if data["positive_label"] is None else _string(data["positive_label"], where,
                                                                                "positive_label"),
        "description": _string(data["description"], where, "description", allow_empty=True),
    }
    if data["columns"] is None:
        task: TaskSpec = TaskSpec(**spec, reader=_NoReader(name))
    else:
        columns = _columns_from_json(data["columns"], where)
        task = UserTask(**spec, reader=ColumnReader(columns), columns=columns)
    _check_task(task, f"{where}: task")
    return task


@dataclass(frozen=True)
class _NoReader:
    name: str

    def __call__(self, path: Path) -> list[Example]:
        raise UserError(f"task {self.name} was read from an adapter and has no data reader; read {path} through "
                        f"the registered task instead")


def _columns_from_json(data: object, where: str) -> FileColumns:
    names = tuple(f.name for f in fields(FileColumns))
    data = _mapping(data, where, "task 'columns'")
    _exact_keys(data, names, where, "task 'columns'")
    for key in ("text_column", "label_column", "label_separator"):
        _string(data[key], where, f"columns.{key}")
    if data["text_pair_column"] is not None:
        _string(data["text_pair_column"], where, "columns.text_pair_column")
    if not isinstance(data["multi_label"], bool):
        raise UserError(f"{where}: task 'columns.multi_label' must be true or false, got {data['multi_label']!r}")
    try:
        return FileColumns(**data)
    except UserError as error:
        raise UserError(f"{where}: task 'columns': {error}") from None


def _check_task(task: TaskSpec, where: str) -> None:
    """Consistency across fields: template fields, metrics known and fitting the label kind, positive label."""
    from infoprompt.metrics import METRICS  # imports scikit-learn: only when a task is built
    from infoprompt.templates import Template  # imports torch

    register_multilabel_metrics()

    try:
        template_fields = Template.parse(task.template).fields
    except UserError as error:
        raise UserError(f"{where} 'template': {error}") from None
    if len(set(task.fields)) != len(task.fields):
        raise UserError(f"{where} 'fields' names a field twice: {list(task.fields)}")
    if set(template_fields) != set(task.fields):
        raise UserError(f"{where} 'template' {task.template!r} uses fields {sorted(set(template_fields))}, "
                        f"but 'fields' lists {list(task.fields)}")
    if isinstance(task, UserTask) and task.fields != task.columns.fields:
        raise UserError(f"{where} 'fields' {list(task.fields)} do not match its columns, which fill "
                        f"{list(task.columns.fields)}")
    multi = is_multi_label(task)
    for metric in task.metrics:
        if metric not in METRICS:
            raise UserError(f"{where} 'metrics': unknown metric {metric!r}; known: {', '.join(METRICS)}")
        if metric.startswith("multilabel_") != multi:
            kind = "a multi-label" if multi else "a single-label"
            raise UserError(f"{where} 'metrics': {metric!r} does not score {kind} task")
    if task.positive_label is not None and task.positive_label not in task.labels:
        raise UserError(f"{where} 'positive_label' {task.positive_label!r} is not one of the labels")


def check_task_name(name: object, what: str = "task name") -> str:
    """``name`` when it is a valid name for a user's task (not a built-in task's), else a one-line error."""
    _check_name(name, what)
    if name in _builtin_names():
        raise UserError(f"{what} {name!r} is a built-in task; give your data another name")
    return str(name)


def _check_name(name: object, what: str) -> None:
    if not isinstance(name, str) or not _TASK_NAME.match(name):
        raise UserError(f"{what} must be letters, digits, '_', '-' or '.' (not starting with '-' or '.'), "
                        f"got {name!r}")


def _check_labels(value: object, key: str, where: str = "") -> tuple[str, ...]:
    prefix = f"{where}: task " if where else ""
    labels = _strings(value, where, key, minimum=0) if where else value
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise UserError(f"{prefix}{key!r} must be a list of label names, got {value!r}")
    for label in labels:
        if not label.strip() or label != label.strip():
            raise UserError(f"{prefix}{key!r}: label {label!r} is blank or has surrounding whitespace")
    if len(set(labels)) != len(labels):
        twice = next(label for label in labels if labels.count(label) > 1)
        raise UserError(f"{prefix}{key!r} names label {twice!r} twice")
    if len(labels) < 2:
        raise UserError(f"{prefix}{key!r} holds {len(labels)} label(s); a classifier needs at least 2")
    return tuple(labels)


def _mapping(value: object, where: str, what: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise UserError(f"{where}: {what} must be a JSON object, got {type(value).__name__}")
    return value


def _exact_keys(data: Mapping[str, object], keys: Sequence[str], where: str, what: str) -> None:
    if unknown := [key for key in data if key not in keys]:
        raise UserError(f"{where}: {what} has unknown key {unknown[0]!r}; known: {', '.join(keys)}")
    if missing := [key for key in keys if key not in data]:
        raise UserError(f"{where}: {what} lacks key {missing[0]!r}")


def _string(value: object, where: str, key: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise UserError(f"{where}: task {key!r} must be a non-empty string, got {value!r}")
    return value


def _strings(value: object, where: str, key: str, *, minimum: int) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise UserError(f"{where}: task {key!r} must be a list of non-empty strings, got {value!r}")
    if len(value) < minimum:
        raise UserError(f"{where}: task {key!r} must hold at least {minimum} entr{'y' if minimum == 1 else 'ies'}")
    return value
