"""What a peft prompt-tuning adapter's model card says: the virtual tokens, the sequence head, the native snippet."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infoprompt.kinds.model_card import PEFT_DIR, snippet_head
from infoprompt.kinds.registry import CardText

PEFT_SNIPPET = """\
import torch
from peft import PeftModel
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer

{head}
# The model is built from the adapter's config (its label names) with the backbone's encoder put in: loaded
# from the backbone instead, AutoModelForSequenceClassification would report its classifier as newly
# initialised, though peft replaces it with the adapter's trained one.
model = AutoModelForSequenceClassification.from_config(AutoConfig.from_pretrained(adapter))
setattr(model, model.base_model_prefix, AutoModel.from_pretrained(base))
model = PeftModel.from_pretrained(model, adapter).eval()
tokenizer = AutoTokenizer.from_pretrained(base)
tokens = tokenizer(texts, padding=True, truncation=True, max_length={max_length}, return_tensors="pt")
with torch.no_grad():
    probabilities = model(**tokens).logits.softmax(-1)
labels = [model.config.id2label[int(i)] for i in probabilities.argmax(-1)]
print(labels, probabilities.tolist())
"""


def sequence_head(config: Any) -> str:
    model_type = str(config.backbone_fingerprint.get("model_type", ""))
    if model_type == "bert":
        return ("BERT's: the backbone's pretrained pooler, tanh of a dense layer on the [CLS] state, then the "
                "trained linear `classifier`")
    if model_type in ("roberta", "mpnet", "xlm-roberta", "camembert"):
        return "the trained `classifier`: dense, tanh and `out_proj` on the first token's state"
    return "the architecture's sequence-classification head, trained"


def computes(config: Any, directory: Path, base: str) -> str:
    return (f"peft's prompt tuning: the {config.options.n_prompts} virtual tokens of "
            "`peft/adapter_model.safetensors` are prepended to the input embeddings, and "
            f"`AutoModelForSequenceClassification`'s own head reads the result ({sequence_head(config)}). "
            "The trained classifier is saved by peft as a module to save; `peft/config.json` holds the label "
            "names (`id2label`). Probabilities: the softmax of the logits.")


def snippet(*, adapter: str, base: str, texts: Sequence[str], max_length: int, pooling: str = "mean") -> str:
    return PEFT_SNIPPET.format(head=snippet_head(adapter, base, texts), max_length=max_length)


CARD = CardText(computes, snippet, snippet_folder=PEFT_DIR)
