"""Your data, your labels: train / eval / predict on files written in the test, adapters that carry their task."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.kinds import load_adapter, make_classifier, train
from infoprompt.kinds.config import CONFIG_NAME, read_adapter_config
from infoprompt.tasks import TASKS, FileColumns, task_from_file
from infoprompt.training.inference import predict

# Label names with spaces, unicode and punctuation: they must come back exactly.
INTENTS = {
    "book flight": ["book me a flight to {}", "i need a plane ticket to {}", "fly me to {} tomorrow"],
    "météo ☀": ["what is the weather in {}", "will it rain in {}", "is it sunny in {}"],
    "play: music!": ["play some jazz in {}", "put on music from {}", "play the radio of {}"],
}
CITIES = ["paris", "rome", "tokyo", "lima", "oslo", "cairo", "delhi", "quito"]


def write_intents(path: Path, per_class: int, offset: int = 0, *, header=("utterance", "intent")) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for label, patterns in INTENTS.items():
            for i in range(per_class):
                city = CITIES[(i + offset) % len(CITIES)]
                writer.writerow([patterns[(i + offset) % len(patterns)].format(city), label])
    return path


@pytest.fixture
def intent_files(tmp_path) -> tuple[Path, Path]:
    return write_intents(tmp_path / "intents.csv", 6), write_intents(tmp_path / "intents-dev.csv", 3, offset=5)


def train_args(backbone_dir, train_file, out, *extra: str) -> list[str]:
    return ["train", "--train-file", str(train_file), "--text-column", "utterance", "--label-column", "intent",
            "--backbone", str(backbone_dir), "--out", str(out), "--max-length", "32", "--quiet", *extra]


@pytest.mark.parametrize("method", ["linear-probe", "infoprompt"])
def test_train_eval_predict_on_an_intent_csv(method, intent_files, tiny_model_dirs, tmp_path, capsys):
    train_file, dev_file = intent_files
    out = tmp_path / "run"
    engine = [] if method == "linear-probe" else ["--epochs", "1", "--eval-every-epochs", "0"]  # the probe reads none
    assert main(train_args(tiny_model_dirs["bert"], train_file, out, "--method", method, "--eval-file",
                           str(dev_file), *engine)) == 0
    record = json.loads((out / "metrics.json").read_text())
    assert record["task"] == "intents" and record["shots"] == "full" and record["n_train"] == 18
    assert set(record["metrics"]) == {"accuracy", "macro_f1"} and record["n_eval"] == 9
    # Both fits (the engine's and a baseline's) say how much of the evaluation their most-predicted class took.
    shares = record["prediction_shares"]
    assert shares["top_class"] in INTENTS and 1 / len(INTENTS) - 1e-6 <= shares["top_share"] <= 1
    assert shares["majority_share"] == pytest.approx(1 / 3, abs=1e-6)  # the dev file holds 3 rows of each class
    config = read_adapter_config(out)
    assert config.labels == tuple(sorted(INTENTS)) and config.task_spec["columns"]["text_column"] == "utterance"
    capsys.readouterr()

    assert main(["eval", "--adapter", str(out), "--eval-file", str(dev_file), "--quiet"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["metrics"] == pytest.approx(record["metrics"]) and evaluated["n"] == 9

    texts = tmp_path / "new.txt"
    texts.write_text("fly me to berlin\n\nwill it rain in madrid\n", encoding="utf-8")
    assert main(["predict", "--adapter", str(out), "--input", str(texts), "--quiet"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["line"] for row in rows] == [1, 3]
    assert all(row["label"] in INTENTS and set(row["probabilities"]) == set(INTENTS) for row in rows)
    # The training file itself (its own column names, the label column ignored) is a valid input.
    assert main(["predict", "--adapter", str(out), "--input", str(dev_file), "--quiet"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 9


def test_an_adapter_on_a_custom_file_loads_in_a_fresh_process(intent_files, tiny_model_dirs, tmp_path, bert_backbone):
    train_file, _ = intent_files
    task, examples = task_from_file(train_file, FileColumns(text_column="utterance", label_column="intent"))
    assert task.name not in TASKS  # nothing is registered
    model = make_classifier(bert_backbone, task, "linear-probe", max_length=32)
    train(model, examples)
    model.save_pretrained(tmp_path / "a")
    reloaded = load_adapter(tmp_path / "a", backbone=bert_backbone)
    here = [row["label"] for row in predict(reloaded, [{"text": "will it rain in lima"},
                                                       {"text": "play the radio of rome"}])]
    script = (
        "import json, sys, infoprompt as ip\n"
        "model = ip.load_adapter(sys.argv[1])\n"
        "rows = ip.predict(model, [{'text': 'will it rain in lima'}, {'text': 'play the radio of rome'}])\n"
        "print(json.dumps([list(model.config.labels), [r['label'] for r in rows]]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    labels, predicted = json.loads(done.stdout)
    assert labels == sorted(INTENTS) and predicted == here


def test_a_builtin_task_adapter_carries_no_task_spec(bert_backbone, tmp_path):
    model = make_classifier(bert_backbone, "sst2", "linear-probe", max_length=32)
    model.save_pretrained(tmp_path / "a")
    assert json.loads((tmp_path / "a" / CONFIG_NAME).read_text())["task_spec"] is None  # found by its name


def test_shots_draw_k_per_class_and_config_file(intent_files, tiny_model_dirs, tmp_path):
    train_file, _ = intent_files
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(f"train-file: {train_file}\ntext-column: utterance\nlabel-column: intent\n"
                        "method: linear-probe\nshots: 4\nseed: 3\n", encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--config", str(run_yaml), "--shots", "2", "--backbone", str(tiny_model_dirs["bert"]),
                 "--out", str(out), "--max-length", "32", "--quiet"]) == 0
    record = json.loads((out / "metrics.json").read_text())
    assert record["shots"] == 2 and record["shots_unit"] == "per class" and record["seed"] == 3  # the flag wins
    assert record["train_label_counts"] == dict.fromkeys(sorted(INTENTS), 2) and record["metrics"] == {}


def _rows(path: Path, rows: list[list[str]], header=("utterance", "intent")) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([list(header), *rows])
    return path


@pytest.mark.parametrize("case,message", [
    ("missing column", "intents.csv:1: no column 'utterance'"),
    ("one class", "the labels hold only the class 'a'"),
    ("unseen eval label", "dev.csv:3: label 'zzz' never occurs in the training data"),
    ("empty text", "bad.csv:3: empty text field(s) utterance"),
    ("blank label", "bad.csv:2: column 'intent': label is blank or missing"),
    ("nan label", "bad.csv:3: column 'intent': label is 'NaN', which marks a missing value"),
    ("task and file", "give a task (--task) or your own training file (--train-file), not both or neither"),
    ("neither", "give a task (--task) or your own training file (--train-file), not both or neither"),
])
def test_bad_files_are_one_line_errors(case, message, intent_files, tiny_model_dirs, tmp_path, capsys):
    train_file, dev_file = intent_files
    out = tmp_path / "out"
    backbone = tiny_model_dirs["bert"]
    extra: list[str] = []
    if case == "missing column":
        train_file = _rows(tmp_path / "intents.csv", [["hi", "a"], ["yo", "b"]], header=("text", "intent"))
    elif case == "one class":
        train_file = _rows(tmp_path / "bad.csv", [["hi", "a"], ["yo", "a"]])
    elif case == "unseen eval label":
        dev_file = _rows(tmp_path / "dev.csv", [["fly me to oslo", "book flight"], ["hi", "zzz"]])
    elif case == "empty text":
        train_file = _rows(tmp_path / "bad.csv", [["hi", "a"], [" ", "b"]])
    elif case == "blank label":
        train_file = _rows(tmp_path / "bad.csv", [["hi", ""], ["yo", "b"]])
    elif case == "nan label":
        train_file = _rows(tmp_path / "bad.csv", [["hi", "a"], ["yo", "NaN"]])
    elif case == "task and file":
        extra = ["--task", "sst2"]
    args = train_args(backbone, train_file, out, "--method", "linear-probe", "--eval-file", str(dev_file), *extra)
    if case == "neither":
        args = ["train", "--backbone", str(backbone), "--out", str(out), "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_a_pair_column_on_a_single_text_adapter_is_refused(intent_files, tiny_model_dirs, tmp_path, capsys):
    train_file, dev_file = intent_files
    out = tmp_path / "run"
    assert main(train_args(tiny_model_dirs["bert"], train_file, out, "--method", "linear-probe")) == 0
    capsys.readouterr()
    written = tmp_path / "metrics.json"
    assert main(["eval", "--adapter", str(out), "--eval-file", str(dev_file), "--text-pair-column", "intent",
                 "--output", str(written), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--text-pair-column 'intent'" in err and "one text per example" in err and err.count("\n") == 1
    assert not written.exists()
    assert main(["eval", "--adapter", str(out), "--quiet"]) == 2
    assert "give --eval-file" in capsys.readouterr().err


def test_adapters_leave_the_critics_out_unless_asked(intent_files, tiny_model_dirs, tmp_path, bert_backbone):
    from safetensors import safe_open

    from infoprompt.kinds.config import TRAINING_STATE_NAME, WEIGHTS_NAME

    train_file, dev_file = intent_files
    runs = {}
    for name, extra in (("slim", []), ("kept", ["--keep-training-state"])):
        runs[name] = tmp_path / name
        assert main(train_args(tiny_model_dirs["bert"], train_file, runs[name], "--method", "infoprompt",
                               "--epochs", "1", "--eval-every-epochs", "0", *extra)) == 0
    with safe_open(str(runs["slim"] / WEIGHTS_NAME), "pt") as handle:
        names = set(handle.keys())
    assert names and not any(n.startswith(("head_mi.", "rep_mi.")) for n in names)
    assert not (runs["slim"] / TRAINING_STATE_NAME).exists()
    with safe_open(str(runs["kept"] / TRAINING_STATE_NAME), "pt") as handle:
        critics = set(handle.keys())
    assert critics and all(n.startswith(("head_mi.", "rep_mi.")) for n in critics)
    assert (runs["kept"] / WEIGHTS_NAME).read_bytes() == (runs["slim"] / WEIGHTS_NAME).read_bytes()
    slim = load_adapter(runs["slim"], backbone=bert_backbone)
    kept = load_adapter(runs["kept"], backbone=bert_backbone)
    kept_state, slim_state = kept.trainable_state(), slim.trainable_state()
    # The kept critics are read back (trained), the slim adapter's are freshly initialised.
    assert any(not bool((kept_state[n] == slim_state[n]).all()) for n in critics)
    rows = [{"text": "fly me to rome"}, {"text": "will it rain in oslo"}]
    assert predict(slim, rows) == predict(kept, rows)


LONG = " ".join(["the weather in paris is sunny and warm today"] * 6)  # about 55 tokens


def test_truncation_is_counted_and_reported_at_fit_and_predict(intent_files, tiny_model_dirs, tmp_path, capsys):
    train_file, _ = intent_files
    with train_file.open("a", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerow([LONG, "météo ☀"])
    out = tmp_path / "run"
    assert main(train_args(tiny_model_dirs["bert"], train_file, out, "--method", "linear-probe",
                           "--max-length", "16")) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: " in err and "of 19 training texts had more than max_length=16" in err
    assert json.loads((out / "metrics.json").read_text())["truncated_train"] >= 1
    texts = tmp_path / "in.txt"
    texts.write_text(f"rain\n{LONG}\n", encoding="utf-8")
    assert main(["predict", "--adapter", str(out), "--input", str(texts), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err == ("infoprompt: warning: 1 of 2 inputs had more than max_length=16 tokens and were cut (raise "
                   "--max-length, or read windows with --long-text chunk)\n")


def test_long_text_chunk_reads_windows_and_pools_them(bert_backbone):
    from infoprompt.tasks import Example
    from infoprompt.training.data import encode_examples, prompted_batch

    task, _ = task_from_file_rows()
    chunked = make_classifier(bert_backbone, task, "linear-probe", max_length=16, long_text="chunk")
    assert chunked.config.to_json()["long_text"] == "chunk"
    encoded = encode_examples(chunked, [Example(fields={"text": LONG}), Example(fields={"text": "rain"})])
    assert not any(pair.truncated for pair in encoded.pairs)
    features = chunked.features(prompted_batch(chunked, encoded, [0, 1]))
    # By hand: the long text's windows of 14 text tokens, each framed by [CLS] ... [SEP], mean-pooled, averaged.
    tokenizer = bert_backbone.tokenizer
    body = tokenizer(LONG, add_special_tokens=False)["input_ids"]
    pooled = []
    for start in range(0, len(body), 14):
        ids = torch.tensor([[tokenizer.cls_token_id, *body[start:start + 14], tokenizer.sep_token_id]])
        pooled.append(bert_backbone.model(input_ids=ids).last_hidden_state.mean(1)[0])
    assert len(pooled) >= 3 and torch.allclose(features[0], torch.stack(pooled).mean(0), atol=1e-5)
    short = [tokenizer.cls_token_id, *tokenizer("rain", add_special_tokens=False)["input_ids"], tokenizer.sep_token_id]
    assert torch.allclose(features[1], bert_backbone.model(input_ids=torch.tensor([short])).last_hidden_state.mean(1)[0],
                          atol=1e-5)
    with pytest.raises(UserError, match="long_text 'chunk' reads windows of pooled encoder features"):
        make_classifier(bert_backbone, task, "infoprompt", max_length=16, long_text="chunk")


def task_from_file_rows():
    from infoprompt.tasks import user_task

    return user_task("weather", FileColumns(), ["rain", "sun"]), []


def test_eval_file_of_a_builtin_task_is_read_like_its_splits(bert_backbone, toy_examples, tmp_path, capsys):
    model = make_classifier(bert_backbone, "sst2", "linear-probe", max_length=32)
    train(model, toy_examples)
    model.save_pretrained(tmp_path / "a")
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\na great movie\t1\nboring dull plot\t0\n", encoding="utf-8")
    assert main(["eval", "--adapter", str(tmp_path / "a"), "--eval-file", str(dev), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 2
    dev.write_text("sentence\tlabel\na great movie\t7\n", encoding="utf-8")
    assert main(["eval", "--adapter", str(tmp_path / "a"), "--eval-file", str(dev), "--quiet"]) == 2
    assert "dev.tsv:2" in capsys.readouterr().err


def test_predict_prefers_the_training_column_over_the_field_name(bert_backbone, tmp_path):
    from infoprompt.inputs import read_inputs

    task, _ = task_from_file(write_intents(tmp_path / "t.csv", 2), FileColumns(text_column="utterance",
                                                                                 label_column="intent"))
    both = tmp_path / "both.csv"
    both.write_text("text,utterance\nignored,fly me to rome\n", encoding="utf-8")
    assert read_inputs(str(both), task).rows == [{"text": "fly me to rome"}]
    fields = tmp_path / "fields.jsonl"
    fields.write_text('{"text": "fly me to rome"}\n', encoding="utf-8")
    assert read_inputs(str(fields), task).rows == [{"text": "fly me to rome"}]
    with pytest.raises(UserError, match=r"in.csv:1: header \['body'\] lacks column\(s\) utterance or text"):
        (tmp_path / "in.csv").write_text("body\nhello\n", encoding="utf-8")
        read_inputs(str(tmp_path / "in.csv"), task)


def test_a_parquet_training_file(intent_files, tiny_model_dirs, tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow

    with intent_files[0].open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    table = pyarrow.table({"utterance": [r["utterance"] for r in rows], "intent": [r["intent"] for r in rows]})
    pq.write_table(table, tmp_path / "intents.parquet")
    out = tmp_path / "run"
    assert main(train_args(tiny_model_dirs["bert"], tmp_path / "intents.parquet", out, "--method", "linear-probe",
                           "--shots", "3")) == 0
    record = json.loads((out / "metrics.json").read_text())
    assert record["train_label_counts"] == dict.fromkeys(sorted(INTENTS), 3)
    assert read_adapter_config(out).labels == tuple(sorted(INTENTS))


def test_predict_reads_plain_lines_on_stdin_in_a_fresh_process(intent_files, tiny_model_dirs, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_args(tiny_model_dirs["bert"], intent_files[0], out, "--method", "linear-probe")) == 0
    done = subprocess.run([sys.executable, "-m", "infoprompt.cli", "predict", "--adapter", str(out), "--input", "-",
                           "--quiet"], input="will it rain in lima\n{\"utterance\": \"play jazz\"}\n",
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["line"] for row in rows] == [1, 2] and all(row["label"] in INTENTS for row in rows)
