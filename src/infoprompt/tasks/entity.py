"""Entity typing with given spans (CoNLL04, CoNLL-2003): one example per gold entity, [MASK] before the span."""

from __future__ import annotations

from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.tasks.base import Example, TaskSpec
from infoprompt.tasks.spans import check_entities, read_jsonl, require, token_char_spans, typing_fields

# As in the paper, the readout [MASK] stands right before the given span; the sentence is cut around the
# mention (left from its start, right from its end) and the mention itself is never cut.
TYPING_TEMPLATE = "<cls> <p> {left:cut-start} <mask> {mention:keep} {right:cut-end} <p> <sep>"
TYPING_FIELDS = ("left", "mention", "right")


def read_typing(path: Path) -> list[Example]:
    """One example per gold entity of a SpERT-style JSONL file (``tokens``, ``entities``)."""
    examples = []
    for where, record in read_jsonl(path):
        tokens = require(record, "tokens", list, where)
        if not all(isinstance(token, str) for token in tokens):
            raise UserError(f"{where}: field 'tokens' must be a list of strings")
        entities = check_entities(tokens, require(record, "entities", list, where), where)
        text = " ".join(tokens)
        spans = token_char_spans(tokens, [(start, end) for start, end, _ in entities])
        for index, ((_, _, kind), (start, end)) in enumerate(zip(entities, spans, strict=True)):
            examples.append(
                Example(
                    fields=typing_fields(text, start, end),
                    label=kind,
                    spans={"mention": (start, end)},
                    source=f"{where} (entity {index})",
                )
            )
    return examples


CONLL04_NER = TaskSpec(
    name="conll04-ner",
    fields=TYPING_FIELDS,
    labels=("Loc", "Org", "Other", "Peop"),
    label_words={"Loc": ("location",), "Org": ("organization",), "Other": ("other",), "Peop": ("person",)},
    metrics=("accuracy", "macro_f1"),
    template=TYPING_TEMPLATE,
    splits={"train": "conll04/train.jsonl", "dev": "conll04/dev.jsonl", "test": "conll04/test.jsonl"},
    reader=read_typing,
    train_split="train",
    eval_split="test",
    description="CoNLL04 entity typing with given spans (stands in for ACE05)",
)

CONLL03_NER = TaskSpec(
    name="conll03-ner",
    fields=TYPING_FIELDS,
    labels=("LOC", "MISC", "ORG", "PER"),
    label_words={"LOC": ("location",), "MISC": ("miscellaneous",), "ORG": ("organization",), "PER": ("person",)},
    metrics=("accuracy", "macro_f1"),
    template=TYPING_TEMPLATE,
    splits={"train": "conll2003/train.jsonl", "dev": "conll2003/dev.jsonl", "test": "conll2003/test.jsonl"},
    reader=read_typing,
    train_split="train",
    eval_split="test",
    description="CoNLL-2003 entity typing with given spans (stands in for ACE05)",
)

ENTITY_TASKS = (CONLL04_NER, CONLL03_NER)
