"""The classifier across methods × tiny architectures: shapes, frozen encoder, save → load, clear load errors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from infoprompt.backbones import load_backbone
from infoprompt.errors import UserError
from infoprompt.kinds import load_adapter
from infoprompt.kinds.config import CONFIG_NAME, WEIGHTS_NAME
from infoprompt.kinds.registry import METHODS
from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.training import TrainConfig, encode_examples, predict_encoded, train

PROMPT_METHODS = ("infoprompt", "infoprompt-no-head", "infoprompt-no-rep", "infoprompt-ce", "warp", "idpg")


def tiny_classifier(backbone, method, n_prompts=4, seed=0):
    spec = RunSpec(task="sst2", method=method, n_prompts=n_prompts, seed=seed, backbone=backbone.name,
                   classifier={"max_length": 48})
    return build_classifier(spec, backbone)


@pytest.mark.parametrize("method", PROMPT_METHODS)
def test_train_save_load_identical_logits(tiny_backbone, method, toy_examples, tmp_path):
    model = tiny_classifier(tiny_backbone, method)
    before = {n: p.clone() for n, p in model.encoder.named_parameters()}
    train(model, toy_examples, None, TrainConfig(epochs=1, batch_size=4, progress=False))
    assert all(torch.equal(before[n], p.to(before[n].device)) for n, p in model.encoder.named_parameters())  # frozen
    model.save_pretrained(tmp_path / "adapter")
    loaded = load_adapter(tmp_path / "adapter", backbone=tiny_backbone)
    encoded = encode_examples(model, toy_examples)
    assert torch.equal(predict_encoded(model, encoded), predict_encoded(loaded, encode_examples(loaded, toy_examples)))
    saved = json.loads((tmp_path / "adapter" / CONFIG_NAME).read_text())
    assert saved["method"] == method and saved["backbone_fingerprint"] == tiny_backbone.fingerprint()


def test_only_trained_parameters_are_saved(bert_backbone, tmp_path):
    """The adapter holds what prediction reads; the critics, which only training reads, go to a file of their own
    with keep_training_state and are left out otherwise."""
    from safetensors.torch import load_file

    from infoprompt.kinds.config import TRAINING_STATE_NAME

    model = tiny_classifier(bert_backbone, "infoprompt")
    model.save_pretrained(tmp_path / "slim")
    model.save_pretrained(tmp_path / "kept", keep_training_state=True)
    names = set(load_file(str(tmp_path / "slim" / WEIGHTS_NAME)))
    assert names == {"prompt.down", "prompt.up", "prompt.bias", "head.weight", "head.bias"}
    assert not (tmp_path / "slim" / TRAINING_STATE_NAME).exists()
    critics = load_file(str(tmp_path / "kept" / TRAINING_STATE_NAME))
    assert set(critics) == {"head_mi.critic.weight", "rep_mi.f_mu.weight", "rep_mi.f_mu.bias",
                            "rep_mi.f_sigma.weight", "rep_mi.f_sigma.bias", "rep_mi.critic.weight"}
    counts = model.parameter_counts()
    saved = load_file(str(tmp_path / "kept" / WEIGHTS_NAME))
    assert counts["trainable"] == sum(t.numel() for t in (*saved.values(), *critics.values()))
    assert counts["frozen"] == sum(p.numel() for p in bert_backbone.model.parameters())


def test_method_presets_switch_parts(bert_backbone):
    ip = tiny_classifier(bert_backbone, "infoprompt")
    assert ip.head_mi is not None and ip.rep_mi is not None and ip.config.options.beta == 0.1 and ip.config.options.gamma == 0.05
    assert tiny_classifier(bert_backbone, "infoprompt-no-head").head_mi is None
    assert tiny_classifier(bert_backbone, "infoprompt-no-rep").rep_mi is None
    warp = tiny_classifier(bert_backbone, "warp")
    assert warp.prompt.weight.shape == (4, 32) and not warp.needs_features
    idpg = tiny_classifier(bert_backbone, "idpg")
    assert idpg.template.parts[:2] == ("<cls>", "<p>") and "<mask>" not in idpg.template.parts
    assert set(PROMPT_METHODS) <= set(METHODS)


def test_loading_onto_a_different_backbone_fails(tiny_model_dirs, bert_backbone, tmp_path):
    tiny_classifier(bert_backbone, "warp").save_pretrained(tmp_path)
    other = load_backbone(str(tiny_model_dirs["roberta"]))
    with pytest.raises(UserError, match="adapter was trained on backbone"):
        load_adapter(tmp_path, backbone=other)


def test_corrupt_or_missing_files_fail_clearly(bert_backbone, tmp_path):
    tiny_classifier(bert_backbone, "warp").save_pretrained(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (tmp_path / "a" / WEIGHTS_NAME).write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="not a readable safetensors file"):
        load_adapter(tmp_path / "a", backbone=bert_backbone)
    (tmp_path / "b" / CONFIG_NAME).write_text("{broken")
    with pytest.raises(UserError, match="not valid JSON"):
        load_adapter(tmp_path / "b", backbone=bert_backbone)
    (tmp_path / "b" / CONFIG_NAME).unlink()
    with pytest.raises(UserError, match="infoprompt_adapter.json is missing"):
        load_adapter(tmp_path / "b", backbone=bert_backbone)
    with pytest.raises(UserError, match="does not exist"):
        load_adapter(tmp_path / "nowhere", backbone=bert_backbone)


def test_unknown_names_list_valid_ones(bert_backbone):
    with pytest.raises(UserError, match="unknown method 'wrap'; did you mean 'warp'\\? valid methods: infoprompt"):
        tiny_classifier(bert_backbone, "wrap")
    with pytest.raises(UserError, match="unknown backbone 'no-such-model-here'"):
        load_backbone("no-such-model-here")
    with pytest.raises(UserError, match="exceeds the 64 positions"):
        build_classifier(RunSpec(task="sst2", method="warp", classifier={"max_length": 512}), bert_backbone)
