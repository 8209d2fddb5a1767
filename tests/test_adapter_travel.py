"""Adapters travel: no machine paths in saved files, a model card in every adapter, moved copies predict the same."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

import infoprompt as ip
from infoprompt.backbones import portable_name
from infoprompt.cli import main
from infoprompt.io_utils import CARD_NAME
from infoprompt.kinds import KINDS, kind_of, load_adapter
from infoprompt.pipeline import RunSpec, run_training
from infoprompt.training import TrainConfig, encode_examples, predict_encoded

TRAIN = [("a great movie", "positive"), ("this film was brilliant", "positive"), ("lovely story and good actor", "positive"),
         ("funny and great", "positive"), ("a terrible movie", "negative"), ("this film was awful", "negative"),
         ("boring dull plot", "negative"), ("bad scene and bad story", "negative")]
TEXTS = ["a great film", "the plot was dull and boring", "quite funny , not bad", "lovely"]
REPO = Path(__file__).resolve().parents[1]
# What a model card must not hold: Hugging Face's blank template and its like.
PLACEHOLDERS = ("More Information Needed", "Model Card for Model ID", "<!--", "TODO", "{{", "[optional]")
KIND_METHODS = {name: kind.methods[0].name for name, kind in KINDS.items()}


def examples() -> list[ip.Example]:
    return [ip.Example(fields={"sentence": text}, label=label, source=f"train:{i + 1}")
            for i, (text, label) in enumerate(TRAIN)]


def train_and_save(backbone, method: str, directory: Path):
    """A few training steps of ``method`` (as tests/fixtures/make_adapters.py takes them), then ``save_pretrained``."""
    model = ip.make_classifier(backbone, task="sst2", method=method, n_prompts=2, seed=1, max_length=32)
    read = kind_of(method).training_options
    own_schedule = "max_steps" in read and "epochs" not in read
    config = TrainConfig(epochs=1, batch_size=4, lr=None if own_schedule else 0.05, max_steps=2 if own_schedule else None,
                         seed=1, progress=False, device="cpu", feature_store=False)
    ip.train(model, examples(), None, config)
    model.save_pretrained(directory)
    return model


@pytest.fixture(scope="module", params=["tiny-bert", pytest.param("minilm", marks=pytest.mark.slow)])
def saved_kinds(request, tiny_model_dirs, tmp_path_factory):
    """An adapter of every kind (its first method), saved on the tiny BERT named by a relative path as a user
    gives one, or on the packaged MiniLM, whose files load from this machine's site-packages."""
    pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")
    root = tmp_path_factory.mktemp("travel")
    shutil.copytree(tiny_model_dirs["bert"], root / "tiny-bert")
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)  # the tiny BERT is found by its relative name, as the committed fixtures find it
        backbone = ip.load_backbone(request.param)
        for kind, method in KIND_METHODS.items():
            train_and_save(backbone, method, root / "out" / kind)
    return request.param, root


def forbidden_strings(root: Path) -> list[str]:
    """Where this machine keeps things: a saved file naming any of them holds a path that does not travel."""
    places = {str(root), str(root.resolve()), tempfile.gettempdir(), str(Path.home()), sys.prefix, sys.base_prefix,
              str(REPO), "site-packages", "/tmp/", "/home/", "/root/", "/Users/", ":\\"}
    return sorted(place for place in places if place not in ("", "/"))


def text_files(directory: Path) -> list[Path]:
    return [path for path in sorted(directory.rglob("*")) if path.is_file() and path.suffix != ".safetensors"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_no_saved_text_file_names_an_absolute_path(saved_kinds, kind):
    backbone, root = saved_kinds
    directory = root / "out" / kind
    files = text_files(directory)
    assert files and directory / CARD_NAME in files
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        found = [place for place in forbidden_strings(root) if place in text]
        assert not found, f"{path.relative_to(root)} names {found}"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_adapter_has_a_model_card_without_placeholders(saved_kinds, kind):
    backbone, root = saved_kinds
    directory = root / "out" / kind
    card = (directory / CARD_NAME).read_text(encoding="utf-8")
    config = json.loads((directory / "infoprompt_adapter.json").read_text(encoding="utf-8"))
    assert card.startswith("---\nlibrary_name: infoprompt\n") and f"\n# {config['method']} adapter" in card
    assert f"- **kind**: `{kind}`\n" in card and f"- **method**: `{config['method']}`" in card
    assert "- **labels**: `negative`, `positive` " in card  # in the head's order
    assert config["backbone_fingerprint"]["embedding_sha256"] in card and f"`{backbone}`" in card
    assert "not recorded" in card and "Not evaluated" in card  # save_pretrained is told no run
    assert "infoprompt predict --adapter" in card and "Classifier.load(" in card and "load_adapter(" in card
    assert f"the name the adapter records, `{backbone}` (" in card and "absolute path" not in card
    for section in ("## Model details", "## Intended use", "## Limitations", "## Training procedure",
                    "## Evaluation", "## How to use", "### With infoprompt", "### Without infoprompt"):
        assert section in card
    assert not [p for p in PLACEHOLDERS if p in card]
    if kind in ("peft", "setfit", "setfit-lora", "top-lora", "linear-probe"):
        snippet = card.split("```python\n")[-1].split("```")[0]
        assert "import infoprompt" not in snippet and "from infoprompt" not in snippet and ("base = " in snippet) == (kind != "setfit")
    pointer = directory / "peft" / CARD_NAME
    if (directory / "peft").is_dir():  # peft's own blank template is replaced by a pointer to the card
        text = pointer.read_text(encoding="utf-8")
        assert "../README.md" in text and not [p for p in PLACEHOLDERS if p in text] and len(text) < 1000


@pytest.mark.parametrize("kind", ["peft", "setfit-lora", "top-lora"])
def test_peft_configs_name_the_base_model_portably(saved_kinds, kind):
    backbone, root = saved_kinds
    saved = json.loads((root / "out" / kind / "peft" / "adapter_config.json").read_text(encoding="utf-8"))
    expected = "sentence-transformers/all-MiniLM-L6-v2" if backbone == "minilm" else "tiny-bert"
    assert saved["base_model_name_or_path"] == portable_name(backbone) == expected
    card = (root / "out" / kind / CARD_NAME).read_text(encoding="utf-8")
    assert f'base = "{expected}"' in card  # the snippet gives the base model explicitly


def test_portable_names():
    assert portable_name("minilm") == "sentence-transformers/all-MiniLM-L6-v2"
    assert portable_name("mpnet") == "sentence-transformers/all-mpnet-base-v2"
    assert portable_name("roberta-large") == "roberta-large" and portable_name("org/model") == "org/model"
    assert portable_name("models/tiny") == "models/tiny"  # relative: as given, found from the working directory
    assert portable_name("/data/models/my-encoder") == "my-encoder"  # absolute: its folder name only


@pytest.fixture
def tiny_bert_here(tiny_model_dirs, tmp_path, monkeypatch):
    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    monkeypatch.chdir(tmp_path)
    return ip.load_backbone("tiny-bert")


def test_a_run_card_has_the_data_drawn_and_the_metrics(tiny_bert_here, tmp_path):
    rows = "".join(f"{text},{label}\n" for text, label in TRAIN)
    Path("train.csv").write_text("text,label\n" + rows, encoding="utf-8")
    Path("dev.csv").write_text("text,label\n" + rows, encoding="utf-8")
    spec = RunSpec(task=None, method="linear-probe", shots=3, seed=2, backbone="tiny-bert", train_file="train.csv",
                   eval_file="dev.csv", classifier={"max_length": 32})
    record = run_training(spec, "run", backbone=tiny_bert_here)
    card = Path("run", CARD_NAME).read_text(encoding="utf-8")
    assert "the file `train.csv`, task `train`: 3 examples per class drawn with seed 2, 6 examples in all." in card
    assert "per class `negative` 3, `positive` 3." in card
    assert "On `dev.csv` (8 examples), after training; the task's primary metric is `accuracy`:" in card
    assert f"| accuracy | {record['metrics']['accuracy']:.4f} |" in card
    assert f"- **size**: {record['adapter_bytes']:,} bytes" in card
    assert "infoprompt predict --adapter run --input" in card and 'Classifier.load("run")' in card
    assert "infoprompt eval --adapter run --eval-file" in card  # a file task is evaluated on a file
    assert not [p for p in PLACEHOLDERS if p in card] and str(tmp_path) not in card


def test_a_classifier_card_has_the_examples_it_was_fitted_on(bert_backbone, tmp_path):
    clf = ip.Classifier(method="linear-probe", backbone=bert_backbone, max_length=32)
    clf.fit([text for text, _ in TRAIN], [label for _, label in TRAIN]).save(tmp_path / "clf")
    card = (tmp_path / "clf" / CARD_NAME).read_text(encoding="utf-8")
    assert "8 examples given to `Classifier.fit` (task `classifier`)." in card
    assert "per class `negative` 4, `positive` 4." in card and "- **Run**: seed 1" in card
    assert "Not evaluated" in card and 'Classifier.load("clf")' in card
    # The backbone was named by its absolute path: infoprompt_adapter.json keeps it (the library finds the encoder
    # by it on this machine), the card names its folder only.
    assert json.loads((tmp_path / "clf" / "infoprompt_adapter.json").read_text())["backbone"] == bert_backbone.name
    assert Path(bert_backbone.name).is_absolute() and bert_backbone.name not in card
    assert f"encoder `{Path(bert_backbone.name).name}`" in card and "the absolute path of a folder" in card


@pytest.mark.parametrize("method", ["linear-probe", "peft-prompt-tuning", "setfit-lora"])
def test_an_adapter_moved_to_a_fresh_path_loads_and_predicts_the_same(method, tiny_bert_here, tmp_path, capsys):
    if method == "setfit-lora":
        pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")
    model = train_and_save(tiny_bert_here, method, tmp_path / "first" / "adapter")
    rows = [ip.Example(fields={"sentence": text}, source=f"input {i + 1}") for i, text in enumerate(TEXTS)]
    before = predict_encoded(model, encode_examples(model, rows))
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text("".join(json.dumps({"sentence": text}) + "\n" for text in TEXTS), encoding="utf-8")
    capsys.readouterr()
    assert main(["predict", "--adapter", str(tmp_path / "first" / "adapter"), "--input", str(inputs), "--quiet"]) == 0
    cli_before = capsys.readouterr().out

    shutil.copytree(tmp_path / "first" / "adapter", tmp_path / "elsewhere" / "moved")
    shutil.rmtree(tmp_path / "first")
    moved = tmp_path / "elsewhere" / "moved"
    loaded = load_adapter(moved)  # its backbone found by name, not through the old directory
    assert torch.equal(predict_encoded(loaded, encode_examples(loaded, rows)), before)
    classifier = ip.Classifier.load(moved)
    assert torch.equal(torch.from_numpy(classifier.predict_proba(TEXTS)), before.double())
    assert main(["predict", "--adapter", str(moved), "--input", str(inputs), "--quiet"]) == 0
    assert capsys.readouterr().out == cli_before
