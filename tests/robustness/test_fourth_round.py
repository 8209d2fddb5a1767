"""Regression tests of issue 56, one section per class: user text escaped for each foreign format, bounded memory
for every input, settings checked where they enter, ``Classifier`` checks, invisible text by Unicode property,
and usage errors before any data is read."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from robust_helpers import listing, run_cli

from infoprompt.errors import UserError

PROBE_ARGS = ("--method", "linear-probe", "--max-length", "32", "--quiet")
# Labels a hostile file may carry: formulas (OWASP's list), a quote, markup, mathtext, line breaks.
NASTY_LABELS = ("=cmd|' /C calc'!A0", "+1", "-2", "@SUM(A1)", "\tx", "\rx", "'=x", "$\\frac$", "a_b^c", "<b>x</b>")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# -- class 1: user text escaped for each foreign format ------------------------------------------------------------
label_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(labels=st.lists(st.one_of(label_text, st.sampled_from(NASTY_LABELS)), min_size=2, max_size=4, unique=True),
       kept=st.one_of(label_text, st.sampled_from(NASTY_LABELS)))
def test_predict_csv_cells_never_start_a_formula_and_read_back_by_the_documented_rule(labels, kept):
    from infoprompt.prediction_format import PredictionWriter, csv_text

    writer = PredictionWriter("csv", labels, multi_label=False, top_k=2, keep=["id"])
    probabilities = {label: 1.0 / len(labels) for label in labels}
    text = writer.header() + writer.lines([2], [{"label": labels[0], "probabilities": probabilities}], [{"id": kept}])
    header, row = list(csv.reader(io.StringIO(text, newline="")))
    for cell in header + row:
        assert not cell.startswith(FORMULA_STARTS), cell  # no cell a spreadsheet would evaluate
    assert [csv_text(cell) for cell in header[3:3 + len(labels)]] == [f"probability_{label}" for label in labels]
    assert csv_text(row[1]) == kept and csv_text(row[2]) == labels[0] and csv_text(row[-4]) in labels


def test_report_csvs_escape_task_and_method_names_but_not_numbers():
    from infoprompt.experiments.report_format import cells_csv
    from infoprompt.experiments.tables import Stat

    text = cells_csv({("@backbone", "-method", "=HYPERLINK(1)", 8, 0): Stat(values=(-0.25, -0.5), seeds=(1, 2))})
    header, row = list(csv.reader(io.StringIO(text)))
    assert row[:3] == ["'@backbone", "'-method", "'=HYPERLINK(1)"]
    assert float(row[5]) == -0.375  # a negative mean stays a number


def test_predict_csv_escapes_a_formula_label_end_to_end_and_keeps_columns(tmp_path, tiny_bert):
    rows = [{"text": text, "label": label, "id": f"r{i}"} for i, (text, label) in
            enumerate([("great movie", "=cmd|' /C calc'!A0"), ("bad film", "+1"), ("lovely story", "=cmd|' /C calc'!A0"),
                       ("boring story", "+1")])]
    train = jsonl(tmp_path / "train.jsonl", rows)
    assert run_cli("train", "--train-file", train, *PROBE_ARGS, "--backbone", tiny_bert, "--out",
                   tmp_path / "run").code == 0
    result = run_cli("predict", "--adapter", tmp_path / "run", "--input", train, "--format", "csv", "--quiet",
                     "--keep-columns", "id,text")
    assert result.code == 0, result.err
    table = list(csv.reader(io.StringIO(result.out, newline="")))
    assert table[0] == ["line", "id", "text", "label", "probability_+1", "probability_=cmd|' /C calc'!A0"]
    assert [row[1] for row in table[1:]] == ["r0", "r1", "r2", "r3"]
    assert {row[3] for row in table[1:]} <= {"'+1", "'=cmd|' /C calc'!A0"}
    lines = [json.loads(line) for line in run_cli("predict", "--adapter", tmp_path / "run", "--input", train,
                                                  "--quiet", "--keep-columns", "id").out.splitlines()]
    assert [line["input"] for line in lines] == [{"id": f"r{i}"} for i in range(4)]


@pytest.mark.parametrize(("columns", "message"), [
    ("nope", "train.jsonl:1: no column 'nope' to keep (--keep-columns)"),
    ("id,,text", "argument --keep-columns: expected column names separated by commas"),
    ("id,id", "argument --keep-columns: column 'id' is named more than once"),
    ("label", "--keep-columns: column 'label' is also a column predict writes"),
])
def test_keep_columns_mistakes_are_one_line_before_the_model_loads(tmp_path, tiny_run, columns, message):
    train = jsonl(tmp_path / "train.jsonl", [{"sentence": "great movie", "id": 1, "label": 1}])
    before = listing(tmp_path)
    result = run_cli("predict", "--adapter", tiny_run, "--input", train, "--format", "csv", "--keep-columns", columns,
                     "--output", tmp_path / "out.csv")
    assert result.one_line_error and message in result.err, result.err
    assert listing(tmp_path) == before


def test_keep_columns_of_a_txt_input_is_the_tasks_field(tmp_path, tiny_run):
    (tmp_path / "in.txt").write_text("=1+1 great movie\n", encoding="utf-8")
    result = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.txt", "--format", "csv", "--quiet",
                     "--keep-columns", "sentence")
    assert result.code == 0, result.err
    assert list(csv.reader(io.StringIO(result.out)))[1][:2] == ["1", "'=1+1 great movie"]
    refused = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.txt", "--keep-columns", "id")
    assert refused.one_line_error and "no column 'id' to keep" in refused.err


plot_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=10)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(labels=st.lists(st.one_of(plot_text, st.sampled_from(NASTY_LABELS)), min_size=2, max_size=3, unique=True),
       title=plot_text)
def test_plots_draw_user_text_literally_never_as_mathtext(tmp_path, monkeypatch, labels, title):
    import matplotlib.mathtext

    from infoprompt.eval_report import plot_confusion

    def no_mathtext(*args, **kwargs):
        raise AssertionError("user text reached mathtext")

    monkeypatch.setattr(matplotlib.mathtext.MathTextParser, "parse", no_mathtext)
    matrix = {"labels": labels, "matrix": [[1] * len(labels) for _ in labels]}
    plot_confusion(matrix, tmp_path / "confusion.png", title)
    assert (tmp_path / "confusion.png").read_bytes().startswith(b"\x89PNG")


# -- class 5: invisible text by Unicode property -------------------------------------------------------------------
DEFAULT_IGNORABLE = ("\u3164", "\u115f", "\u1160", "\uffa0", "\u034f", "\u180b", "\u180e", "\u180f", "\ufe00",
                     "\ufe0f", "\U000e0001", "\U000e0100", "\u2060", "\u00ad", "\u200b", "\ufeff")
invisible = st.text(st.one_of(st.sampled_from(DEFAULT_IGNORABLE),
                              st.characters(categories=("Zs", "Zl", "Zp", "Cc", "Cf", "Mn", "Me"))), min_size=1)


@settings(max_examples=300, deadline=None)
@given(text=invisible)
def test_text_of_invisible_characters_only_is_empty(text):
    from infoprompt.gate import check_texts

    with pytest.raises(UserError, match="empty text field"):
        check_texts({"text": text}, "texts[0]")


@settings(max_examples=200, deadline=None)
@given(text=invisible, letter=st.characters(categories=("L", "N", "P", "S"), exclude_characters=DEFAULT_IGNORABLE))
def test_one_visible_character_makes_text(text, letter):
    from infoprompt.gate import is_blank

    assert not is_blank(text + letter + text)


@pytest.mark.parametrize("text", ["\u3164", "\u034f\u034f", "\u115f\u1160", "\ufe0f"])
def test_invisible_text_is_refused_from_a_file_the_api_and_the_server(tmp_path, tiny_run, tiny_model_dirs, text):
    pytest.importorskip("fastapi")
    import shutil

    from fastapi.testclient import TestClient

    from infoprompt import Classifier
    from infoprompt.serving.app import create_app

    path = jsonl(tmp_path / "in.jsonl", [{"sentence": "great movie"}, {"sentence": text}])
    result = run_cli("predict", "--adapter", tiny_run, "--input", path, "--output", tmp_path / "out.jsonl")
    assert result.one_line_error and "in.jsonl:2: empty text field(s) sentence" in result.err, result.err
    assert not (tmp_path / "out.jsonl").exists()
    with pytest.raises(UserError, match=r"texts\[1\]: empty text field"):
        Classifier(method="linear-probe", backbone=str(tiny_model_dirs["bert"])).fit(["good", text], ["a", "b"])
    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    app = create_app({"run": tiny_run}, backbone_dirs=[tiny_model_dirs["bert"]])
    with TestClient(app, raise_server_exceptions=False) as api:
        answer = api.post("/v1/adapters/run/predict", json={"inputs": ["good film", text]})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["message"] == "inputs[1]: empty text field(s) sentence"


# -- class 3: every setting checked where it enters -----------------------------------------------------------------
@pytest.mark.parametrize(("value", "kept", "note"), [
    ("abc", None, "OMP_NUM_THREADS='abc' is not a positive whole number; ignored"),
    ("0", None, "OMP_NUM_THREADS='0' is not a positive whole number"),
    ("-2", None, "OMP_NUM_THREADS='-2' is not a positive whole number"),
    ("4,0", None, "OMP_NUM_THREADS='4,0' is not a positive whole number"),
    ("99999", "8", "OMP_NUM_THREADS=99999 is more than the 8 CPUs of this machine; using 8"),
    ("99999,2", "8,2", "using 8,2"),
    ("3", "3", None),
])
def test_thread_variables_are_read_before_torch_and_fixed_in_the_environment(monkeypatch, value, kept, note):
    from infoprompt import threads

    monkeypatch.setattr(threads, "machine_cpus", lambda: 8)
    environ = {"OMP_NUM_THREADS": value, "MKL_NUM_THREADS": "many", "PATH": "/bin"}
    notes = threads.check_thread_environment(environ)
    assert environ.get("OMP_NUM_THREADS") == kept and "MKL_NUM_THREADS" not in environ and environ["PATH"] == "/bin"
    assert notes[-1] == "MKL_NUM_THREADS='many' is not a positive whole number; ignored (the default count applies)"
    assert (note is None and len(notes) == 1) or note in notes[0]


def test_a_thread_count_over_the_machine_is_cut_to_it(monkeypatch, capsys):
    from infoprompt import threads

    monkeypatch.setattr(threads, "machine_cpus", lambda: 2)
    monkeypatch.setattr(threads, "usable_cpus", lambda: (2, "cpu-count"))
    assert threads.choose_threads(100000, environ={}).threads == 2
    assert threads.choose_threads(environ={"OMP_NUM_THREADS": "99999"}).threads == 2
    import torch

    before = torch.get_num_threads()
    try:
        assert threads.use_threads(100000).threads == 2
    finally:
        torch.set_num_threads(before)
    assert capsys.readouterr().err == ("infoprompt: warning: 100000 threads (--threads) are more than the 2 CPUs of "
                                       "this machine; using 2\n")


def test_importing_infoprompt_fixes_thread_variables_before_torch_loads():
    import os
    import subprocess
    import sys

    code = ("import os, infoprompt, torch; from infoprompt.threads import use_threads; "
            "print(os.environ.get('OMP_NUM_THREADS')); use_threads(1)")
    env = {**os.environ, "OMP_NUM_THREADS": "-4"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == "None\n", done.stderr
    assert done.stderr == ("infoprompt: warning: OMP_NUM_THREADS='-4' is not a positive whole number; ignored "
                           "(the default count applies)\n")


def test_garbage_thread_variables_never_reach_libgomp(tiny_run, tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "in.txt").write_text("great movie\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "garbage", "MKL_NUM_THREADS": "0"}
    done = subprocess.run([sys.executable, "-m", "infoprompt.cli", "predict", "--adapter", str(tiny_run), "--input",
                           str(tmp_path / "in.txt"), "--quiet", "--threads", "100000"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "libgomp" not in done.stderr and done.stderr.count("\n") == 3, done.stderr
    assert "OMP_NUM_THREADS='garbage' is not a positive whole number" in done.stderr
    assert json.loads(done.stdout)["line"] == 1


# -- class 2: bounded memory for every input channel ------------------------------------------------------------
def test_a_token_file_is_read_no_further_than_its_limit(tmp_path):
    from infoprompt.serving.cli import MAX_TOKEN_BYTES, read_token

    with pytest.raises(UserError, match=f"--token-file /dev/zero: more than {MAX_TOKEN_BYTES} bytes"):
        read_token("/dev/zero")
    (tmp_path / "token").write_text("s3cret\n")
    assert read_token(str(tmp_path / "token")) == "s3cret"


def test_serve_with_dev_zero_as_token_file_is_one_line(tiny_run):
    pytest.importorskip("fastapi")
    result = run_cli("serve", "--adapter", f"run={tiny_run}", "--token-file", "/dev/zero", "--port", "1")
    assert result.one_line_error and "more than 4096 bytes" in result.err, result.err


@pytest.fixture
def small_pieces(monkeypatch):
    """Line pieces of 64 bytes and lines of at most 1 kB, so that over-long lines are cheap to make."""
    from infoprompt import io_utils

    monkeypatch.setattr(io_utils, "LINE_PIECE_BYTES", 64)
    monkeypatch.setattr(io_utils, "MAX_LINE_BYTES", 1024)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "latin-1"])
def test_an_over_long_txt_line_keeps_its_head_and_tail_and_nothing_between(small_pieces, tmp_path, encoding):
    from infoprompt.inputs import read_inputs
    from infoprompt.tasks import get_task

    text = "é" + "x" * 5000 + "ü"
    (tmp_path / "in.txt").write_bytes(f"short\n{text}\nlast\n".encode(encoding))
    inputs = read_inputs(str(tmp_path / "in.txt"), get_task("sst2"), encoding, cut_chars=10)
    assert [row["sentence"] for row in inputs.rows] == ["short", "éxxxxxxxxx" + "xxxxxxxxxü", "last"]
    assert inputs.lines == [1, 2, 3]


@pytest.mark.parametrize("suffix", [".jsonl", ".tsv", ".csv"])
def test_an_over_long_line_of_json_or_columns_is_one_line(small_pieces, tmp_path, suffix):
    from infoprompt.inputs import read_inputs
    from infoprompt.tasks import get_task

    long = "x" * 5000
    body = {".jsonl": json.dumps({"sentence": long}) + "\n", ".tsv": f"sentence\n{long}\n",
            ".csv": f"sentence\n{long}\n"}[suffix]
    (tmp_path / f"in{suffix}").write_text(body, encoding="utf-8")
    with pytest.raises(UserError, match="the line is longer than 1024 bytes, the most a line of JSON or columns"):
        read_inputs(str(tmp_path / f"in{suffix}"), get_task("sst2"), cut_chars=10)
    (tmp_path / f"ok{suffix}").write_text(body.replace(long, "x" * 500), encoding="utf-8")
    assert read_inputs(str(tmp_path / f"ok{suffix}"), get_task("sst2")).rows == [{"sentence": "x" * 500}]


def test_predict_on_an_over_long_txt_line_gives_what_the_whole_line_gives(tmp_path, tiny_run, monkeypatch):
    from infoprompt import io_utils

    words = " ".join(f"w{i}" for i in range(20000))
    (tmp_path / "in.txt").write_text(words + "\n", encoding="utf-8")
    whole = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.txt", "--quiet")
    monkeypatch.setattr(io_utils, "LINE_PIECE_BYTES", 256)
    cut = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.txt", "--quiet")
    assert whole.code == cut.code == 0 and json.loads(whole.out) == json.loads(cut.out)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_training_file_over_the_limit_is_refused_before_it_is_read(tmp_path, tiny_bert, monkeypatch, suffix):
    from infoprompt.tasks import files

    monkeypatch.setattr(files, "MAX_DATA_FILE_BYTES", 100)
    train = tmp_path / f"train{suffix}"
    train.write_text("text,label\n" + "good film,pos\nbad film,neg\n" * 10 if suffix == ".csv" else
                     "".join(json.dumps({"text": "good film", "label": "pos"}) + "\n" for _ in range(10)))
    result = run_cli("train", "--train-file", train, *PROBE_ARGS, "--backbone", tiny_bert, "--out", tmp_path / "run")
    assert result.one_line_error and "more than the 100 bytes" in result.err, result.err
    assert not (tmp_path / "run").exists()


# -- class 4: Classifier checks every parameter at construction and set_params --------------------------------
WRONG_VALUES = (None, "seven", 7, True, float("nan"), -1, 0)


def _kinds_methods() -> list[tuple[str, str]]:
    from infoprompt.kinds.registry import KINDS, METHODS

    return [(kind, next(m.name for m in METHODS.values() if m.kind == kind)) for kind in KINDS]


def _plainly_wrong(annotation: str, value: object) -> bool:
    """Whether ``value`` cannot be an option of type ``annotation`` at all (whatever its range)."""
    arms = {arm.strip() for arm in annotation.split("|")}
    if value is None:
        return "None" not in arms
    if isinstance(value, float) and value != value:
        return True  # NaN
    if isinstance(value, bool):
        return "bool" not in arms
    if isinstance(value, str):
        return not any(arm == "str" or arm.startswith("tuple[str") for arm in arms)
    return "int" not in arms and "float" not in arms  # an int for a text


@pytest.mark.parametrize(("kind", "method"), _kinds_methods())
def test_every_option_of_every_kind_is_checked_at_construction_and_set_params(kind, method):
    import dataclasses

    from infoprompt import Classifier
    from infoprompt.kinds.config import ClassifierConfig
    from infoprompt.kinds.registry import KINDS

    options = KINDS[kind].options
    shared = {"max_length": "int", "truncate": "bool", "long_text": "str", "template": "str | None",
              "threshold": "float | None"}
    fields = {f.name: str(f.type) for f in dataclasses.fields(options) if f.name not in options.preset_names()}
    base = Classifier(method=method, backbone="tiny")
    for name, annotation in {**shared, **fields}.items():
        for value in WRONG_VALUES:
            try:
                ClassifierConfig.create(task="classifier", method=method, backbone="-", **{name: value})
                valid = True
            except UserError:
                valid = False
            try:
                Classifier(method=method, backbone="tiny", **{name: value})
                accepted = True
            except UserError as error:  # a ValueError with one line, never a TypeError or AttributeError
                accepted = False
                assert "\n" not in str(error) and isinstance(error, ValueError)
            assert accepted == valid, (name, value)  # what construction accepts, fit accepts
            assert not (accepted and _plainly_wrong(annotation, value)), (name, value)
            if not accepted:
                with pytest.raises(UserError):
                    base.set_params(**{name: value})
                assert name not in base.get_params() or base.get_params()[name] != value


@pytest.mark.parametrize(("call", "message"), [
    (lambda C: C(backbone=42), "backbone must be a name or path"),
    (lambda C: C(backbone=None), "backbone must be a name or path"),
    (lambda C: C(method=None), "method must be a method name (a string; see infoprompt methods), got NoneType"),
    (lambda C: C(method=42), "method must be a method name (a string; see infoprompt methods), got int 42"),
    (lambda C: C(method="top-lora", top_layers=0), "top_layers must be a positive integer, got 0"),
    (lambda C: C.load("/nonexistent", backbone=42), "backbone must be a name or path"),
    (lambda C: C(method="linear-probe").set_params(backbone=3.5), "backbone must be a name or path"),
])
def test_bad_classifier_arguments_are_user_errors(call, message):
    from infoprompt import Classifier

    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(Classifier)


def test_grid_search_over_a_bad_value_gives_its_reason(tiny_bert):
    from sklearn.model_selection import GridSearchCV

    from infoprompt import Classifier

    texts, labels = ["great movie", "bad film", "lovely story", "boring story"] * 2, ["pos", "neg"] * 4
    search = GridSearchCV(Classifier(method="linear-probe", backbone=str(tiny_bert)), {"max_length": [32, 0]}, cv=2)
    with pytest.raises(UserError, match="max_length must be a positive integer, got 0"):
        search.fit(texts, labels)


@pytest.fixture(scope="module")
def top_lora_run(tmp_path_factory, tiny_bert) -> Path:
    pytest.importorskip("setfit")
    work = tmp_path_factory.mktemp("top-lora")
    rows = [{"text": text, "label": label} for text, label in
            [("great movie", "pos"), ("bad film", "neg"), ("lovely story", "pos"), ("boring story", "neg")] * 2]
    train = jsonl(work / "train.jsonl", rows)
    result = run_cli("train", "--train-file", train, "--method", "top-lora", "--epochs", "1", "--max-length", "32",
                     "--quiet", "--backbone", tiny_bert, "--out", work / "run")
    assert result.code == 0, result.err
    return work / "run"


@pytest.mark.parametrize(("field", "value", "message"), [
    ("top_layers", 99, "options.top_layers is 99, but the adapter's weights and"),
    ("top_layers", 1, "options.top_layers is 1, but"),
    ("lora_rank", 4, "options.lora_rank is 4, but the adapter's weights and"),
    ("lora_alpha", 3, "options.lora_alpha is 3, but"),
])
def test_a_saved_adapters_options_must_agree_with_its_weights(tmp_path, top_lora_run, field, value, message):
    import shutil

    adapter = tmp_path / "adapter"
    shutil.copytree(top_lora_run, adapter)
    (tmp_path / "in.txt").write_text("good film\n")
    assert run_cli("predict", "--adapter", adapter, "--input", tmp_path / "in.txt", "--quiet").code == 0
    record = json.loads((adapter / "infoprompt_adapter.json").read_text())
    record["options"][field] = value
    (adapter / "infoprompt_adapter.json").write_text(json.dumps(record))
    before = listing(tmp_path)
    for command in (("predict", "--adapter", adapter, "--input", tmp_path / "in.txt"),
                    ("eval", "--adapter", adapter, "--eval-file", top_lora_run.parent / "train.jsonl")):
        result = run_cli(*command)
        assert result.one_line_error and "infoprompt_adapter.json: " + message in result.err, result.err
    assert listing(tmp_path) == before


# -- class 6: usage errors first ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("flags", "message"), [
    (("--register-model", "m"), "--register-model needs --track mlflow"),
    (("--track", "mlflow", "--register-model", ""), "--register-model: expected a model name, got an empty one"),
    (("--tasks", "sst2"), "give --tasks (built-in tasks) or --train-file (your own data), not both"),
])
def test_sweep_usage_errors_come_before_the_data(tmp_path, monkeypatch, flags, message):
    from infoprompt.experiments import grid

    monkeypatch.setattr(grid, "load_cells", lambda *a, **k: pytest.fail("the grid was read"))
    (tmp_path / "train.csv").write_text("text,label\ngood,a\n", encoding="utf-8")  # no eval file: a note
    before = listing(tmp_path)
    result = run_cli("sweep", "--train-file", tmp_path / "train.csv", "--results", tmp_path / "results", *flags)
    assert result.one_line_error and message in result.err, result.err
    assert listing(tmp_path) == before


@pytest.mark.parametrize("plots", ["loop", "dangling", ""])
def test_eval_plots_on_an_unusable_path_fails_before_the_evaluation(tmp_path, tiny_run, monkeypatch, plots):
    from infoprompt.kinds import factory

    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "dir")
    monkeypatch.setattr(factory, "load_saved", lambda *a, **k: pytest.fail("the adapter was loaded"))
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\ngreat movie\t1\n", encoding="utf-8")
    result = run_cli("eval", "--adapter", tiny_run, "--eval-file", "dev.tsv", "--plots", plots)
    assert result.one_line_error, result.err
    assert ("leads nowhere" in result.err) if plots else ("--plots: expected a directory" in result.err)
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("make", ["config", "grid", "adapter"])
def test_documents_are_read_no_further_than_their_limit(tmp_path, tiny_run, make):
    """A sparse 8 GiB file where a run config, a grid or an adapter's metadata should be: one line, not 8 GiB."""
    import os
    import shutil

    def huge(path: Path) -> Path:
        with path.open("wb") as handle:
            os.ftruncate(handle.fileno(), 8 << 30)  # no disk used: a hole of zeros
        return path

    if make == "config":
        result = run_cli("train", "--config", huge(tmp_path / "run.yaml"), "--out", tmp_path / "out")
    elif make == "grid":
        result = run_cli("sweep", "--grid", huge(tmp_path / "grid.yaml"), "--results", tmp_path / "results", "--list")
    else:
        shutil.copytree(tiny_run, tmp_path / "adapter")
        huge(tmp_path / "adapter" / "infoprompt_adapter.json")
        (tmp_path / "in.txt").write_text("good film\n")
        result = run_cli("predict", "--adapter", tmp_path / "adapter", "--input", tmp_path / "in.txt")
    assert result.one_line_error and "more than" in result.err, result.err
