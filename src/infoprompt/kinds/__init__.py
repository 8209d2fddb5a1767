"""Every kind of adapter, registered: a kind is one folder with its options, model, fit and methods (see
:mod:`infoprompt.kinds.registry` and docs/kinds.md), plus one line here. Build, train and load a model of any kind
through :mod:`infoprompt.kinds.factory`."""

from collections.abc import Sequence

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
    get_kind,
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


def native_snippet(kind: str, *, adapter: str, base: str, texts: Sequence[str], max_length: int,
                   pooling: str = "mean") -> str | None:
    """The Python code that loads an adapter of ``kind`` with its own libraries alone and predicts ``texts``,
    ending with ``labels`` (label names) and ``probabilities`` (texts × labels), as its model card quotes it
    (``Kind.card``); ``None`` where there is none (a probe pooling entity spans, the kinds only infoprompt runs).
    ``adapter``: the directory (peft's folder for ``peft``); ``base``: the backbone as a Hub id or a local path."""
    card = get_kind(kind).card
    if card is None or card.snippet is None:
        return None
    return card.snippet(adapter=adapter, base=base, texts=texts, max_length=max_length, pooling=pooling)

__all__ = [
    "KINDS",
    "METHODS",
    "native_snippet",
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
