"""The contract every registered kind keeps (in the spirit of scikit-learn's check_estimator), on the tiny BERT:
it trains through the pipeline, saves, loads in a fresh process and predicts the same numbers; it refuses bad
and foreign options in one line naming itself; it does what its capabilities say and refuses the rest; and its
run record has the same schema as every other kind's."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import torch
from test_feature_store import ROWS, write_split

from infoprompt.classifier import Classifier
from infoprompt.cli import build_parser, kind_flags, split_flags
from infoprompt.errors import UserError
from infoprompt.export import export_refusal
from infoprompt.kinds import KINDS, load_adapter, make_classifier
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.registry import LONG_TEXT_CHUNKS, MULTI_LABEL, ONNX_EXPORT, SHARED_PLAIN_PASS
from infoprompt.pipeline import RunSpec, run_training
from infoprompt.serving import adapters as serving
from infoprompt.tasks import Example
from infoprompt.training import TrainConfig, encode_examples, predict_encoded
from infoprompt.training.config import COMMON_TRAINING

pytestmark = pytest.mark.usefixtures("one_thread")

NAMES = sorted(KINDS)
INPUTS = ["a great film", "the plot was dull and boring", "quite funny , not bad", "lovely"]
# A few steps of every kind's own fit (SetFit's capped by max_steps); no selection, so every record has one shape.
FAST = TrainConfig(epochs=1, batch_size=4, max_steps=2, select="none", eval_every_epochs=0, progress=False,
                   device="cpu", feature_store=False)


def first_method(kind: str) -> str:
    return KINDS[kind].methods[0].name


@pytest.fixture(scope="module")
def trained(tiny_model_dirs, tmp_path_factory) -> dict[str, tuple[dict, Path]]:
    """Per kind: the run record and the run directory of its first method, trained through the pipeline."""
    if "setfit" in KINDS:
        pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")
    root = tmp_path_factory.mktemp("conformance")
    write_split(root / "data", ROWS)
    runs = {}
    for kind in NAMES:
        spec = RunSpec(task="sst2", method=first_method(kind), shots=8, n_prompts=2, seed=1,
                       backbone=str(tiny_model_dirs["bert"]), data_dir=str(root / "data"),
                       classifier={"max_length": 32}, training=FAST)
        runs[kind] = (run_training(spec, root / kind), root / kind)
    return runs


def examples() -> list[Example]:
    return [Example(fields={"sentence": text}, source=f"input {i + 1}") for i, text in enumerate(INPUTS)]


FRESH_PROCESS = """
import json, sys
import infoprompt
from infoprompt.tasks import Example
from infoprompt.training import encode_examples, predict_encoded
out = {}
for kind, directory in json.loads(sys.argv[1]).items():
    model = infoprompt.load_adapter(directory)
    rows = [Example(fields={"sentence": text}, source=str(i)) for i, text in enumerate(json.loads(sys.argv[2]))]
    out[kind] = predict_encoded(model, encode_examples(model, rows)).tolist()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def fresh_predictions(trained) -> dict[str, list[list[float]]]:
    """What a new Python process, which never built these adapters, predicts with each of them."""
    directories = {kind: str(directory) for kind, (_, directory) in trained.items()}
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS, json.dumps(directories), json.dumps(INPUTS)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("kind", NAMES)
def test_it_trains_saves_and_predicts_the_same_in_a_fresh_process(kind, trained, fresh_predictions):
    record, directory = trained[kind]
    model = load_adapter(directory)
    assert model.config.kind.name == kind and record["classifier"]["kind"] == kind
    here = predict_encoded(model, encode_examples(model, examples()))
    assert here.shape == (len(INPUTS), 2) and torch.allclose(here.sum(1), torch.ones(len(INPUTS)))
    assert torch.equal(torch.tensor(fresh_predictions[kind], dtype=here.dtype), here)



@pytest.mark.parametrize("kind", NAMES)
def test_its_trained_tensors_are_read_back_after_load_and_survive_a_second_save(kind, trained, tmp_path):
    """What a loaded adapter reports as trained (re-saving, MLflow logging and parameter counts read it) is not
    empty and round-trips: guards against a library update that freezes loaded weights (peft 0.22, #52)."""
    _, directory = trained[kind]
    loaded = load_adapter(directory)
    state = loaded.trainable_state()
    kept = set(state) - loaded.training_only_names()
    assert kept, f"{kind}: a loaded adapter reports no trained tensor"
    loaded.save_pretrained(tmp_path / "again")
    again = load_adapter(tmp_path / "again").trainable_state()
    assert kept <= set(again) and all(torch.equal(state[name], again[name]) for name in kept)

def bad_values(annotation: object) -> list[object]:
    """Values of the wrong type for a field of type ``annotation``."""
    text = str(annotation)
    if "bool" in text:
        return ["yes", 1]
    if "int" in text or "float" in text:
        return ["four", True]
    if "tuple" in text:
        return [7, [""]]
    return [5]


@pytest.mark.parametrize("kind", NAMES)
def test_bad_and_foreign_options_are_one_line_errors_naming_the_kind(kind):
    method, options = first_method(kind), KINDS[kind].options
    hints = typing.get_type_hints(options)

    def refused(**given: object) -> str:
        with pytest.raises(UserError) as error:
            ClassifierConfig.create(task="sst2", method=method, backbone="x", **given)
        assert "\n" not in str(error.value)
        return str(error.value)

    for field in dataclasses.fields(options):
        spec = field.metadata["option"]
        for value in bad_values(hints[field.name]):
            assert field.name in refused(**{field.name: value})
        if spec.choices is not None:
            assert field.name in refused(**{field.name: "no-such-choice"})
        elif spec.type is not None and "bool" not in str(hints[field.name]):
            assert field.name in refused(**{field.name: -1})  # every rule of a number refuses a negative one
        if spec.preset:
            assert f"kind {kind}" in refused(**{field.name: getattr(KINDS[kind].methods[0].options, field.name)})
    assert f"(kind {kind}) has no option no_such_option" in refused(no_such_option=1)
    for other in set().union(*(k.own_options() for k in KINDS.values())) - set(options.names()):
        assert f"(kind {kind}) has no option {other}" in refused(**{other: 1})


def valid_flag(name: str, spec) -> str:
    """The flag of option ``name`` with a value its parser takes (a count, or a share below 1)."""
    if spec.switch == "flag":
        return spec.flag(name)
    if spec.choices:
        return f"{spec.flag(name)}={spec.choices[0]}"
    for text in ("1", "0.5"):
        try:
            (spec.type or str)(text)
        except argparse.ArgumentTypeError:
            continue
        return f"{spec.flag(name)}={text}"
    raise AssertionError(f"no sample value for {spec.flag(name)}")


@pytest.mark.parametrize("kind", NAMES)
def test_the_command_line_refuses_the_flags_the_kind_lacks(kind):
    """Every other kind's flags, and the training flags its fit does not read, are refused naming the kind; a
    training flag that names one of its own options (top-lora's --epochs) is taken."""
    parser = build_parser()
    base = ["train", "--task", "sst2", "--out", "x", "--method", first_method(kind)]
    split_flags(parser.parse_args(base))  # nothing given, nothing refused
    training = {"epochs": "--epochs=2", "batch_size": "--batch-size=2", "lr": "--lr=0.1", "select": "--select=none",
                "warm_start": "--warm-start", "feature_cache": "--no-feature-cache"}
    lacking = [valid_flag(name, spec) for name, (spec, _) in kind_flags().items()
               if name not in KINDS[kind].own_options()]
    own = set(KINDS[kind].own_options())
    unread = [flag for name, flag in training.items()
              if name not in KINDS[kind].training_options and name not in COMMON_TRAINING and name not in own]
    for flag in lacking + unread:
        with pytest.raises(UserError, match=rf"method \S+ \(kind {kind}\) has no option --"):
            split_flags(parser.parse_args([*base, flag]))
    for name in (KINDS[kind].training_options | own) & set(training):
        split_flags(parser.parse_args([*base, training[name]]))  # what its fit reads is taken


@pytest.mark.parametrize("kind", NAMES)
def test_its_capabilities_are_honoured_and_the_others_refused(kind, trained, bert_backbone):
    record, directory = trained[kind]
    model = load_adapter(directory)
    capabilities = KINDS[kind].capabilities
    # ONNX export: asked of the kind (test_export.py exports every kind that has it).
    assert (export_refusal(model.config) is None) == (ONNX_EXPORT in capabilities)
    # The server's shared plain pass: the same records from the shared features as from predict.
    rows, sources = [{"sentence": text} for text in INPUTS], [str(i) for i in range(len(INPUTS))]
    group = serving.feature_group(model, kind)
    if SHARED_PLAIN_PASS in capabilities:
        assert group is not None
        shared = serving.head_records(model, serving.plain_features(model, rows, sources))
        assert shared == serving.predict(model, rows, sources)
    else:
        assert group is None
    # Texts read in windows.
    build = {"task": "sst2", "method": first_method(kind), "n_prompts": 2, "max_length": 16, "long_text": "chunk"}
    if LONG_TEXT_CHUNKS in capabilities:
        assert make_classifier(bert_backbone, **build).config.long_text == "chunk"
    else:
        with pytest.raises(UserError, match=f"long_text 'chunk' .* not method {first_method(kind)}"):
            make_classifier(bert_backbone, **build)


@pytest.mark.parametrize("kind", NAMES)
def test_multi_label_tasks_train_where_the_kind_can(kind, bert_backbone):
    texts = ["a great movie", "this film was awful", "lovely story and good actor", "boring dull plot"] * 3
    tags = [{"good"} if i % 2 == 0 else {"bad", "dull"} for i in range(len(texts))]
    training = {"epochs": 1, "batch_size": 4} if "epochs" in KINDS[kind].training_options else {}
    clf = Classifier(method=first_method(kind), backbone=bert_backbone, max_length=32, **training)
    if MULTI_LABEL not in KINDS[kind].capabilities:
        with pytest.raises(UserError, match=f"is multi-label, which method {first_method(kind)} does not train"):
            clf.fit(texts, tags)
        return
    predicted = clf.fit(texts, tags).predict(texts[:3])
    assert all(isinstance(row, list) and set(row) <= {"bad", "dull", "good"} for row in predicted)


def keys(record: dict) -> dict[str, object]:
    """A record's schema: its keys, and those of its mappings that every kind fills alike (``last_losses`` holds
    the kind's own terms beside ``total``)."""
    shape: dict[str, object] = {"record": sorted(record)}
    for name in ("timings", "parameters", "spec", "environment", "classifier"):
        shape[name] = sorted(record[name])
    return shape


def test_every_kind_writes_a_record_of_one_schema(trained):
    schemas = {kind: keys(record) for kind, (record, _) in trained.items()}
    reference = schemas[NAMES[0]]
    assert {kind: schema for kind, schema in schemas.items() if schema != reference} == {}
    assert "selection" not in reference["record"] and "adapter_bytes" in reference["record"]
    for kind, (record, _) in trained.items():
        assert "total" in record["last_losses"] and len(record["last_losses"]) > 1, kind
