"""Saved adapters keep loading: a committed tiny adapter of every kind predicts what it predicted when written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import infoprompt
from infoprompt.cli import main
from infoprompt.io_utils import adapter_config_file
from infoprompt.kinds import KINDS, kind_of
from infoprompt.kinds.config import CONFIG_NAME, FORMAT_VERSION
from infoprompt.tasks import Example
from infoprompt.training import encode_examples, predict_encoded

# Written by tests/fixtures/make_adapters.py on the tiny BERT of tiny_models.py, with the probabilities they gave.
FIXTURES = Path(__file__).parent / "fixtures" / "adapters"
SAVED = sorted(path.name for path in FIXTURES.iterdir() if path.is_dir())
TOLERANCE = 1e-5


@pytest.fixture
def tiny_bert_here(tiny_model_dirs, tmp_path, monkeypatch):
    """A working directory where ``tiny-bert``, the relative path the adapters name as their backbone, is a
    freshly built tiny BERT: loading checks the fingerprint saved in the adapter against it."""
    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def expected_of(kind: str) -> dict:
    if kind == "setfit":
        pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")
    return json.loads((FIXTURES / kind / "expected.json").read_text(encoding="utf-8"))


def test_every_registered_kind_has_a_committed_adapter():
    assert sorted(KINDS) == SAVED


@pytest.mark.parametrize("kind", SAVED)
def test_the_format_version_is_one_this_code_reads(kind):
    config = json.loads(adapter_config_file(FIXTURES / kind).read_text(encoding="utf-8"))
    assert isinstance(config["format_version"], int) and 1 <= config["format_version"] <= FORMAT_VERSION
    weights = FIXTURES / kind / "adapter_model.safetensors"
    if weights.is_file():  # peft keeps its weights in its own directory
        with safe_open(str(weights), "pt") as handle:
            assert handle.metadata()["infoprompt_format"] == str(config["format_version"])


@pytest.mark.parametrize("kind", SAVED)
def test_a_committed_adapter_loads_and_predicts_as_when_saved(kind, tiny_bert_here):
    expected = expected_of(kind)
    model = infoprompt.load_adapter(FIXTURES / kind)
    assert kind_of(model.config.method).name == kind and model.config.method == expected["method"]
    assert list(model.config.labels) == expected["labels"]
    examples = [Example(fields=fields, source=f"input {i + 1}") for i, fields in enumerate(expected["inputs"])]
    probabilities = predict_encoded(model, encode_examples(model, examples))
    assert torch.allclose(probabilities, torch.tensor(expected["probabilities"]), atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("kind", SAVED)
def test_the_cli_predicts_what_a_committed_adapter_predicted(kind, tiny_bert_here, capsys):
    expected = expected_of(kind)
    inputs = tiny_bert_here / "inputs.jsonl"
    inputs.write_text("".join(json.dumps(fields) + "\n" for fields in expected["inputs"]), encoding="utf-8")
    assert main(["predict", "--adapter", str(FIXTURES / kind), "--input", str(inputs), "--quiet"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["line"] for r in records] == list(range(1, len(expected["inputs"]) + 1))
    for record, row in zip(records, expected["probabilities"], strict=True):
        got = [record["probabilities"][label] for label in expected["labels"]]
        assert got == pytest.approx(row, abs=TOLERANCE)  # the CLI rounds to 6 decimals
        assert record["label"] == expected["labels"][max(range(len(row)), key=row.__getitem__)]


@pytest.mark.parametrize("kind", SAVED)
def test_a_format_1_adapter_saved_again_in_format_2_predicts_bit_identically(kind, tiny_bert_here):
    """The format-1 reader gives the model a format-2 adapter of it records: saved again (format 2) and loaded
    back, it has the same config, the same trained tensors and predicts exactly the same probabilities."""
    expected = expected_of(kind)
    old = infoprompt.load_adapter(FIXTURES / kind)
    assert expected["format_version"] == 1 and old.config.kind.name == kind
    old.save_pretrained(tiny_bert_here / "again")
    record = json.loads((tiny_bert_here / "again" / CONFIG_NAME).read_text(encoding="utf-8"))
    assert record["format_version"] == FORMAT_VERSION == 2 and record["kind"] == kind
    assert set(record["options"]) == set(KINDS[kind].options.names())
    new = infoprompt.load_adapter(tiny_bert_here / "again")
    assert new.config == old.config
    kept = set(old.trainable_state()) - old.training_only_names()  # what prediction reads (not the critics)
    assert kept and kept == set(new.trainable_state()) - new.training_only_names()
    assert all(torch.equal(old.trainable_state()[name], new.trainable_state()[name]) for name in kept)
    examples = [Example(fields=fields, source=f"input {i + 1}") for i, fields in enumerate(expected["inputs"])]
    assert torch.equal(predict_encoded(new, encode_examples(new, examples)),
                       predict_encoded(old, encode_examples(old, examples)))


def test_the_version_moves_with_the_saved_format():
    """The package version is one (pyproject and the module agree), and its changelog entry names the adapter
    format it writes: a new format comes with a new version and a changelog entry."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    version = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert version == infoprompt.__version__
    assert f"\n## {version} — adapter format {FORMAT_VERSION}\n" in (root / "CHANGELOG.md").read_text(encoding="utf-8")
    assert (root / "LICENSE").read_text(encoding="utf-8").split()[:3] == ["Apache", "License", "Version"]
