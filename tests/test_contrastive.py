"""The contrastive kind (infoprompt-contrastive): its loss, its start at the probe, its head refits and its files."""

from __future__ import annotations

import json
import math

import pytest
import torch

import infoprompt
from infoprompt.errors import UserError
from infoprompt.io_utils import adapter_config_file
from infoprompt.kinds.contrastive.model import label_info_nce
from infoprompt.training import TrainConfig, encode_examples
from infoprompt.training.data import generator_inputs, prompted_batch
from infoprompt.training.loop import warm_start_head

FAST = dict(batch_size=4, seed=1, progress=False, device="cpu", feature_store=False, eval_every_epochs=0)


def contrastive(backbone, method: str = "infoprompt-contrastive", **options):
    return infoprompt.make_classifier(backbone, task="sst2", method=method, n_prompts=2, seed=1, max_length=32,
                                      **options)


def test_label_info_nce_by_hand():
    features = torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    labels = torch.tensor([0, 0, 1])
    s = torch.nn.functional.normalize(features, dim=-1) @ torch.nn.functional.normalize(features, dim=-1).T / 0.5
    # Anchors 0 and 1 have one positive each (each other); anchor 2 has none and is left out.
    expected = [-(s[0, 1] - torch.logsumexp(s[0, [1, 2]], 0)), -(s[1, 0] - torch.logsumexp(s[1, [0, 2]], 0))]
    assert float(label_info_nce(features, labels, 0.5)) == pytest.approx(float(sum(expected) / 2), rel=1e-6)
    lonely = features.clone().requires_grad_(True)
    loss = label_info_nce(lonely, torch.tensor([0, 1, 2]), 0.5)  # no positive anywhere (a last batch of one)
    assert float(loss.detach()) == 0.0
    loss.backward()  # a batch without anchors still backpropagates (zero gradient)
    assert torch.equal(lonely.grad, torch.zeros_like(lonely))


def test_label_info_nce_prefers_features_grouped_by_label():
    labels = torch.tensor([0, 0, 1, 1])
    grouped = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    mixed = grouped[[0, 2, 1, 3]]
    assert float(label_info_nce(grouped, labels, 0.1)) < float(label_info_nce(mixed, labels, 0.1))


def test_before_training_its_features_and_head_are_the_linear_probes(bert_backbone, toy_examples):
    model = contrastive(bert_backbone)
    probe = infoprompt.make_classifier(bert_backbone, task="sst2", method="linear-probe", seed=1, max_length=32)
    assert model.config.template == "<cls> <p> {sentence} <sep>" and model.config.options.readout == "mean"
    encoded, plain = encode_examples(model, toy_examples), encode_examples(probe, toy_examples)
    rows = list(range(len(toy_examples)))
    with torch.no_grad():
        _, z, _ = model(prompted_batch(model, encoded, rows), generator_inputs(model, encoded, rows))
        expected = probe.features(prompted_batch(probe, plain, rows))
    assert torch.allclose(z, expected, atol=1e-5)
    # Zero epochs (selection's floor) is the head fitted on exactly those features: the probe's head.
    warm_start_head(model, encoded, 8, seed=1, precision="fp32")
    infoprompt.train(probe, toy_examples, None, TrainConfig(**FAST))
    assert torch.allclose(model.head.weight, probe.head.weight.to(model.head.weight.dtype), atol=1e-4)


def test_training_moves_gate_and_prompts_refits_the_head_and_reloads(bert_backbone, toy_examples, tmp_path):
    model = contrastive(bert_backbone)
    before = {k: v.clone() for k, v in model.trainable_state().items()}
    log = tmp_path / "log.jsonl"
    result = infoprompt.train(model, toy_examples, toy_examples[:6], TrainConfig(epochs=2, select="none", **FAST),
                              log_path=log)
    assert all(math.isfinite(v) for v in result.last_losses.values()) and result.last_losses["pred"] > 0
    after = model.trainable_state()
    assert float(after["gate"]) != 0.0 and not torch.equal(before["prompt.up"], after["prompt.up"])
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["epoch"] for r in records if r["type"] == "head_refit"] == [1, 2]
    assert set(result.metrics) >= {"accuracy"}

    model.save_pretrained(tmp_path / "a")
    saved = json.loads(adapter_config_file(tmp_path / "a").read_text())
    assert saved["options"]["temperature"] == 0.1 and saved["method"] == "infoprompt-contrastive"
    loaded = infoprompt.load_adapter(tmp_path / "a", backbone=bert_backbone)
    assert type(loaded).__name__ == "ContrastivePromptClassifier" and loaded.config == model.config
    texts = [{"sentence": e.fields["sentence"]} for e in toy_examples[:4]]
    assert infoprompt.predict(loaded, texts) == infoprompt.predict(model, texts)


def test_holdout_selection_scores_zero_epochs_first(bert_backbone, toy_examples, tmp_path):
    model = contrastive(bert_backbone, method="infoprompt-contrastive-no-info")
    assert (model.config.options.beta, model.config.options.gamma) == (0.0, 0.0)
    result = infoprompt.train(model, toy_examples, None, TrainConfig(epochs=2, patience=0, **FAST))
    assert result.selection is not None and [c["epoch"] for c in result.selection["candidates"]] == [0, 1, 2]


def test_temperature_is_its_own_option(bert_backbone):
    assert contrastive(bert_backbone, temperature=0.5).config.options.temperature == 0.5
    with pytest.raises(UserError, match="temperature must be a finite number > 0"):
        contrastive(bert_backbone, temperature=0.0)
    with pytest.raises(UserError, match=r"method infoprompt-plus \(kind prompt\) has no option temperature"):
        infoprompt.make_classifier(bert_backbone, task="sst2", method="infoprompt-plus", temperature=0.5)
    other = infoprompt.make_classifier(bert_backbone, task="sst2", method="infoprompt-plus", max_length=32)
    assert "temperature" not in other.config.to_json()  # other kinds' adapters are written as before


def test_the_cli_trains_both_new_kinds_and_refuses_a_bad_temperature(tiny_model_dirs, tmp_path, capsys):
    from test_feature_store import ROWS, write_split

    from infoprompt.cli import main

    assert main(["train", "--help"]) == 0
    assert "--temperature" in capsys.readouterr().out
    write_split(tmp_path / "data", ROWS)
    common = ["--data-dir", str(tmp_path / "data"), "--quiet"]
    train = ["train", "--task", "sst2", "--shots", "8", "--epochs", "1", "--backbone", str(tiny_model_dirs["bert"]),
             "--max-length", "48", *common]
    assert main([*train, "--method", "infoprompt-contrastive", "--temperature", "0.5", "--n-prompts", "1",
                 "--out", str(tmp_path / "contrastive")]) == 0
    assert json.loads(adapter_config_file(tmp_path / "contrastive").read_text())["options"]["temperature"] == 0.5
    assert main([*train, "--method", "lora-ce", "--out", str(tmp_path / "lora")]) == 0
    for run in ("contrastive", "lora"):
        capsys.readouterr()
        assert main(["eval", "--adapter", str(tmp_path / run), *common]) == 0
        trained = json.loads((tmp_path / run / "metrics.json").read_text())
        assert json.loads(capsys.readouterr().out)["metrics"] == trained["metrics"]
    assert main([*train, "--method", "infoprompt-contrastive", "--temperature", "0", "--out", str(tmp_path / "x")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "temperature" in error[0] and not (tmp_path / "x").exists()
