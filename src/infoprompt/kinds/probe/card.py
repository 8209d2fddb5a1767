"""What a linear probe's model card says: the frozen encoder's pooled features, the head, the native snippet."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infoprompt.kinds.model_card import code, linear_head_code, linear_head_text, snippet_head
from infoprompt.kinds.registry import CardText

PROBE_SNIPPET = """\
import json
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

{head}
encoder = AutoModel.from_pretrained(base).eval()
tokenizer = AutoTokenizer.from_pretrained(base)
tokens = tokenizer(texts, padding=True, truncation=True, max_length={max_length}, return_tensors="pt")
mask = tokens["attention_mask"].unsqueeze(-1).to(torch.float32)
with torch.no_grad():
    {features}
{linear_head}"""

# The probe's features per pooling, as LinearProbe.features computes them (entity spans need infoprompt's template).
PROBE_FEATURES = {
    "mean": "states = encoder(input_ids=tokens[\"input_ids\"], attention_mask=tokens[\"attention_mask\"])"
            ".last_hidden_state\n    features = (states * mask).sum(1) / mask.sum(1)  # mean over the real tokens",
    "cls": "states = encoder(input_ids=tokens[\"input_ids\"], attention_mask=tokens[\"attention_mask\"])"
           ".last_hidden_state\n    features = states[:, 0]  # the first token's state",
    "embeddings": "embedded = encoder.get_input_embeddings()(tokens[\"input_ids\"])\n"
                  "    features = (embedded * mask).sum(1) / mask.sum(1)  # mean input embedding, no encoder pass",
}


def pooling_text(config: Any) -> str:
    pooling = config.options.pooling
    text = {
        "mean": "the mean of the last hidden states over the real (unpadded) tokens, special tokens included",
        "cls": "the last hidden state of the first token ([CLS])",
        "embeddings": "the mean of the input token embeddings over the real tokens (no encoder pass)",
        "spans": "the mean last hidden state of each entity mention the template marks, concatenated (infoprompt's "
                 "template finds the mentions: load this adapter with infoprompt)",
    }.get(pooling, f"pooled by {code(str(pooling))}")
    if config.long_text == "chunk":
        text += (f"; a text over {config.max_length} tokens is read in windows of {config.max_length} tokens, "
                 "each framed by [CLS] … [SEP] and pooled, and the windows' features averaged")
    return text


def computes(config: Any, directory: Path, base: str) -> str:
    return (f"The frozen encoder {code(base)} runs unchanged; its features are {pooling_text(config)}, not "
            "normalised. " + linear_head_text(config))


def snippet(*, adapter: str, base: str, texts: Sequence[str], max_length: int, pooling: str = "mean") -> str | None:
    if pooling not in PROBE_FEATURES:
        return None
    return PROBE_SNIPPET.format(head=snippet_head(adapter, base, texts), max_length=max_length,
                                linear_head=linear_head_code("features"),
                                features=PROBE_FEATURES[pooling])


CARD = CardText(computes, snippet)
