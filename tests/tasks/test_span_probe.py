"""The span-pooled linear probe: it reads the states of the given mentions, not the whole sentence."""

from __future__ import annotations

import pytest
import torch

from infoprompt.errors import UserError
from infoprompt.kinds import load_adapter
from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.tasks import Example, get_task, load_split
from infoprompt.training import TrainConfig, encode_examples, prompted_batch, train


def probe(backbone, task, pooling="spans"):
    spec = RunSpec(task=task, method="linear-probe", classifier={"pooling": pooling, "max_length": 60})
    return build_classifier(spec, backbone)


def test_typing_features_are_the_mean_state_of_the_mention(bert_backbone):
    model = probe(bert_backbone, "conll04-ner")
    fields = {"left": "yesterday in the city of", "mention": "new york city", "right": "it rained"}
    encoded = encode_examples(model, [Example(fields=fields, source="x")])
    batch = prompted_batch(model, encoded, [0])
    tokens = bert_backbone.tokenizer.convert_ids_to_tokens(batch.input_ids[0].tolist())
    (span,) = encoded.pairs[0].prompted.span_positions
    assert [tokens[i] for i in span] == bert_backbone.tokenizer.tokenize("new york city")
    states = bert_backbone.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    expected = states[0, list(span)].mean(0)
    assert torch.allclose(model.features(batch)[0], expected, atol=1e-6)
    # The same sentence with another mention gives other features; a mean over the sentence would not tell.
    other = encode_examples(model, [Example(fields={"left": "yesterday in the", "mention": "city",
                                                     "right": "of new york city it rained"}, source="y")])
    assert not torch.allclose(model.features(prompted_batch(model, other, [0]))[0], expected, atol=1e-3)


def test_relation_probe_concatenates_four_mentions_and_learns(bert_backbone, data_dir):
    model = probe(bert_backbone, "conll04-re-gold")
    task = get_task("conll04-re-gold")
    rows = load_split(task, "train", data_dir)[:40]
    encoded = encode_examples(model, rows[:3])
    batch = prompted_batch(model, encoded, [0, 1, 2])
    assert batch.span_positions.shape[:2] == (3, 4)  # the two marked mentions and the two bare ones
    assert model.features(batch).shape == (3, 4 * bert_backbone.hidden_size)
    result = train(model, rows, rows[:8], TrainConfig(progress=False))
    assert model.head.weight.shape == (len(task.labels), 4 * bert_backbone.hidden_size)
    assert set(result.metrics) >= {"re_micro_f1"}


def test_spans_pooling_is_refused_where_it_cannot_apply(bert_backbone):
    with pytest.raises(UserError, match="needs a template with entity fields"):
        probe(bert_backbone, "sst2")
    with pytest.raises(UserError, match=r"method infoprompt \(kind prompt\): unknown pooling 'spans'; valid: mean"):
        build_classifier(RunSpec(task="conll04-ner", method="infoprompt", classifier={"pooling": "spans", "max_length": 60}),
                         bert_backbone)


def test_span_probe_saves_and_loads(bert_backbone, data_dir, tmp_path):
    from infoprompt.training import predict_encoded

    model = probe(bert_backbone, "conll04-ner")
    rows = load_split(get_task("conll04-ner"), "train", data_dir)[:24]
    train(model, rows, None, TrainConfig(progress=False))
    model.save_pretrained(tmp_path / "probe")
    loaded = load_adapter(tmp_path / "probe", backbone=bert_backbone)
    assert torch.equal(predict_encoded(model, encode_examples(model, rows)),
                       predict_encoded(loaded, encode_examples(loaded, rows)))
