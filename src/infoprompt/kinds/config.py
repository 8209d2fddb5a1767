"""The adapter config every kind saves (``infoprompt_adapter.json``), its resolution against task and method, and
the checked readers of a saved adapter's files."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
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
from infoprompt.kinds.readouts import READOUTS
from infoprompt.kinds.registry import Method
from infoprompt.options import NAME_LIST, NON_NEGATIVE, POSITIVE, POSITIVE_FLOAT, cli
from infoprompt.tasks import (
    BUILTIN_TASKS,
    TASKS,
    TaskSpec,
    get_task,
    is_multi_label,
    task_from_json,
    task_to_json,
)
from infoprompt.templates import Template
from infoprompt.validation import check_finite, check_labels, require_fingerprint, validate_classifier_config

# Where the InfoNCE negatives come from: "paper" (no-prompt states, token embeddings) or "batch" (the other
# examples' prompts).
MI_NEGATIVES = ("paper", "batch")
POOLINGS = ("mean", "cls", "embeddings", "spans")
HEAD_SUMMARIES = ("predicted", "mean")
# The kinds that take each kind-only training option (``resolved`` refuses it on any other).
LORA_KINDS = ("setfit-lora", "lora", "top-lora")
SETFIT_KINDS = ("setfit", "setfit-lora")
HEAD_KINDS = (*SETFIT_KINDS, "top-lora")
OPTION_KINDS = {"pair_iterations": SETFIT_KINDS, "lora_rank": LORA_KINDS, "lora_alpha": LORA_KINDS,
                "lora_targets": LORA_KINDS, "head_c": HEAD_KINDS, "select_head_c": HEAD_KINDS}
# Options of one kind only, left out of the saved config while unset (the two first have checks of their own).
KIND_ONLY_FIELDS = ("released_batch_prompt", "temperature", *OPTION_KINDS)
LONG_TEXTS = ("truncate", "chunk")
# Kinds that train on multi-label tasks (a sigmoid head, a decision threshold picked on held-out shots).
MULTI_LABEL_KINDS = ("linear-probe", "prompt")
# Kinds whose head reads pooled encoder features, so that windows of a long text can be pooled into one.
CHUNKING_KINDS = ("linear-probe",)
CONFIG_NAME = ADAPTER_CONFIG_NAME  # read under the legacy name too: see read_adapter_config
WEIGHTS_NAME = "adapter_model.safetensors"
# Parameters only training uses (the prompt kind's information critics), kept apart on request.
TRAINING_STATE_NAME = "training_state.safetensors"
FORMAT_VERSION = 1


@dataclass
class ClassifierConfig:
    """Everything that defines an adapter; saved next to its weights.

    Attributes:
        task: task name (see ``infoprompt tasks``).
        method: method name (see ``infoprompt methods``); supplies the defaults below.
        backbone: backbone name or path the adapter was trained on.
        labels: class names in head-row order.
        n_prompts: number of prompt tokens ``n_p``.
        template: template string; ``None`` picks the task's, adapted to the method's placement.
        beta: weight of the representation MI loss; ``None`` takes the method's.
        gamma: weight of the head MI loss; ``None`` takes the method's.
        n_negatives: K, negatives per InfoNCE term.
        rank: rank of each slot's up/down projection in generated prompts.
        pooling: what the prompt generator reads as ``P'``: the no-prompt pass pooled by ``mean`` over tokens
            or its ``cls`` state (the paper: ``P' = Φ(X)``), or ``embeddings``, the mean input embedding of
            the tokens, which needs no encoder pass, so that prediction costs one pass instead of two.
            ``spans`` (linear probe on span tasks only): the mean state of each entity mention, concatenated.
        head_summary: how θ is summarised for the head loss: ``predicted`` or ``mean``.
        readout: what the head reads from the prompted pass: the ``mask`` slot (the paper), the ``cls`` state,
            the ``mean`` of the text-field states, ``spans`` (span tasks: the mean state of each entity
            mention, concatenated) or ``auto`` (``spans`` where the template marks mentions, else ``mean``);
            ``None`` takes the method's.
        mi_negatives: the InfoNCE negatives of both information terms. ``paper``: no-prompt states for
            I(P; Z | X) and token embeddings for I(P; θ | X), which a critic tells from prompts within a few
            steps (the bound saturates); ``batch``: the prompts of the other examples of the batch, so the
            critic has to pick the example's own prompt among prompts (the bound is capped at log B).
            ``None`` takes the method's.
        verbalizer_init: initialise head rows from label-word embeddings; ``None`` takes the method's.
        generator_bias: generated prompts carry a bias initialised from token embeddings.
        kl_weight: optional weight of KL(N(μ, σ) ‖ N(0, I)) on the variational Gaussians.
        max_length: token budget of one templated input.
        truncate: shorten text fields that do not fit (otherwise such an input is an error).
        released_batch_prompt: the ``released`` kind only: insert the first example's generated prompt in
            every row of a batch (the released code's behaviour); ``None`` takes the method's.
        temperature: the ``contrastive`` kind only: temperature τ of its label-aware InfoNCE over cosine
            similarities; ``None`` takes the method's.
        pair_iterations: the ``setfit`` and ``setfit-lora`` kinds only: contrastive pairs per training example
            and per polarity (SetFit's ``num_iterations``); ``None`` takes SetFit's default, 20.
        lora_rank: the ``setfit-lora`` and ``lora`` kinds only: rank r of each LoRA update; ``None``: 8.
        lora_alpha: the ``setfit-lora`` and ``lora`` kinds only: LoRA's scaling numerator α (the update is
            ``α / r · B A x``); ``None``: 16.
        lora_targets: the ``setfit-lora`` and ``lora`` kinds only: names of the encoder modules LoRA adapts
            (peft's ``target_modules``); ``None``: the attention query and value projections.
        head_c: the ``setfit`` and ``setfit-lora`` kinds only: inverse L2 strength C of the logistic-regression
            head; ``None``: SetFit's default, 1.
        select_head_c: the ``setfit`` and ``setfit-lora`` kinds only: pick the head's C on the few-shot draw
            (stratified k-fold log-loss of the trained body's embeddings over a grid of C values) instead of
            using a fixed one; ``None``: off.
        long_text: what becomes of a text longer than ``max_length`` tokens: ``truncate`` (cut; counted and
            reported) or ``chunk`` (kinds that read pooled encoder features, the linear probe: the text is read
            in windows of ``max_length`` tokens, each encoded, and their pooled features averaged).
        init_seed: seed of the parameter initialisation.
        backbone_fingerprint: architecture and weight hash of the backbone, checked on load.
        threshold: multi-label tasks: a label is predicted where its sigmoid probability reaches this value
            (picked on a held-out slice of the few-shot draw when the adapter is fitted); ``None`` otherwise.
        task_spec: the task itself (:func:`~infoprompt.tasks.task_to_json`) for a task that is not built in
            (a user's file, a registered task), so that the adapter loads in any process without registration;
            ``None`` for built-in tasks, found by name (and then not written, so their adapters stay as they were).
    """

    task: str
    method: str
    backbone: str
    labels: tuple[str, ...] = ()
    n_prompts: int = 4
    template: str | None = field(default=None, metadata=cli(
        "template string, e.g. '<cls> <p> {sentence} <p> <mask> <p> <sep>'"))
    beta: float | None = field(default=None, metadata=cli("weight of the representation MI loss", type=NON_NEGATIVE))
    gamma: float | None = field(default=None, metadata=cli("weight of the head MI loss", type=NON_NEGATIVE))
    n_negatives: int = field(default=32, metadata=cli("K, negatives per InfoNCE term (default 32)", type=POSITIVE))
    rank: int = field(default=64, metadata=cli("rank of the prompt generator projections (default 64)", type=POSITIVE))
    pooling: str = field(default="mean", metadata=cli(
        "generator input P': the no-prompt pass pooled by mean (default) or cls, or the mean input embedding "
        "(embeddings: one encoder pass at prediction instead of two); spans: linear-probe on span tasks, the mean "
        "state of each mention", choices=POOLINGS))
    head_summary: str = field(default="predicted", metadata=cli(
        "how θ is summarised for the head loss", choices=HEAD_SUMMARIES))
    readout: str | None = field(default=None, metadata=cli(
        "head features: the [MASK] state (paper), [CLS], the mean of the text tokens, the entity mentions (span "
        "tasks), or auto (spans on span tasks, else mean)", choices=("auto", *READOUTS)))
    mi_negatives: str | None = field(default=None, metadata=cli(
        "InfoNCE negatives: paper (no-prompt states, token embeddings) or batch (other examples' prompts)",
        choices=MI_NEGATIVES))
    verbalizer_init: bool | None = field(default=None, metadata=cli(
        "initialise head rows from label-word embeddings", switch="flag"))
    generator_bias: bool = True
    kl_weight: float = field(default=0.0, metadata=cli("weight of the optional KL term (default 0)", type=NON_NEGATIVE))
    max_length: int = field(default=128, metadata=cli("token budget per input (default 128)", type=POSITIVE))
    truncate: bool = field(default=True, metadata=cli("reject inputs longer than --max-length", switch="negate"))
    released_batch_prompt: bool | None = field(default=None, metadata=cli(
        "infoprompt-released only: every row of a batch gets the first example's generated prompt, as the authors' "
        "released code does (default: the method's; off for infoprompt-released)", switch="flag"))
    temperature: float | None = field(default=None, metadata=cli(
        "infoprompt-contrastive only: temperature of the label-aware InfoNCE (default: the method's, 0.1)",
        type=POSITIVE_FLOAT))
    pair_iterations: int | None = field(default=None, metadata=cli(
        "setfit, setfit-lora only: contrastive pairs per training example and polarity, SetFit's num_iterations "
        "(default 20)", type=POSITIVE))
    lora_rank: int | None = field(default=None, metadata=cli(
        "setfit-lora, lora-ce only: LoRA rank r (default 8)", type=POSITIVE))
    lora_alpha: int | None = field(default=None, metadata=cli(
        "setfit-lora, lora-ce only: LoRA scaling alpha, the update is alpha/r * BAx (default 16)", type=POSITIVE))
    lora_targets: tuple[str, ...] | None = field(default=None, metadata=cli(
        "setfit-lora, lora-ce only: comma-separated encoder module names LoRA adapts, e.g. query,key,value "
        "(default: the attention query and value projections)", type=NAME_LIST))
    head_c: float | None = field(default=None, metadata=cli(
        "setfit, setfit-lora only: C (inverse L2 strength) of the logistic-regression head (default SetFit's 1)",
        type=POSITIVE_FLOAT))
    select_head_c: bool | None = field(default=None, metadata=cli(
        "setfit, setfit-lora only: pick the head's C on the few-shot draw by stratified cross-validation "
        "(log-loss, C in 0.01 ... 1000) instead of a fixed C", switch="flag"))
    long_text: str = field(default="truncate", metadata=cli(
        "a text over --max-length tokens: truncate (cut, counted and reported; default) or chunk (linear-probe: "
        "encode windows of --max-length tokens and average their pooled features)", choices=LONG_TEXTS))
    init_seed: int = 0
    backbone_fingerprint: dict[str, object] = field(default_factory=dict)
    task_spec: dict[str, object] | None = None
    threshold: float | None = None

    def resolved(self, task: TaskSpec, preset: Method) -> ClassifierConfig:
        """A copy with every ``None`` default filled from the task and method."""
        values = dataclasses.asdict(self)
        values["labels"] = tuple(self.labels) or task.labels
        values["beta"] = preset.beta if self.beta is None else self.beta
        values["gamma"] = preset.gamma if self.gamma is None else self.gamma
        values["verbalizer_init"] = preset.verbalizer_init if self.verbalizer_init is None else self.verbalizer_init
        if preset.prompt_source is None:
            values["n_prompts"] = 0
        values["template"] = self.template or default_template(task, preset)
        if self.pooling not in POOLINGS:
            raise UserError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.pooling == "spans" and preset.kind != "linear-probe":
            raise UserError(f"pooling 'spans' is for the linear-probe method only, not {preset.name}")
        values["readout"] = resolve_readout(self.readout or preset.readout, Template.parse(values["template"]), task, preset)
        values["mi_negatives"] = self.mi_negatives or preset.mi_negatives
        if values["mi_negatives"] not in MI_NEGATIVES:
            raise UserError(f"mi_negatives must be one of {', '.join(MI_NEGATIVES)}, got {self.mi_negatives!r}")
        if self.head_summary not in HEAD_SUMMARIES:
            raise UserError(f"head_summary must be 'predicted' or 'mean', got {self.head_summary!r}")
        if values["n_prompts"] < 0 or (preset.prompt_source and values["n_prompts"] == 0):
            raise UserError(f"method {preset.name} needs at least one prompt token, got n_prompts={self.n_prompts}")
        if is_multi_label(task) and preset.kind not in MULTI_LABEL_KINDS:
            raise UserError(f"task {task.name} is multi-label, which method {preset.name} does not train; use "
                            f"{' or '.join(MULTI_LABEL_KINDS)}")
        if self.long_text not in LONG_TEXTS:
            raise UserError(f"long_text must be one of {', '.join(LONG_TEXTS)}, got {self.long_text!r}")
        if self.long_text == "chunk" and (preset.kind not in CHUNKING_KINDS or self.pooling == "spans"):
            raise UserError(f"long_text 'chunk' reads windows of pooled encoder features: for "
                            f"{', '.join(CHUNKING_KINDS)} (not pooling 'spans'), not method {preset.name}")
        if self.n_negatives < 1:
            raise UserError(f"n_negatives must be at least 1, got {self.n_negatives}")
        if self.released_batch_prompt is not None and preset.kind != "released":
            raise UserError(f"released_batch_prompt is an option of the infoprompt-released methods, not of {preset.name}")
        if preset.kind == "contrastive":
            values["temperature"] = preset.temperature if self.temperature is None else self.temperature
        elif self.temperature is not None:
            raise UserError(f"temperature is an option of the infoprompt-contrastive methods, not of {preset.name}")
        for name, kinds in OPTION_KINDS.items():
            if getattr(self, name) is not None and preset.kind not in kinds:
                raise UserError(f"{name} is an option of the {' and '.join(kinds)} kinds, not of method {preset.name}")
        if self.head_c is not None and self.select_head_c:
            raise UserError("head_c fixes the head's C and select_head_c picks it on the draw: give one of them")
        check_labels(values["labels"], task)
        return ClassifierConfig(**values)

    def __post_init__(self) -> None:
        if isinstance(self.lora_targets, list):
            self.lora_targets = tuple(self.lora_targets)  # as JSON and YAML give it
        validate_classifier_config(self)

    def to_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["labels"] = list(self.labels)
        # Left out at their defaults, so that adapters of built-in tasks stay byte-identical to earlier versions.
        if self.task_spec is None:
            del data["task_spec"]
        if self.long_text == "truncate":
            del data["long_text"]
        if self.threshold is None:
            del data["threshold"]
        data["format_version"] = FORMAT_VERSION
        for name in KIND_ONLY_FIELDS:
            if data[name] is None:
                del data[name]  # unset: adapters of the other kinds are written exactly as before it existed
        return data

    @classmethod
    def from_json(cls, data: dict[str, object], where: str) -> ClassifierConfig:
        data = dict(data)
        data.pop("format_version", None)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}")
        missing = [name for name in ("task", "method", "backbone") if name not in data]
        if missing:
            raise UserError(f"{where}: missing field(s) {', '.join(missing)}")
        if not isinstance(data.get("labels", ()), list | tuple):
            raise UserError(f"{where}: labels must be a list of names, got {data['labels']!r}")
        data["labels"] = tuple(data.get("labels", ()))
        try:
            config = cls(**data)
            task = config_task(config)
            if config.labels:
                check_labels(config.labels, task)
        except UserError as error:
            raise UserError(f"{where}: {error}") from None
        return config


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


def resolve_readout(readout: str, template: Template, task: TaskSpec, preset: Method) -> str:
    """The readout a config asks for, with ``auto`` (the method's choice) made concrete: ``spans`` where the
    template marks entity mentions, ``mean`` elsewhere."""
    has_spans = count_spans(template) > 0
    if readout == "auto":
        return "spans" if has_spans else "mean"
    if readout not in READOUTS:
        raise UserError(f"readout must be one of auto, {', '.join(READOUTS)}, got {readout!r}")
    if readout == "spans" and not has_spans:
        raise UserError(f"readout 'spans' needs a task with entity mentions; {task.name} has none")
    if readout == "mask" and preset.readout == "cls":
        raise UserError(f"readout 'mask' needs a [MASK] slot, and method {preset.name}'s template has none")
    return readout


def count_spans(template: Template) -> int:
    """Entity mentions a template marks (its ``{name:keep}`` fields)."""
    return sum(policy == "keep" for policy in template.cut_policies.values())


def default_template(task: TaskSpec, preset: Method) -> str:
    template = Template.parse(task.template)
    if preset.placement == "prepend":
        if any(":" in part for part in template.parts):
            # Span tasks split one sentence into fields with truncation policies: keep that text as it is.
            # There the mask marks where the entity is; IDPG reads [CLS], so a literal "@" keeps the mark.
            kept = ["@" if part == "<mask>" else part for part in template.parts if part not in ("<p>", "<cls>")]
            return " ".join(["<cls>", "<p>", *kept])
        fields = " <sep> ".join(f"{{{name}}}" for name in task.fields)
        return f"<cls> <p> {fields} <sep>"
    if preset.placement == "none":
        template = template.without_prompts()
    if preset.readout == "cls":
        template = Template.parse(" ".join(p for p in template.parts if p != "<mask>"))
    return template.text


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
