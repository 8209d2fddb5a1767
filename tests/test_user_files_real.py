"""Files made in the test from real data, not through the built-in tasks: 19 SemEval relations under label
strings of their own, and CoNLL04 sentences labelled with the set of entity types they mention (multi-label)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from infoprompt.cli import main
from infoprompt.kinds import load_adapter
from infoprompt.kinds.config import read_adapter_config
from infoprompt.training.inference import predict


def semeval_file(data_dir: Path, split: str, path: Path) -> Path:
    """A TSV of the sentences (entity markers kept) and their relation, written 'Type ‹e1→e2›'."""
    source = data_dir / "semeval2010_task8" / f"{split}.jsonl"
    with source.open(encoding="utf-8") as lines, path.open("w", encoding="utf-8") as out:
        out.write("sentence\trelation\n")
        for line in lines:
            record = json.loads(line)
            direction = record["direction"].replace(",", "→") if record["direction"] else "none"
            out.write(f"{record['sentence']}\t{record['relation_type']} ‹{direction}›\n")
    return path


def conll04_file(data_dir: Path, split: str, path: Path) -> Path:
    """A JSON-lines file: the sentence and the sorted list of entity types it mentions ([] when none)."""
    source = data_dir / "conll04" / f"{split}.jsonl"
    with source.open(encoding="utf-8") as lines, path.open("w", encoding="utf-8") as out:
        for line in lines:
            record = json.loads(line)
            types = sorted({entity["type"] for entity in record["entities"]})
            out.write(json.dumps({"text": " ".join(record["tokens"]), "entities": types}) + "\n")
    return path


@pytest.fixture
def semeval_dir(data_dir):
    if not (data_dir / "semeval2010_task8" / "train.jsonl").is_file():
        pytest.skip("SemEval data not found")
    return data_dir


@pytest.fixture
def conll_dir(data_dir):
    if not (data_dir / "conll04" / "train.jsonl").is_file():
        pytest.skip("CoNLL04 data not found")
    return data_dir


def test_a_19_class_semeval_file_with_labels_of_its_own(semeval_dir, tiny_model_dirs, tmp_path, capsys):
    train = semeval_file(semeval_dir, "train", tmp_path / "relations.tsv")
    dev = tmp_path / "relations-dev.tsv"
    with train.open(encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    dev.write_text("".join("\t".join(row) + "\n" for row in [rows[0], *rows[-60:]]), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--train-file", str(train), "--eval-file", str(dev), "--text-column", "sentence",
                 "--label-column", "relation", "--method", "linear-probe", "--shots", "2", "--seed", "1",
                 "--backbone", str(tiny_model_dirs["bert"]), "--max-length", "48", "--out", str(out), "--quiet"]) == 0
    record = json.loads((out / "metrics.json").read_text())
    labels = read_adapter_config(out).labels
    assert len(labels) == 19 and "Cause-Effect ‹e1→e2›" in labels and "Other ‹none›" in labels
    # 2 per class; the one class with a single row ('Entity-Destination ‹e2→e1›') gives it, another makes up the rest.
    counts = record["train_label_counts"]
    assert record["n_train"] == 38 and counts["Entity-Destination ‹e2→e1›"] == 1
    assert sorted(counts.values()) == [1, *[2] * 17, 3]
    assert set(record["metrics"]) == {"accuracy", "macro_f1"} and record["n_eval"] == 60
    capsys.readouterr()
    assert main(["predict", "--adapter", str(out), "--input", str(dev), "--quiet"]) == 0
    predicted = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(predicted) == 60 and {row["label"] for row in predicted} <= set(labels)


def test_a_multi_label_conll04_file(conll_dir, tiny_model_dirs, bert_backbone, tmp_path, capsys):
    train = conll04_file(conll_dir, "train", tmp_path / "entities.jsonl")
    dev = conll04_file(conll_dir, "dev", tmp_path / "entities-dev.jsonl")
    out = tmp_path / "run"
    assert main(["train", "--train-file", str(train), "--eval-file", str(dev), "--label-column", "entities",
                 "--multi-label", "--method", "linear-probe", "--shots", "8", "--seed", "2",
                 "--backbone", str(tiny_model_dirs["bert"]), "--max-length", "48", "--out", str(out), "--quiet"]) == 0
    record = json.loads((out / "metrics.json").read_text())
    config = read_adapter_config(out)
    assert config.labels == ("Loc", "Org", "Other", "Peop") and 0 < config.threshold < 1
    assert record["n_train"] == 32 and min(record["train_label_counts"].values()) >= 1
    assert set(record["metrics"]) == {"multilabel_micro_f1", "multilabel_macro_f1"}
    assert 0.0 <= record["metrics"]["multilabel_micro_f1"] <= 1.0 and record["n_eval"] == 231
    capsys.readouterr()

    assert main(["eval", "--adapter", str(out), "--eval-file", str(dev), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == pytest.approx(record["metrics"])
    model = load_adapter(out, backbone=bert_backbone)
    rows = predict(model, [{"text": "John Smith lives in Boston ."}, {"text": "It rained ."}])
    for row in rows:
        assert set(row) == {"labels", "probabilities"} and set(row["labels"]) <= set(config.labels)
        assert row["labels"] == [label for label, p in row["probabilities"].items() if p >= config.threshold]


def test_multi_label_is_refused_by_kinds_that_do_not_train_it(conll_dir, tiny_model_dirs, tmp_path, capsys):
    train = conll04_file(conll_dir, "dev", tmp_path / "entities.jsonl")
    assert main(["train", "--train-file", str(train), "--label-column", "entities", "--multi-label",
                 "--method", "peft-prompt-tuning", "--shots", "2", "--backbone", str(tiny_model_dirs["bert"]),
                 "--max-length", "48", "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "task entities is multi-label, which method peft-prompt-tuning does not train" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_the_prompt_kind_trains_a_multi_label_file(conll_dir, tiny_model_dirs, tmp_path, capsys):
    train = conll04_file(conll_dir, "train", tmp_path / "entities.jsonl")
    dev = conll04_file(conll_dir, "dev", tmp_path / "entities-dev.jsonl")
    out = tmp_path / "run"
    assert main(["train", "--train-file", str(train), "--eval-file", str(dev), "--label-column", "entities",
                 "--multi-label", "--method", "infoprompt-plus", "--shots", "4", "--seed", "1", "--epochs", "2",
                 "--backbone", str(tiny_model_dirs["bert"]), "--max-length", "48", "--out", str(out), "--quiet"]) == 0
    record = json.loads((out / "metrics.json").read_text())
    config = read_adapter_config(out)
    holdout = [c for c in record["selection"]["candidates"]]
    assert all("threshold" in c for c in holdout) and config.threshold in {c["threshold"] for c in holdout}
    assert set(record["metrics"]) == {"multilabel_micro_f1", "multilabel_macro_f1"} and record["n_train"] == 16
    assert record["last_losses"]["pred"] > 0
