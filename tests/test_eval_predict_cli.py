"""`eval`'s per-class report and confusion matrix (JSON, table, PNG), through the CLI on the committed tiny
adapters and a multi-label probe trained here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from infoprompt.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "adapters"
PROBE = FIXTURES / "linear-probe"  # sst2: negative, positive
DEV = [("a great film", 1), ("the plot was dull and boring", 0), ("quite funny , not bad", 1),
       ("she said it was terrible", 0), ("lovely", 1), ("boring dull plot", 0), ("a good story", 1)]
MULTI = [("a great film about a dog", "movie|animal"), ("the cat sat on the dog", "animal"),
         ("a city film", "movie|place"), ("she lives in the city", "place"), ("the dog ran in the city", "animal|place"),
         ("a boring movie", "movie"), ("the cat and the dog", "animal"), ("this city is lovely", "place")]


@pytest.fixture
def here(tiny_model_dirs, tmp_path, monkeypatch):
    """A working directory where ``tiny-bert`` (the relative backbone path the committed adapters name) is the
    tiny BERT they were trained on."""
    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_dev(path: Path) -> Path:
    path.write_text("sentence\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in DEV), encoding="utf-8")
    return path


# -- eval ---------------------------------------------------------------------------------------------------------

def test_eval_gives_per_class_metrics_and_a_confusion_matrix(here, capsys):
    dev = write_dev(here / "dev.tsv")
    assert main(["eval", "--adapter", str(PROBE), "--eval-file", str(dev), "--output", "record.json",
                 "--plots", "plots"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1  # stdout stays the one machine-readable line
    record = json.loads(out)
    assert record == json.loads((here / "record.json").read_text())
    matrix = record["confusion_matrix"]
    assert matrix["labels"] == ["negative", "positive"]
    counts = matrix["matrix"]
    assert sum(map(sum, counts)) == record["n"] == len(DEV)
    assert [sum(row) for row in counts] == [3, 4]  # rows are the true labels
    assert (counts[0][0] + counts[1][1]) / len(DEV) == pytest.approx(record["metrics"]["accuracy"])
    for i, label in enumerate(matrix["labels"]):
        column = counts[0][i] + counts[1][i]
        row = record["per_class"][label]
        assert row["support"] == sum(counts[i])
        assert row["recall"] == pytest.approx(counts[i][i] / sum(counts[i]))
        assert row["precision"] == pytest.approx(counts[i][i] / column if column else 0.0)
    # The same for people, on stderr: scikit-learn's report and the matrix.
    assert "precision    recall  f1-score   support" in err and "macro avg" in err
    assert "confusion matrix (rows: true label, columns: predicted label)" in err
    assert [line.split()[2:] for line in err.splitlines() if line.startswith(("[0] negative", "[1] positive"))] == \
        [[str(count) for count in row] for row in counts]
    png = here / "plots" / "confusion_matrix.png"
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and "wrote plots/confusion_matrix.png" in err


def test_eval_quiet_keeps_only_the_json_line(here, capsys):
    dev = write_dev(here / "dev.tsv")
    assert main(["eval", "--adapter", str(PROBE), "--eval-file", str(dev), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert set(json.loads(out)) == {"adapter", "task", "split", "n", "metrics", "per_class", "confusion_matrix"}
    assert "precision" not in err and "confusion" not in err


def test_eval_refuses_a_plots_directory_it_cannot_write_before_any_work(here, capsys):
    (here / "taken").write_text("a file, not a directory")
    assert main(["eval", "--adapter", str(PROBE), "--eval-file", str(write_dev(here / "dev.tsv")),
                 "--plots", "taken"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "cannot write taken/confusion_matrix.png" in err and err.count("\n") == 1


@pytest.fixture
def multi_label_run(here, capsys):
    """A linear probe trained here on a tiny multi-label file (labels as ``a|b``)."""
    rows = "".join(f"{text},{labels}\n" for text, labels in MULTI * 2)
    (here / "multi.csv").write_text("text,labels\n" + rows, encoding="utf-8")
    assert main(["train", "--train-file", "multi.csv", "--multi-label", "--label-column", "labels", "--method",
                 "linear-probe", "--backbone", "tiny-bert", "--max-length", "32", "--out", "multi", "--quiet"]) == 0
    capsys.readouterr()
    return here / "multi"


def test_eval_of_a_multi_label_adapter_reports_each_label_and_skips_the_matrix(multi_label_run, here, capsys):
    assert main(["eval", "--adapter", str(multi_label_run), "--eval-file", "multi.csv", "--plots", "plots"]) == 0
    out, err = capsys.readouterr()
    record = json.loads(out)
    assert record["confusion_matrix"] is None
    assert set(record["per_class"]) == {"animal", "movie", "place"}
    assert [record["per_class"][label]["support"] for label in ("animal", "movie", "place")] == [8, 6, 8]
    assert "no confusion matrix for a multi-label task" in err and "samples avg" in err
    assert "--plots: nothing written" in err and not (here / "plots").exists()
