"""Template parsing, positions, prompt distribution and slot-preserving truncation."""

from __future__ import annotations

import pytest

from infoprompt.errors import UserError
from infoprompt.tasks.glue import PAIR_TEMPLATE, SINGLE_TEMPLATE
from infoprompt.templates import Template, TemplateEncoder, collate, shorten_longest_first


def encoder(backbone, template=SINGLE_TEMPLATE, n_prompts=4, max_length=32, truncate=True):
    return TemplateEncoder(backbone.tokenizer, Template.parse(template), n_prompts, max_length, truncate)


def test_prompts_spread_over_places_earlier_first():
    template = Template.parse(SINGLE_TEMPLATE)
    assert template.prompts_per_place(4) == [2, 1, 1]
    assert template.prompts_per_place(1) == [1, 0, 0]
    assert Template.parse(PAIR_TEMPLATE).prompts_per_place(4) == [1, 1, 1, 1]
    assert template.without_prompts().parts == ("<cls>", "{sentence}", "<mask>", "<sep>")


def test_single_template_positions(bert_backbone):
    tok = bert_backbone.tokenizer
    pair = encoder(bert_backbone).encode_many([{"sentence": "a great movie"}])[0]
    text = tok("a great movie", add_special_tokens=False)["input_ids"]
    ids = pair.prompted.input_ids
    # <cls> p p text p <mask> p <sep>
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert pair.prompted.prompt_positions == [1, 2, 3 + len(text), 5 + len(text)]
    assert pair.prompted.readout_position == 4 + len(text)
    assert ids[pair.prompted.readout_position] == tok.mask_token_id
    assert [ids[i] for i in pair.prompted.context_positions] == text
    plain = pair.plain
    assert plain.input_ids == [tok.cls_token_id, *text, tok.mask_token_id, tok.sep_token_id]
    assert plain.prompt_positions == [] and plain.readout_position == 1 + len(text)


def test_pair_template_keeps_both_fields_in_order(bert_backbone):
    tok = bert_backbone.tokenizer
    pair = encoder(bert_backbone, PAIR_TEMPLATE).encode_many([{"sentence1": "the dog ran", "sentence2": "a cat sat"}])[0]
    ids = pair.prompted.input_ids
    first = tok("the dog ran", add_special_tokens=False)["input_ids"]
    second = tok("a cat sat", add_special_tokens=False)["input_ids"]
    assert [ids[i] for i in pair.prompted.context_positions] == first + second
    mask = pair.prompted.readout_position
    assert ids[mask] == tok.mask_token_id
    assert max(pair.prompted.context_positions[: len(first)]) < mask < min(pair.prompted.context_positions[len(first):])


@pytest.mark.parametrize("template,fields", [
    (SINGLE_TEMPLATE, {"sentence": " ".join(["boring"] * 80)}),
    (PAIR_TEMPLATE, {"sentence1": " ".join(["dog"] * 50), "sentence2": " ".join(["cat"] * 70)}),
])
def test_truncation_shortens_text_only(bert_backbone, template, fields):
    enc = encoder(bert_backbone, template, n_prompts=4, max_length=24)
    pair = enc.encode_many([fields])[0]
    ids = pair.prompted.input_ids
    assert pair.truncated
    assert len(ids) == 24
    assert len(pair.prompted.prompt_positions) == 4
    assert ids[pair.prompted.readout_position] == bert_backbone.tokenizer.mask_token_id
    assert ids[0] == bert_backbone.tokenizer.cls_token_id and ids[-1] == bert_backbone.tokenizer.sep_token_id
    assert len(pair.plain.input_ids) == 24 - 4  # same text, no prompt slots
    if template == PAIR_TEMPLATE:
        counts = [ids.count(bert_backbone.tokenizer.convert_tokens_to_ids(w)) for w in ("dog", "cat")]
        assert abs(counts[0] - counts[1]) <= 1 and sum(counts) == 24 - 4 - 3  # longest-first balances the fields


def test_shorten_longest_first():
    assert shorten_longest_first({"a": 10, "b": 3}, 8) == {"a": 5, "b": 3}
    assert shorten_longest_first({"a": 6, "b": 6}, 6) == {"a": 3, "b": 3}


def test_strict_mode_rejects_long_input(bert_backbone):
    enc = encoder(bert_backbone, max_length=16, truncate=False)
    with pytest.raises(UserError, match="more than max_length=16"):
        enc.encode_many([{"sentence": " ".join(["dull"] * 40)}], ["file.tsv:7"])
    with pytest.raises(UserError, match="file.tsv:7"):
        enc.encode_many([{"sentence": " ".join(["dull"] * 40)}], ["file.tsv:7"])


def test_template_errors(bert_backbone):
    with pytest.raises(UserError, match="unknown part <x>"):
        Template.parse("<cls> <x> {sentence}")
    with pytest.raises(UserError, match="more than one <mask>"):
        Template.parse("<cls> <mask> <mask>")
    with pytest.raises(UserError, match="leaving no room"):
        encoder(bert_backbone, n_prompts=40, max_length=32)
    with pytest.raises(UserError, match="missing text field 'sentence'"):
        encoder(bert_backbone).encode_many([{"text": "a"}])


def test_collate_pads_right(bert_backbone):
    enc = encoder(bert_backbone)
    pairs = enc.encode_many([{"sentence": "good"}, {"sentence": "a very very long boring dull story"}])
    batch = collate([p.prompted for p in pairs], bert_backbone.tokenizer.pad_token_id)
    assert batch.input_ids.shape[0] == 2 and batch.attention_mask[0].sum() < batch.attention_mask[1].sum()
    assert batch.prompt_positions.shape == (2, 4)
    assert batch.context_mask.sum(1).tolist() == [len(p.prompted.context_positions) for p in pairs]
