"""Relation classification between two given entities: SemEval-2010 Task 8 and CoNLL04 (ordered pairs)."""

from __future__ import annotations

import itertools
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.tasks.base import Example, TaskSpec
from infoprompt.tasks.spans import (
    check_char_span,
    check_entities,
    read_jsonl,
    relation_fields,
    require,
    token_char_spans,
)

# The sentence with the head marked ``@ … @`` and the tail ``# … #`` inside it, then the bare mentions around
# the readout: "… @ Obama @ lives in # Chicago # … Obama [MASK] Chicago". Truncation cuts the text before,
# between and after the mentions and never the mentions.
RELATION_TEMPLATE = (
    "<cls> <p> {before:cut-start} {first:keep} {between:cut-middle} {second:keep} {after:cut-end} "
    "<p> {head:keep} <mask> {tail:keep} <p> <sep>"
)
RELATION_FIELDS = ("before", "first", "between", "second", "after", "head", "tail")

# -- SemEval-2010 Task 8 -----------------------------------------------------------------------------------

SEMEVAL_OTHER = "Other"
# Per type: the words that read the relation from e1 to e2 ("e1 causes e2"), then from e2 to e1.
SEMEVAL_WORDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "Cause-Effect": (("causes",), ("caused", "by")),
    "Component-Whole": (("part", "of"), ("has", "part")),
    "Content-Container": (("inside",), ("contains",)),
    "Entity-Destination": (("into",), ("receives",)),
    "Entity-Origin": (("from",), ("origin", "of")),
    "Instrument-Agency": (("used", "by"), ("uses",)),
    "Member-Collection": (("member", "of"), ("group", "of")),
    "Message-Topic": (("about",), ("topic", "of")),
    "Product-Producer": (("made", "by"), ("makes",)),
}
SEMEVAL_LABELS = (SEMEVAL_OTHER,) + tuple(
    f"{kind}({direction})" for kind in SEMEVAL_WORDS for direction in ("e1,e2", "e2,e1")
)
SEMEVAL_LABEL_WORDS = {SEMEVAL_OTHER: ("other",)} | {
    f"{kind}({direction})": words[i]
    for kind, words in SEMEVAL_WORDS.items()
    for i, direction in enumerate(("e1,e2", "e2,e1"))
}
SEMEVAL_DEV_ROWS = 800  # no official dev split: the last 800 training rows, the common practice


def read_semeval(path: Path) -> list[Example]:
    """The staged SemEval JSONL (``text``, ``e1``/``e2`` with ``[start, end)`` character spans, ``relation``)."""
    examples = []
    for where, record in read_jsonl(path):
        text = require(record, "text", str, where)
        label = require(record, "relation", str, where)
        e1 = check_char_span(text, record.get("e1_span"), require(record, "e1", str, where), "e1", where)
        e2 = check_char_span(text, record.get("e2_span"), require(record, "e2", str, where), "e2", where)
        if e1[0] < e2[1] and e2[0] < e1[1]:
            raise UserError(f"{where}: the e1 span {list(e1)} and the e2 span {list(e2)} overlap")
        examples.append(
            Example(fields=relation_fields(text, e1, e2), label=label, spans={"head": e1, "tail": e2}, source=where)
        )
    return examples


SEMEVAL = TaskSpec(
    name="semeval",
    fields=RELATION_FIELDS,
    labels=SEMEVAL_LABELS,
    label_words=SEMEVAL_LABEL_WORDS,
    metrics=("semeval_macro_f1", "accuracy"),
    template=RELATION_TEMPLATE,
    splits={
        "train": f"semeval2010_task8/train.jsonl[:-{SEMEVAL_DEV_ROWS}]",
        "dev": f"semeval2010_task8/train.jsonl[-{SEMEVAL_DEV_ROWS}:]",
        "test": "semeval2010_task8/test.jsonl",
    },
    reader=read_semeval,
    train_split="train",
    eval_split="test",
    description="SemEval-2010 Task 8 relation classification, 19 directed labels (e1 = head)",
)

# -- CoNLL04 -----------------------------------------------------------------------------------------------

NO_RELATION = "no_relation"  # the label that infoprompt.metrics.re_micro_f1 leaves out

CONLL04_RELATIONS = ("Kill", "Live_In", "Located_In", "OrgBased_In", "Work_For")
CONLL04_WORDS = {
    NO_RELATION: ("unrelated",),
    "Kill": ("killed",),
    "Live_In": ("lives", "in"),
    "Located_In": ("located", "in"),
    "OrgBased_In": ("based", "in"),
    "Work_For": ("works", "for"),
}


def read_conll04_pairs(path: Path, gold_only: bool = False) -> list[Example]:
    """One example per ordered pair of distinct gold entities of a sentence (SpERT-style JSONL).

    A pair ``(head, tail)`` takes the type of the relation from head to tail, else ``no_relation``;
    with ``gold_only`` only the pairs that hold a relation are kept.
    """
    examples = []
    for where, record in read_jsonl(path):
        tokens = require(record, "tokens", list, where)
        if not all(isinstance(token, str) for token in tokens):
            raise UserError(f"{where}: field 'tokens' must be a list of strings")
        entities = check_entities(tokens, require(record, "entities", list, where), where)
        relations: dict[tuple[int, int], str] = {}
        for index, relation in enumerate(require(record, "relations", list, where)):
            at = f"{where}: relation {index}"
            if not isinstance(relation, dict):
                raise UserError(f"{at} must be a JSON object")
            head, tail = require(relation, "head", int, at), require(relation, "tail", int, at)
            kind = require(relation, "type", str, at)
            for role, value in (("head", head), ("tail", tail)):
                if not 0 <= value < len(entities):
                    raise UserError(f"{at}: {role} {value} is out of range for {len(entities)} entities")
            if head == tail:
                raise UserError(f"{at}: head and tail are the same entity {head}")
            if relations.get((head, tail), kind) != kind:
                raise UserError(f"{at}: entities {head}->{tail} already hold relation {relations[(head, tail)]!r}")
            relations[(head, tail)] = kind
        text = " ".join(tokens)
        spans = token_char_spans(tokens, [(start, end) for start, end, _ in entities])
        pairs = sorted(relations) if gold_only else itertools.permutations(range(len(entities)), 2)
        for head, tail in pairs:
            (hs, he, _), (ts, te, _) = entities[head], entities[tail]
            if hs < te and ts < he:
                raise UserError(
                    f"{where}: entities {head} [{hs}, {he}) and {tail} [{ts}, {te}) overlap, so the pair "
                    "cannot be marked"
                )
            examples.append(
                Example(
                    fields=relation_fields(text, spans[head], spans[tail]),
                    label=relations.get((head, tail), NO_RELATION),
                    spans={"head": spans[head], "tail": spans[tail]},
                    source=f"{where} (entities {head}->{tail})",
                )
            )
    return examples


def read_conll04_gold_pairs(path: Path) -> list[Example]:
    return read_conll04_pairs(path, gold_only=True)


CONLL04_SPLITS = {"train": "conll04/train.jsonl", "dev": "conll04/dev.jsonl", "test": "conll04/test.jsonl"}

CONLL04_RE = TaskSpec(
    name="conll04-re",
    fields=RELATION_FIELDS,
    labels=(NO_RELATION, *CONLL04_RELATIONS),
    label_words=CONLL04_WORDS,
    metrics=("re_micro_f1", "accuracy"),
    template=RELATION_TEMPLATE,
    splits=CONLL04_SPLITS,
    reader=read_conll04_pairs,
    train_split="train",
    eval_split="test",
    description="CoNLL04 relations of every ordered gold-entity pair, no_relation included (stands in for ACE05)",
)

CONLL04_RE_GOLD = TaskSpec(
    name="conll04-re-gold",
    fields=RELATION_FIELDS,
    labels=CONLL04_RELATIONS,
    label_words={label: CONLL04_WORDS[label] for label in CONLL04_RELATIONS},
    metrics=("re_micro_f1", "macro_f1"),
    template=RELATION_TEMPLATE,
    splits=CONLL04_SPLITS,
    reader=read_conll04_gold_pairs,
    train_split="train",
    eval_split="test",
    description="CoNLL04 relation typing of the gold related pairs only (no no_relation)",
)

RELATION_TASKS = (SEMEVAL, CONLL04_RE, CONLL04_RE_GOLD)
