"""Baselines: peft prompt tuning, linear probe, adapters and fine-tuning train, save and load to identical logits."""

from __future__ import annotations

import json

import numpy as np
import peft
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from infoprompt.backbones import load_backbone
from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.kinds import kind_of, load_adapter
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.peft_prompt import PeftPromptClassifier, sequence_classifier
from infoprompt.kinds.probe import head_from_sklearn
from infoprompt.kinds.prompt.model import PromptClassifier
from infoprompt.pipeline import RunSpec, build_classifier, read_split, run_training
from infoprompt.tasks import get_task
from infoprompt.training import TrainConfig, encode_examples, predict_encoded, prompted_batch


def spec_for(method, toy_task, backbone_dir, seed=1, **training):
    task, data_dir = toy_task
    config = TrainConfig(**{"epochs": 2, "batch_size": 4, "seed": seed, "progress": False, "eval_every_epochs": 0,
                            **training})
    return RunSpec(task=task, method=method, shots=8, seed=seed, backbone=str(backbone_dir), data_dir=str(data_dir),
                   classifier={"max_length": 32}, training=config)


def dev_examples(toy_task):
    task, data_dir = toy_task
    return read_split(get_task(task), "dev", str(data_dir), "files")


def frozen_snapshot(backbone):
    return {name: p.detach().clone() for name, p in backbone.model.state_dict().items()}


def assert_unchanged(backbone, snapshot):
    for name, tensor in backbone.model.state_dict().items():
        assert torch.equal(tensor.cpu(), snapshot[name].cpu()), name  # training may have moved it to a GPU


@pytest.mark.parametrize("method", ["peft-prompt-tuning", "linear-probe", "adapter", "finetune"])
def test_train_save_load_gives_identical_logits(method, toy_task, tiny_bert_dir, tmp_path):
    backbone = load_backbone(str(tiny_bert_dir))
    snapshot = frozen_snapshot(backbone)
    spec = spec_for(method, toy_task, tiny_bert_dir)
    task = get_task(spec.task)
    sample = read_split(task, "train", spec.data_dir, "files")[:8]
    examples = dev_examples(toy_task)
    model = build_classifier(spec, backbone)
    result = kind_of(method).trainer()(model, sample, examples, spec.training)
    assert result.steps > 0 and set(result.metrics) == {"accuracy", "f1"}
    assert_unchanged(backbone, snapshot)  # the shared encoder is never trained in place
    assert not backbone.model.training

    model.save_pretrained(tmp_path / "adapter")
    # On the device the trained model is on: finetune trains its own copy of the encoder, so the shared backbone
    # (and what loads on it) can be on the CPU while the trained copy is on a GPU.
    loaded = load_adapter(tmp_path / "adapter", backbone=backbone).to(next(model.parameters()).device)
    assert type(loaded) is type(model) and loaded.config.method == method
    trained = predict_encoded(model, encode_examples(model, examples))
    assert torch.equal(predict_encoded(loaded, encode_examples(loaded, examples)), trained)
    # What training changed is in the adapter: an untrained model predicts differently.
    fresh = build_classifier(spec, backbone)
    assert not torch.equal(predict_encoded(fresh, encode_examples(fresh, examples)), trained)


def test_every_kind_keeps_the_same_record_schema(toy_task, tiny_bert_dir):
    backbone = load_backbone(str(tiny_bert_dir))
    keys = [set(run_training(spec_for(m, toy_task, tiny_bert_dir, max_steps=1), backbone=backbone))
            for m in ("warp", "linear-probe", "peft-prompt-tuning")]
    assert keys[0] == keys[1] == keys[2]


@pytest.mark.parametrize("arch", ["bert", "roberta", "mpnet"])
def test_peft_is_the_real_library_and_its_adapter_loads_in_peft(arch, toy_task, tiny_model_dirs, tmp_path):
    backbone = load_backbone(str(tiny_model_dirs[arch]))
    model = build_classifier(spec_for("peft-prompt-tuning", toy_task, tiny_model_dirs[arch]), backbone)
    assert isinstance(model, PeftPromptClassifier) and isinstance(model.peft, peft.PeftModel)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("prompt_encoder" in n or "modules_to_save" in n for n in trainable)
    assert model.peft.peft_config["default"].num_virtual_tokens == 4
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.1)  # stand-in for training
    model.save_pretrained(tmp_path / "a")
    assert (tmp_path / "a" / "peft" / "adapter_model.safetensors").is_file()
    # peft itself reads the saved adapter onto a fresh sequence classifier.
    base = sequence_classifier(backbone, model.config.labels, seed=99)
    direct = peft.PeftModel.from_pretrained(base, str(tmp_path / "a" / "peft")).eval()
    encoded = encode_examples(model, dev_examples(toy_task))
    batch = prompted_batch(model, encoded, [0, 1, 2])
    model.eval()
    with torch.no_grad():
        ours = model(batch)[0]
        theirs = direct(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    assert torch.equal(ours, theirs)


def test_linear_probe_matches_sklearn_probabilities():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(60, 5))
    for classes in (2, 3):
        labels = rng.integers(0, classes, size=60)
        classifier = LogisticRegression(max_iter=500).fit(features, labels)
        weight, bias = head_from_sklearn(classifier, classes + 1)  # one class never seen in training
        logits = torch.tensor(features @ weight.T + bias)
        probabilities = logits.softmax(-1).numpy()
        assert np.allclose(probabilities[:, :classes], classifier.predict_proba(features), atol=1e-6)
        assert np.all(probabilities[:, classes] < 1e-6)


def test_adapters_start_as_identity_and_touch_only_their_own_pass(toy_task, tiny_bert_dir):
    backbone = load_backbone(str(tiny_bert_dir))
    adapter = build_classifier(spec_for("adapter", toy_task, tiny_bert_dir), backbone)
    plain = build_classifier(spec_for("finetune", toy_task, tiny_bert_dir), backbone)  # same template, no adapters
    trainable = {n.split(".")[0] for n, p in adapter.named_parameters() if p.requires_grad}
    assert trainable == {"head", "adapters"} and len(adapter.adapters.blocks) == 2
    encoded = encode_examples(adapter, dev_examples(toy_task))
    batch = prompted_batch(adapter, encoded, [0, 1, 2, 3])
    with torch.no_grad():
        assert torch.allclose(adapter.encode_states(batch, None), plain.encode_states(batch, None), atol=1e-6)
        for block in adapter.adapters.blocks:
            block.up.weight.normal_()
        adapted = adapter.encode_states(batch, None)
        assert not torch.allclose(adapted, plain.encode_states(batch, None), atol=1e-3)
        # Hooks live only for the adapter's own pass: the shared encoder runs unadapted afterwards.
        assert torch.allclose(adapter.encode_states(batch, None, adapted=False), plain.encode_states(batch, None), atol=1e-6)
        assert not any(layer._forward_hooks for layer in backbone.model.encoder.layer)


@pytest.mark.parametrize(("method", "training"), [("linear-probe", {}), ("peft-prompt-tuning", {}),
                                                 ("setfit", {"max_steps": 4})])
def test_eval_and_predict_cli_work_for_baseline_adapters(method, training, toy_task, tiny_bert_dir, tmp_path, capsys):
    _, data_dir = toy_task
    out = tmp_path / method
    spec = spec_for(method, toy_task, tiny_bert_dir, **training)
    record = run_training(spec, out, backbone=load_backbone(str(tiny_bert_dir)))
    assert json.loads((out / "metrics.json").read_text())["metrics"] == record["metrics"]
    capsys.readouterr()
    assert main(["eval", "--adapter", str(out), "--data-dir", str(data_dir), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == record["metrics"]
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"sentence": "great movie"}\n{"sentence": "awful plot"}\n')
    assert main(["predict", "--adapter", str(out), "--input", str(inputs)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and set(rows[0]["probabilities"]) == {"negative", "positive"}


def test_baselines_refuse_the_wrong_constructor_and_templates(toy_task, tiny_bert_dir, bert_backbone):
    task, _ = toy_task
    config = ClassifierConfig.create(task=task, method="linear-probe", backbone=str(tiny_bert_dir), max_length=32)
    with pytest.raises(UserError, match="not a prompt-kind method"):
        PromptClassifier(bert_backbone, config)
    with pytest.raises(UserError, match="must have no <p>"):
        PeftPromptClassifier(bert_backbone, ClassifierConfig.create(
            task=task, method="peft-prompt-tuning", backbone="x", max_length=32, template="<cls> <p> {sentence} <sep>"))
    with pytest.raises(UserError, match="exceeds"):
        PeftPromptClassifier(bert_backbone, ClassifierConfig.create(task=task, method="peft-prompt-tuning", backbone="x",
                                                             max_length=62))


def test_plain_template_of_every_registered_task():
    from infoprompt.kinds.common import plain_template
    from infoprompt.tasks import TASKS
    from infoprompt.templates import Template

    assert plain_template(get_task("sst2")) == "<cls> {sentence} <sep>"
    assert plain_template(get_task("mrpc")) == "<cls> {sentence1} <sep> {sentence2} <sep>"
    for task in TASKS.values():
        template = Template.parse(plain_template(task))
        assert "<p>" not in template.parts and "<mask>" not in template.parts
        assert set(template.fields) == set(Template.parse(task.template).fields)
