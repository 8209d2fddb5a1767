"""What a setfit adapter's model card says: the fine-tuned sentence-transformer body, the head, the native snippet."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infoprompt.kinds.model_card import logistic_head_text, snippet_head
from infoprompt.kinds.registry import CardText

SETFIT_SNIPPET = """\
import json
from safetensors.numpy import load_file
from sentence_transformers import SentenceTransformer
from setfit import SetFitModel
from sklearn.linear_model import LogisticRegression

{head}
# setfit reads a fitted head only from a pickle (model_head.pkl), which infoprompt never writes (loading one runs
# code), so SetFitModel.from_pretrained would build an untrained head and say so: build the model from the
# body and the regression's saved arrays instead.
head = LogisticRegression()
head.__dict__.update(load_file(f"{{adapter}}/setfit_head.safetensors"))  # coef_, intercept_, classes_
with open(f"{{adapter}}/config_setfit.json", encoding="utf-8") as handle:
    names = json.load(handle)["labels"]
model = SetFitModel(model_body=SentenceTransformer(adapter), model_head=head, labels=names)
labels = model.predict(texts)
probabilities = model.predict_proba(texts, as_numpy=True)
print(labels, probabilities.tolist())
"""


def computes(config: Any, directory: Path, base: str) -> str:
    return ("The body is a sentence-transformer (`modules.json`): the fine-tuned encoder (`model.safetensors`), "
            "mean pooling over the real tokens, special tokens included, and L2 normalisation. "
            + logistic_head_text(config))


def snippet(*, adapter: str, base: str, texts: Sequence[str], max_length: int, pooling: str = "mean") -> str:
    return SETFIT_SNIPPET.format(head=snippet_head(adapter, None, texts))


CARD = CardText(computes, snippet, self_contained=True)
