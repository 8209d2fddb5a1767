"""The method rows of the released kind: InfoPrompt as the authors' released code trains it, with each row its
own prompt (``infoprompt-released``) and with the released code's first-row prompt (``-first-row``)."""

from __future__ import annotations

from infoprompt.kinds.registry import Method
from infoprompt.kinds.released.options import ReleasedOptions

KIND_NAME = "released"

RELEASED = Method(
    "infoprompt-released", ReleasedOptions(beta=0.2, gamma=0.1), lr=1e-3, table_order=13,
    baselines=("infoprompt", "infoprompt-ce"),
    description="the authors' released recipe: CLS-read MLP generator, variational label-word head, clamped "
                "InfoNCE terms + 0.1 KL, β=0.2, γ=0.1, linear warm-up/decay (docs/released.md)")

RELEASED_METHODS: tuple[Method, ...] = (
    RELEASED,
    RELEASED.variant("infoprompt-released-first-row", released_batch_prompt=True, table_order=14,
                     baselines=("infoprompt-released", "infoprompt"),
                     description="infoprompt-released with the released code's bug kept: the batch's first generated "
                                 "prompt in every row"),
)
