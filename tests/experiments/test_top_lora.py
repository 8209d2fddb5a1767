"""top-lora: LoRA only in the top k blocks, trained from the lower blocks' states computed once; the split encoder
computes what the whole encoder computes, the losses are what they claim, and the adapter reloads (here and in peft)."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")

from infoprompt.backbones import load_backbone  # noqa: E402
from infoprompt.errors import UserError  # noqa: E402
from infoprompt.kinds import load_adapter, make_classifier, train  # noqa: E402
from infoprompt.kinds.top_lora import TopLoraClassifier, TopLoraSettings  # noqa: E402
from infoprompt.kinds.top_lora.blocks import SplitEncoder  # noqa: E402
from infoprompt.kinds.top_lora.fit import epoch_batches  # noqa: E402
from infoprompt.kinds.top_lora.losses import BatchAllTriplet, BatchPairs, SupervisedContrastive  # noqa: E402
from infoprompt.pipeline import read_split  # noqa: E402
from infoprompt.tasks import get_task  # noqa: E402
from infoprompt.templates import collate  # noqa: E402
from infoprompt.training import TrainConfig, encode_examples, predict_encoded  # noqa: E402


def examples(toy_task, split="train"):
    return read_split(get_task(toy_task[0]), split, str(toy_task[1]), "files")


def model_with(backbone, toy_task, **settings_overrides):
    model = make_classifier(backbone, toy_task[0], "top-lora", seed=3, max_length=32)
    if settings_overrides:
        import dataclasses

        model = TopLoraClassifier(backbone, model.config, dataclasses.replace(model.settings, **settings_overrides))
    return model


@pytest.mark.parametrize("top_layers", [1, 2])
def test_split_encoder_computes_what_the_whole_encoder_computes(tiny_backbone, toy_task, top_layers):
    model = model_with(tiny_backbone, toy_task, top_layers=top_layers)
    torch.manual_seed(0)
    for name, parameter in model.lora_model.named_parameters():
        if "lora_B" in name:
            parameter.data.normal_(0, 0.5)  # LoRA that changes the output, so a skipped block would show
    pairs = encode_examples(model, examples(toy_task)[:9]).pairs
    split = SplitEncoder(model.lora_encoder, top_layers, tiny_backbone.tokenizer.pad_token_id)
    states = split.lower_states([p.prompted.input_ids for p in pairs], batch_size=4)
    split.upper.eval()
    model.eval()
    with torch.no_grad():
        ours = torch.nn.functional.normalize(split.pooled(states, batch_size=2), dim=-1)
        theirs = model.embed(collate([p.prompted for p in pairs], tiny_backbone.tokenizer.pad_token_id))
    assert torch.allclose(ours, theirs, atol=1e-5)
    lora_blocks = {n.split(".layer.")[1].split(".")[0] for n, _ in model.lora_model.named_parameters() if "lora_" in n}
    depth = tiny_backbone.model.config.num_hidden_layers
    assert lora_blocks == {str(i) for i in range(depth - top_layers, depth)}


def test_supcon_matches_setfit_where_every_anchor_has_a_positive():
    from setfit.losses import SupConLoss

    torch.manual_seed(1)
    embeddings, labels = torch.randn(8, 5), torch.tensor([0, 0, 1, 1, 2, 2, 1, 0])
    theirs = SupConLoss(model=lambda features: {"sentence_embedding": features["x"]}, temperature=0.1,
                        base_temperature=0.1)(
        [{"x": embeddings}], labels)
    assert torch.allclose(SupervisedContrastive(0.1)(embeddings, labels), theirs, atol=1e-5)
    lonely = SupervisedContrastive(0.1)(embeddings, torch.tensor([0, 0, 1, 1, 2, 3, 1, 0]))
    assert torch.isfinite(lonely)


def test_batch_losses_prefer_embeddings_that_follow_the_labels():
    labels = torch.tensor([0, 0, 1, 1])
    aligned = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    crossed = aligned[[0, 2, 1, 3]]
    for loss in (SupervisedContrastive(0.1), BatchPairs(), BatchAllTriplet(0.25)):
        assert loss(aligned, labels) < loss(crossed, labels), type(loss).__name__


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=60), st.integers(2, 40), st.integers(0, 10))
def test_epoch_batches_cover_the_draw_and_pair_every_class(labels, batch_size, seed):
    batches = epoch_batches(labels, batch_size, torch.Generator().manual_seed(seed))
    assert sorted(i for batch in batches for i in batch) == list(range(len(labels)))
    for batch in batches:
        for label in {labels[i] for i in batch}:
            if labels.count(label) >= 2:
                assert sum(labels[i] == label for i in batch) >= 2


def test_top_lora_trains_saves_and_reloads_here_and_in_peft(toy_task, tiny_bert_dir, tmp_path):
    backbone = load_backbone(str(tiny_bert_dir))
    snapshot = {name: t.clone() for name, t in backbone.model.state_dict().items()}
    model = model_with(backbone, toy_task, top_layers=1, epochs=3, batch_size=8)
    dev = examples(toy_task, "dev")
    result = train(model, examples(toy_task), dev, TrainConfig(seed=1, progress=False))
    assert result.steps == 3 * 5 and result.metrics
    for name, tensor in backbone.model.state_dict().items():
        assert torch.equal(tensor, snapshot[name]), name
    out = tmp_path / "adapter"
    model.save_pretrained(out)
    assert json.loads((out / "setfit_lora_config.json").read_text())["settings"]["top_layers"] == 1
    loaded = load_adapter(out, backbone=backbone)
    assert isinstance(loaded, TopLoraClassifier) and loaded.settings == model.settings
    ours = predict_encoded(loaded, encode_examples(loaded, dev))
    assert torch.allclose(ours, predict_encoded(model, encode_examples(model, dev)))

    from peft import PeftModel
    from transformers import AutoModel

    native = PeftModel.from_pretrained(AutoModel.from_pretrained(str(tiny_bert_dir)), str(out / "peft")).eval()
    batch = collate([p.prompted for p in encode_examples(loaded, dev).pairs], backbone.tokenizer.pad_token_id)
    with torch.no_grad():
        states = native(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        mask = batch.attention_mask.unsqueeze(-1).float()
        pooled = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
        assert torch.allclose(pooled, loaded.embed(batch), atol=1e-5)


def test_holdout_selection_is_recorded_and_deterministic(toy_task, tiny_bert_dir):
    backbone = load_backbone(str(tiny_bert_dir))
    runs = []
    for _ in range(2):
        model = model_with(backbone, toy_task, top_layers=1, epochs=4, batch_size=8, select="holdout",
                           check_every=2, patience=0)
        result = train(model, examples(toy_task), examples(toy_task, "dev"), TrainConfig(seed=2, progress=False))
        runs.append((result.selection, result.metrics, model.head.weight.detach().clone()))
    (selection, metrics, head), (selection2, metrics2, head2) = runs
    assert selection["method"] == "holdout" and [c["epoch"] for c in selection["candidates"]] == [0, 2, 4]
    assert selection == selection2 and metrics == metrics2 and torch.equal(head, head2)


def test_bad_top_lora_settings_are_one_line_errors(toy_task, bert_backbone):
    with pytest.raises(UserError, match="top_layers must be a positive integer"):
        TopLoraSettings(top_layers=0)
    with pytest.raises(UserError, match="loss must be one of"):
        TopLoraSettings(loss="hinge")
    with pytest.raises(UserError, match="batch_size must be at least 2"):
        TopLoraSettings(batch_size=1)
    with pytest.raises(UserError, match="from 1 to the encoder's 2 blocks"):
        model_with(bert_backbone, toy_task, top_layers=3)
    model = model_with(bert_backbone, toy_task, top_layers=1)
    one_class = [e for e in examples(toy_task) if e.label == "positive"]
    with pytest.raises(UserError, match="at least two classes"):
        train(model, one_class, None, TrainConfig(progress=False))


def test_plateau_stops_after_patience_epochs_without_real_improvement():
    from infoprompt.kinds.top_lora.fit import Plateau

    plateau = Plateau(tolerance=0.01, patience=2)
    assert [plateau.reached(v) for v in (4.0, 3.5, 3.2, 3.19, 3.2, 3.0, 2.99, 2.985)] == [
        False, False, False, False, True, False, False, True]


def test_the_head_is_balanced_by_default_where_the_metric_weighs_classes_alike(toy_task, bert_backbone):
    from infoprompt.kinds.top_lora.model import BALANCED_METRICS

    model = model_with(bert_backbone, toy_task, epochs=1, batch_size=8)
    assert model.settings.head_balanced is None
    train(model, examples(toy_task), None, TrainConfig(progress=False))
    assert model.settings.head_balanced is (model.task.primary_metric in BALANCED_METRICS) is False
    assert "mcc" in BALANCED_METRICS
