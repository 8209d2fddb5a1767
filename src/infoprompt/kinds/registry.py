"""The one registry of adapter kinds and of the method table (each method a named preset of one kind's options).

A kind (:class:`Kind`) is one folder under ``src/infoprompt/kinds/`` that owns everything about it: its model
(built, trained, saved and loaded through the :class:`~infoprompt.training.contract.Adapter` contract), its fit,
its options (a :class:`~infoprompt.kinds.options.KindOptions` dataclass whose fields carry their flag and check),
its capabilities (multi-label tasks, long-text chunks, ONNX export, the server's shared plain pass) and its
methods (:class:`Method`: named presets of its options). The rest of the library asks a kind what it can do
and never lists kind names.

Adding a kind (see docs/kinds.md): a folder ``kinds/<name>/`` whose ``__init__`` defines
``KIND = Kind("<name>", Model, fit, options=Options, capabilities={...}, methods=(...))``, and one line in
``kinds/__init__.py``: ``register_kind(<name>.KIND)``. Its flags, methods, loading and the conformance tests
follow from the registry. This module imports no model code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.kinds.options import KindOptions
from infoprompt.suggest import unknown_name
from infoprompt.training.config import COMMON_TRAINING, ENGINE_TRAINING
from infoprompt.training.contract import FitFunction

# What a kind can do beyond training and predicting; a kind lists those it has in ``Kind.capabilities``.
MULTI_LABEL = "multi-label"
LONG_TEXT_CHUNKS = "long-text-chunks"
ONNX_EXPORT = "onnx-export"
SHARED_PLAIN_PASS = "shared-plain-pass"
MIXED_LORA = "mixed-lora-batch"
CAPABILITIES = {
    MULTI_LABEL: "trains on multi-label tasks (a sigmoid per label, a threshold picked on held-out shots)",
    LONG_TEXT_CHUNKS: "reads a text over max_length tokens in windows whose pooled features are averaged "
                      "(long_text: chunk)",
    ONNX_EXPORT: "predicts with one encoder pass over the tokenizer's input_ids and attention_mask and a head, "
                 "so `infoprompt export --onnx` can write it as one graph",
    SHARED_PLAIN_PASS: "predicts with a head (head_logits) on features of the plain input alone (forward's second "
                       "output), so the server runs one encoder pass for every such adapter on a backbone",
    MIXED_LORA: "predicts through peft LoRA in a structure copy of the shared encoder (lora_model) and a readout of "
                "its last hidden states (readout_logits), so rows of different adapters share one batch and the "
                "blocks below their LoRA run once per text (infoprompt.kinds.mixed_lora)",
}


@dataclass(frozen=True)
class Method:
    """One row of the method table: a named preset of its kind's options, with its training defaults and how
    report tables show it.

    Attributes:
        name: CLI / table name.
        options: the preset, an instance of the kind's options class; a run's own options override it.
        lr: default learning rate of the kind's fit (required, so that no row trains at 0 by omission; a fit
            without one, the probe's, takes 0).
        select: ``"none"`` (train all epochs) or ``"holdout"`` (pick the epoch count on a held-out slice of the
            few-shot draw, then refit); see :class:`~infoprompt.training.TrainConfig`.
        warm_start: fit the head by logistic regression on the initial features before training.
        refit_head: the head is fitted by logistic regression on the adapter's current features before the first
            epoch and after every epoch (for objectives that train the features, not the head).
        description: one line for ``infoprompt methods``.
        table_order: position in report tables (lower first; ``None``: after the ordered rows, by name).
        table_label: the row label in report tables (default: the name).
        baselines: the methods ``report`` pairs this one with when no ``--compare`` is given.
        kind: the name of the :class:`Kind` that registers the row (set by it).
    """

    name: str
    options: KindOptions
    lr: float
    select: str = "none"
    warm_start: bool = False
    refit_head: bool = False
    description: str = ""
    table_order: int | None = None
    table_label: str = ""
    baselines: tuple[str, ...] = ()
    kind: str = ""

    def variant(self, name: str, **changes: object) -> Method:
        """This row under another name with some fields changed: the row's own (``description``, ``lr``, ...)
        and its options' (``beta=0.0``), in one call."""
        own = {f.name for f in dataclasses.fields(Method)}
        options = {key: value for key, value in changes.items() if key not in own}
        rest = {key: value for key, value in changes.items() if key in own}
        return dataclasses.replace(self, name=name, options=dataclasses.replace(self.options, **options), **rest)

    @property
    def uses_prompts(self) -> bool:
        """Whether the method inserts prompt tokens (a sweep runs it once per ``n_prompts``; others once)."""
        return self.options.prompt_tokens() > 0


@dataclass(frozen=True)
class CardText:
    """What an adapter's model card says of its kind beyond what every card says (``infoprompt.kinds.model_card``).

    Attributes:
        computes: ``computes(config, directory, base)``: how the adapter predicts, in words a reader without
            infoprompt can follow (pooling, normalisation, where the head's weights are and how they apply).
        snippet: ``snippet(adapter=, base=, texts=, max_length=, pooling=)``: Python code that loads the adapter
            with its own libraries and predicts ``texts``, ending with ``labels`` and ``probabilities``; ``None``
            where the kind (or this adapter's settings) has none.
        snippet_folder: the adapter's subfolder the snippet loads (peft's own layout), or "" for the adapter itself.
        self_contained: the adapter holds a whole encoder, so its snippet needs no backbone.
    """

    computes: Callable[[Any, Path, str], str]
    snippet: Callable[..., str | None] | None = None
    snippet_folder: str = ""
    self_contained: bool = False


@dataclass(frozen=True)
class Kind:
    """One kind of model, everything about it, and the methods that use it.

    Attributes:
        name: the kind's name (saved in every adapter it writes).
        model: the model class: ``model(backbone, config)`` builds a fresh one, ``model.load(directory, config,
            backbone)`` reads a saved adapter (see :class:`~infoprompt.training.contract.Adapter`).
        fit: the trainer (see :data:`~infoprompt.training.contract.FitFunction`).
        options: its options class (a :class:`~infoprompt.kinds.options.KindOptions` dataclass); the flags of
            ``infoprompt train`` are made from its fields.
        capabilities: names from :data:`CAPABILITIES` of what it can do.
        limits: why it lacks a capability, in words, for the error that refuses it (e.g. ONNX export).
        training_options: the :class:`~infoprompt.training.TrainConfig` fields its fit reads besides those every
            fit reads (:data:`~infoprompt.training.config.COMMON_TRAINING`); ``infoprompt train`` refuses a flag
            for any other one.
        methods: the method-table rows of this kind, registered with it.
        require: checks the kind's optional dependencies; called before any data is read.
        card: what its adapters' model cards say of it; ``None``: a model only infoprompt runs (the card says so
            in general terms and gives no native snippet).
    """

    name: str
    model: type
    fit: FitFunction
    options: type[KindOptions] = KindOptions
    capabilities: Collection[str] = frozenset()
    limits: Mapping[str, str] = field(default_factory=dict)
    training_options: Collection[str] = ENGINE_TRAINING
    methods: tuple[Method, ...] = ()
    require: Callable[[], None] | None = None
    card: CardText | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))
        object.__setattr__(self, "training_options", frozenset(self.training_options))
        unknown = sorted(self.capabilities - set(CAPABILITIES))
        if unknown:
            raise ValueError(f"kind {self.name}: unknown capabilities {unknown}; known: {', '.join(CAPABILITIES)}")
        rows = []
        for method in self.methods:
            if type(method.options) is not self.options:
                raise TypeError(f"method {method.name}'s options are a {type(method.options).__name__}, not kind "
                                f"{self.name}'s {self.options.__name__}")
            rows.append(dataclasses.replace(method, kind=self.name))
        object.__setattr__(self, "methods", tuple(rows))

    def trainer(self) -> FitFunction:
        if self.require is not None:
            self.require()
        return self.fit

    def own_options(self) -> tuple[str, ...]:
        """The options a run may set (its options class's fields, less those only methods set)."""
        fixed = self.options.preset_names()
        return tuple(name for name in self.options.names() if name not in fixed)

    def lacking(self, method: str, names: Collection[str], known: Collection[str] | None = None) -> str:
        """The one-line error for options ``names`` that this kind does not have (``known``: what it has, as the
        face that refuses them names it; default its own options)."""
        own = ", ".join(self.own_options() if known is None else known) or "none of its own"
        return f"method {method} (kind {self.name}) has no option {', '.join(names)}; its options: {own}"

    def reads(self, name: str) -> bool:
        """Whether a run of this kind reads the option or training field ``name`` (:meth:`split` takes it)."""
        return name in self.own_options() or (name in ENGINE_TRAINING
                                              and (name in COMMON_TRAINING or name in self.training_options))

    def split(self, method: str, settings: Mapping[str, object],
              shown: Callable[[str], str] = str) -> tuple[dict[str, object], dict[str, object]]:
        """The one splitter every face calls (``infoprompt train`` and ``sweep``, grids, :class:`Classifier`):
        ``settings``, option and training names as a user gave them in one flat mapping, as the kind's options
        and the :class:`~infoprompt.training.TrainConfig` fields its fit reads. A name that is both (top-lora's
        ``epochs``: its own epoch count) is the kind's option. Any other name is refused in one line that names
        the method, the kind and what it has; ``shown`` writes a name as the face calls it (``--epochs``)."""
        own = set(self.own_options())
        options = {name: value for name, value in settings.items() if name in own}
        training = {name: value for name, value in settings.items() if name not in own and self.reads(name)}
        foreign = [name for name in settings if name not in options and name not in training]
        if foreign:
            read = sorted(self.training_options - COMMON_TRAINING - own - {"seed"})
            raise UserError(self.lacking(method, [shown(name) for name in foreign],
                                         [shown(name) for name in (*self.own_options(), *read)]))
        return options, training

    def options_for(self, preset: Method, overrides: Mapping[str, object]) -> KindOptions:
        """The method's preset with a run's ``overrides`` (option name -> value), checked; an option the kind
        lacks, or one only methods set, is a one-line error naming the kind."""
        unknown = [name for name in overrides if name not in self.options.names()]
        if unknown:
            raise UserError(self.lacking(preset.name, unknown))
        fixed = [name for name in overrides if name in self.options.preset_names()]
        if fixed:
            raise UserError(f"{fixed[0]} is what method {preset.name} is (a preset of kind {self.name}), not an "
                            f"option of a run; pick another method")
        try:
            return dataclasses.replace(preset.options, **overrides) if overrides else preset.options
        except UserError as error:
            raise UserError(f"method {preset.name} (kind {self.name}): {error}") from None

    def refusal(self, capability: str, options: KindOptions, pairs: bool = False) -> str | None:
        """Why adapters of this kind with ``options`` (reading text pairs, with ``pairs``) cannot do ``capability``
        (a name from :data:`CAPABILITIES`), or ``None`` when they can."""
        if capability not in self.capabilities:
            return self.limits.get(capability, f"kind {self.name} lacks the {capability} capability")
        return options.limits(pairs).get(capability)


def kinds_with(capability: str) -> list[str]:
    """The registered kinds that have ``capability``, for errors that say where to turn."""
    return [kind.name for kind in KINDS.values() if capability in kind.capabilities]


KINDS: dict[str, Kind] = {}
METHODS: dict[str, Method] = {}


def register_kind(kind: Kind) -> Kind:
    """Add (or replace) a kind and its methods; returns it."""
    KINDS[kind.name] = kind
    for method in kind.methods:
        register_method(method)
    return kind


def register_method(method: Method) -> Method:
    """Add (or replace) a row of the method table (of a registered kind, whose ``Kind`` sets ``method.kind``);
    returns it."""
    METHODS[method.name] = method
    return method


def get_method(name: str) -> Method:
    """The row ``name`` of the method table; an unknown name is a one-line error with the closest valid one."""
    try:
        return METHODS[name]
    except KeyError:
        raise UserError(unknown_name("method", name, METHODS)) from None


def kind_of(method: str) -> Kind:
    """The kind of ``method`` (a name from the method table)."""
    return get_kind(get_method(method).kind, f"method {method}")


def get_kind(name: str, where: str = "") -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        prefix = f"{where} has " if where else ""
        raise UserError(f"{prefix}unknown kind {name!r}; known kinds: {', '.join(KINDS)}") from None


def table_order(names: set[str]) -> list[str]:
    """Method names (``name`` or a variant ``name[k=v]``) in table order: rows with a ``table_order`` first, a
    variant right after its base, the rest by name."""
    def key(name: str) -> tuple[float, str]:
        method = METHODS.get(name.split("[", 1)[0])
        order = method.table_order if method is not None and method.table_order is not None else float("inf")
        return (order, name)

    return sorted(names, key=key)


def table_label(name: str) -> str:
    method = METHODS.get(name)
    return method.table_label if method is not None and method.table_label else name
