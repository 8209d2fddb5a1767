"""The lora kind (lora-ce): LoRA in the shared encoder with a cross-entropy head, the control beside setfit-lora."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import infoprompt
from infoprompt.errors import UserError
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


def test_rank_alpha_and_targets_are_options_kept_in_the_adapter(bert_backbone, toy_examples, tmp_path):
    model = infoprompt.make_classifier(bert_backbone, task="sst2", method="lora-ce", seed=1, max_length=32,
                                       lora_rank=2, lora_alpha=4, lora_targets=["query"])
    state = model.trainable_state()
    a_shapes = {tuple(t.shape) for name, t in state.items() if "lora_A" in name}
    assert a_shapes == {(2, bert_backbone.hidden_size)}
    assert all("query" in name for name in state if "lora_" in name)
    layer = next(m for name, m in model.lora_model.named_modules() if name.endswith("query"))
    assert layer.scaling["default"] == 2.0  # alpha / r
    infoprompt.train(model, toy_examples, None, TrainConfig(epochs=1, select="none", **FAST))
    model.save_pretrained(tmp_path / "a")
    loaded = infoprompt.load_adapter(tmp_path / "a", backbone=bert_backbone)
    assert (loaded.config.lora_rank, loaded.config.lora_targets) == (2, ("query",))
    assert all(torch.equal(t, loaded.trainable_state()[k]) for k, t in model.trainable_state().items())


def test_lora_options_are_refused_where_they_mean_nothing(bert_backbone):
    with pytest.raises(UserError, match="lora_rank is an option of the setfit-lora and lora and top-lora kinds, not of method"):
        infoprompt.make_classifier(bert_backbone, task="sst2", method="infoprompt-plus", lora_rank=4)
    with pytest.raises(UserError, match="pair_iterations is an option of the setfit and setfit-lora kinds"):
        infoprompt.make_classifier(bert_backbone, task="sst2", method="lora-ce", pair_iterations=4)
    with pytest.raises(UserError, match="lora_rank must be a positive integer"):
        lora_with(bert_backbone, lora_rank=0)
    with pytest.raises(UserError, match="lora_targets must be a non-empty list of names"):
        lora_with(bert_backbone, lora_targets=[])
    with pytest.raises(UserError, match="no_such_module"):
        lora_with(bert_backbone, lora_targets=["no_such_module"])
    assert "lora_rank" not in lora(bert_backbone).config.to_json()  # unset: the adapter is written as before


def lora_with(backbone, **options):
    return infoprompt.make_classifier(backbone, task="sst2", method="lora-ce", seed=1, max_length=32, **options)


def test_the_cli_takes_the_lora_options_and_refuses_bad_ones_in_one_line(tiny_model_dirs, tmp_path, capsys):
    from test_feature_store import ROWS, write_split

    from infoprompt.cli import main
    from infoprompt.io_utils import adapter_config_file

    assert main(["train", "--help"]) == 0
    usage = capsys.readouterr().out
    assert all(flag in usage for flag in ("--lora-rank", "--lora-alpha", "--lora-targets", "--pair-iterations"))
    write_split(tmp_path / "data", ROWS)
    train = ["train", "--task", "sst2", "--shots", "8", "--epochs", "1", "--method", "lora-ce", "--quiet",
             "--backbone", str(tiny_model_dirs["bert"]), "--max-length", "48", "--data-dir", str(tmp_path / "data")]
    assert main([*train, "--lora-rank", "2", "--lora-targets", "query, value", "--out", str(tmp_path / "a")]) == 0
    saved = json.loads(adapter_config_file(tmp_path / "a").read_text())
    assert (saved["lora_rank"], saved["lora_targets"]) == (2, ["query", "value"])
    for bad in (["--lora-targets", " , "], ["--lora-rank", "0"], ["--pair-iterations", "3"]):
        capsys.readouterr()
        assert main([*train, *bad, "--out", str(tmp_path / "x")]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and bad[0].strip("-").replace("-", "_") in error[0].replace("-", "_")
        assert not (tmp_path / "x").exists()
