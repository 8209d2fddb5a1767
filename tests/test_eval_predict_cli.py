"""`eval`'s per-class report and confusion matrix (JSON, table, PNG) and `predict --format csv|jsonl --top-k`,
through the CLI on the committed tiny adapters and a multi-label probe trained here."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from infoprompt.cli import main
from infoprompt.prediction_format import PredictionWriter, output_format, top_labels

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


# -- predict ------------------------------------------------------------------------------------------------------

def predict(*args: str, capsys) -> str:
    assert main(["predict", "--adapter", str(PROBE), "--quiet", *args]) == 0
    return capsys.readouterr().out


def test_predict_top_k_in_json_lines_and_csv(here, capsys):
    (here / "in.jsonl").write_text("".join(json.dumps({"sentence": text}) + "\n\n" for text, _ in DEV[:3]))
    plain = [json.loads(line) for line in predict("--input", "in.jsonl", capsys=capsys).splitlines()]
    ranked = [json.loads(line) for line in predict("--input", "in.jsonl", "--top-k", "1", capsys=capsys).splitlines()]
    assert [r["line"] for r in ranked] == [1, 3, 5]  # blank lines skipped, each record names its input line
    for before, after in zip(plain, ranked, strict=True):
        best = max(before["probabilities"], key=before["probabilities"].get)
        assert after.pop("top_k") == [{"label": best, "probability": before["probabilities"][best]}]
        assert after == before and best == before["label"]  # --top-k adds, and changes nothing else

    table = list(csv.DictReader(io.StringIO(predict("--input", "in.jsonl", "--format", "csv", "--top-k", "5",
                                                    capsys=capsys))))
    assert list(table[0]) == ["line", "label", "probability_negative", "probability_positive", "top1_label",
                              "top1_probability", "top2_label", "top2_probability"]  # K is capped at 2 labels
    for row, record in zip(table, plain, strict=True):
        assert int(row["line"]) == record["line"] and row["label"] == record["label"] == row["top1_label"]
        for label, p in record["probabilities"].items():
            assert float(row[f"probability_{label}"]) == p
        assert float(row["top1_probability"]) >= float(row["top2_probability"])
        assert {row["top1_label"], row["top2_label"]} == {"negative", "positive"}


def test_predict_writes_csv_for_a_csv_output_and_jsonl_when_told(here, capsys):
    (here / "in.txt").write_text("a great film\nboring dull plot\n")
    predict("--input", "in.txt", "--output", "out.csv", capsys=capsys)
    assert (here / "out.csv").read_text().splitlines()[0] == "line,label,probability_negative,probability_positive"
    predict("--input", "in.txt", "--output", "forced.csv", "--format", "jsonl", capsys=capsys)
    assert json.loads((here / "forced.csv").read_text().splitlines()[0])["line"] == 1
    empty = here / "empty.txt"
    empty.write_text("\n")
    assert predict("--input", str(empty), "--format", "csv", capsys=capsys) == \
        "line,label,probability_negative,probability_positive\n"  # no input: still the header


def test_predict_csv_of_a_multi_label_adapter_joins_the_labels(multi_label_run, here, capsys):
    (here / "in.csv").write_text("text\na film about a dog\n")
    assert main(["predict", "--adapter", str(multi_label_run), "--input", "in.csv", "--format", "csv", "--top-k", "1",
                 "--quiet"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert set(row) == {"line", "labels", "probability_animal", "probability_movie", "probability_place",
                        "top1_label", "top1_probability"}
    chosen = row["labels"].split("|") if row["labels"] else []
    assert chosen == [label for label in ("animal", "movie", "place") if label in chosen]  # in label order


def test_the_prediction_writer_orders_ties_by_label_and_quotes_cells():
    assert top_labels({"b": 0.4, "a": 0.4, "c": 0.2}, 2) == [("b", 0.4), ("a", 0.4)]  # a tie: label order
    writer = PredictionWriter("csv", ["yes, really", "no"], multi_label=False, top_k=1)
    assert writer.header() == 'line,label,"probability_yes, really",probability_no,top1_label,top1_probability\n'
    record = {"label": "yes, really", "probabilities": {"yes, really": 0.7, "no": 0.3}}
    assert writer.lines([4], [record]) == '4,"yes, really",0.7,0.3,"yes, really",0.7\n'
    assert output_format(None, "x.CSV") == "csv" and output_format(None, "-") == "jsonl"
    assert output_format("jsonl", "x.csv") == "jsonl"
