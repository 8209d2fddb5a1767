"""The one text SetFit reads for an example, and an encoder that gives the engine exactly the token ids SetFit's
body gets for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from infoprompt.backbones import silence_length_warning
from infoprompt.errors import UserError
from infoprompt.templates import (
    _FIELD,
    SPECIAL_PARTS,
    Encoded,
    EncodedPair,
    Template,
    cut,
    shorten_longest_first,
)


def render_text(template: Template, fields: dict[str, str], sep_token: str | None) -> str:
    """The one text SetFit sees for an example: the method's plain template with the field texts filled in.

    The leading ``<cls>`` and the last ``<sep>`` are left to the tokenizer; an inner ``<sep>`` (between the
    two sentences of MRPC/RTE, or before the relation's tail mention) becomes the tokenizer's separator token
    (``[SEP]``, ``</s>``), which it reads as that special token; literal markers (``#``, ``@``) stay as words.
    """
    parts = list(template.parts)
    if parts and parts[0] == "<cls>":
        parts = parts[1:]
    if parts and parts[-1] == "<sep>":
        parts = parts[:-1]
    words: list[str] = []
    for part in parts:
        if part == "<sep>":
            words.append(sep_token or "")
        elif part in SPECIAL_PARTS:
            continue
        elif m := _FIELD.match(part):
            words.append(fields[m.group(1)].strip())
        else:
            words.append(part)
    return " ".join(word for word in words if word)


class SetFitTextEncoder:
    """Encodes examples as :mod:`infoprompt.training` expects, but with exactly the token ids SetFit's body
    produces for the rendered text, so that training (inside ``setfit``) and our predictions read one input.

    Texts over the budget are shortened first with the template's truncation policies (entity mentions are
    kept, as in every other method), then decoded back to text; the body cuts any remainder from the end.
    """

    def __init__(self, body: Any, tokenizer: Any, template: Template, max_length: int, truncate: bool):
        self.body = body
        self.tokenizer = tokenizer
        silence_length_warning(tokenizer)  # ``text`` counts the tokens of whole fields before cutting them
        self.template = template
        self.max_length = max_length
        self.truncate = truncate
        self.policies = template.cut_policies
        sep = getattr(tokenizer, "sep_token", None)
        self.sep_token = sep
        inner_seps = max(0, template.parts.count("<sep>") - (1 if template.parts[-1] == "<sep>" else 0))
        literals = [p for p in template.parts if p not in SPECIAL_PARTS and not _FIELD.match(p)]
        literal_tokens = sum(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in literals)
        self.fixed_length = tokenizer.num_special_tokens_to_add() + inner_seps + literal_tokens
        if self.fixed_length >= max_length:
            raise UserError(f"template {template.text!r} leaves no room for text within max_length={max_length}")

    def text(self, fields: dict[str, str], where: str) -> tuple[str, bool]:
        """The rendered text of one example and whether it had to be shortened."""
        names = self.template.fields
        missing = [name for name in names if name not in fields]
        if missing:
            raise UserError(f"{where}: missing text field {missing[0]!r}")
        ids = {name: self.tokenizer(fields[name], add_special_tokens=False)["input_ids"] for name in names}
        budget = self.max_length - self.fixed_length
        if sum(len(v) for v in ids.values()) <= budget:
            return render_text(self.template, fields, self.sep_token), False
        if not self.truncate:
            raise UserError(
                f"{where}: input has {sum(len(v) for v in ids.values()) + self.fixed_length} tokens, more than "
                f"max_length={self.max_length} (enable truncation or raise --max-length)"
            )
        lengths = shorten_longest_first({n: len(v) for n, v in ids.items()}, budget, self.policies)
        short = {n: self.tokenizer.decode(cut(v, lengths[n], self.policies[n])) for n, v in ids.items()}
        return render_text(self.template, short, self.sep_token), True

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """What the body's own tokenisation (``SentenceTransformer.preprocess``/``tokenize``) gives each text."""
        tokenize = getattr(self.body, "preprocess", None) or self.body.tokenize
        rows: list[list[int]] = []
        for start in range(0, len(texts), 256):
            features = tokenize(list(texts[start : start + 256]))
            for ids, mask in zip(features["input_ids"].tolist(), features["attention_mask"].tolist(), strict=True):
                rows.append([i for i, m in zip(ids, mask, strict=True) if m])
        return rows

    def encode_many(self, field_texts: Sequence[dict[str, str]], sources: Sequence[str] | None = None) -> list[EncodedPair]:
        rendered = [self.text(f, sources[i] if sources else f"input {i + 1}") for i, f in enumerate(field_texts)]
        pairs = []
        for (_, truncated), ids in zip(rendered, self.token_ids([text for text, _ in rendered]), strict=True):
            encoded = Encoded(input_ids=ids, prompt_positions=[], readout_position=0,
                              context_positions=list(range(len(ids))))
            pairs.append(EncodedPair(prompted=encoded, plain=encoded, truncated=truncated))
        return pairs
