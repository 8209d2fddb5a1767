"""The method rows of the contrastive kind: with the paper's two information terms and without them."""

from __future__ import annotations

from dataclasses import dataclass, replace

from infoprompt.kinds.registry import Method

KIND_NAME = "contrastive"


@dataclass(frozen=True)
class ContrastiveMethod(Method):
    """A :class:`~infoprompt.kinds.registry.Method` row with the contrastive kind's own preset.

    Attributes:
        temperature: τ of the label-aware InfoNCE over cosine similarities (``--temperature`` overrides it).
    """

    temperature: float = 0.1


CONTRASTIVE = ContrastiveMethod(
    "infoprompt-contrastive", "generated", "prepend", "auto", 0.1, 0.05, False, 1e-3, kind=KIND_NAME,
    mi_negatives="batch", select="holdout", refit_head=True, table_order=10,
    baselines=("infoprompt-contrastive-no-info", "infoprompt-plus", "linear-probe", "setfit", "setfit-lora"),
    description="generated prompts trained with a label-aware InfoNCE (+ β, γ in-batch terms) on a prompted pass "
                "gated from the plain mean pool; logistic head refitted each epoch; epochs picked on held-out shots")

CONTRASTIVE_METHODS: tuple[ContrastiveMethod, ...] = (
    CONTRASTIVE,
    replace(CONTRASTIVE, name="infoprompt-contrastive-no-info", beta=0.0, gamma=0.0, table_order=11,
            table_label="infoprompt-contrastive-no-info (β=γ=0)", baselines=("linear-probe",),
            description="infoprompt-contrastive without the information terms (β=γ=0)"),
)
