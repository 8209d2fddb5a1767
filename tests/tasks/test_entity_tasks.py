"""Entity typing tasks: [MASK] right before the given span, cutting around the mention, readers and errors."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from infoprompt.errors import UserError
from infoprompt.tasks import get_task, load_split
from infoprompt.tasks.entity import TYPING_TEMPLATE, read_typing
from infoprompt.tasks.spans import token_char_spans, typing_fields
from infoprompt.templates import Template, TemplateEncoder

TOKENS = ["the", "man", "works", "for", "the", "company"]


def encode(backbone, fields, max_length):
    enc = TemplateEncoder(backbone.tokenizer, Template.parse(TYPING_TEMPLATE), 4, max_length)
    return enc.encode_many([fields])[0]


def test_typing_fields_from_tokens():
    tokens = ["he", "said", *TOKENS]
    text = " ".join(tokens)
    (start, end), = token_char_spans(tokens, [(2, 4)])
    assert text[start:end] == "the man"
    assert typing_fields(text, start, end) == {"left": "he said", "mention": "the man", "right": "works for the company"}
    (start, end), = token_char_spans(tokens, [(7, 8)])
    assert typing_fields(text, start, end)["right"] == ""


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_mask_stands_right_before_the_span_in_long_sentences(bert_backbone, where):
    tok = bert_backbone.tokenizer
    left = {"start": "", "middle": "dull " * 40 + "he said", "end": "boring " * 80 + "he said"}[where]
    right = {"start": "works for the company " + "dull " * 80, "middle": "works for " + "boring " * 40, "end": ""}[where]
    pair = encode(bert_backbone, {"left": left.strip(), "mention": "the man", "right": right.strip()}, max_length=24)
    ids = pair.prompted.input_ids
    tokens = tok.convert_ids_to_tokens(ids)
    mask = pair.prompted.readout_position
    assert pair.truncated and len(ids) == 24 and len(pair.prompted.prompt_positions) == 4
    assert ids[mask] == tok.mask_token_id
    assert tokens[mask + 1 : mask + 3] == ["the", "man"]  # the whole mention, right after the mask
    if where != "start":
        assert tokens[mask - 2 : mask] == ["he", "said"]  # left is cut from its start
    if where != "end":
        assert tokens[mask + 3 : mask + 5] == ["works", "for"]  # right is cut from its end
    assert tokens[:3] == [tok.cls_token, tok.unk_token, tok.unk_token]  # <cls> <p> <p> ...
    assert tokens[-3:] == [tok.unk_token, tok.unk_token, tok.sep_token]  # ... <p> <p> <sep>
    # the plain pass holds the same text without the prompt slots
    assert tok.convert_ids_to_tokens(pair.plain.input_ids)[pair.plain.readout_position + 1:][:2] == ["the", "man"]


def test_left_and_right_share_the_cut():
    """Longest first: a long left and a long right keep about the same amount of context."""
    from infoprompt.templates import shorten_longest_first

    policies = Template.parse(TYPING_TEMPLATE).cut_policies
    assert shorten_longest_first({"left": 40, "mention": 3, "right": 30}, 21, policies) == {
        "left": 9, "mention": 3, "right": 9}


def test_typing_reader_counts(data_dir):
    """One example per gold entity: the entity counts of shared/data/README.md."""
    expected = {
        "conll04-ner": {"train": 3377, "dev": 893, "test": 1079},
        "conll03-ner": {"train": 23499, "dev": 5942, "test": 5648},
    }
    loaded = {}
    for name, counts in expected.items():
        task = get_task(name)
        for split, count in counts.items():
            loaded[name, split] = load_split(task, split, data_dir)
            assert len(loaded[name, split]) == count, (name, split)
        assert set(Counter(e.label for e in loaded[name, "train"])) == set(task.labels)
    conll03 = Counter(e.label for e in loaded["conll03-ner", "train"])
    assert conll03 == {"PER": 6600, "LOC": 7140, "ORG": 6321, "MISC": 3438}
    first = loaded["conll03-ner", "train"][0]  # EU rejects German call ...
    assert first.fields == {"left": "", "mention": "EU", "right": "rejects German call to boycott British lamb ."}
    assert first.label == "ORG" and first.source.endswith("train.jsonl:1 (entity 0)")


def typing_row(entities):
    return json.dumps({"tokens": TOKENS, "entities": entities})


@pytest.mark.parametrize("entities,message", [
    ([{"start": 3, "end": 3, "type": "Peop"}], "entity 0 span [3, 3) is empty or reversed (start must be < end)"),
    ([{"start": 1, "end": 2, "type": "Peop"}, {"start": 4, "end": 9, "type": "Org"}],
     "entity 1 span [4, 9) is out of range for a text of 6 tokens"),
    ([{"start": 5, "end": 6, "type": "Org", "text": "firm"}],
     "entity 0 text 'firm' does not match tokens [5, 6), which read 'company'"),
    ([{"start": "1", "end": 2, "type": "Peop"}], "must be two integers"),
    ([{"start": 1, "end": 2}], "missing field 'type'"),
])
def test_typing_span_errors_name_file_and_line(tmp_path, entities, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(typing_row([{"start": 1, "end": 2, "type": "Peop"}]) + "\n" + typing_row(entities) + "\n")
    with pytest.raises(UserError) as error:
        read_typing(path)
    assert message in str(error.value) and str(error.value).startswith(f"{path}:2:")


def test_unknown_entity_type_is_reported_with_its_line(tmp_path, monkeypatch):
    (tmp_path / "conll04").mkdir()
    (tmp_path / "conll04" / "train.jsonl").write_text(typing_row([{"start": 1, "end": 2, "type": "Person"}]) + "\n")
    with pytest.raises(UserError, match=r"unknown label 'Person' for task conll04-ner \(.*train.jsonl:1 \(entity 0\)\)"):
        load_split(get_task("conll04-ner"), "train", tmp_path)
