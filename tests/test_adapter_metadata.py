"""The adapter metadata file: written as ``infoprompt_adapter.json``, read under PEFT's reserved legacy name too,
and never mistaken for a PEFT config that happens to carry that name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from infoprompt.errors import UserError
from infoprompt.io_utils import LEGACY_ADAPTER_CONFIG_NAME, adapter_config_file, is_run_directory
from infoprompt.kinds import load_adapter
from infoprompt.kinds.config import CONFIG_NAME, read_adapter_config
from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.training import encode_examples, predict_encoded

FIXTURES = Path(__file__).parent / "fixtures" / "adapters"


def saved_probe(backbone, directory: Path):
    spec = RunSpec(task="sst2", method="linear-probe", seed=0, backbone=backbone.name, classifier={"max_length": 32})
    model = build_classifier(spec, backbone)
    with torch.no_grad():
        model.head.weight.normal_()
    model.save_pretrained(directory)
    return model


def test_a_new_adapter_is_written_under_the_new_name(bert_backbone, tmp_path):
    saved_probe(bert_backbone, tmp_path / "probe")
    names = {path.name for path in (tmp_path / "probe").iterdir()}
    assert CONFIG_NAME == "infoprompt_adapter.json" and CONFIG_NAME in names
    assert LEGACY_ADAPTER_CONFIG_NAME not in names  # the name transformers and PEFT read as a PEFT config


def test_an_adapter_under_the_legacy_name_loads_and_predicts_the_same(bert_backbone, tmp_path, toy_examples):
    model = saved_probe(bert_backbone, tmp_path / "probe")
    (tmp_path / "probe" / CONFIG_NAME).rename(tmp_path / "probe" / LEGACY_ADAPTER_CONFIG_NAME)
    loaded = load_adapter(tmp_path / "probe", backbone=bert_backbone)
    assert loaded.config.method == "linear-probe"
    expected = predict_encoded(model, encode_examples(model, toy_examples))
    assert torch.equal(predict_encoded(loaded, encode_examples(loaded, toy_examples)), expected)


# Written before the metadata was renamed: tests/test_adapter_fixtures.py loads them, so the legacy reader stays
# covered; adapters of kinds added since (setfit-lora) are written under the new name.
LEGACY_FIXTURES = ("prompt", "peft", "linear-probe", "setfit", "released")


@pytest.mark.parametrize("kind", LEGACY_FIXTURES)
def test_the_committed_adapters_are_legacy_named(kind):
    assert adapter_config_file(FIXTURES / kind) == FIXTURES / kind / LEGACY_ADAPTER_CONFIG_NAME


def test_a_fixture_written_after_the_rename_has_the_new_name():
    assert adapter_config_file(FIXTURES / "setfit-lora") == FIXTURES / "setfit-lora" / CONFIG_NAME


def test_a_peft_config_under_the_legacy_name_is_not_taken_for_ours(tmp_path):
    shutil.copytree(FIXTURES / "peft" / "peft", tmp_path / "peft-only")
    (tmp_path / "peft-only" / "metrics.json").write_text("{}")
    assert adapter_config_file(tmp_path / "peft-only") is None
    assert not is_run_directory(tmp_path / "peft-only")  # --overwrite leaves it alone
    with pytest.raises(UserError, match=r"infoprompt_adapter.json is missing \(.*adapter_config.json there is another"):
        read_adapter_config(tmp_path / "peft-only")


def test_the_new_name_wins_over_a_legacy_file(tmp_path):
    shutil.copytree(FIXTURES / "linear-probe", tmp_path / "probe")
    legacy = json.loads((tmp_path / "probe" / LEGACY_ADAPTER_CONFIG_NAME).read_text())
    (tmp_path / "probe" / CONFIG_NAME).write_text(json.dumps({**legacy, "max_length": 16}))
    assert read_adapter_config(tmp_path / "probe").max_length == 16


def test_a_damaged_legacy_config_is_reported_by_its_name(tmp_path):
    shutil.copytree(FIXTURES / "linear-probe", tmp_path / "probe")
    (tmp_path / "probe" / LEGACY_ADAPTER_CONFIG_NAME).write_text("{broken")
    with pytest.raises(UserError, match="adapter_config.json: not valid JSON"):
        read_adapter_config(tmp_path / "probe")
