"""The lora kind (lora-ce): LoRA in the shared encoder with a cross-entropy head, the control beside setfit-lora."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

import infoprompt
from infoprompt.kinds.config import WEIGHTS_NAME
from infoprompt.training import TrainConfig, encode_examples
from infoprompt.training.data import prompted_batch
from infoprompt.training.loop import warm_start_head

FAST = dict(batch_size=4, seed=1, progress=False, device="cpu", feature_store=False, eval_every_epochs=0)


def lora(backbone):
    return infoprompt.make_classifier(backbone, task="sst2", method="lora-ce", seed=1, max_length=32)


def test_before_training_it_is_the_linear_probe(bert_backbone, toy_examples):
    model = lora(bert_backbone)
    probe = infoprompt.make_classifier(bert_backbone, task="sst2", method="linear-probe", seed=1, max_length=32)
    encoded, plain = encode_examples(model, toy_examples), encode_examples(probe, toy_examples)
    rows = list(range(len(toy_examples)))
    with torch.no_grad():
        _, features, _ = model(prompted_batch(model, encoded, rows))
        expected = probe.features(prompted_batch(probe, plain, rows))
    assert torch.allclose(features, expected, atol=1e-5)
    warm_start_head(model, encoded, 8, seed=1, precision="fp32")
    infoprompt.train(probe, toy_examples, None, TrainConfig(**FAST))
    assert torch.allclose(model.head.weight, probe.head.weight, atol=1e-4)


def test_only_lora_and_head_train_and_the_shared_encoder_stays(bert_backbone, toy_examples, tmp_path):
    shared = {name: p.detach().clone() for name, p in bert_backbone.model.named_parameters()}
    model = lora(bert_backbone)
    before = {k: v.clone() for k, v in model.trainable_state().items()}
    assert before and all("lora_" in name or name.startswith("head.") for name in before)
    infoprompt.train(model, toy_examples, None, TrainConfig(epochs=2, select="none", **FAST))
    after = model.trainable_state()
    assert any(not torch.equal(before[k], after[k]) for k in before if "lora_B" in k)
    assert all(torch.equal(p, shared[name]) for name, p in bert_backbone.model.named_parameters())

    model.save_pretrained(tmp_path / "a")
    assert set(load_file(tmp_path / "a" / WEIGHTS_NAME)) == set(after)  # no encoder weight is saved
    loaded = infoprompt.load_adapter(tmp_path / "a", backbone=bert_backbone)
    texts = [{"sentence": e.fields["sentence"]} for e in toy_examples[:4]]
    assert infoprompt.predict(loaded, texts) == infoprompt.predict(model, texts)


def test_a_second_adapter_on_the_same_encoder_is_independent(bert_backbone, toy_examples):
    first, second = lora(bert_backbone), lora(bert_backbone)
    infoprompt.train(first, toy_examples, None, TrainConfig(epochs=1, select="none", **FAST))
    untouched = {k: v for k, v in second.trainable_state().items() if "lora_B" in k}
    assert untouched and all(float(v.abs().sum()) == 0.0 for v in untouched.values())
