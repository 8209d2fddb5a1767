"""Per-field truncation policies of templates ({field:cut-start}, {field:keep}, ...) and their backwards compatibility."""

from __future__ import annotations

import pytest

from infoprompt.errors import UserError
from infoprompt.tasks.glue import PAIR_TEMPLATE, SINGLE_TEMPLATE
from infoprompt.templates import Template, TemplateEncoder, cut, shorten_longest_first


def test_parse_policies_and_defaults():
    template = Template.parse("<cls> <p> {left:cut-start} <mask> {mention:keep} {right} {mid:cut-middle} <sep>")
    assert template.fields == ("left", "mention", "right", "mid")
    assert template.cut_policies == {"left": "cut-start", "mention": "keep", "right": "cut-end", "mid": "cut-middle"}
    # plain templates: every field is cut from its end, as before the extension
    assert Template.parse(PAIR_TEMPLATE).cut_policies == {"sentence1": "cut-end", "sentence2": "cut-end"}
    # policies survive the method adaptations of the template
    assert Template.parse(template.without_prompts().text).cut_policies == template.cut_policies


def test_policy_errors():
    with pytest.raises(UserError, match="unknown truncation policy 'cut-left'"):
        Template.parse("<cls> {left:cut-left} <mask> <sep>")
    with pytest.raises(UserError, match="different truncation policies"):
        Template.parse("<cls> {a:keep} <mask> {a:cut-start} <sep>")


def test_cut_sides():
    ids = list(range(10))
    assert cut(ids, 4, "cut-end") == [0, 1, 2, 3]
    assert cut(ids, 4, "cut-start") == [6, 7, 8, 9]
    assert cut(ids, 5, "cut-middle") == [0, 1, 2, 8, 9]
    assert cut(ids, 0, "cut-middle") == [] and cut(ids, 0, "cut-start") == []
    assert cut(ids, 4, "keep") == [0, 1, 2, 3]  # last resort only
    assert cut(ids, 12, "cut-start") == ids


def test_keep_fields_are_cut_last():
    policies = {"left": "cut-start", "mention": "keep", "right": "cut-end"}
    assert shorten_longest_first({"left": 10, "mention": 5, "right": 3}, 12, policies) == {
        "left": 4, "mention": 5, "right": 3}
    # the longest of the cuttable fields loses first, even if a kept field is longer
    assert shorten_longest_first({"left": 6, "mention": 9, "right": 6}, 17, policies) == {
        "left": 4, "mention": 9, "right": 4}
    # nothing else left: the kept field is cut too, so the input still fits
    assert shorten_longest_first({"left": 3, "mention": 9, "right": 2}, 6, policies) == {
        "left": 0, "mention": 6, "right": 0}
    # without policies the old behaviour is unchanged
    assert shorten_longest_first({"a": 10, "b": 3}, 8) == {"a": 5, "b": 3}


def test_plain_template_encoding_is_unchanged(bert_backbone):
    """A template without policies cuts every field from its end, longest first (the original behaviour)."""
    tok = bert_backbone.tokenizer
    enc = TemplateEncoder(tok, Template.parse(SINGLE_TEMPLATE), 4, 16)
    sentence = "the dog ran and the cat sat on the man with a dog and a cat for the woman"
    pair = enc.encode_many([{"sentence": sentence}])[0]
    text_ids = tok(sentence, add_special_tokens=False)["input_ids"]
    kept = [pair.prompted.input_ids[i] for i in pair.prompted.context_positions]
    assert pair.truncated and kept == text_ids[: 16 - enc.fixed_length]


def test_cut_start_keeps_the_words_next_to_the_mask(bert_backbone):
    tok = bert_backbone.tokenizer
    enc = TemplateEncoder(tok, Template.parse("<cls> <p> {left:cut-start} <mask> {mention:keep} <p> <sep>"), 2, 12)
    pair = enc.encode_many([{"left": "dull " * 20 + "he said", "mention": "the man"}])[0]
    tokens = tok.convert_ids_to_tokens(pair.prompted.input_ids)
    mask = pair.prompted.readout_position
    assert len(tokens) == 12
    assert tokens[mask - 2 : mask] == ["he", "said"] and tokens[mask + 1 : mask + 3] == ["the", "man"]
