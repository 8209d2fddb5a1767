"""The peft kind: the Hugging Face ``peft`` library's prompt tuning on a sequence-classification model."""

from infoprompt.kinds.peft_prompt.card import CARD
from infoprompt.kinds.peft_prompt.model import PeftPromptClassifier, sequence_classifier
from infoprompt.kinds.peft_prompt.options import PeftOptions
from infoprompt.kinds.registry import ONNX_EXPORT, Kind, Method
from infoprompt.training import train

__all__ = ["KIND", "PeftPromptClassifier", "sequence_classifier"]

# peft's prompt and head train in the engine's gradient loop, as the prompt kind's models do.
KIND = Kind("peft", PeftPromptClassifier, train, options=PeftOptions, card=CARD, limits={
    ONNX_EXPORT: "peft prompt tuning prepends its virtual tokens inside peft's model; load it with PeftModel instead",
}, methods=(
    Method("peft-prompt-tuning", PeftOptions(), lr=1e-3, table_order=10,
           description="Hugging Face peft PromptTuningConfig on AutoModelForSequenceClassification"),
))
