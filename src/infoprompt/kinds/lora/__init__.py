"""The lora kind: LoRA inside the shared, frozen encoder and a linear head on its mean pool, trained with
cross-entropy alone; the control that tells "adapts the body" from "contrastive" beside ``setfit-lora``."""

from infoprompt.kinds.lora.card import CARD
from infoprompt.kinds.lora.model import LoraClassifier
from infoprompt.kinds.lora_layers import LoraOptions
from infoprompt.kinds.registry import MIXED_LORA, ONNX_EXPORT, Kind, Method
from infoprompt.training import train

KIND = Kind("lora", LoraClassifier, train, options=LoraOptions, card=CARD, capabilities={MIXED_LORA}, limits={
    ONNX_EXPORT: "its export (peft's LoRA layers in the encoder) has not been built or checked",
}, methods=(
    Method("lora-ce", LoraOptions(), lr=5e-4, warm_start=True, select="holdout", table_order=14,
           baselines=("setfit-lora", "linear-probe"),
           description="control: setfit-lora's LoRA (r=8, q/v) in the shared encoder + a head on the mean pool, "
                       "cross-entropy only, probe-initialised head, epochs picked on held-out shots"),
))
