"""Prediction runs the frozen no-prompt pass only when the prompt generator reads it."""

from __future__ import annotations

import pytest
import torch

from infoprompt.kinds import load_adapter
from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.training import TrainConfig, encode_examples, predict_encoded, train


def encoder_calls(model, examples):
    calls = []
    handle = model.backbone.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        predict_encoded(model, encode_examples(model, examples), batch_size=64)
    finally:
        handle.remove()
    return len(calls)


@pytest.mark.parametrize(("method", "pooling", "passes"), [
    ("infoprompt", "mean", 2),        # the paper's generator reads Φ(X): two passes per batch
    ("infoprompt", "cls", 2),
    ("infoprompt", "embeddings", 1),  # the generator reads input embeddings: one pass
    ("idpg", "embeddings", 1),
    ("warp", "mean", 1),
])
def test_encoder_passes_per_prediction_batch(bert_backbone, toy_examples, method, pooling, passes):
    model = build_classifier(RunSpec(task="sst2", method=method, classifier={"max_length": 48, "pooling": pooling}),
                             bert_backbone)
    assert encoder_calls(model, toy_examples[:8]) == passes


def test_warp_with_a_representation_loss_still_predicts_in_one_pass(bert_backbone, toy_examples):
    model = build_classifier(RunSpec(task="sst2", method="warp", classifier={"max_length": 48, "beta": 0.1}),
                             bert_backbone)
    assert model.rep_mi is not None and model.needs_features
    assert encoder_calls(model, toy_examples[:8]) == 1


def test_embedding_pooled_generator_trains_with_both_information_losses(bert_backbone, toy_examples):
    model = build_classifier(RunSpec(task="sst2", method="infoprompt", classifier={"max_length": 48,
                                                                                  "pooling": "embeddings"}),
                             bert_backbone)
    before = model.prompt.up.detach().clone()
    result = train(model, toy_examples, toy_examples[:8], TrainConfig(epochs=2, batch_size=4, progress=False))
    assert result.last_losses["rep"] > 0 and result.last_losses["head"] > 0
    assert not model.prompt.up.detach().cpu().equal(before.cpu())
    # The generator's input depends on the example, so prompts differ within a batch.
    encoded = encode_examples(model, toy_examples[:2])
    from infoprompt.training import generator_inputs

    pooled = generator_inputs(model, encoded, [0, 1])
    prompts = model.prompt(2, pooled)
    assert not prompts[0].allclose(prompts[1])


def test_one_pass_adapter_saves_and_loads_with_identical_predictions(bert_backbone, toy_examples, tmp_path):

    model = build_classifier(RunSpec(task="sst2", method="infoprompt", classifier={"max_length": 48,
                                                                                  "pooling": "embeddings"}),
                             bert_backbone)
    train(model, toy_examples, None, TrainConfig(epochs=1, batch_size=4, progress=False))
    model.save_pretrained(tmp_path / "adapter")
    loaded = load_adapter(tmp_path / "adapter", backbone=bert_backbone)
    assert loaded.config.options.pooling == "embeddings"
    expected = predict_encoded(model, encode_examples(model, toy_examples))
    assert torch.equal(expected, predict_encoded(loaded, encode_examples(loaded, toy_examples)))
