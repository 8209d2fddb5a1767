"""The linear probe's options: how the frozen encoder's states are pooled into the head's features."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from infoprompt.kinds.options import KindOptions
from infoprompt.kinds.registry import LONG_TEXT_CHUNKS, ONNX_EXPORT
from infoprompt.options import POSITIVE_FLOAT, option

POOLINGS = ("mean", "cls", "embeddings", "spans")


@dataclass(frozen=True)
class ProbeOptions(KindOptions):
    """``pooling``: ``mean`` over the tokens, the ``cls`` state, ``embeddings`` (the mean input embedding, a
    bag-of-embeddings probe without an encoder pass) or ``spans`` (span tasks: the mean state of each entity
    mention of the template, concatenated, so that the probe knows which entities of the sentence are meant).
    ``head_c``: the inverse L2 strength C of the logistic regression (scikit-learn's default, 1; an adapter saved
    before the option existed was fitted with 1)."""

    pooling: str = option("mean", "the probe's features: the encoder's states pooled by mean (default) or cls, the "
                          "mean input embedding (embeddings), or on span tasks the mean state of each entity "
                          "mention (spans)", choices=POOLINGS)
    HEAD_ONLY: ClassVar[tuple[str, ...]] = ("head_c",)

    # 1: infoprompt.logistic.REGULARISATION_C, scikit-learn's default (not imported: it would load scikit-learn).
    head_c: float = option(1.0, "C (inverse L2 strength) of the probe's logistic regression "
                           "(default 1, scikit-learn's)", type=POSITIVE_FLOAT)

    def limits(self, pairs: bool = False) -> dict[str, str]:
        if self.pooling != "spans":
            return {}
        return {LONG_TEXT_CHUNKS: "pooling 'spans' reads entity mentions, not windows",
                ONNX_EXPORT: "a linear-probe with pooling 'spans' reads entity-mention positions that the "
                             "tokenizer's inputs do not carry"}
