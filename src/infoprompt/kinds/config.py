"""The adapter config every kind saves (``infoprompt_adapter.json``): the fields every kind shares plus the kind's
own options; its format-2 record, the checked readers of a saved adapter's config and files."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from infoprompt.backbones import Backbone, load_backbone
from infoprompt.errors import UserError
from infoprompt.io_utils import (
    ADAPTER_CONFIG_NAME,
    LEGACY_ADAPTER_CONFIG_NAME,
    adapter_config_file,
    read_json_object,
)
from infoprompt.kinds.format_v1 import fields_from_v1
from infoprompt.kinds.options import KindOptions
from infoprompt.kinds.registry import (
    LONG_TEXT_CHUNKS,
    MULTI_LABEL,
    Kind,
    get_method,
    kind_of,
    kinds_with,
)
from infoprompt.options import TOKEN_BUDGET, option
from infoprompt.tasks import (
    BUILTIN_TASKS,
    TASKS,
    TaskSpec,
    get_task,
    is_multi_label,
    task_from_json,
    task_to_json,
)
from infoprompt.validation import (
    Rule,
    check_fields,
    check_finite,
    check_labels,
    distinct_names,
    finite_number,
    require_fingerprint,
)

LONG_TEXTS = ("truncate", "chunk")
CONFIG_NAME = ADAPTER_CONFIG_NAME  # read under the legacy name too: see read_adapter_config
WEIGHTS_NAME = "adapter_model.safetensors"
# Parameters only training uses (the prompt kind's information critics), kept apart on request.
TRAINING_STATE_NAME = "training_state.safetensors"
# 1: one flat record of every kind's fields (up to infoprompt 0.1.0, read by format_v1.py); 2: the shared fields
# plus "kind" and the kind's own "options".
FORMAT_VERSION = 2
# The fields of a config that its builder sets, not a run's settings (a grid's `classifier`, make_classifier's
# options): every other field, and every option of the method's kind, a run may set.
SET_BY_CALLER = ("task", "method", "backbone", "options", "labels", "init_seed", "backbone_fingerprint")


@dataclass
class ClassifierConfig:
    """Everything that defines an adapter; saved next to its weights.

    Attributes:
        task: task name (see ``infoprompt tasks``).
        method: method name (see ``infoprompt methods``); its kind owns ``options``, its row presets them.
        backbone: backbone name or path the adapter was trained on.
        options: the kind's options (:class:`~infoprompt.kinds.options.KindOptions`); given as ``None`` (the
            method's preset) or as a mapping of overrides of that preset (``{"beta": 0.2}``), each checked, an
            option the kind lacks refused with one line naming the kind.
        labels: class names in head-row order.
        template: template string; ``None`` picks the task's, adapted to the kind (and method).
        max_length: token budget of one templated input.
        truncate: shorten text fields that do not fit (otherwise such an input is an error).
        long_text: what becomes of a text longer than ``max_length`` tokens: ``truncate`` (cut; counted and
            reported) or ``chunk`` (kinds with the long-text-chunks capability, the linear probe: the text is read
            in windows of ``max_length`` tokens, each encoded, and their pooled features averaged).
        init_seed: seed of the parameter initialisation.
        backbone_fingerprint: architecture and weight hash of the backbone, checked on load.
        task_spec: the task itself (:func:`~infoprompt.tasks.task_to_json`) for a task that is not built in
            (a user's file, a registered task), so that the adapter loads in any process without registration;
            ``None`` for built-in tasks, found by name.
        threshold: multi-label tasks: a label is predicted where its sigmoid probability reaches this value
            (picked on a held-out slice of the few-shot draw when the adapter is fitted); ``None`` otherwise.
    """

    task: str
    method: str
    backbone: str
    options: KindOptions | Mapping[str, object] | None = None
    labels: tuple[str, ...] = option((), type=Rule(distinct_names))
    template: str | None = option(None, "template string, e.g. '<cls> <p> {sentence} <p> <mask> <p> <sep>'")
    max_length: int = option(128, "token budget per input (default 128)", type=TOKEN_BUDGET)
    truncate: bool = option(True, "reject inputs longer than --max-length", switch="negate")
    long_text: str = option("truncate", "a text over --max-length tokens: truncate (cut, counted and reported; "
                            "default) or chunk (linear-probe: encode windows of --max-length tokens and average "
                            "their pooled features)", choices=LONG_TEXTS)
    init_seed: int = 0
    backbone_fingerprint: dict[str, object] = field(default_factory=dict)
    task_spec: dict[str, object] | None = None
    threshold: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.labels, list):
            self.labels = tuple(self.labels)  # as JSON gives them
        kind = self.kind
        if not isinstance(self.options, KindOptions):
            if self.options is not None and not isinstance(self.options, Mapping):
                raise UserError(f"options must be a mapping of option names to values, got {self.options!r}")
            self.options = kind.options_for(get_method(self.method), dict(self.options or {}))
        elif type(self.options) is not kind.options:
            raise UserError(f"method {self.method} (kind {kind.name}) takes {kind.options.__name__}, "
                            f"not {type(self.options).__name__}")
        check_fields(self)
        if self.threshold is not None and not 0 <= finite_number(self.threshold, "threshold") <= 1:
            raise UserError(f"threshold must be a probability from 0 to 1, got {self.threshold}")

    @classmethod
    def create(cls, task: str, method: str, backbone: str, **given: object) -> ClassifierConfig:
        """A config from flat keyword arguments, as a run's settings give them (``max_length=64, beta=0.2``): the
        shared fields are set, every other name is an option of the method's kind (and refused if it is not)."""
        shared = {f.name for f in dataclasses.fields(cls)} - {"options"}
        return cls(task=task, method=method, backbone=backbone,
                   options={name: value for name, value in given.items() if name not in shared},
                   **{name: value for name, value in given.items() if name in shared})

    @property
    def kind(self) -> Kind:
        """The kind of the config's method."""
        return kind_of(self.method)

    @property
    def n_prompts(self) -> int:
        """Prompt tokens the adapter inserts in an input (0 for kinds without prompts)."""
        return self.options.prompt_tokens()

    def resolved(self, task: TaskSpec) -> ClassifierConfig:
        """A copy with the task's labels where none are given, checked against what the kind can do: multi-label
        tasks and texts read in windows need kinds with those capabilities. (A kind's own resolution, of the
        template and its options, comes first, in its model.)"""
        kind = self.kind
        if is_multi_label(task) and kind.refusal(MULTI_LABEL, self.options) is not None:
            raise UserError(f"task {task.name} is multi-label, which method {self.method} does not train; use a "
                            f"method of kind {' or '.join(kinds_with(MULTI_LABEL))}")
        if self.long_text == "chunk" and (reason := kind.refusal(LONG_TEXT_CHUNKS, self.options)) is not None:
            raise UserError(f"long_text 'chunk' reads windows of pooled encoder features: for kinds "
                            f"{', '.join(kinds_with(LONG_TEXT_CHUNKS))}, not method {self.method} ({reason})")
        labels = tuple(self.labels) or task.labels
        check_labels(labels, task)
        return dataclasses.replace(self, labels=labels)

    def to_json(self) -> dict[str, object]:
        """The format-2 record: the shared fields, ``kind`` and the kind's ``options``."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data.update(format_version=FORMAT_VERSION, kind=self.kind.name, labels=list(self.labels),
                    options=self.options.to_json())
        return data

    @classmethod
    def from_json(cls, data: dict[str, object], where: str) -> ClassifierConfig:
        """The config of a saved record of either format, checked; errors name ``where``."""
        version = data.get("format_version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise UserError(f"{where}: format_version must be a positive integer, got {version!r}")
        if version > FORMAT_VERSION:
            raise UserError(f"{where}: format_version {version} was written by a newer infoprompt; this one reads "
                            f"formats 1 to {FORMAT_VERSION}")
        if version == 1:
            return checked_config(cls, None, fields_from_v1(data, where), where)
        data = dict(data)
        del data["format_version"]
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names - {"kind"})
        if unknown:
            raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}")
        missing = [name for name in ("task", "method", "backbone", "kind", "options") if name not in data]
        if missing:
            raise UserError(f"{where}: missing field(s) {', '.join(missing)}")
        return checked_config(cls, data.pop("kind"), data, where)


def checked_config(cls: type[ClassifierConfig], kind_name: object, values: dict[str, object],
                   where: str) -> ClassifierConfig:
    """A saved config from its field ``values`` (``options`` complete or not), with its kind, labels and task
    checked; every error is one line naming ``where``."""
    try:
        kind = kind_of(str(values["method"]))
        if kind_name is not None and kind_name != kind.name:
            raise UserError(f"kind {kind_name!r} is not method {values['method']}'s kind {kind.name!r}")
        labels = values.get("labels", ())
        if not isinstance(labels, list | tuple):
            raise UserError(f"labels must be a list of names, got {labels!r}")
        saved = values.get("options")
        if not isinstance(saved, Mapping):
            raise UserError(f"options must be a mapping of option names to values, got {saved!r}")
        values = {**values, "labels": tuple(labels), "options": saved_options(kind, values["method"], saved)}
        config = cls(**values)
        task = config_task(config)
        if config.labels:
            check_labels(config.labels, task)
    except UserError as error:
        raise UserError(f"{where}: {error}") from None
    return config


def saved_options(kind: Kind, method: object, values: Mapping[str, object]) -> KindOptions:
    """The options a saved adapter records (an option it lacks, one added to the kind since, takes the method's
    preset); a name the kind does not have is refused."""
    unknown = sorted(set(values) - set(kind.options.names()))
    if unknown:
        raise UserError(kind.lacking(str(method), unknown))
    return dataclasses.replace(get_method(str(method)).options, **values)


def config_task(config: ClassifierConfig) -> TaskSpec:
    """The task of an adapter's config: the one it carries (``task_spec``) when it has one, else the registered
    task of that name. Every place that needs an adapter's task goes through here. A carried task that this
    process has also registered, unchanged, is the registered one (which knows where its data is)."""
    if config.task_spec is None:
        return get_task(config.task)
    registered = TASKS.get(config.task)
    if registered is not None and task_to_json(registered) == config.task_spec:
        return registered
    task = task_from_json(config.task_spec, "adapter config")
    if task.name != config.task:
        raise UserError(f"adapter config: task_spec names task {task.name!r}, but task is {config.task!r}")
    return task


def task_identity(task: str | TaskSpec) -> dict[str, object]:
    """The ``task`` and ``task_spec`` fields of a config for ``task`` (a name or a task): a built-in task is
    named only; any other task (a user's file, one registered in this process) is also carried as JSON."""
    if isinstance(task, str):
        task = get_task(task)
    builtin = BUILTIN_TASKS.get(task.name)
    return {"task": task.name, "task_spec": None if builtin is task else task_to_json(task)}


def check_backbone(config: ClassifierConfig, backbone: Backbone, reserved: int = 0) -> None:
    """Refuse a backbone other than the adapter's, or one too short for ``max_length`` (+ ``reserved`` tokens);
    then record the backbone's fingerprint in ``config``."""
    if config.backbone_fingerprint and config.backbone_fingerprint != backbone.fingerprint():
        raise UserError(
            f"adapter was trained on backbone {config.backbone!r} {config.backbone_fingerprint}, "
            f"but the loaded backbone {backbone.name!r} is {backbone.fingerprint()}"
        )
    config.backbone_fingerprint = backbone.fingerprint()
    if config.max_length + reserved > backbone.max_positions:
        extra = f" plus {reserved} prompt token(s)" if reserved else ""
        raise UserError(
            f"max_length={config.max_length}{extra} exceeds the {backbone.max_positions} positions of backbone "
            f"{backbone.name!r}"
        )


def load_saved(model_type: Any, directory: Path, config: ClassifierConfig, backbone: Backbone | None,
               cache_dir: str | None) -> Any:
    """Load the adapter in ``directory`` as ``model_type`` on ``backbone`` (the saved one unless given), on the
    backbone's device: the one place every kind's loading goes through."""
    if backbone is None:
        backbone = load_backbone(config.backbone, cache_dir=cache_dir, from_file=True)
    return model_type.load(directory, config, backbone).to(backbone.device)


def read_adapter_config(directory: Path) -> ClassifierConfig:
    """The config of the adapter saved in ``directory`` (any kind), with its files checked to be there.

    Adapters written before the metadata moved to ``infoprompt_adapter.json`` are read from their
    ``adapter_config.json``, unless that file is another library's (PEFT's) config."""
    if not directory.is_dir():
        raise UserError(f"adapter directory {directory} does not exist")
    config_path = adapter_config_file(directory)
    if config_path is None:
        foreign = directory / LEGACY_ADAPTER_CONFIG_NAME
        note = f" ({foreign} there is another library's config)" if foreign.is_file() else ""
        raise UserError(f"adapter file {directory / CONFIG_NAME} is missing{note}")
    data = require_fingerprint(read_json_object(config_path), str(config_path))
    return ClassifierConfig.from_json(data, str(config_path))


def read_weights(
    directory: Path, expected: dict[str, torch.Tensor], free_shapes: Collection[str] = (),
    optional: Collection[str] = (), name: str = WEIGHTS_NAME,
) -> dict[str, torch.Tensor]:
    """Read ``adapter_model.safetensors`` (or ``name``) and check its names, the shapes of all but
    ``free_shapes`` against ``expected``, and that every value is finite. Names in ``optional`` may be absent
    (training-only parameters, which older adapters hold and newer ones leave out)."""
    path = directory / name
    if not path.is_file():
        raise UserError(f"adapter file {path} is missing")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise UserError(f"{path}: not a readable safetensors file ({error})") from None
    missing = sorted(set(expected) - set(state) - set(optional))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise UserError(f"{path}: parameters do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    for name, tensor in state.items():
        if name not in free_shapes and tensor.shape != expected[name].shape:
            raise UserError(f"{path}: {name} has shape {tuple(tensor.shape)}, expected {tuple(expected[name].shape)}")
    check_finite(state, str(path))
    return state
