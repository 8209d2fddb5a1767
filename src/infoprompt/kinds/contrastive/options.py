"""The contrastive kind's options: the prompt kind's, and the temperature of its label-aware InfoNCE."""

from __future__ import annotations

from dataclasses import dataclass

from infoprompt.kinds.prompt.options import PromptOptions
from infoprompt.options import POSITIVE_FLOAT, option


@dataclass(frozen=True)
class ContrastiveOptions(PromptOptions):
    """:class:`~infoprompt.kinds.prompt.options.PromptOptions` plus ``temperature``, τ of the label-aware InfoNCE
    over cosine similarities."""

    temperature: float = option(0.1, "temperature of the label-aware InfoNCE (default: the method's, 0.1)",
                                type=POSITIVE_FLOAT)
