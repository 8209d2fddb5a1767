"""--track mlflow: a finished run's settings, loss curves, metrics and adapter land in an MLflow store, read back."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import pytest

from infoprompt import pipeline
from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.tracking import LOG_NAME, METRICS_NAME, TrackedRunner, make_tracker, resolve_tracking_uri


def test_run_file_names_are_the_pipelines():
    assert (METRICS_NAME, LOG_NAME) == (pipeline.METRICS_NAME, pipeline.LOG_NAME)


def test_tracking_options_need_track_and_a_missing_mlflow_is_one_line(monkeypatch, tmp_path, capsys):
    assert main(["train", "--task", "sst2", "--out", str(tmp_path / "run"), "--tracking-uri", str(tmp_path)]) == 2
    assert "--tracking-uri and --tracking-experiment need --track mlflow" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if it were not installed
    with pytest.raises(UserError, match=r"pip install 'infoprompt\[mlflow\]'"):
        make_tracker("mlflow", str(tmp_path / "mlruns"))
    assert not (tmp_path / "run").exists() and not (tmp_path / "mlruns").exists()


def test_plain_paths_become_absolute_file_uris(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_tracking_uri("./mlruns") == (tmp_path / "mlruns").resolve().as_uri()
    assert resolve_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert resolve_tracking_uri("sqlite:///mlflow.db") == "sqlite:///mlflow.db"


def _log_entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_tracked_run_reads_back_from_the_mlflow_store(tiny_bert_dir, data_dir, tmp_path, capsys, one_thread):
    mlflow = pytest.importorskip("mlflow")
    from infoprompt.kinds import load_adapter

    store, out = tmp_path / "mlruns", tmp_path / "sst2-run"
    assert main(["train", "--task", "sst2", "--method", "infoprompt", "--shots", "8", "--backbone", str(tiny_bert_dir),
                 "--data-dir", str(data_dir), "--out", str(out), "--epochs", "2", "--batch-size", "4",
                 "--eval-every-epochs", "1", "--max-length", "32", "--quiet", "--track", "mlflow",
                 "--tracking-uri", str(store), "--tracking-experiment", "tests"]) == 0
    record = json.loads((out / METRICS_NAME).read_text())
    run_id = record["tracking"]["run_id"]
    assert f"run {run_id}" in capsys.readouterr().out

    mlflow.set_tracking_uri(store.as_uri())
    runs = mlflow.search_runs(experiment_names=["tests"])
    assert list(runs["run_id"]) == [run_id] and runs.loc[0, "status"] == "FINISHED"
    assert runs.loc[0, "tags.mlflow.runName"] == "sst2-run"
    # Parameters: the training settings the kind's fit reads, as given, and the classifier as resolved.
    assert runs.loc[0, "params.task"] == "sst2" and runs.loc[0, "params.method"] == "infoprompt"
    assert runs.loc[0, "params.kind"] == "prompt" and runs.loc[0, "params.n_prompts"] == "4"
    assert runs.loc[0, "params.spec.training.epochs"] == "2" and runs.loc[0, "params.classifier.max_length"] == "32"
    assert float(runs.loc[0, "params.classifier.options.beta"]) == record["classifier"]["options"]["beta"]
    params = {column[len("params."):] for column in runs.columns if column.startswith("params.")}
    options = {f"classifier.options.{name}" for name in record["classifier"]["options"]}
    assert options <= params and not [p for p in params - options if p.startswith("classifier.options.")]
    assert not {"spec.data_dir", "spec.cache_dir", "classifier.task_spec", "spec.training.progress"} & params
    # Final metrics, and per-step losses and information terms with their step numbers.
    assert runs.loc[0, "metrics.accuracy"] == pytest.approx(record["metrics"]["accuracy"])
    client = mlflow.MlflowClient(store.as_uri())
    steps = [e for e in _log_entries(out / LOG_NAME) if e["type"] == "step"]
    assert len(steps) == record["steps"] == 4
    for key in ("loss_total", "loss_pred", "mi_rep", "mi_head"):
        history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        assert history == [(e["step"], pytest.approx(e[key])) for e in steps], key
    periodic = [e for e in _log_entries(out / LOG_NAME) if e["type"] == "eval"]
    evaluated = [m.step for m in client.get_metric_history(run_id, "eval.accuracy")]
    assert periodic and evaluated == [e["step"] for e in periodic]
    # The run's record and log as artifacts; the adapter as the run's model, whose adapter directory loads as
    # the saved one does.
    assert {Path(a.path).name for a in client.list_artifacts(run_id, "run")} == {METRICS_NAME, LOG_NAME}
    downloaded = Path(mlflow.artifacts.download_artifacts(f"runs:/{run_id}/model/artifacts/adapter",
                                                          dst_path=str(tmp_path / "download")))
    assert {p.name for p in downloaded.iterdir()} == {p.name for p in out.iterdir()} - {METRICS_NAME, LOG_NAME}
    assert (downloaded / "adapter_model.safetensors").read_bytes() == (out / "adapter_model.safetensors").read_bytes()
    assert load_adapter(downloaded).config.to_json() == load_adapter(out).config.to_json()


def test_sweep_records_keep_the_mlflow_run_of_each_cell(toy_task, tiny_bert_dir, tmp_path, one_thread):
    mlflow = pytest.importorskip("mlflow")
    from infoprompt.experiments.store import load_records

    task, data_dir = toy_task
    store, results = tmp_path / "mlruns", tmp_path / "results"
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"backbone: {tiny_bert_dir}\ntasks: [{task}]\nmethods: [linear-probe]\nshots: [8]\nseeds: [1, 2]\n"
                    "classifier: {max_length: 32}\ntraining: {epochs: 1, eval_every_epochs: 0}\n")
    args = ["sweep", "--grid", str(grid), "--results", str(results), "--data-dir", str(data_dir), "--quiet",
            "--track", "mlflow", "--tracking-uri", str(store)]
    assert main(args) == 0
    records = {r["cell"]: r for r in load_records(results)}
    client = mlflow.MlflowClient(store.as_uri())
    experiment = client.get_experiment_by_name("infoprompt")
    runs = {run.info.run_id: run for run in client.search_runs([experiment.experiment_id])}
    assert {r["tracking"]["run_id"] for r in records.values()} == set(runs)
    for cell_id, record in records.items():
        run = runs[record["tracking"]["run_id"]]
        assert run.data.tags["mlflow.runName"] == cell_id == run.data.tags["infoprompt.cell"]
        assert run.data.metrics["accuracy"] == pytest.approx(record["metrics"]["accuracy"])
        assert run.data.params["seed"] == str(record["seed"])
    assert not (results / "runs").exists()  # without --save-runs the runs were logged from a scratch directory
    assert main(args) == 0 and len(client.search_runs([experiment.experiment_id])) == 2  # a resumed sweep logs nothing


def test_the_tracked_runner_travels_to_workers(tmp_path):
    pytest.importorskip("mlflow")
    runner = TrackedRunner(pipeline.run_training, make_tracker("mlflow", str(tmp_path / "mlruns")))
    assert pickle.loads(pickle.dumps(runner)) == runner


def test_a_probe_run_logs_only_its_kind_options_and_the_settings_it_reads(tiny_bert_dir, tmp_path, one_thread):
    pytest.importorskip("mlflow")
    from test_sweep_files import write_csv

    from infoprompt.pipeline import RunSpec, run_training
    from infoprompt.tracking import run_params
    from infoprompt.training.config import TrainConfig

    train = tmp_path / "intents.csv"
    write_csv(train, 4)
    spec = RunSpec(task=None, method="linear-probe", shots=None, backbone=str(tiny_bert_dir), train_file=str(train),
                   text_column="utterance", label_column="intent", classifier={"max_length": 32},
                   training=TrainConfig(progress=False))
    params = run_params(run_training(spec))
    # The axes, the two options of the probe's kind, the one training setting its fit reads, where it ran, the
    # data it read and the classifier fields every kind reads: no prompt or gradient-loop settings.
    assert params == {
        "task": "intents", "method": "linear-probe", "kind": "linear-probe", "shots": "full", "seed": "1",
        "backbone": str(tiny_bert_dir), "n_train": "12", "steps": params["steps"],
        "spec.training.holdout_fraction": "0.25", "spec.training.device": "auto", "spec.training.precision": "fp32",
        "spec.train_file": str(train), "spec.text_column": "utterance", "spec.label_column": "intent",
        "spec.multi_label": "false", "classifier.max_length": "32", "classifier.truncate": "true",
        "classifier.long_text": "truncate", "classifier.template": params["classifier.template"],
        "classifier.options.pooling": "mean", "classifier.options.head_c": "1.0",
    }


def test_the_adapter_is_an_mlflow_model_that_predicts_as_the_library_does(tiny_bert_dir, tmp_path, capsys,
                                                                          monkeypatch, one_thread):
    mlflow = pytest.importorskip("mlflow")
    pd = pytest.importorskip("pandas")
    from test_sweep_files import write_csv

    from infoprompt.kinds import load_adapter
    from infoprompt.training.inference import predict

    train, test = tmp_path / "intents.csv", tmp_path / "intents-test.csv"
    write_csv(train, 6)
    write_csv(test, 3, offset=2)
    store, out = tmp_path / "mlruns", tmp_path / "run"
    assert main(["train", "--train-file", str(train), "--eval-file", str(test), "--text-column", "utterance",
                 "--label-column", "intent", "--method", "linear-probe", "--backbone", str(tiny_bert_dir),
                 "--max-length", "32", "--out", str(out), "--quiet", "--track", "mlflow", "--tracking-uri",
                 str(store), "--register-model", "intents"]) == 0
    tracked = json.loads((out / METRICS_NAME).read_text())["tracking"]
    assert (tracked["registered_model"], tracked["registered_model_version"]) == ("intents", "1")
    assert tracked["model_uri"].startswith("models:/") and "model models:/intents/1" in capsys.readouterr().out

    # Nothing pickled: the model is the adapter's files (safetensors and JSON) and the code that loads them.
    assert not [p for p in store.rglob("*") if p.suffix in (".pkl", ".pickle", ".cloudpickle")]
    [mlmodel] = store.rglob("MLmodel")
    assert "loader_module: mlflow.pyfunc.loaders.code_model" in mlmodel.read_text()  # MLflow's models from code
    assert (mlmodel.parent / "mlflow_model_code.py").is_file()
    adapter = mlmodel.parent / "artifacts" / "adapter"
    assert {p.name for p in adapter.iterdir()} == {p.name for p in out.iterdir()} - {METRICS_NAME, LOG_NAME}

    # Read back as on MLflow 3: a file store needs the opt-in in the reading process too.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(store.as_uri())
    frame = pd.read_csv(test)  # the evaluation file as it is: its label column is left out
    expected = predict(load_adapter(out), [{"text": text} for text in frame["utterance"]])
    for uri in (tracked["model_uri"], "models:/intents/1", f"runs:/{tracked['run_id']}/model"):
        got = mlflow.pyfunc.load_model(uri).predict(frame)
        assert list(got["label"]) == [record["label"] for record in expected], uri
        for probabilities, record in zip(got["probabilities"], expected, strict=True):
            assert probabilities == pytest.approx(record["probabilities"])
    by_field = mlflow.pyfunc.load_model("models:/intents/1").predict(pd.DataFrame({"text": list(frame["utterance"])}))
    assert list(by_field["label"]) == [record["label"] for record in expected]  # the field's own name serves too


def test_model_inputs_are_read_by_the_training_file_columns_or_the_field_names():
    pd = pytest.importorskip("pandas")
    pytest.importorskip("mlflow")
    from infoprompt.mlflow_model import input_rows
    from infoprompt.tasks import FileColumns, user_task

    task = user_task("pairs", FileColumns(text_column="question1", text_pair_column="question2"), ["no", "yes"])
    rows = [{"text": "is it a dog", "text_pair": "was it a cat"}, {"text": "he ran", "text_pair": "he sat"}]
    as_file = pd.DataFrame({"question1": ["is it a dog", "he ran"], "question2": ["was it a cat", "he sat"],
                            "label": ["no", "yes"]})
    assert input_rows(as_file, task) == rows
    assert input_rows(pd.DataFrame(rows), task) == rows
    assert input_rows([("is it a dog", "was it a cat"), ("he ran", "he sat")], task) == rows
    with pytest.raises(UserError, match=r"no column 'question2' or 'text_pair' for the task's field text_pair; "
                                        r"columns present: 'question1'"):
        input_rows(as_file[["question1"]], task)
    with pytest.raises(UserError, match=r"model input row 1: empty text field\(s\) text_pair"):
        input_rows(pd.DataFrame({"question1": ["a", "b"], "question2": ["c", None]}), task)


def test_register_model_needs_track(tmp_path, capsys):
    assert main(["train", "--task", "sst2", "--out", str(tmp_path / "run"), "--register-model", "x"]) == 2
    assert "--register-model needs --track mlflow" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_global_tracking_uri_is_put_back_as_it_was(monkeypatch, tmp_path):
    mlflow = pytest.importorskip("mlflow")
    from mlflow.tracking._tracking_service import utils as state

    from infoprompt.tracking import global_tracking_uri

    monkeypatch.setattr(state, "_tracking_uri", None)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "elsewhere").as_uri())
    with global_tracking_uri((tmp_path / "store").as_uri()):
        assert mlflow.get_tracking_uri() == (tmp_path / "store").as_uri()
    # unset again, so that the caller's variable, and the registry that follows the tracking URI, hold as before
    assert state._tracking_uri is None and mlflow.get_tracking_uri() == (tmp_path / "elsewhere").as_uri()
    assert mlflow.get_registry_uri() == (tmp_path / "elsewhere").as_uri()
