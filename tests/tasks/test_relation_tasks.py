"""Relation tasks: span-split fields, entity-preserving templates, the SemEval and RE metrics, readers and errors."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from infoprompt.errors import UserError
from infoprompt.metrics import NO_RELATION as METRIC_NO_RELATION
from infoprompt.metrics import compute_metrics, relation_type
from infoprompt.tasks import get_task, load_split
from infoprompt.tasks.base import split_location
from infoprompt.tasks.relation import (
    NO_RELATION,
    RELATION_TEMPLATE,
    SEMEVAL_LABELS,
    read_conll04_pairs,
    read_semeval,
)
from infoprompt.tasks.spans import relation_fields
from infoprompt.templates import Template, TemplateEncoder


def encode(backbone, fields, max_length, n_prompts=4):
    enc = TemplateEncoder(backbone.tokenizer, Template.parse(RELATION_TEMPLATE), n_prompts, max_length)
    return enc, enc.encode_many([fields])[0]


def tokens_of(backbone, text):
    return backbone.tokenizer.tokenize(text)


def test_relation_fields_mark_head_and_tail_in_reading_order():
    text = "the man works for the company"
    fields = relation_fields(text, head=(22, 29), tail=(4, 7))  # head after tail
    assert fields == {"before": "the", "first": "# man #", "between": "works for the", "second": "@ company @",
                      "after": "", "head": "company", "tail": "man"}
    with pytest.raises(ValueError, match="overlap"):
        relation_fields(text, (0, 7), (4, 9))


@pytest.mark.parametrize("where", ["start", "end", "apart"])
def test_long_sentence_keeps_both_entities(bert_backbone, where):
    filler = " ".join(["dull"] * 80)
    if where == "start":  # both entities open the sentence, the long rest follows
        text = f"man works for company {filler}"
        head, tail = (0, 3), (14, 21)
    elif where == "end":  # a long lead-in, then the entities close the sentence
        text = f"{filler} he said the man works for the company"
        head = (len(filler) + 13, len(filler) + 16)
        tail = (len(text) - 7, len(text))
    else:  # one entity at each end, the long middle between them
        text = f"man {filler} company"
        head, tail = (0, 3), (len(text) - 7, len(text))
    assert text[head[0]:head[1]] == "man" and text[tail[0]:tail[1]] == "company"
    enc, pair = encode(bert_backbone, relation_fields(text, head, tail), max_length=32)
    tok = bert_backbone.tokenizer
    ids = pair.prompted.input_ids
    tokens = tok.convert_ids_to_tokens(ids)
    mask = pair.prompted.readout_position
    assert pair.truncated and len(ids) == 32
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id and ids[mask] == tok.mask_token_id
    assert len(pair.prompted.prompt_positions) == 4
    # the mentions around the mask: "man [MASK] company"
    assert tokens[mask - 1] == "man" and tokens[mask + 1] == "company"
    # both marked mentions survive inside the sentence, in order (the markers are [UNK] in the tiny vocabulary)
    context = [tokens[i] for i in pair.prompted.context_positions]
    assert context.count("man") == 2 and context.count("company") == 2
    first = context.index("man")
    assert context[first - 1] == context[first + 1] == tok.unk_token
    if where == "end":
        # the lead-in is cut from its start: the words next to the head survive
        assert context[first - 3 : first - 1] == ["said", "the"]
    if where == "start":
        assert context[:4] == [tok.unk_token, "man", tok.unk_token, "works"]
    assert "dull" in context  # the filler is what got cut, not all of it
    assert len(pair.plain.input_ids) == 32 - 4


def test_semeval_metric_on_a_hand_made_confusion():
    labels = ("Other", "Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)", "Component-Whole(e1,e2)", "Component-Whole(e2,e1)")
    other, ce12, ce21, cw12, cw21 = range(5)
    pairs = [  # (gold, predicted)
        (ce12, ce12),  # correct
        (ce12, ce21),  # right type, wrong direction: wrong (the scorer's xDIRx)
        (ce21, ce21),  # correct
        (cw12, other),  # missed
        (cw21, cw21),  # correct
        (other, ce12),  # false alarm
        (other, other),  # Other is never scored itself
        (cw12, ce12),  # wrong type
        (cw12, cw12),  # correct
    ]
    gold, pred = [g for g, _ in pairs], [p for _, p in pairs]
    # Cause-Effect: correct 2, predicted with that type 5 (rows 1, 2, 3, 6, 8), gold 3 -> P 2/5, R 2/3, F1 1/2
    # Component-Whole: correct 2, predicted 2, gold 4 -> P 1, R 1/2, F1 2/3
    score = compute_metrics(("semeval_macro_f1",), gold, pred, labels)["semeval_macro_f1"]
    assert score == pytest.approx((1 / 2 + 2 / 3) / 2)
    # ignoring direction would count row 2 as correct (Cause-Effect F1 3/4): the official score does not
    assert score != pytest.approx((3 / 4 + 2 / 3) / 2)


def test_semeval_metric_edge_cases():
    labels = ("Other", "Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)", "Message-Topic(e1,e2)")
    # only the types present in the gold labels are averaged (the scorer divides by those)
    assert compute_metrics(("semeval_macro_f1",), [1, 1], [1, 3], labels)["semeval_macro_f1"] == pytest.approx(2 / 3)
    # perfect on Other and nothing else scores 0
    assert compute_metrics(("semeval_macro_f1",), [0, 0, 1], [0, 0, 0], labels)["semeval_macro_f1"] == 0.0
    assert compute_metrics(("semeval_macro_f1",), [0, 0], [0, 1], labels)["semeval_macro_f1"] == 0.0
    assert relation_type("Cause-Effect(e2,e1)") == "Cause-Effect" and relation_type("Other") == "Other"


def test_re_micro_f1_excludes_no_relation():
    labels = (NO_RELATION, "Kill", "Work_For")
    none, kill, work = range(3)
    gold = [kill, kill, work, none, none, work]
    pred = [kill, none, kill, none, none, work]
    # correct 2 of 3 relation predictions (precision 2/3) and of 4 gold relations (recall 1/2)
    assert compute_metrics(("re_micro_f1",), gold, pred, labels)["re_micro_f1"] == pytest.approx(4 / 7)
    # all no_relation: nothing proposed, F1 0 although accuracy is high
    assert compute_metrics(("re_micro_f1",), [none, none, kill], [none, none, none], labels)["re_micro_f1"] == 0.0
    # without a no_relation label (gold pairs only) it is accuracy
    assert compute_metrics(("re_micro_f1",), [0, 1, 1], [0, 1, 0], ("Kill", "Work_For"))["re_micro_f1"] == pytest.approx(2 / 3)
    assert NO_RELATION == METRIC_NO_RELATION


def test_semeval_task_definition():
    task = get_task("semeval")
    assert len(task.labels) == 19 and set(task.labels) == set(SEMEVAL_LABELS)
    assert task.primary_metric == "semeval_macro_f1" and task.eval_split == "test"
    assert set(task.label_words) == set(task.labels)
    # the two directions of a type get different verbalizer words, so their head rows start apart
    assert task.label_words["Cause-Effect(e1,e2)"] != task.label_words["Cause-Effect(e2,e1)"]
    assert get_task("conll04-re").labels[0] == NO_RELATION and get_task("conll04-re").primary_metric == "re_micro_f1"
    assert NO_RELATION not in get_task("conll04-re-gold").labels


# -- readers against the counts of shared/data/README.md -----------------------------------------------------


def test_split_row_ranges():
    assert split_location("semeval2010_task8/train.jsonl[:-800]") == ("semeval2010_task8/train.jsonl", slice(None, -800))
    assert split_location("a/train.jsonl[-800:]") == ("a/train.jsonl", slice(-800, None))
    assert split_location("a/b[1]/c.tsv") == ("a/b[1]/c.tsv", slice(None))  # no range: the whole file
    assert split_location("SST-2/train.tsv") == ("SST-2/train.tsv", slice(None))


def test_semeval_reader_counts(data_dir):
    task = get_task("semeval")
    train, dev, test = (load_split(task, split, data_dir) for split in ("train", "dev", "test"))
    assert (len(train), len(dev), len(test)) == (7200, 800, 2717)  # README: train 8,000 (last 800 = dev), test 2,717
    assert len({e.label for e in train}) == 19 and len({e.label for e in test}) == 19
    assert dev[0].source.endswith("train.jsonl:7201") and dev[-1].source.endswith("train.jsonl:8000")
    # per-type counts of train + test, as in TRAIN_TEST_DISTRIB.TXT
    types = Counter(relation_type(e.label) for e in train + dev + test)
    assert types["Other"] == 1410 + 454 and types["Cause-Effect"] == 1003 + 328
    first = train[0]  # "... an arrayed <e1>configuration</e1> of antenna <e2>elements</e2>."
    assert first.fields["first"] == "@ configuration @" and first.fields["second"] == "# elements #"
    assert first.fields["between"] == "of antenna" and first.fields["after"] == "."
    assert first.label == "Component-Whole(e2,e1)"


def test_conll04_pair_reader_counts(data_dir):
    task = get_task("conll04-re")
    counts = {}
    for split, (sentences, entities, relations) in {"train": (922, 3377, 1283), "dev": (231, 893, 343),
                                                      "test": (288, 1079, 422)}.items():
        rows = [json.loads(line) for line in (data_dir / "conll04" / f"{split}.jsonl").open()]
        assert len(rows) == sentences and sum(len(r["entities"]) for r in rows) == entities
        pairs = load_split(task, split, data_dir)
        labels = Counter(e.label for e in pairs)
        # README counts: every relation is one labelled pair; the other ordered pairs are no_relation
        assert sum(n for label, n in labels.items() if label != NO_RELATION) == relations
        assert len(pairs) == sum(len(r["entities"]) * (len(r["entities"]) - 1) for r in rows)
        assert len(load_split(get_task("conll04-re-gold"), split, data_dir)) == relations
        counts[split] = len(pairs)
    assert counts == {"train": 11998, "dev": 3260, "test": 3822}


# -- malformed input ------------------------------------------------------------------------------------------


def semeval_row(**changes):
    row = {"id": 1, "text": "the man works for the company", "e1": "man", "e1_span": [4, 7],
           "e2": "company", "e2_span": [22, 29], "relation": "Other"}
    return json.dumps(row | changes)


@pytest.mark.parametrize("changes,message", [
    ({"e1_span": [7, 4]}, "e1 span [7, 4) is empty or reversed"),
    ({"e1_span": [4, 4]}, "e1 span [4, 4) is empty or reversed"),
    ({"e2_span": [22, 40]}, "e2 span [22, 40) is out of range for a text of 29 characters"),
    ({"e1_span": [-1, 3]}, "out of range"),
    ({"e1": "dog"}, "e1 text 'dog' does not match its span [4, 7), which covers 'man'"),
    ({"e2_span": [5, 9], "e2": "an w"}, "overlap"),
    ({"e1_span": "4-7"}, "e1 span must be a"),
])
def test_semeval_span_errors_name_file_and_line(tmp_path, changes, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(semeval_row() + "\n" + semeval_row(**changes) + "\n")
    with pytest.raises(UserError) as error:
        read_semeval(path)
    assert message in str(error.value) and str(error.value).startswith(f"{path}:2:")


def conll04_row(entities=None, relations=None):
    entities = entities or [{"start": 1, "end": 2, "type": "Peop", "text": "man"},
                            {"start": 5, "end": 6, "type": "Org", "text": "company"}]
    relations = relations if relations is not None else [{"head": 0, "tail": 1, "type": "Work_For"}]
    return json.dumps({"tokens": ["the", "man", "works", "for", "the", "company"], "entities": entities, "relations": relations})


@pytest.mark.parametrize("row,message", [
    (conll04_row([{"start": 2, "end": 1, "type": "Peop"}], []), "entity 0 span [2, 1) is empty or reversed"),
    (conll04_row([{"start": 5, "end": 7, "type": "Org"}], []), "entity 0 span [5, 7) is out of range for a text of 6 tokens"),
    (conll04_row([{"start": 1, "end": 2, "type": "Peop", "text": "woman"}], []),
     "entity 0 text 'woman' does not match tokens [1, 2), which read 'man'"),
    (conll04_row(relations=[{"head": 0, "tail": 2, "type": "Kill"}]), "relation 0: tail 2 is out of range for 2 entities"),
    (conll04_row(relations=[{"head": 1, "tail": 1, "type": "Kill"}]), "same entity"),
    (conll04_row(relations=[{"head": 0, "tail": 1, "type": "Kill"}, {"head": 0, "tail": 1, "type": "Work_For"}]),
     "already hold relation 'Kill'"),
    (conll04_row([{"start": 1, "end": 3, "type": "Peop"}, {"start": 2, "end": 4, "type": "Org"}], []), "overlap"),
    ("{not json", "not valid JSON"),
])
def test_conll04_errors_name_file_and_line(tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(conll04_row() + "\n\n" + row + "\n")
    with pytest.raises(UserError) as error:
        read_conll04_pairs(path)
    assert message in str(error.value) and str(error.value).startswith(f"{path}:3:")


def test_conll04_pairs_are_ordered(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text(conll04_row() + "\n")
    pairs = read_conll04_pairs(path)
    assert [(e.fields["head"], e.fields["tail"], e.label) for e in pairs] == [
        ("man", "company", "Work_For"), ("company", "man", NO_RELATION)]
    assert pairs[1].fields["first"] == "# man #" and pairs[1].fields["second"] == "@ company @"
    assert pairs[0].source == f"{path}:1 (entities 0->1)"
