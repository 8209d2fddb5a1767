"""``infoprompt export --onnx``: the exported graph gives PyTorch's probabilities under onnxruntime, ships its
tokenizer and label names, and kinds that are not one encoder pass plus a head are refused in one line."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import WORDS

from infoprompt.cli import main
from infoprompt.export import (
    ENCODER_NAME,
    HEAD_NAME,
    IDENTITY_NAME,
    LABELS_NAME,
    ONNX_NAME,
    OnnxRunner,
    export_refusal,
    splits,
)
from infoprompt.kinds import KINDS, load_adapter
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.registry import ONNX_EXPORT
from infoprompt.tasks import Example
from infoprompt.training import encode_examples, predict_encoded
from infoprompt.training.data import prompted_batch

pytest.importorskip("onnxruntime", reason="the onnx extra is not installed: pip install 'infoprompt[onnx]'")

FIXTURES = Path(__file__).parent / "fixtures" / "adapters"
N_INPUTS = 64


@pytest.fixture
def tiny_bert_here(tiny_model_dirs, tmp_path, monkeypatch):
    """A working directory holding ``tiny-bert``, the backbone the committed adapters name."""
    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 20))) for _ in range(n)]


# The committed adapters of the kinds with the ONNX-export capability, and of the others.
EXPORTABLE = sorted(name for name, kind in KINDS.items() if ONNX_EXPORT in kind.capabilities)
NOT_EXPORTABLE = sorted(set(KINDS) - set(EXPORTABLE))


@pytest.mark.slow
@pytest.mark.parametrize("kind", EXPORTABLE)
def test_onnxruntime_gives_pytorchs_probabilities(kind, tiny_bert_here, capsys):
    if kind == "setfit":
        pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")
    out = tiny_bert_here / "exported"
    assert main(["export", "--onnx", "--adapter", str(FIXTURES / kind), "--out", str(out), "--quiet"]) == 0
    assert "onnxruntime matches PyTorch" in capsys.readouterr().out

    model = load_adapter(FIXTURES / kind)
    examples = [Example(fields={"sentence": text}, source=f"input {i + 1}") for i, text in enumerate(sentences(N_INPUTS))]
    encoded = encode_examples(model, examples)
    batch = prompted_batch(model, encoded, list(range(N_INPUTS)))  # one padded batch: the mask must hold
    runner = OnnxRunner(out)
    assert runner.split == splits(model.config) and (out / (HEAD_NAME if runner.split else ONNX_NAME)).is_file()
    exported = runner.probabilities(batch.input_ids.numpy(), batch.attention_mask.numpy())
    expected = predict_encoded(model, encoded).numpy()
    assert exported.shape == (N_INPUTS, len(model.config.labels))
    assert np.abs(exported - expected).max() <= 1e-4
    assert (exported.argmax(1) == expected.argmax(1)).all()
    assert len(set(expected.argmax(1).tolist())) == 2  # both classes occur, so a swapped head would show

    described = json.loads((out / LABELS_NAME).read_text())
    assert described["labels"] == list(model.config.labels)
    assert described["inputs"] == (["features"] if runner.split else ["input_ids", "attention_mask"])
    texts = sentences(8, seed=1)
    assert runner.tokenizer(texts)["input_ids"] == model.backbone.tokenizer(texts)["input_ids"]


def test_a_probe_exports_as_a_small_head_on_one_shared_encoder_graph(tiny_bert_here, capsys):
    """#55: a linear-probe's export is its head (<= 1 MB) beside one encoder graph that every probe on that
    backbone and pooling shares (written once, then reused); chained, they give PyTorch's probabilities (1e-5)."""
    first = load_adapter(FIXTURES / "linear-probe")
    with torch.no_grad():  # a second probe: the same encoder pass, another head
        first.head.weight.mul_(-3)
    first.save_pretrained(tiny_bert_here / "second")
    outputs = []
    for adapter, out in ((FIXTURES / "linear-probe", "exported/first"), (tiny_bert_here / "second", "exported/second")):
        assert main(["export", "--onnx", "--adapter", str(adapter), "--out", out, "--quiet"]) == 0
        outputs.append(capsys.readouterr().out)
    assert "written" in outputs[0] and "found there, reused" in outputs[1]
    (encoder,) = list(Path("exported/encoders").iterdir())  # one shared encoder graph for both
    assert (encoder / ENCODER_NAME).is_file() and (encoder / IDENTITY_NAME).is_file()
    assert (encoder / ENCODER_NAME).stat().st_size > 50 * (Path("exported/first") / HEAD_NAME).stat().st_size
    examples = [Example(fields={"sentence": text}, source=f"input {i + 1}") for i, text in enumerate(sentences(N_INPUTS))]
    predictions = []
    for adapter, out in ((FIXTURES / "linear-probe", "exported/first"), (tiny_bert_here / "second", "exported/second")):
        assert sorted(p.name for p in Path(out).iterdir()) == [HEAD_NAME, LABELS_NAME]
        assert sum(p.stat().st_size for p in Path(out).iterdir()) <= 1_000_000
        model = load_adapter(adapter)
        encoded = encode_examples(model, examples)
        batch = prompted_batch(model, encoded, list(range(N_INPUTS)))
        runner = OnnxRunner(out)
        exported = runner.probabilities(batch.input_ids.numpy(), batch.attention_mask.numpy())
        expected = predict_encoded(model, encoded).numpy()
        assert np.abs(exported - expected).max() <= 1e-5
        predictions.append(exported.argmax(1))
        # From texts, through the saved tokenizer (the tiny one adds no [CLS] ... [SEP] itself; a real one does).
        from_texts = runner.predict_proba([f"[CLS] {e.fields['sentence']} [SEP]" for e in examples])
        assert from_texts.shape == expected.shape and np.abs(from_texts - expected).max() <= 1e-5
        assert runner.predict(["[CLS] a film [SEP]", "[CLS] a plot [SEP]"]) == [
            model.config.labels[i] for i in runner.predict_proba(["[CLS] a film [SEP]", "[CLS] a plot [SEP]"]).argmax(1)]
    assert (predictions[0] != predictions[1]).any()  # two heads, not one


def test_an_encoders_folder_of_another_encoder_is_refused(tiny_bert_here, capsys):
    config = load_adapter(FIXTURES / "linear-probe").config
    from infoprompt.export import encoder_folder

    taken = tiny_bert_here / "shared" / encoder_folder(config)
    taken.mkdir(parents=True)
    (taken / IDENTITY_NAME).write_text('{"backbone": "another"}')
    assert main(["export", "--onnx", "--adapter", str(FIXTURES / "linear-probe"), "--out", "exported",
                 "--encoders", "shared", "--quiet"]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "not the shared encoder graph" in error
    assert not Path("exported").exists() and [p.name for p in taken.iterdir()] == [IDENTITY_NAME]


@pytest.mark.parametrize("kind", NOT_EXPORTABLE)
def test_kinds_that_are_not_an_encoder_pass_and_a_head_are_refused(kind, tmp_path, capsys):
    out = tmp_path / "exported"
    assert main(["export", "--onnx", "--adapter", str(FIXTURES / kind), "--out", str(out), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "cannot be exported to ONNX" in error
    assert not out.exists()


def test_a_span_probe_is_refused_and_a_mean_probe_is_not():
    spans = ClassifierConfig.create(task="conll04-re", method="linear-probe", backbone="x", pooling="spans")
    assert "pooling 'spans'" in export_refusal(spans)
    assert export_refusal(ClassifierConfig.create(task="sst2", method="linear-probe", backbone="x")) is None


def test_an_existing_output_directory_is_left_alone(tmp_path, capsys):
    out = tmp_path / "exported"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export", "--onnx", "--adapter", str(FIXTURES / "linear-probe"), "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and [p.name for p in out.iterdir()] == ["keep.txt"]


def test_the_format_must_be_named(tmp_path, capsys):
    assert main(["export", "--adapter", str(FIXTURES / "linear-probe"), "--out", str(tmp_path / "x")]) == 2
    assert "--onnx" in capsys.readouterr().err and not (tmp_path / "x").exists()
