"""Peer baselines outside PromptClassifier, and the dispatch from a method's ``kind`` to its model and trainer.

Kinds (``MethodPreset.kind``): ``classifier`` (:class:`~infoprompt.model.PromptClassifier`, every prompt method,
``finetune`` and ``adapter``), ``peft`` (:mod:`.peft_prompt`), ``linear-probe`` (:mod:`.linear_probe`) and
``setfit`` (:mod:`.setfit_peer`, needs the optional ``setfit`` extra).
Imports are lazy because :mod:`infoprompt.model` imports :mod:`.bottleneck` from this package.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.methods import get_method

KINDS = ("classifier", "peft", "linear-probe", "setfit")


def build_model(backbone: Backbone, config) -> nn.Module:
    """A fresh model for ``config`` (a :class:`~infoprompt.model.ClassifierConfig`) of whatever kind its method is."""
    kind = get_method(config.method).kind
    if kind == "classifier":
        from infoprompt.model import PromptClassifier

        return PromptClassifier(backbone, config)
    if kind == "peft":
        from infoprompt.baselines.peft_prompt import PeftPromptClassifier

        return PeftPromptClassifier(backbone, config)
    if kind == "linear-probe":
        from infoprompt.baselines.linear_probe import LinearProbe

        return LinearProbe(backbone, config)
    if kind == "setfit":
        from infoprompt.baselines.setfit_peer import SetFitClassifier

        return SetFitClassifier(backbone, config)
    raise UserError(f"method {config.method} has unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")


def load_model(directory: Path, config, backbone: Backbone) -> nn.Module:
    """Load a saved baseline adapter (called by ``PromptClassifier.from_pretrained`` for non-classifier kinds)."""
    kind = get_method(config.method).kind
    if kind == "peft":
        from infoprompt.baselines.peft_prompt import PeftPromptClassifier

        return PeftPromptClassifier.load(Path(directory), config, backbone)
    if kind == "linear-probe":
        from infoprompt.baselines.linear_probe import LinearProbe

        return LinearProbe.load(Path(directory), config, backbone)
    if kind == "setfit":
        from infoprompt.baselines.setfit_peer import SetFitClassifier

        return SetFitClassifier.load(Path(directory), config, backbone)
    from infoprompt.model import PromptClassifier

    return PromptClassifier.from_pretrained(directory, backbone)


def fit_function(method: str) -> Callable[..., dict[str, object]]:
    """The trainer of ``method``: ``(model, train_examples, eval_examples, TrainConfig, log_path) -> result``."""
    kind = get_method(method).kind
    if kind == "linear-probe":
        from infoprompt.baselines.linear_probe import fit_linear_probe

        return fit_linear_probe
    if kind == "setfit":
        from infoprompt.baselines.setfit_peer import fit_setfit, require_setfit

        require_setfit()  # before any data is read: a missing extra is a one-line error
        return fit_setfit
    from infoprompt.training import train

    return train
