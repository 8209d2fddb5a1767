"""The one registry of adapter kinds and of the method table (each method a named preset of one kind).

A kind says how to build, train and load a model (:class:`Kind`); a method is a row of the table that names
its kind and presets its options (:class:`Method`). Kind modules describe themselves; the package's
``__init__`` registers them, one line each, so this module imports no model code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infoprompt.errors import UserError
from infoprompt.training.contract import FitFunction


@dataclass(frozen=True)
class Kind:
    """One kind of model and the methods that use it.

    Attributes:
        name: the ``kind`` its :class:`Method` rows name.
        model: the model class: ``model(backbone, config)`` builds a fresh one, ``model.load(directory, config,
            backbone)`` reads a saved adapter (see :class:`~infoprompt.training.contract.Adapter`).
        fit: the trainer (see :data:`~infoprompt.training.contract.FitFunction`).
        methods: the method-table rows of this kind, registered with it.
        require: checks the kind's optional dependencies; called before any data is read.
    """

    name: str
    model: type
    fit: FitFunction
    methods: tuple[Method, ...] = ()
    require: Callable[[], None] | None = None

    def trainer(self) -> FitFunction:
        if self.require is not None:
            self.require()
        return self.fit


@dataclass(frozen=True)
class Method:
    """One row of the method table: a named preset of its kind's options, plus how tables show it.

    Attributes:
        name: CLI / table name.
        prompt_source: ``"static"`` (WARP), ``"generated"`` (IDPG, InfoPrompt) or ``None`` (no prompts).
        placement: ``"template"`` (prompt places of the task template) or ``"prepend"`` (right after
            ``[CLS]``, the IDPG layout) or ``"none"``.
        readout: ``"mask"`` (state at the ``[MASK]`` slot), ``"cls"`` (state at ``[CLS]``), ``"mean"`` (mean of
            the text-field states) or ``"auto"`` (``spans`` on span tasks, ``mean`` elsewhere).
        beta: weight of the representation MI loss.
        gamma: weight of the head MI loss.
        verbalizer_init: initialise head rows from label-word embeddings.
        lr: default learning rate.
        train_encoder: every encoder weight is trained (fine-tuning).
        description: one line for ``infoprompt methods``.
        kind: the registered :class:`Kind` that builds, trains and loads the method (``prompt``, ``peft``,
            ``linear-probe``, ``setfit``, or one a user registers).
        adapter_size: bottleneck width of the adapters inserted after every transformer layer (0: none).
        mi_negatives: InfoNCE negatives of the information terms, ``"paper"`` or ``"batch"`` (other examples'
            prompts); see :class:`~infoprompt.kinds.config.ClassifierConfig`.
        warm_start: fit the head by logistic regression on the initial features before training.
        select: ``"none"`` (train all epochs) or ``"holdout"`` (pick the epoch count on a held-out slice of the
            few-shot draw, then refit); see :class:`~infoprompt.training.TrainConfig`.
        refit_head: the head is fitted by logistic regression on the adapter's current features before the first
            epoch and after every epoch (for objectives that train the features, not the head).
        table_order: position in report tables (lower first; ``None``: after the ordered rows, by name).
        table_label: the row label in report tables (default: the name).
        baselines: the methods ``report`` pairs this one with when no ``--compare`` is given.
    """

    name: str
    prompt_source: str | None
    placement: str
    readout: str
    beta: float
    gamma: float
    verbalizer_init: bool
    lr: float
    train_encoder: bool = False
    description: str = ""
    kind: str = "prompt"
    adapter_size: int = 0
    mi_negatives: str = "paper"
    warm_start: bool = False
    select: str = "none"
    refit_head: bool = False
    table_order: int | None = None
    table_label: str = ""
    baselines: tuple[str, ...] = ()

    @property
    def uses_features(self) -> bool:
        """Whether the no-prompt pass (P', Z') is needed during training."""
        return self.prompt_source == "generated" or self.beta > 0


KINDS: dict[str, Kind] = {}
METHODS: dict[str, Method] = {}


def register_kind(kind: Kind) -> Kind:
    """Add (or replace) a kind and its methods; returns it."""
    KINDS[kind.name] = kind
    for method in kind.methods:
        register_method(method)
    return kind


def register_method(method: Method) -> Method:
    """Add (or replace) a row of the method table (of a registered kind); returns it."""
    METHODS[method.name] = method
    return method


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise UserError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}") from None


def kind_of(method: str) -> Kind:
    """The kind of ``method`` (a name from the method table)."""
    name = get_method(method).kind
    if name not in KINDS:
        raise UserError(f"method {method} has unknown kind {name!r}; known kinds: {', '.join(KINDS)}")
    return KINDS[name]


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
