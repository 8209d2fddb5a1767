"""Every kind of adapter, registered: a kind is one folder with its options, model, fit and methods (see
:mod:`infoprompt.kinds.registry` and docs/kinds.md), plus one line here. Build, train and load a model of any kind
through :mod:`infoprompt.kinds.factory`."""

from infoprompt.kinds import (
    contrastive,
    lora,
    peft_prompt,
    probe,
    prompt,
    released,
    setfit,
    setfit_lora,
    top_lora,
)
from infoprompt.kinds.factory import build_model, load_adapter, make_classifier, train
from infoprompt.kinds.registry import (
    KINDS,
    METHODS,
    Kind,
    Method,
    get_method,
    kind_of,
    register_kind,
    register_method,
)

register_kind(prompt.KIND)
register_kind(peft_prompt.KIND)
register_kind(probe.KIND)
register_kind(setfit.KIND)
register_kind(setfit_lora.KIND)
register_kind(released.KIND)
register_kind(contrastive.KIND)
register_kind(lora.KIND)
register_kind(top_lora.KIND)

__all__ = [
    "KINDS",
    "METHODS",
    "Kind",
    "Method",
    "build_model",
    "get_method",
    "kind_of",
    "load_adapter",
    "make_classifier",
    "register_kind",
    "register_method",
    "train",
]
