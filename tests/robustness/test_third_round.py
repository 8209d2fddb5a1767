"""Regression tests of issue 46: one text gate and one document reader on every path, bounded waits on MLflow and
Ray, report directories that know what they wrote, labels, half-read adapter files, and no tracebacks or 500s."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import socket
import threading
from pathlib import Path

import pytest
from robust_helpers import TRAIN_ARGS, run_cli

from infoprompt.errors import UserError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "adapters"
# A linear probe: trains in a second on the tiny encoder, so a test that reaches training stays short.
PROBE_ARGS = ("--method", "linear-probe", "--max-length", "32", "--quiet")  # the probe reads no --epochs


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def labelled(*extra: dict) -> list[dict]:
    """Four good rows of two classes, then ``extra``."""
    good = [{"text": "great movie", "label": "pos"}, {"text": "bad film", "label": "neg"},
            {"text": "lovely story", "label": "pos"}, {"text": "boring story", "label": "neg"}]
    return [*good, *extra]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class NotRay(http.server.BaseHTTPRequestHandler):
    """An HTTP/1 service: what a wrong --address or --tracking-uri may find listening."""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_error(404)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def http_service():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotRay)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


# -- one text gate -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    ("good \ud800", "train.jsonl:1: field text holds a lone surrogate (U+D800) at character 6"),
    ("\u200b\u200d", "train.jsonl:1: empty text field(s) text"),
])
def test_a_bad_text_in_a_training_file_is_one_line(tmp_path, tiny_bert, text, message):
    train = jsonl(tmp_path / "train.jsonl", [{"text": text, "label": "pos"}, *labelled()])
    result = run_cli("train", "--train-file", train, *PROBE_ARGS, "--backbone", tiny_bert, "--out", tmp_path / "run")
    assert result.one_line_error and message in result.err, result.err
    assert not (tmp_path / "run").exists()


def test_a_bad_text_in_an_evaluation_file_is_one_line(tmp_path, tiny_bert):
    train = jsonl(tmp_path / "train.jsonl", labelled())
    dev = jsonl(tmp_path / "dev.jsonl", [{"text": "fine \udfff", "label": "pos"}])
    result = run_cli("train", "--train-file", train, "--eval-file", dev, *PROBE_ARGS, "--backbone", tiny_bert,
                     "--out", tmp_path / "run")
    assert result.one_line_error and "dev.jsonl:1: field text holds a lone surrogate (U+DFFF)" in result.err


def test_a_builtin_span_task_checks_its_texts(tmp_path):
    from infoprompt.tasks import get_task, load_split

    row = {"id": 1, "text": "the man works for \ud800 the company", "e1": "man", "e1_span": [4, 7],
           "e2": "company", "e2_span": [24, 31], "relation": "Other"}
    folder = tmp_path / "semeval2010_task8"
    folder.mkdir()
    jsonl(folder / "test.jsonl", [row])
    with pytest.raises(UserError, match="lone surrogate"):
        load_split(get_task("semeval"), "test", tmp_path)


@pytest.fixture(scope="module")
def fitted_classifier(tiny_model_dirs):
    from infoprompt import Classifier

    classifier = Classifier(method="linear-probe", backbone=str(tiny_model_dirs["bert"]), max_length=32)
    return classifier.fit(["great movie", "bad film", "lovely story", "boring story"] * 2, ["pos", "neg"] * 4)


@pytest.mark.parametrize(("text", "message"), [
    ("a \ud800", "texts[1]: field text holds a lone surrogate"),
    ("\ufeff\u200b", "texts[1]: empty text field(s) text"),
])
def test_the_classifier_passes_the_same_gate(fitted_classifier, text, message):
    from infoprompt import Classifier

    with pytest.raises(UserError, match=re.escape(message)):
        fitted_classifier.predict(["good film", text])
    with pytest.raises(UserError, match="texts\\[1\\]"):
        Classifier(method="linear-probe", backbone=fitted_classifier.backbone).fit(["good film", text], ["a", "b"])


def test_user_error_is_a_value_error():
    assert issubclass(UserError, ValueError)


# -- one document reader: depth and size limits ------------------------------------------------------------------
def test_a_label_nested_200000_deep_in_a_training_file_is_one_line(tmp_path, tiny_bert):
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "a", "label": ' + "[" * 200_000 + "]" * 200_000 + "}\n" +
                     "".join(json.dumps(row) + "\n" for row in labelled()))
    result = run_cli("train", "--train-file", train, *PROBE_ARGS, "--backbone", tiny_bert, "--out", tmp_path / "run")
    assert result.one_line_error and "train.jsonl:1: JSON nested too deeply" in result.err


@pytest.mark.parametrize("text", [
    "epochs: " + "[" * 50_000 + "]" * 50_000 + "\n",
    "".join(" " * i + f"k{i}:\n" for i in range(1000)) + " " * 1000 + "v\n",
])
def test_deeply_nested_yaml_configs_and_grids_are_one_line(tmp_path, text):
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    for args in (("train", "--config", path), ("sweep", "--grid", path, "--results", tmp_path / "res", "--list")):
        result = run_cli(*args)
        assert result.one_line_error and "deep.yaml:" in result.err and "nested" in result.err, result.err[-500:]
    assert not (tmp_path / "res").exists()


def test_deeply_nested_toml_is_one_line(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("epochs = " + "[" * 50_000 + "]" * 50_000 + "\n")
    result = run_cli("train", "--config", path)
    assert result.one_line_error and "deep.toml: TOML nested too deeply" in result.err


def test_a_config_over_the_size_limit_is_one_line(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (2 << 20) + "\nepochs: 1\n")
    result = run_cli("train", "--config", path)
    assert result.one_line_error and "big.yaml:" in result.err and "more than the" in result.err


# -- bounded waits on outside services ---------------------------------------------------------------------------
def test_an_mlflow_server_that_does_not_answer_stops_the_run_before_it_starts(tmp_path, sst2_dir, tiny_bert,
                                                                              monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # keeps a run that does start (a regression) short
    uri = f"http://127.0.0.1:{closed_port()}"
    result = run_cli("train", *TRAIN_ARGS, "--backbone", tiny_bert, "--data-dir", sst2_dir, "--out", tmp_path / "run",
                     "--track", "mlflow", "--tracking-uri", uri)
    assert result.one_line_error and f"--tracking-uri {uri}: no MLflow server answers there" in result.err
    assert not (tmp_path / "run").exists()


def test_a_service_that_is_no_mlflow_server_stops_the_run_before_it_starts(tmp_path, sst2_dir, tiny_bert,
                                                                           http_service, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    result = run_cli("train", *TRAIN_ARGS, "--backbone", tiny_bert, "--data-dir", sst2_dir, "--out", tmp_path / "run",
                     "--track", "mlflow", "--tracking-uri", f"http://127.0.0.1:{http_service}")
    assert result.one_line_error and "does not answer as an MLflow tracking server" in result.err
    assert not (tmp_path / "run").exists()


def test_logging_to_mlflow_runs_under_bounded_retries_and_timeouts(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from infoprompt.tracking import HTTP_BOUNDS, MlflowTracker

    for name in HTTP_BOUNDS:
        monkeypatch.delenv(name, raising=False)
    seen = {}

    def spy(self, run_dir, run_name, tags):
        seen.update({name: __import__("os").environ.get(name) for name in HTTP_BOUNDS})
        from mlflow.exceptions import MlflowException

        raise MlflowException("API request to endpoint /api/2.0/mlflow/runs/create failed\nmore lines")

    monkeypatch.setattr(MlflowTracker, "_log", spy)
    with pytest.raises(UserError) as caught:
        MlflowTracker("http://127.0.0.1:1").log_run(tmp_path, run_name="x", tags={})
    assert seen == HTTP_BOUNDS and int(HTTP_BOUNDS["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]) <= 3
    assert "the run finished, but logging it to http://127.0.0.1:1 failed" in str(caught.value)
    assert "\n" not in str(caught.value) and all(name not in __import__("os").environ for name in HTTP_BOUNDS)


@pytest.mark.parametrize("under", ["", "/sub"])
def test_a_tracking_uri_that_is_a_file_is_one_line_before_the_run(tmp_path, sst2_dir, tiny_bert, under):
    pytest.importorskip("mlflow")
    (tmp_path / "store").write_text("not a directory")
    result = run_cli("train", *TRAIN_ARGS, "--backbone", tiny_bert, "--data-dir", sst2_dir, "--out", tmp_path / "run",
                     "--track", "mlflow", "--tracking-uri", f"{tmp_path / 'store'}{under}")
    assert result.one_line_error and "the MLflow store must be a directory" in result.err
    assert not (tmp_path / "run").exists()


def test_a_service_that_is_no_ray_head_is_one_line_without_ray(tmp_path, http_service, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init was called"))
    address = f"127.0.0.1:{http_service}"
    result = run_cli("sweep", "--results", tmp_path / "res", "--tasks", "sst2", "--methods", "warp", "--shots", "8",
                     "--n-prompts", "1", "--seeds", "1", "--quiet", "--backend", "ray", "--address", address)
    assert result.one_line_error and f"--address {address}: the service there is no Ray head" in result.err
    assert not (tmp_path / "res").exists()


def test_a_grpc_server_passes_the_ray_head_check():
    pytest.importorskip("ray")
    from infoprompt.experiments.ray_backend import _check_reachable

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer():
            connection, _ = server.accept()
            with connection:
                connection.recv(64)
                connection.sendall(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # an empty SETTINGS frame, as gRPC sends

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        _check_reachable(f"127.0.0.1:{server.getsockname()[1]}")
        thread.join(10)


@pytest.mark.parametrize("verbose", [False, True])
def test_rays_own_log_stays_out_of_the_terminal_unless_verbose(monkeypatch, verbose):
    import logging

    from infoprompt.experiments import ray_backend

    calls = []

    class FakeRay:
        def is_initialized(self):
            return False

        def init(self, **kwargs):
            calls.append(kwargs)

    monkeypatch.delenv("RAY_BACKEND_LOG_LEVEL", raising=False)
    assert ray_backend.connect(FakeRay(), ray_backend.RayOptions(), verbose=verbose)
    (kwargs,) = calls
    assert (kwargs["logging_level"] == logging.ERROR) != verbose
    assert ("RAY_BACKEND_LOG_LEVEL" in __import__("os").environ) != verbose


# -- the report directory knows what it wrote ---------------------------------------------------------------------
def stored_results(root: Path) -> Path:
    from infoprompt.experiments.grid import Cell
    from infoprompt.experiments.store import write_record

    for seed, value in ((1, 0.5), (2, 0.7)):
        record = {"task": "sst2", "method": "warp", "shots": 64, "n_prompts": 4, "seed": seed, "backbone": "minilm",
                  "primary_metric": "accuracy", "metrics": {"accuracy": value}, "status": "ok"}
        write_record(root, Cell("sst2", "warp", 64, 4, seed), record)
    return root


def test_report_leaves_a_folder_with_a_users_report_md_and_cells_csv_alone(tmp_path):
    results = stored_results(tmp_path / "results")
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    mine = {"report.md": "my chapter", "cells.csv": "my,numbers\n", "table-np-shots=64.md": "my table",
            "paired.csv": "mine", "thesis.tex": "\\begin{document}"}
    for name, text in mine.items():
        (thesis / name).write_text(text)
    result = run_cli("report", results, "--out", thesis)
    assert result.one_line_error and "is not a report directory" in result.err
    assert {p.name: p.read_text() for p in thesis.iterdir()} == mine


def test_report_writes_a_manifest_and_reruns_on_its_own_directory(tmp_path):
    results = stored_results(tmp_path / "results")
    out = tmp_path / "out"
    assert run_cli("report", results, "--out", out).code == 0
    manifest = json.loads((out / "report-manifest.json").read_text())
    assert set(manifest["files"]) == {p.name for p in out.iterdir()} - {"report-manifest.json"}
    (out / "notes.md").write_text("mine")
    assert run_cli("report", results, "--out", out).code == 0
    assert (out / "notes.md").read_text() == "mine"


def edit_own_report(out: Path) -> str:
    (out / "report.md").write_text("my edits")
    return "report.md"


def put_own_cells_csv(out: Path) -> str:
    manifest = json.loads((out / "report-manifest.json").read_text())
    del manifest["files"]["cells.csv"]  # cells.csv is now a file of the user's that the report would write
    (out / "report-manifest.json").write_text(json.dumps(manifest))
    (out / "cells.csv").write_text("mine")
    return "cells.csv"


@pytest.mark.parametrize(("spoil", "message"), [
    (edit_own_report, "report.md was changed since the report wrote it"),
    (put_own_cells_csv, "holds cells.csv, which this report would write but no report wrote"),
])
def test_report_never_replaces_a_file_it_did_not_write(tmp_path, spoil, message):
    results = stored_results(tmp_path / "results")
    out = tmp_path / "out"
    assert run_cli("report", results, "--out", out).code == 0
    name = spoil(out)
    before = (out / name).read_text()
    result = run_cli("report", results, "--out", out)
    assert result.one_line_error and message in result.err
    assert (out / name).read_text() == before


def test_a_report_directory_of_an_earlier_version_is_adopted(tmp_path):
    results = stored_results(tmp_path / "results")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("## Results from `results`\n\nold numbers\n")
    (out / "cells.csv").write_text("backbone,method,task,shots,n_prompts,mean,std,n_seeds,seeds,values\nold\n")
    (out / "table-shots-np=2.md").write_text("a table of an earlier layout")
    (out / "notes.md").write_text("mine")
    assert run_cli("report", results, "--out", out).code == 0
    assert "old numbers" not in (out / "report.md").read_text()
    assert (out / "notes.md").read_text() == "mine" and (out / "table-shots-np=2.md").exists()
    assert "report.md" in json.loads((out / "report-manifest.json").read_text())["files"]


# -- labels ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("missing", ["null", "None", "NA", "N/A", "NULL"])
def test_csv_labels_that_mark_a_missing_value_are_refused(tmp_path, tiny_bert, missing):
    train = tmp_path / "train.csv"
    train.write_text(f"text,label\ngreat movie,pos\nbad film,neg\nlovely story,{missing}\nboring story,neg\n")
    result = run_cli("train", "--train-file", train, *PROBE_ARGS, "--backbone", tiny_bert, "--out", tmp_path / "run")
    assert result.one_line_error and f"train.csv:4: column 'label': label is '{missing}', which marks a missing" \
        in result.err


def test_json_labels_1_and_string_1_are_refused_as_mixed_types(tmp_path, tiny_bert):
    train = jsonl(tmp_path / "train.jsonl", [{"text": "great movie", "label": 1}, {"text": "bad film", "label": "1"},
                                             {"text": "lovely", "label": 1}])
    result = run_cli("train", "--train-file", train, *PROBE_ARGS, "--backbone", tiny_bert, "--out", tmp_path / "run")
    assert result.one_line_error and "train.jsonl:2: column 'label': label '1' is text, but at " \
        f"{train}:1 the label '1' is a number" in result.err
    assert "only the class" not in result.err


def test_thousands_of_single_example_classes_are_refused_before_fitting(tmp_path, tiny_bert, monkeypatch):
    monkeypatch.setattr("infoprompt.pipeline.build_classifier", lambda *a, **k: pytest.fail("training started"))
    train = tmp_path / "ids.csv"
    train.write_text("text,label\n" + "".join(f"row {i},id-{i}\n" for i in range(1500)))
    result = run_cli("train", "--train-file", train, *PROBE_ARGS, "--backbone", tiny_bert, "--out", tmp_path / "run")
    assert result.one_line_error and "the labels hold 1500 classes, 1500 of them with a single example" in result.err


def test_many_classes_with_several_examples_each_get_a_warning(capsys):
    from infoprompt.tasks import Example
    from infoprompt.tasks.files import MANY_CLASSES, collect_labels

    examples = [Example(fields={"text": "x"}, label=f"c{i % (MANY_CLASSES + 1)}") for i in range(2 * MANY_CLASSES + 2)]
    assert len(collect_labels(examples, where="big.csv")) == MANY_CLASSES + 1
    assert "infoprompt: warning: big.csv: 1001 classes" in capsys.readouterr().err


# -- tracebacks and a 500 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".txt", ".csv"])
def test_predict_with_utf16_on_a_utf8_file_is_one_line(tiny_run, tmp_path, suffix):
    path = tmp_path / f"in{suffix}"
    path.write_text("sentence\ngood film\n", encoding="utf-8")
    result = run_cli("predict", "--adapter", tiny_run, "--input", path, "--encoding", "utf-16", "--quiet")
    assert result.one_line_error and "not valid utf-16 text" in result.err


def long_path(root: Path) -> Path:
    return root.joinpath(*["d" * 200] * 25)  # 5,000 bytes: over PATH_MAX, each name within NAME_MAX


def test_paths_longer_than_path_max_are_one_line(tmp_path, tiny_run, sst2_dir, tiny_bert):
    (tmp_path / "in.txt").write_text("good film\n")
    runs = [
        ("train", *TRAIN_ARGS, "--backbone", tiny_bert, "--data-dir", sst2_dir, "--out", long_path(tmp_path)),
        ("train", "--train-file", f"{long_path(tmp_path)}.csv", *PROBE_ARGS, "--backbone", tiny_bert, "--out",
         tmp_path / "run"),
        ("predict", "--adapter", tiny_run, "--input", f"{long_path(tmp_path)}.txt", "--quiet"),
        ("predict", "--adapter", tiny_run, "--input", tmp_path / "in.txt", "--output", long_path(tmp_path) / "p.jsonl"),
        ("predict", "--adapter", long_path(tmp_path), "--input", tmp_path / "in.txt", "--quiet"),
    ]
    for args in runs:
        result = run_cli(*args)
        assert result.one_line_error and len(result.err) < 600, (args[0], result.err[-300:])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@pytest.fixture
def served(tmp_path, tiny_model_dirs, monkeypatch):
    """An adapter root holding the committed linear probe (backbone ``tiny-bert``, beside the root), and a client
    of the app over it."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from infoprompt.serving.app import create_app

    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    shutil.copytree(FIXTURES / "linear-probe", tmp_path / "root" / "probe")
    monkeypatch.chdir(tmp_path)

    def client(**kwargs):
        return TestClient(create_app({"probe": tmp_path / "root" / "probe"}, adapter_root=tmp_path / "root", **kwargs),
                          raise_server_exceptions=False)

    return tmp_path, client


def test_the_server_refuses_invisible_text_and_deep_bodies_with_the_gates_messages(served):
    root, client = served
    with client(backbone_dirs=[root / "tiny-bert"]) as api:
        answer = api.post("/v1/adapters/probe/predict", json={"inputs": ["good film", "\u200b\u2060"]})
        assert answer.status_code == 422 and answer.json()["error"]["message"] == "inputs[1]: empty text field(s) sentence"
        deep = api.post("/v1/adapters/probe/predict", content=b"[" * 5000 + b"]" * 5000,
                        headers={"Content-Type": "application/json"})
        assert deep.status_code == 400 and "the body: JSON nested too deeply" in deep.json()["error"]["message"]


@pytest.mark.parametrize("path", ["probe\x00", "\ud800probe", "x" * 5000, "/".join(["y" * 250] * 20)])
def test_an_adapter_path_the_file_system_cannot_take_is_a_4xx(served, path):
    root, client = served
    with client(backbone_dirs=[root / "tiny-bert"]) as api:
        body = json.dumps({"name": "b", "path": path})  # ASCII: a lone surrogate travels as its \ud800 escape
        answer = api.post("/v1/adapters", content=body, headers={"Content-Type": "application/json"})
        assert 400 <= answer.status_code < 500 and len(answer.json()["error"]["message"].splitlines()) == 1


def test_a_served_adapters_backbone_must_be_named_or_under_the_root(served):
    root, client = served
    with client(backbone_dirs=[root / "tiny-bert"]) as api:
        shutil.copytree(FIXTURES / "linear-probe", root / "root" / "elsewhere")
        shutil.copytree(root / "tiny-bert", root / "private-model")
        config = json.loads((root / "root" / "elsewhere" / "adapter_config.json").read_text())
        config["backbone"] = str(root / "private-model")
        (root / "root" / "elsewhere" / "adapter_config.json").write_text(json.dumps(config))
        answer = api.post("/v1/adapters", json={"name": "b", "path": "elsewhere"})
        assert answer.status_code == 403 and "is a directory outside the adapter root" in answer.json()["error"]["message"]
    with client(backbone_dirs=[root / "tiny-bert", root / "private-model"]) as api:
        assert api.post("/v1/adapters", json={"name": "b", "path": "elsewhere"}).status_code == 201


def test_the_serve_command_refuses_a_startup_adapter_whose_backbone_is_outside(served, capsys, monkeypatch):
    import uvicorn

    from infoprompt.cli import main

    monkeypatch.setattr(uvicorn.Server, "run", lambda self, **kwargs: pytest.fail("the server started"))
    root, _ = served
    status = main(["serve", "--adapter", "p=root/probe", "--adapter-root", "root", "--port", str(closed_port())])
    error = capsys.readouterr().err
    assert status == 2 and "--allow-backbone-dir" in error and len(error.splitlines()) == 1


# -- half-read files ---------------------------------------------------------------------------------------------
def lora_adapter(tmp_path: Path, tiny_model_dirs, kind: str = "setfit-lora") -> Path:
    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    shutil.copytree(FIXTURES / kind, tmp_path / "adapter")
    return tmp_path / "adapter"


def edit_peft(**changes):
    def edit(peft_dir: Path) -> None:
        config = json.loads((peft_dir / "adapter_config.json").read_text())
        (peft_dir / "adapter_config.json").write_text(json.dumps({**config, **changes}))
    return edit


@pytest.mark.parametrize(("kind", "corrupt", "message"), [
    ("setfit-lora", edit_peft(r=4), "adapter_config.json: r is 4, but the adapter's weights and settings are those of r=8"),
    ("setfit-lora", edit_peft(peft_type="IA3"), "peft_type is 'IA3'"),
    ("setfit-lora", edit_peft(lora_alpha=32), "lora_alpha is 32"),
    ("setfit-lora", edit_peft(target_modules=["key", "value"]), "target_modules is ['key', 'value']"),
    ("setfit-lora", edit_peft(use_dora=True), "use_dora is True"),
    ("setfit-lora", edit_peft(base_model_name_or_path="bert-base-uncased"), "base_model_name_or_path is 'bert-base-uncased'"),
    ("setfit-lora", lambda peft_dir: (peft_dir / "adapter_config.json").unlink(), "adapter_config.json is missing"),
    # top-lora's LoRA sits in the top blocks only: peft's layers_to_transform and layers_pattern say which.
    ("top-lora", edit_peft(layers_to_transform=[1]), "layers_to_transform is [1]"),
    ("top-lora", edit_peft(layers_to_transform=None), "layers_to_transform is None"),
    ("top-lora", edit_peft(layers_pattern="layers"), "layers_pattern is 'layers'"),
    ("top-lora", edit_peft(r=4), "r is 4"),
])
def test_a_lora_adapters_peft_config_must_describe_its_weights(tmp_path, tiny_model_dirs, monkeypatch, kind, corrupt,
                                                               message):
    pytest.importorskip("setfit")
    adapter = lora_adapter(tmp_path, tiny_model_dirs, kind)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("good film\n")
    assert run_cli("predict", "--adapter", adapter, "--input", tmp_path / "in.txt", "--quiet").code == 0
    corrupt(adapter / "peft")
    result = run_cli("predict", "--adapter", adapter, "--input", tmp_path / "in.txt", "--quiet")
    assert result.one_line_error and message in result.err, result.err


@pytest.mark.parametrize("content", [b"hello world", b"\x80\x04\x95garbage", bytes(range(256))])
def test_newton_on_a_garbage_npz_never_suggests_pickles(tmp_path, content):
    path = tmp_path / "instance.npz"
    path.write_bytes(content)
    result = run_cli("theory", "newton", "--input", path)
    assert result.one_line_error and "not a readable .npz archive" in result.err
    assert "pickle" not in result.err.lower()
