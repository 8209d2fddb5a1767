"""``infoprompt export --onnx``: the exported graph gives PyTorch's probabilities under onnxruntime, ships its
tokenizer and label names, and kinds that are not one encoder pass plus a head are refused in one line."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from tiny_models import WORDS

from infoprompt.cli import main
from infoprompt.export import LABELS_NAME, ONNX_NAME, export_refusal, onnx_probabilities
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
    exported = onnx_probabilities(out / ONNX_NAME, batch.input_ids, batch.attention_mask)
    expected = predict_encoded(model, encoded).numpy()
    assert exported.shape == (N_INPUTS, len(model.config.labels))
    assert np.abs(exported - expected).max() <= 1e-4
    assert (exported.argmax(1) == expected.argmax(1)).all()
    assert len(set(expected.argmax(1).tolist())) == 2  # both classes occur, so a swapped head would show

    described = json.loads((out / LABELS_NAME).read_text())
    assert described["labels"] == list(model.config.labels) and described["inputs"] == ["input_ids", "attention_mask"]
    from transformers import AutoTokenizer

    texts = sentences(8, seed=1)
    assert AutoTokenizer.from_pretrained(out)(texts)["input_ids"] == model.backbone.tokenizer(texts)["input_ids"]


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
