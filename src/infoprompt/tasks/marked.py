"""Many-class tasks shaped like a user's file: one text per row, its entities marked inline, one label column.

A user who classifies relations brings sentences such as ``The <e1>child</e1> was wrapped into the
<e2>cradle</e2>`` and a label per row; nothing tells the library where the entities are but the marks in the
text. These tasks read the staged SemEval-2010 Task 8 and CoNLL04 files that way (the ``text`` field alone, the
user-file template and metrics), so that the benchmark of the default method sees what users bring:
SemEval's 10 relation types and its 19 directed relations, and CoNLL04's 5 relation types.
"""

from __future__ import annotations

from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.tasks.base import Example, TaskSpec
from infoprompt.tasks.files import TEXT_FIELD
from infoprompt.tasks.relation import (
    CONLL04_RELATIONS,
    CONLL04_SPLITS,
    SEMEVAL_LABELS,
    SEMEVAL_OTHER,
    SEMEVAL_WORDS,
)
from infoprompt.tasks.spans import check_entities, read_jsonl, require
from infoprompt.tasks.user_task import SINGLE_LABEL_METRICS, USER_SINGLE_TEMPLATE

SEMEVAL_TYPES = (SEMEVAL_OTHER, *SEMEVAL_WORDS)
SEMEVAL_SPLITS = {"train": "semeval2010_task8/train.jsonl", "test": "semeval2010_task8/test.jsonl"}


def read_semeval_marked(path: Path, label_field: str) -> list[Example]:
    """SemEval rows as their marked sentence (``<e1>…</e1>``, ``<e2>…</e2>``) and the label in ``label_field``."""
    return [Example(fields={TEXT_FIELD: require(record, "sentence", str, where)},
                    label=require(record, label_field, str, where), source=where)
            for where, record in read_jsonl(path)]


def read_semeval_types(path: Path) -> list[Example]:
    return read_semeval_marked(path, "relation_type")


def read_semeval_directed(path: Path) -> list[Example]:
    return read_semeval_marked(path, "relation")


def mark_pair(tokens: list[str], head: tuple[int, int], tail: tuple[int, int]) -> str:
    """The sentence with the head's tokens inside ``<e1>…</e1>`` and the tail's inside ``<e2>…</e2>``."""
    opening = {head[0]: "<e1>", tail[0]: "<e2>"}
    closing = {head[1] - 1: "</e1>", tail[1] - 1: "</e2>"}
    return " ".join(f"{opening.get(i, '')}{token}{closing.get(i, '')}" for i, token in enumerate(tokens))


def read_conll04_marked(path: Path) -> list[Example]:
    """One row per gold relation of a CoNLL04 sentence: the sentence with head and tail marked, its type."""
    examples = []
    for where, record in read_jsonl(path):
        tokens = require(record, "tokens", list, where)
        entities = check_entities(tokens, require(record, "entities", list, where), where)
        for index, relation in enumerate(require(record, "relations", list, where)):
            at = f"{where}: relation {index}"
            if not isinstance(relation, dict):
                raise UserError(f"{at} must be a JSON object")
            head, tail = require(relation, "head", int, at), require(relation, "tail", int, at)
            if not (0 <= head < len(entities) and 0 <= tail < len(entities)) or head == tail:
                raise UserError(f"{at}: head {head} and tail {tail} must be two of the {len(entities)} entities")
            (hs, he, _), (ts, te, _) = entities[head], entities[tail]
            if hs < te and ts < he:
                raise UserError(f"{at}: the head and tail entities overlap, so the pair cannot be marked")
            examples.append(Example(fields={TEXT_FIELD: mark_pair(tokens, (hs, he), (ts, te))},
                                    label=require(relation, "type", str, at), source=f"{at}"))
    return examples


def marked_task(name: str, labels: tuple[str, ...], splits: dict[str, str], reader, description: str) -> TaskSpec:
    return TaskSpec(name=name, fields=(TEXT_FIELD,), labels=labels,
                    label_words={label: tuple(label.lower().replace("(", " ").replace(")", " ").replace(",", " ")
                                              .replace("-", " ").replace("_", " ").split()) for label in labels},
                    metrics=SINGLE_LABEL_METRICS, template=USER_SINGLE_TEMPLATE, splits=splits, reader=reader,
                    train_split="train", eval_split="test", description=description)


MARKED_TASKS = (
    marked_task("semeval-types", SEMEVAL_TYPES, SEMEVAL_SPLITS, read_semeval_types,
                "SemEval-2010 Task 8 as a user's file: the marked sentence, its 10 relation types (direction dropped)"),
    marked_task("semeval-directed", SEMEVAL_LABELS, SEMEVAL_SPLITS, read_semeval_directed,
                "SemEval-2010 Task 8 as a user's file: the marked sentence, its 19 directed relations"),
    marked_task("conll04-types", CONLL04_RELATIONS, CONLL04_SPLITS, read_conll04_marked,
                "CoNLL04 gold relations as a user's file: the sentence with both entities marked, 5 types"),
)
