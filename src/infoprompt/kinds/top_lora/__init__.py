"""The ``top-lora`` kind: LoRA in the top k blocks of the frozen shared encoder, trained with an in-batch contrastive
objective over the lower blocks' states computed once per text, then a logistic head (SetFit's accuracy at a
fraction of its passes)."""

from infoprompt.kinds.registry import MIXED_LORA, ONNX_EXPORT, Kind, Method
from infoprompt.kinds.setfit import require_setfit
from infoprompt.kinds.setfit_lora.card import CARD  # the same adapter layout: peft LoRA, mean pooling, head
from infoprompt.kinds.top_lora.fit import TOP_LORA_TRAINING, fit_top_lora
from infoprompt.kinds.top_lora.model import TopLoraClassifier, TopLoraSettings
from infoprompt.kinds.top_lora.options import TopLoraOptions

TOP_LORA = Method(
    "top-lora", TopLoraOptions(), lr=5e-4, table_order=15, baselines=("setfit-lora-all", "setfit", "linear-probe"),
    description="LoRA in the top blocks of the shared encoder, supervised contrastive over every pair of a batch, "
                "lower blocks computed once per text; + logistic regression")

TOP_LORA_SIAMESE = TOP_LORA.variant(
    "top-lora-siamese", pair_reading="separate", pair_training=False, table_order=16,
    description="top-lora with the two texts of a pair encoded apart and compared ([u, v, |u - v|, u * v, cos]) by "
                "the head alone on the frozen encoder; single texts as top-lora")

KIND = Kind("top-lora", TopLoraClassifier, fit_top_lora, options=TopLoraOptions, capabilities={ONNX_EXPORT, MIXED_LORA},
            card=CARD,
            training_options=TOP_LORA_TRAINING, require=require_setfit, methods=(TOP_LORA, TOP_LORA_SIAMESE))

__all__ = ["KIND", "TOP_LORA", "TOP_LORA_SIAMESE", "TopLoraClassifier", "TopLoraOptions", "TopLoraSettings", "fit_top_lora"]
