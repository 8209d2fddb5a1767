"""The registry of method kinds: where each kind's model class and trainer live, and the one way to build,
train and load a model of any kind.

A kind is a module with a model class (``Class(backbone, config)`` builds one, ``Class.load(directory, config,
backbone)`` reads a saved adapter; the modules it runs, the backbone's encoder too, are registered submodules, so
that ``model.to(device)`` moves all of it) and a trainer ``fit(model, train_examples, eval_examples, TrainConfig,
log_path) -> result``. Adding a kind is that module plus one :func:`register_kind` line. Modules are named by
string and imported on first use, so this registry imports no model code and closes no import cycle.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.methods import get_method


@dataclass(frozen=True)
class MethodKind:
    """One kind of model.

    Attributes:
        name: the ``kind`` of :class:`~infoprompt.methods.MethodPreset` rows that use it.
        module: the module that holds the class and the trainer.
        model_class: the model class's name in ``module``.
        fit: the trainer's name in ``module`` (or ``"infoprompt.training.loop:train"`` style, module:name).
        require: optional name of a function that checks optional dependencies, called before any data is read.
    """

    name: str
    module: str
    model_class: str
    fit: str
    require: str | None = None

    def _attribute(self, name: str) -> Any:
        module, _, attribute = name.rpartition(":") if ":" in name else (self.module, "", name)
        return getattr(importlib.import_module(module), attribute)

    def model_type(self) -> type:
        return self._attribute(self.model_class)

    def trainer(self) -> Callable[..., dict[str, object]]:
        if self.require is not None:
            self._attribute(self.require)()
        return self._attribute(self.fit)


KINDS: dict[str, MethodKind] = {}


def register_kind(kind: MethodKind) -> MethodKind:
    """Add (or replace) a kind; returns it."""
    KINDS[kind.name] = kind
    return kind


register_kind(MethodKind("classifier", "infoprompt.model", "PromptClassifier", "infoprompt.training.loop:train"))
register_kind(MethodKind("peft", "infoprompt.baselines.peft_prompt", "PeftPromptClassifier", "infoprompt.training.loop:train"))
register_kind(MethodKind("linear-probe", "infoprompt.baselines.linear_probe", "LinearProbe", "fit_linear_probe"))
register_kind(MethodKind("setfit", "infoprompt.baselines.setfit_peer", "SetFitClassifier", "fit_setfit",
                         require="require_setfit"))


def kind_of(method: str) -> MethodKind:
    """The kind of ``method`` (a name from the method table)."""
    name = get_method(method).kind
    if name not in KINDS:
        raise UserError(f"method {method} has unknown kind {name!r}; known kinds: {', '.join(KINDS)}")
    return KINDS[name]


def build_model(backbone, config) -> Any:
    """A fresh model for ``config`` (a :class:`~infoprompt.model.ClassifierConfig`) of whatever kind its method is,
    on the backbone's device: its new parameters join an encoder that a training run may have left on a GPU."""
    return kind_of(config.method).model_type()(backbone, config).to(backbone.device)


def fit_function(method: str) -> Callable[..., dict[str, object]]:
    """The trainer of ``method``: ``(model, train_examples, eval_examples, TrainConfig, log_path) -> result``."""
    return kind_of(method).trainer()


def train(model, train_examples: Sequence, eval_examples: Sequence | None = None, config=None,
          log_path: Path | None = None) -> dict[str, object]:
    """Train ``model`` with its own kind's trainer (prompt methods, peft, the probe, SetFit alike)."""
    return fit_function(model.config.method)(model, train_examples, eval_examples, config, log_path)


def load_adapter(directory: str | Path, backbone=None, cache_dir: str | None = None) -> Any:
    """Load a saved adapter of any kind; its backbone is loaded from the saved name unless one is given.
    The model is on the backbone's device (a backbone that a training run moved to a GPU stays there)."""
    from infoprompt.model import load_saved, read_adapter_config

    directory = Path(directory)
    config = read_adapter_config(directory)
    return load_saved(kind_of(config.method).model_type(), directory, config, backbone, cache_dir)
