"""The method rows of the released kind: InfoPrompt as the authors' released code trains it, with each row its
own prompt (``infoprompt-released``) and with the released code's first-row prompt (``-first-row``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from infoprompt.kinds.registry import Method

KIND_NAME = "released"


@dataclass(frozen=True)
class ReleasedMethod(Method):
    """A :class:`~infoprompt.kinds.registry.Method` row with the released kind's own preset.

    Attributes:
        batch_prompt: every row of a batch gets the first example's generated prompt (the released code's
            ``prompts_embeds[0, counter]``); ``--released-batch-prompt`` overrides it.
    """

    batch_prompt: bool = False


RELEASED = ReleasedMethod(
    "infoprompt-released", "generated", "template", "mask", 0.2, 0.1, False, 1e-3, kind=KIND_NAME,
    table_order=13, baselines=("infoprompt", "infoprompt-ce"),
    description="the authors' released recipe: CLS-read MLP generator, variational label-word head, clamped "
                "InfoNCE terms + 0.1 KL, β=0.2, γ=0.1, linear warm-up/decay (docs/released.md)")

RELEASED_METHODS: tuple[ReleasedMethod, ...] = (
    RELEASED,
    replace(RELEASED, name="infoprompt-released-first-row", batch_prompt=True, table_order=14,
            baselines=("infoprompt-released", "infoprompt"),
            description="infoprompt-released with the released code's bug kept: the batch's first generated "
                        "prompt in every row"),
)
