"""Declarative templates: text fields, prompt slots and a readout slot turned into token ids and positions.

A template is a whitespace-separated string of parts:

* ``<cls>``, ``<sep>``: the tokenizer's own classification / separator tokens (never hard-coded ids);
* ``<mask>``: the readout slot, whose last-layer state ``Z`` feeds the head;
* ``<p>``: a place where prompt tokens go (``n_prompts`` tokens are spread over the places, earlier
  places first: 4 prompts over 3 places gives 2, 1, 1);
* ``{field}``: a text field of the example; ``{field:policy}`` also says how truncation may cut it;
* anything else: literal words, tokenised once.

Truncation shortens only text fields (longest first), so prompt slots and the readout slot always survive.
A field's policy says where it loses tokens: ``cut-end`` (the default, as for a plain ``{field}``),
``cut-start``, ``cut-middle`` (keeps both ends), or ``keep``: such a field is cut only when every other field
is already empty, from its end. Span-aware tasks use this to cut a sentence around an entity, e.g.
``<cls> <p> {left:cut-start} <mask> {mention:keep} {right:cut-end} <p> <sep>``.
Without a ``<mask>`` part the readout is the ``<cls>`` token.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from infoprompt.errors import UserError

_FIELD = re.compile(r"^\{(\w+)(?::([\w-]+))?\}$")
SPECIAL_PARTS = ("<cls>", "<sep>", "<mask>", "<p>")
# Truncation policies of a field part; the first is what a plain ``{field}`` gets.
CUT_POLICIES = ("cut-end", "cut-start", "cut-middle", "keep")
# Characters of a text field read per token of the budget: a field longer than max_length × this is cut to
# that many characters (at the end its policy cuts) before it is tokenised, so a huge input costs no more than
# this. Tokens average 3-6 characters, so the cut text still holds more tokens than the budget, and the tokens
# kept are the same; only text averaging over 64 characters a token (long runs of spaces, words of 65+
# letters) is cut shorter than before.
CHARS_PER_TOKEN = 64


@dataclass(frozen=True)
class Template:
    """A parsed template. ``parts`` keeps the order; ``fields`` lists the text fields it expects."""

    text: str
    parts: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Template:
        parts = tuple(text.split())
        if not parts:
            raise UserError("empty template")
        if parts.count("<mask>") > 1:
            raise UserError(f"template {text!r} has more than one <mask> slot")
        if "<mask>" not in parts and "<cls>" not in parts:
            raise UserError(f"template {text!r} needs a <mask> or <cls> part to read the representation from")
        policies: dict[str, set[str]] = {}
        for part in parts:
            if part.startswith("<") and part.endswith(">") and part not in SPECIAL_PARTS:
                raise UserError(f"template {text!r}: unknown part {part}; known: {', '.join(SPECIAL_PARTS)}")
            if m := _FIELD.match(part):
                policy = m.group(2) or CUT_POLICIES[0]
                if policy not in CUT_POLICIES:
                    raise UserError(
                        f"template {text!r}: unknown truncation policy {policy!r} in {part}; "
                        f"known: {', '.join(CUT_POLICIES)}"
                    )
                policies.setdefault(m.group(1), set()).add(policy)
        conflicting = sorted(name for name, found in policies.items() if len(found) > 1)
        if conflicting:
            raise UserError(f"template {text!r} gives field(s) {', '.join(conflicting)} different truncation policies")
        return cls(text=text, parts=parts)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(m.group(1) for part in self.parts if (m := _FIELD.match(part)))

    @property
    def cut_policies(self) -> dict[str, str]:
        """Truncation policy per field name (``cut-end`` where the template gives none)."""
        return {m.group(1): m.group(2) or CUT_POLICIES[0] for part in self.parts if (m := _FIELD.match(part))}

    @property
    def n_places(self) -> int:
        return self.parts.count("<p>")

    def without_prompts(self) -> Template:
        kept = tuple(part for part in self.parts if part != "<p>")
        return Template(text=" ".join(kept), parts=kept)

    def prompts_per_place(self, n_prompts: int) -> list[int]:
        places = self.n_places
        if n_prompts and not places:
            raise UserError(f"template {self.text!r} has no <p> place for {n_prompts} prompt token(s)")
        if not places:
            return []
        base, extra = divmod(n_prompts, places)
        return [base + (1 if i < extra else 0) for i in range(places)]


@dataclass(frozen=True)
class Encoded:
    """One example as token ids, with the positions the model needs.

    ``prompt_positions`` are placeholders overwritten by prompt embeddings; ``context_positions`` are the
    text-field tokens (the pool that head-loss negatives are drawn from); ``span_positions`` holds, per
    ``keep`` field of the template (the entity mentions of span tasks), its token positions.
    """

    input_ids: list[int]
    prompt_positions: list[int]
    readout_position: int
    context_positions: list[int]
    span_positions: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class EncodedPair:
    """The same example encoded with prompt slots (prompted pass) and without them (no-prompt pass)."""

    prompted: Encoded
    plain: Encoded
    truncated: bool


class TemplateEncoder:
    """Turns examples into :class:`EncodedPair` with one tokenizer, one template and a length budget."""

    def __init__(self, tokenizer, template: Template, n_prompts: int, max_length: int, truncate: bool = True):
        self.tokenizer = tokenizer
        self.template = template
        self.n_prompts = n_prompts
        self.max_length = max_length
        self.truncate = truncate
        self.per_place = template.prompts_per_place(n_prompts)
        self.policies = template.cut_policies
        for name in ("cls_token_id", "sep_token_id"):
            if getattr(tokenizer, name) is None and f"<{name[:3]}>" in template.parts:
                raise UserError(f"the tokenizer has no {name[:3]} token, which template {template.text!r} needs")
        if "<mask>" in template.parts and tokenizer.mask_token_id is None:
            raise UserError(f"the tokenizer has no mask token, which template {template.text!r} needs")
        # Any id works as the placeholder: its embedding is replaced by the prompt before the encoder runs.
        self.placeholder_id = tokenizer.unk_token_id if tokenizer.unk_token_id is not None else tokenizer.pad_token_id
        self.literal_ids = {
            part: tokenizer(part, add_special_tokens=False)["input_ids"]
            for part in template.parts
            if part not in SPECIAL_PARTS and not _FIELD.match(part)
        }
        fixed = sum(len(ids) for ids in self.literal_ids.values())
        fixed += sum(1 for part in template.parts if part in ("<cls>", "<sep>", "<mask>")) + n_prompts
        self.fixed_length = fixed
        if fixed >= max_length:
            raise UserError(
                f"template {template.text!r} with {n_prompts} prompt(s) needs {fixed} tokens, "
                f"leaving no room for text within max_length={max_length}"
            )

    def encode_many(self, field_texts: Sequence[dict[str, str]], sources: Sequence[str] | None = None) -> list[EncodedPair]:
        names = self.template.fields
        tokenised: dict[str, list[list[int]]] = {}
        for name in names:
            texts = []
            for index, fields in enumerate(field_texts):
                if name not in fields:
                    where = sources[index] if sources else f"input {index + 1}"
                    raise UserError(f"{where}: missing text field {name!r}")
                texts.append(fields[name])
            tokenised[name] = self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        return [
            self._assemble({name: tokenised[name][i] for name in names}, sources[i] if sources else f"input {i + 1}")
            for i in range(len(field_texts))
        ]

    def _assemble(self, field_ids: dict[str, list[int]], where: str) -> EncodedPair:
        budget = self.max_length - self.fixed_length
        lengths = {name: len(ids) for name, ids in field_ids.items()}
        truncated = sum(lengths.values()) > budget
        if truncated:
            if not self.truncate:
                raise UserError(
                    f"{where}: input has {sum(lengths.values()) + self.fixed_length} tokens, more than "
                    f"max_length={self.max_length}, and truncation is off (shorten the input; when training, raise "
                    "--max-length or drop --no-truncate)"
                )
            lengths = shorten_longest_first(lengths, budget, self.policies)
        kept = {name: cut(ids, lengths[name], self.policies[name]) for name, ids in field_ids.items()}
        return EncodedPair(
            prompted=self._build(kept, with_prompts=True),
            plain=self._build(kept, with_prompts=False),
            truncated=truncated,
        )

    def _build(self, field_ids: dict[str, list[int]], with_prompts: bool) -> Encoded:
        ids: list[int] = []
        prompt_positions: list[int] = []
        context_positions: list[int] = []
        span_positions: list[tuple[int, ...]] = []
        readout = -1
        cls_position = -1
        place = 0
        tok = self.tokenizer
        for part in self.template.parts:
            if part == "<cls>":
                cls_position = len(ids)
                ids.append(tok.cls_token_id)
            elif part == "<sep>":
                ids.append(tok.sep_token_id)
            elif part == "<mask>":
                readout = len(ids)
                ids.append(tok.mask_token_id)
            elif part == "<p>":
                count = self.per_place[place]
                place += 1
                if with_prompts:
                    prompt_positions.extend(range(len(ids), len(ids) + count))
                    ids.extend([self.placeholder_id] * count)
            elif m := _FIELD.match(part):
                piece = field_ids[m.group(1)]
                context_positions.extend(range(len(ids), len(ids) + len(piece)))
                if self.policies[m.group(1)] == "keep":
                    span_positions.append(tuple(range(len(ids), len(ids) + len(piece))))
                ids.extend(piece)
            else:
                ids.extend(self.literal_ids[part])
        return Encoded(
            input_ids=ids,
            prompt_positions=prompt_positions,
            readout_position=readout if readout >= 0 else cls_position,
            context_positions=context_positions,
            span_positions=tuple(span_positions),
        )


def clip_characters(text: str, max_length: int, policy: str = "cut-end") -> str:
    """``text`` cut to ``max_length`` × :data:`CHARS_PER_TOKEN` characters where ``policy`` cuts its tokens:
    the start for ``cut-end`` and ``keep``, the end for ``cut-start``, both ends for ``cut-middle``."""
    limit = max_length * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    if policy == "cut-start":
        return text[-limit:]
    if policy == "cut-middle":
        return text[:limit] + " " + text[-limit:]  # the joint falls in the middle, which is cut away
    return text[:limit]


def shorten_longest_first(
    lengths: dict[str, int], budget: int, policies: dict[str, str] | None = None
) -> dict[str, int]:
    """Cut one token at a time from the currently longest field until the total fits ``budget``.

    Fields whose policy is ``keep`` are cut only once every other field is empty.
    """
    result = dict(lengths)
    policies = policies or {}
    cuttable = [name for name in result if policies.get(name) != "keep"]
    kept = [name for name in result if policies.get(name) == "keep"]
    for group in (cuttable, kept):
        while group and sum(result.values()) > budget:
            longest = max(group, key=lambda name: (result[name], name))
            if result[longest] == 0:
                break
            result[longest] -= 1
    return result


def cut(ids: list[int], length: int, policy: str = "cut-end") -> list[int]:
    """The ``length`` tokens of ``ids`` that ``policy`` keeps (see the module docstring)."""
    if length >= len(ids):
        return list(ids)
    if policy == "cut-start":
        return ids[len(ids) - length :]
    if policy == "cut-middle":
        head = (length + 1) // 2
        return ids[:head] + ids[len(ids) - (length - head) :]
    return ids[:length]  # cut-end, and keep fields as a last resort


@dataclass
class Batch:
    """Padded tensors for one pass (prompted or plain) over a list of encoded examples."""

    input_ids: torch.Tensor  # (B, L)
    attention_mask: torch.Tensor  # (B, L)
    prompt_positions: torch.Tensor  # (B, n_p), empty second dim when no prompts
    readout_position: torch.Tensor  # (B,)
    context_positions: torch.Tensor  # (B, C) padded with 0
    context_mask: torch.Tensor  # (B, C) True for real context tokens
    span_positions: torch.Tensor | None = None  # (B, S, W) padded with 0: tokens of each ``keep`` field
    span_mask: torch.Tensor | None = None  # (B, S, W) True for real span tokens

    def to(self, device: torch.device | str) -> Batch:
        return Batch(**{name: None if value is None else value.to(device) for name, value in vars(self).items()})


def collate(encoded: Sequence[Encoded], pad_id: int) -> Batch:
    """Right-pad a list of encoded examples into one :class:`Batch`."""
    size = len(encoded)
    length = max(len(e.input_ids) for e in encoded)
    context_length = max(1, max(len(e.context_positions) for e in encoded))
    n_prompts = len(encoded[0].prompt_positions)
    input_ids = torch.full((size, length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((size, length), dtype=torch.long)
    prompt_positions = torch.zeros((size, n_prompts), dtype=torch.long)
    context_positions = torch.zeros((size, context_length), dtype=torch.long)
    context_mask = torch.zeros((size, context_length), dtype=torch.bool)
    for row, item in enumerate(encoded):
        n = len(item.input_ids)
        input_ids[row, :n] = torch.tensor(item.input_ids)
        attention_mask[row, :n] = 1
        if n_prompts:
            prompt_positions[row] = torch.tensor(item.prompt_positions)
        c = len(item.context_positions)
        if c:
            context_positions[row, :c] = torch.tensor(item.context_positions)
            context_mask[row, :c] = True
    readout = torch.tensor([e.readout_position for e in encoded], dtype=torch.long)
    spans, span_mask = None, None
    n_spans = len(encoded[0].span_positions)
    if n_spans:
        width = max(1, max(len(span) for e in encoded for span in e.span_positions))
        spans = torch.zeros((size, n_spans, width), dtype=torch.long)
        span_mask = torch.zeros((size, n_spans, width), dtype=torch.bool)
        for row, item in enumerate(encoded):
            for index, span in enumerate(item.span_positions):
                spans[row, index, : len(span)] = torch.tensor(span, dtype=torch.long)
                span_mask[row, index, : len(span)] = True
    return Batch(input_ids, attention_mask, prompt_positions, readout, context_positions, context_mask, spans, span_mask)
