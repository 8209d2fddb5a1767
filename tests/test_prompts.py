"""Prompt insertion and sources: per-example prompts, gradients reach prompts but never the encoder."""

from __future__ import annotations

import torch

from infoprompt.kinds.prompt.prompts import GeneratedPrompt, StaticPrompt, insert_prompts
from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.training import cache_features, encode_examples, features_for, prompted_batch


def test_insert_prompts_writes_each_example_its_own_prompt():
    embeddings = torch.zeros(3, 6, 4)
    prompts = torch.arange(3 * 2 * 4, dtype=torch.float32).reshape(3, 2, 4)
    positions = torch.tensor([[0, 1], [2, 5], [3, 4]])
    out = insert_prompts(embeddings, prompts, positions)
    for b in range(3):
        for slot in range(2):
            assert torch.equal(out[b, positions[b, slot]], prompts[b, slot])
    assert out.abs().sum() == prompts.abs().sum()  # nothing else changed
    assert embeddings.abs().sum() == 0  # out of place


def test_generated_prompts_differ_within_a_batch():
    torch.manual_seed(0)
    source = GeneratedPrompt(n_prompts=2, hidden_size=8, rank=4, init=torch.zeros(2, 8))
    torch.nn.init.normal_(source.up)
    pooled = torch.randn(3, 8)
    prompts = source(3, pooled)
    assert prompts.shape == (3, 2, 8)
    assert not torch.allclose(prompts[0], prompts[1])
    static = StaticPrompt(2, torch.randn(2, 8))(3)
    assert torch.equal(static[0], static[2])


def test_gradients_reach_generator_not_encoder(bert_backbone, toy_examples):
    model = build_classifier(RunSpec(task="sst2", method="infoprompt", backbone="tiny", classifier={"max_length": 48}), bert_backbone)
    encoded = encode_examples(model, toy_examples)
    cache_features(model, encoded, 8)
    chunk = list(range(4))
    pooled, z_plain = features_for(model, encoded, chunk)
    batch = prompted_batch(model, encoded, chunk)
    with torch.no_grad():
        torch.nn.init.normal_(model.prompt.up, std=0.5)
    _, _, prompts = model(batch, pooled)
    assert not torch.allclose(prompts[0], prompts[1])  # one prompt per example, never one for the batch
    labels = encoded.labels[chunk].to(bert_backbone.device)  # where a training run may have left the encoder
    terms = model.losses(batch, labels, pooled, z_plain, torch.Generator().manual_seed(0))
    terms.total.backward()
    for name in ("prompt.down", "prompt.up", "prompt.bias", "head.weight", "head_mi.critic.weight", "rep_mi.f_mu.weight"):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name
    assert all(p.grad is None and not p.requires_grad for p in model.encoder.parameters())
