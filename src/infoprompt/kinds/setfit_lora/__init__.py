"""The setfit-lora kind: SetFit's contrastive pairs training only LoRA weights inside the frozen, shared encoder,
then SetFit's logistic-regression head."""

from infoprompt.kinds.lora_layers import structure_copy
from infoprompt.kinds.registry import MIXED_LORA, ONNX_EXPORT, Kind, Method
from infoprompt.kinds.setfit import SETFIT_TRAINING, fit_setfit, require_setfit
from infoprompt.kinds.setfit_lora.card import CARD
from infoprompt.kinds.setfit_lora.model import SetFitLoraClassifier, SetFitLoraSettings
from infoprompt.kinds.setfit_lora.options import SetFitLoraOptions

__all__ = ["KIND", "SetFitLoraClassifier", "SetFitLoraOptions", "SetFitLoraSettings", "structure_copy"]

SETFIT_LORA = Method(
    "setfit-lora", SetFitLoraOptions(), lr=5e-4, table_order=13,
    description="SetFit's contrastive pairs training only LoRA weights (r=8, q/v) in the frozen shared encoder, "
                "+ logistic regression")

KIND = Kind("setfit-lora", SetFitLoraClassifier, fit_setfit, options=SetFitLoraOptions, capabilities={ONNX_EXPORT, MIXED_LORA},
            card=CARD,
            training_options=SETFIT_TRAINING, require=require_setfit, methods=(
                SETFIT_LORA,
                # r=4 keeps six adapted layers a block within the 5 MB adapter goal on MPNet (2.7 MB against r=8
                # q/v's 1.2 MB).
                SETFIT_LORA.variant("setfit-lora-all", lora_rank=4, lora_alpha=8, lora_layers="all-linear",
                                    baselines=("setfit-lora", "setfit", "linear-probe"),
                                    description="setfit-lora with LoRA (r=4) on every linear layer of each block "
                                                "(attention q/k/v/o and the feed-forward pair)"),
            ))
