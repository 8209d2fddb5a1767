"""What a setfit-lora (or top-lora) adapter's model card says: peft's LoRA in the shared encoder, mean pooling, the
head, and the native snippet."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infoprompt.kinds.model_card import PEFT_DIR, code, linear_head_code, logistic_head_text, snippet_head
from infoprompt.kinds.registry import CardText

LORA_SNIPPET = """\
import json
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

{head}
encoder = PeftModel.from_pretrained(AutoModel.from_pretrained(base), f"{{adapter}}/peft").eval()  # LoRA in it
tokenizer = AutoTokenizer.from_pretrained(base)
tokens = tokenizer(texts, padding=True, truncation=True, max_length={max_length}, return_tensors="pt")
with torch.no_grad():
    states = encoder(**tokens).last_hidden_state
mask = tokens["attention_mask"].unsqueeze(-1).to(states.dtype)
embeddings = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)  # mean pooling, L2 norm
{linear_head}"""


def lora_text(directory: Path) -> str:
    try:
        saved = json.loads((directory / PEFT_DIR / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "see `peft/adapter_config.json`"
    targets = saved.get("target_modules") or []
    text = (f"rank {saved.get('r')}, alpha {saved.get('lora_alpha')}, on "
            + ", ".join(code(target) for target in sorted(map(str, targets))))
    if saved.get("layers_to_transform"):
        text += f" of blocks {', '.join(map(str, saved['layers_to_transform']))} only"
    return text


def computes(config: Any, directory: Path, base: str) -> str:
    apart = (getattr(config.options, "pair_reading", "joined") == "separate" and config.template is not None
             and config.template.count("{") == 2)
    pairs = ("Each text of a pair goes through the encoder alone (tokenised as a single text); with u and v the "
             "two normalised embeddings, the head reads [u, v, |u - v|, u * v, u · v] (4 × hidden + 1 features, "
             "in that order). " if apart else "")
    return (f"The encoder is {code(base)} with peft's LoRA ({lora_text(directory)}) in `peft/`; its last hidden states "
            "are mean-pooled over the real (unpadded) tokens, special tokens included, and L2-normalised. "
            + pairs + logistic_head_text(config))


def snippet(*, adapter: str, base: str, texts: Sequence[str], max_length: int, pooling: str = "mean") -> str:
    return LORA_SNIPPET.format(head=snippet_head(adapter, base, texts), max_length=max_length,
                               linear_head=linear_head_code("embeddings"))


CARD = CardText(computes, snippet)
