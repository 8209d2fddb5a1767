"""The method rows of the contrastive kind: with the paper's two information terms and without them."""

from __future__ import annotations

from infoprompt.kinds.contrastive.options import ContrastiveOptions
from infoprompt.kinds.registry import Method

KIND_NAME = "contrastive"

CONTRASTIVE = Method(
    "infoprompt-contrastive",
    ContrastiveOptions(prompt_source="generated", placement="prepend", readout="auto", beta=0.1, gamma=0.05,
                       mi_negatives="batch", temperature=0.1),
    lr=1e-3, select="holdout", refit_head=True, table_order=10,
    baselines=("infoprompt-contrastive-no-info", "infoprompt-plus", "linear-probe", "setfit", "setfit-lora"),
    description="generated prompts trained with a label-aware InfoNCE (+ β, γ in-batch terms) on a prompted pass "
                "gated from the plain mean pool; logistic head refitted each epoch; epochs picked on held-out shots")

CONTRASTIVE_METHODS: tuple[Method, ...] = (
    CONTRASTIVE,
    CONTRASTIVE.variant("infoprompt-contrastive-no-info", beta=0.0, gamma=0.0, table_order=11,
                        table_label="infoprompt-contrastive-no-info (β=γ=0)", baselines=("linear-probe",),
                        description="infoprompt-contrastive without the information terms (β=γ=0)"),
)
