"""top-lora: LoRA only in the top k blocks, trained from the lower blocks' states computed once; the split encoder
computes what the whole encoder computes, the losses are what they claim, and the adapter reloads (here and in peft)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")

from infoprompt.backbones import load_backbone  # noqa: E402
from infoprompt.errors import UserError  # noqa: E402
from infoprompt.kinds import load_adapter, make_classifier, train  # noqa: E402
from infoprompt.kinds.setfit import HEAD_C_GRID  # noqa: E402
from infoprompt.kinds.top_lora import TopLoraClassifier, TopLoraSettings  # noqa: E402
from infoprompt.kinds.top_lora.blocks import SplitEncoder, packed_rows  # noqa: E402
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
    assert split.packs, "BERT's blocks see positions only through its embeddings: its texts are packed"
    lora_blocks = {n.split(".layer.")[1].split(".")[0] for n, _ in model.lora_model.named_parameters() if "lora_" in n}
    depth = tiny_backbone.model.config.num_hidden_layers
    assert lora_blocks == {str(i) for i in range(depth - top_layers, depth)}


@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.integers(8, 64))
def test_packed_rows_hold_every_text_once_within_the_budget(lengths, budget):
    rows = packed_rows(lengths, budget)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    for row in rows:
        assert len(row) == 1 or sum(lengths[i] for i in row) <= budget


class ReadsTheWholeRow(torch.nn.Module):
    """Top blocks that ignore the attention mask: every token sees every other of its row, as an encoder whose
    blocks read absolute positions or mask in their own way would mix packed texts."""

    def forward(self, inputs_embeds, attention_mask):
        return type("Output", (), {"last_hidden_state": inputs_embeds + inputs_embeds.sum(dim=1, keepdim=True)})


def test_packing_is_used_only_where_the_encoder_computes_the_same_packed(tiny_backbone, toy_task):
    model = model_with(tiny_backbone, toy_task, top_layers=2)
    pairs = encode_examples(model, examples(toy_task)[:9]).pairs
    split = SplitEncoder(model.lora_encoder, 2, tiny_backbone.tokenizer.pad_token_id)
    states = split.lower_states([p.prompted.input_ids for p in pairs], batch_size=4)
    split.upper.eval()
    with torch.no_grad():
        packed = split.pooled(states, batch_size=2)
        assert split.packs is True
        assert torch.allclose(packed, split.pooled_padded(states, 2), atol=1e-5)
        assert torch.allclose(packed, split.pooled_packed(states, 10_000), atol=1e-5)  # one row for all
        split.upper, split.packs = ReadsTheWholeRow(), None
        mixed = split.pooled(states, batch_size=len(states))
    assert split.packs is False
    assert torch.equal(mixed, split.pooled_padded(states, len(states)))


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


def test_the_saved_options_say_what_trained_the_adapter(toy_task, tiny_bert_dir, tmp_path):
    backbone = load_backbone(str(tiny_bert_dir))
    model = model_with(backbone, toy_task, top_layers=1, epochs=2, batch_size=8)
    train(model, examples(toy_task), None, TrainConfig(seed=1, progress=False, lr=3e-3, max_steps=4))
    model.save_pretrained(tmp_path / "adapter")
    options = json.loads((tmp_path / "adapter" / "infoprompt_adapter.json").read_text())["options"]
    settings = json.loads((tmp_path / "adapter" / "setfit_lora_config.json").read_text())["settings"]
    assert options["body_learning_rate"] == settings["body_learning_rate"] == 3e-3
    assert options["max_steps"] == settings["max_steps"] == 4
    assert options["head_balanced"] is settings["head_balanced"] is not None
    assert load_adapter(tmp_path / "adapter", backbone=backbone).options == model.options


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
    with pytest.raises(UserError, match="unknown loss 'hinge'"):
        TopLoraSettings(loss="hinge")
    with pytest.raises(UserError, match="batch_size must be an integer >= 2"):
        TopLoraSettings(batch_size=1)
    with pytest.raises(UserError, match="from 1 to the encoder's 2 blocks"):
        model_with(bert_backbone, toy_task, top_layers=3)
    model = model_with(bert_backbone, toy_task, top_layers=1)
    one_class = [e for e in examples(toy_task) if e.label == "positive"]
    with pytest.raises(UserError, match="at least two classes"):
        train(model, one_class, None, TrainConfig(progress=False))


def test_the_options_give_the_settings_and_every_setting_is_an_option(toy_task, bert_backbone):
    model = make_classifier(bert_backbone, toy_task[0], "top-lora", seed=3, max_length=32, top_layers=1, loss="pairs",
                            epochs=3, batch_size=4, lora_rank=4, lora_targets=["query"], max_steps=7,
                            select_head_c=True, head_balanced=True)
    settings = model.settings
    assert (settings.top_layers, settings.loss, settings.epochs, settings.batch_size, settings.rank) == (1, "pairs", 3, 4, 4)
    assert settings.targets == ("query",) and settings.max_steps == 7 and settings.head_balanced
    assert settings.head_c_choices == HEAD_C_GRID
    assert TopLoraSettings.from_options(settings.as_options(), 1) == dataclasses.replace(settings, head_c_choices=())
    defaults = make_classifier(bert_backbone, toy_task[0], "top-lora", max_length=32)
    assert defaults.settings == TopLoraSettings(top_layers=2)  # every default as before, k = min(8, its 2 blocks)
    assert defaults.config.options.top_layers == 2  # the options record the k it has
    with pytest.raises(UserError, match=r"method top-lora \(kind top-lora\) has no option pair_iterations"):
        make_classifier(bert_backbone, toy_task[0], "top-lora", pair_iterations=4)


def test_a_batch_without_a_pair_scores_zero_not_nan():
    """Texts that each are alone of their class in a batch (a draw of one text per class) give no NaN step."""
    embeddings = torch.randn(3, 4, requires_grad=True)
    for loss, rows in ((SupervisedContrastive(0.1), 3), (BatchPairs(), 1)):
        value = loss(embeddings[:rows], torch.arange(rows))
        assert value.item() == 0.0
        value.backward()


def train_cli(toy_task, tiny_bert_dir, out, *extra):
    from infoprompt.cli import main

    return main(["train", "--task", toy_task[0], "--data-dir", str(toy_task[1]), "--backbone", str(tiny_bert_dir),
                 "--method", "top-lora", "--shots", "8", "--max-length", "32", "--quiet", "--out", str(out), *extra])


def test_the_command_line_sets_the_kinds_options_and_its_epochs_and_batch_size(toy_task, tiny_bert_dir, tmp_path):
    out = tmp_path / "run"
    assert train_cli(toy_task, tiny_bert_dir, out, "--top-layers", "1", "--loss", "pairs", "--epochs", "2",
                     "--batch-size", "4", "--lora-rank", "4", "--head-balanced", "--select", "holdout",
                     "--check-every", "1", "--patience", "0") == 0
    options = json.loads((out / "metrics.json").read_text())["classifier"]["options"]
    assert (options["top_layers"], options["loss"], options["epochs"], options["batch_size"]) == (1, "pairs", 2, 4)
    assert options["select"] == "holdout" and options["head_balanced"] and options["lora_rank"] == 4
    settings = json.loads((out / "setfit_lora_config.json").read_text())["settings"]
    assert (settings["epochs"], settings["batch_size"], settings["rank"], settings["select"]) == (2, 4, 4, "holdout")
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    candidates = next(r for r in log if r["type"] == "selection")["candidates"]
    assert [c["epoch"] for c in candidates] == [0, 1, 2]  # --epochs 2 bounds the selection, checked every epoch


@pytest.mark.parametrize(("flags", "message"), [
    (("--top-layers", "3"), "top_layers must be an integer from 1 to the encoder's 2 blocks, got 3"),
    (("--top-layers", "0"), "argument --top-layers: must be a positive integer, got 0"),
    (("--loss", "hinge"), "argument --loss: invalid choice: 'hinge'"),
    (("--batch-size", "1"), "batch_size must be an integer >= 2, got 1"),
    (("--pair-iterations", "4"), "method top-lora (kind top-lora) has no option --pair-iterations"),
    (("--weight-decay", "0.1"), "method top-lora (kind top-lora) has no option --weight-decay"),
])
def test_bad_top_lora_flags_are_one_line_errors_that_write_nothing(toy_task, tiny_bert_dir, tmp_path, capsys, flags,
                                                                      message):
    try:
        code = train_cli(toy_task, tiny_bert_dir, tmp_path / "run", *flags)
    except SystemExit as stop:  # argparse's usage errors
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_draw_of_one_class_is_a_one_line_error_that_writes_nothing(tmp_path, tiny_bert_dir, capsys):
    from infoprompt.cli import main

    rows = tmp_path / "train.tsv"
    rows.write_text("text\tlabel\na good film\tpos\nnice movie\tpos\ngreat one\tpos\n", encoding="utf-8")
    code = main(["train", "--train-file", str(rows), "--method", "top-lora", "--backbone", str(tiny_bert_dir),
                 "--max-length", "16", "--quiet", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "a classifier needs at least 2 classes" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_a_draw_of_one_text_per_class_trains(tmp_path, tiny_bert_dir):
    from infoprompt.cli import main

    rows = tmp_path / "train.tsv"
    rows.write_text("text\tlabel\na good film\tpos\nan awful film\tneg\n", encoding="utf-8")
    assert main(["train", "--train-file", str(rows), "--method", "top-lora", "--backbone", str(tiny_bert_dir),
                 "--max-length", "16", "--quiet", "--out", str(tmp_path / "run")]) == 0


def test_plateau_stops_after_patience_epochs_without_real_improvement():
    from infoprompt.kinds.top_lora.fit import Plateau

    plateau = Plateau(tolerance=0.01, patience=2)
    assert [plateau.reached(v) for v in (4.0, 3.5, 3.2, 3.19, 3.2, 3.0, 2.99, 2.985)] == [
        False, False, False, False, True, False, False, True]


def test_the_head_is_balanced_by_default_where_the_metric_weighs_classes_alike(toy_task, bert_backbone):
    from infoprompt.kinds.top_lora.options import BALANCED_METRICS

    model = model_with(bert_backbone, toy_task, epochs=1, batch_size=8)
    assert model.settings.head_balanced is None
    train(model, examples(toy_task), None, TrainConfig(progress=False))
    assert model.settings.head_balanced is (model.task.primary_metric in BALANCED_METRICS) is False
    assert "mcc" in BALANCED_METRICS


PAIRS = [("the cat sat on the mat", "a cat was sitting on the mat"), ("stocks fell sharply", "the sun is hot"),
         ("he bought a car", "a car was bought by him"), ("rain is wet", "markets rallied today")] * 4
SAME = ["same", "other", "same", "other"] * 4


def test_pairs_read_apart_train_on_what_they_predict_from_and_reload(tiny_bert_dir, tmp_path):
    """With pair_reading=separate, each text of a pair goes through the encoder alone: the features the fit's
    split encoder gives the head equal the model's own pass over the joined input, the head reads
    [u, v, |u - v|, u * v, cos], and the adapter reloads to the same probabilities (#53)."""
    from infoprompt.classifier import Classifier
    from infoprompt.kinds.top_lora.fit import TopBlocksTrainer
    from infoprompt.tasks import Example

    clf = Classifier(method="top-lora", backbone=str(tiny_bert_dir), pair_reading="separate", top_layers=1, epochs=2,
                     batch_size=8, max_length=32, progress=False).fit(PAIRS, SAME)
    model = clf.model_
    hidden = model.backbone.hidden_size
    assert model.reads_pairs_apart and model.head.in_features == 4 * hidden + 1
    encoded = encode_examples(model, [Example(fields={"text": a, "text_pair": b}, source=str(i))
                                      for i, (a, b) in enumerate(PAIRS)])
    ids = [p.prompted.input_ids for p in encoded.pairs]
    first, second = model.split_pair(list(ids[0]))
    tokenizer = model.backbone.tokenizer
    assert first == tokenizer(PAIRS[0][0])["input_ids"] and second == tokenizer(PAIRS[0][1])["input_ids"]
    trainer = TopBlocksTrainer(model, model.settings, ids, torch.device("cpu"))
    model.eval()
    with torch.no_grad():
        ours = torch.from_numpy(trainer.embeddings(range(len(ids)))).float()
        theirs = model.embed(collate([p.prompted for p in encoded.pairs], tokenizer.pad_token_id))
    assert torch.allclose(ours, theirs, atol=1e-5)
    clf.save(tmp_path / "pairs")
    assert Classifier.load(tmp_path / "pairs").predict_proba(PAIRS).tolist() == clf.predict_proba(PAIRS).tolist()
    card = (tmp_path / "pairs" / "README.md").read_text(encoding="utf-8")
    assert "goes through the encoder alone" in card and "PeftModel.from_pretrained" not in card  # no one-pass snippet
    from infoprompt.export import export_refusal

    assert "pair read apart" in export_refusal(model.config)
    from infoprompt.kinds.mixed_lora import lora_parts

    assert lora_parts(model) is None  # the server and predict give it a lane of its own, not a mixed batch


@pytest.mark.parametrize(("ids", "wrap", "halves"), [
    ([101, 7, 8, 102, 9, 102], ([101], [102]), ([101, 7, 8, 102], [101, 9, 102])),  # BERT: [CLS] A [SEP] B [SEP]
    ([0, 7, 2, 9, 10, 2], ([0], [2]), ([0, 7, 2], [0, 9, 10, 2])),  # MPNet/RoBERTa: <s> A </s> B </s>
    ([7, 8, 3, 9], ([], []), ([7, 8], [9])),  # a tokenizer that adds nothing
    ([101, 7, 102], ([101], [102]), ([101, 7, 102], [101, 102])),  # no second text: an empty one
])
def test_a_joined_pair_splits_into_what_each_text_alone_gives(ids, wrap, halves):
    from infoprompt.kinds.top_lora.model import split_pair

    assert split_pair(ids, wrap, wrap[1][0] if wrap[1] else 3) == halves


def test_the_siamese_preset_fits_the_head_alone_on_pairs_and_trains_single_texts(tiny_bert_dir):
    """top-lora-siamese: on pairs no step is taken and LoRA keeps its zero start (the frozen encoder's pair
    features); on single texts it trains as top-lora does, to the same weights (#53)."""
    from infoprompt.classifier import Classifier

    fast = {"backbone": str(tiny_bert_dir), "top_layers": 1, "epochs": 2, "batch_size": 8, "max_length": 32}
    pairs = Classifier(method="top-lora-siamese", **fast).fit(PAIRS, SAME)
    assert pairs.fit_result_.steps == 0
    lora_b = [p for name, p in pairs.model_.lora_model.named_parameters() if "lora_B" in name]
    assert lora_b and all(not p.any() for p in lora_b) and pairs.model_.head.in_features % 4 == 1
    texts, labels = [a for a, _ in PAIRS], SAME
    siamese = Classifier(method="top-lora-siamese", **fast).fit(texts, labels)
    plain = Classifier(method="top-lora", **fast).fit(texts, labels)
    assert siamese.predict_proba(texts).tolist() == plain.predict_proba(texts).tolist()


def test_the_default_trains_and_predicts_a_pair_file_through_the_command_line(tiny_bert_dir, tmp_path, capsys):
    """`infoprompt train` without --method on a file of pairs trains the recommended top-lora-siamese, reading the
    pairs apart; `predict` reads them back; a bad --pair-reading is one line that writes nothing (#53)."""
    import csv

    from infoprompt.cli import main
    from infoprompt.recommended import RECOMMENDED_METHOD

    data = tmp_path / "pairs.csv"
    with data.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("text", "text_pair", "label"), *((a, b, y) for (a, b), y in zip(PAIRS, SAME, strict=True))])
    common = ["--train-file", str(data), "--text-pair-column", "text_pair", "--backbone", str(tiny_bert_dir),
              "--max-length", "32", "--quiet"]
    assert main(["train", *common, "--top-layers", "1", "--out", str(tmp_path / "run")]) == 0
    options = json.loads((tmp_path / "run" / "metrics.json").read_text())["classifier"]
    assert options["method"] == RECOMMENDED_METHOD == "top-lora-siamese"
    assert (options["options"]["pair_reading"], options["options"]["pair_training"]) == ("separate", False)
    capsys.readouterr()
    assert main(["predict", "--adapter", str(tmp_path / "run"), "--input", str(data), "--output",
                 str(tmp_path / "out.jsonl"), "--quiet"]) == 0
    lines = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(PAIRS) and all(json.loads(line)["label"] in ("same", "other") for line in lines)
    capsys.readouterr()
    assert main(["train", *common, "--pair-reading", "sideways", "--out", str(tmp_path / "bad")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--pair-reading" in error[0] and "sideways" in error[0]
    assert not (tmp_path / "bad").exists()
