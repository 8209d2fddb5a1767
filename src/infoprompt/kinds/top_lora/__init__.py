"""The ``top-lora`` kind: LoRA in the top k blocks of the frozen shared encoder, trained with an in-batch contrastive
objective over the lower blocks' states computed once per text, then a logistic head (SetFit's accuracy at a
fraction of its passes)."""

from infoprompt.kinds.registry import Kind
from infoprompt.kinds.setfit import require_setfit
from infoprompt.kinds.top_lora.fit import fit_top_lora
from infoprompt.kinds.top_lora.model import TopLoraClassifier, TopLoraMethod, TopLoraSettings

TOP_LORA = TopLoraMethod(
    "top-lora", None, "none", "cls", 0.0, 0.0, False, 5e-4, kind="top-lora", table_order=15,
    baselines=("setfit-lora-all", "setfit", "linear-probe"),
    description="LoRA in the top blocks of the shared encoder, supervised contrastive over every pair of a batch, "
                "lower blocks computed once per text; + logistic regression")

KIND = Kind("top-lora", TopLoraClassifier, fit_top_lora, require=require_setfit, methods=(TOP_LORA,))

__all__ = ["KIND", "TOP_LORA", "TopLoraClassifier", "TopLoraSettings", "fit_top_lora"]
