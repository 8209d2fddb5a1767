"""Sweeps on the user's own file: seeds × methods × shots on a CSV, resumed, reported, and refused once the file
changed (the records keep its SHA-256)."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.experiments.grid import load_cells
from infoprompt.experiments.store import load_records
from infoprompt.experiments.sweep import BackboneCache, run_sweep

# Three intents in words the tiny test tokenizer knows; the evaluation rows are other sentences.
INTENTS = {
    "praise": ("a great movie", "good film and lovely story", "brilliant actor", "funny plot", "great scene"),
    "complaint": ("a terrible movie", "bad film and boring story", "awful actor", "dull plot", "bad scene"),
    "question": ("is it the same film", "was the story long", "is that correct", "was it a dog or a cat",
                 "is he the actor"),
}


def write_csv(path, rows_per_intent: int, offset: int = 0, text_column: str = "utterance",
              label_column: str = "intent") -> None:
    lines = [f"{text_column},{label_column}"]
    for index in range(rows_per_intent):
        for intent, texts in INTENTS.items():
            lines.append(f"{texts[(index + offset) % len(texts)]} {'very ' * (index % 3)}it was,{intent}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def support_files(tmp_path):
    train, test = tmp_path / "support tickets.csv", tmp_path / "support-test.csv"
    write_csv(train, 6)
    write_csv(test, 3, offset=2)
    return train, test


def grid_file(tmp_path, backbone) -> str:
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"backbone: {backbone}\nclassifier: {{max_length: 32}}\n"
                    "training: {epochs: 1, eval_every_epochs: 0}\n", encoding="utf-8")
    return str(grid)


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_sweep_on_your_file_runs_resumes_reports_and_refuses_a_changed_file(support_files, tiny_bert_dir, tmp_path,
                                                                              capsys, one_thread):
    train, test = support_files
    results = tmp_path / "results"
    args = ["sweep", "--grid", grid_file(tmp_path, tiny_bert_dir), "--train-file", str(train), "--eval-file",
            str(test), "--text-column", "utterance", "--label-column", "intent", "--methods", "linear-probe",
            "--shots", "2", "--seeds", "1,2", "--results", str(results), "--quiet"]
    assert main(args) == 0
    assert "2 finished now" in capsys.readouterr().out
    records = {r["cell"]: r for r in load_records(results)}
    # The task is named by the file's stem (made a task name), and every record keeps both files' hashes.
    assert set(records) == {f"task=support-tickets/method=linear-probe/shots=2/np=0/seed={seed}" for seed in (1, 2)}
    for record in records.values():
        assert record["status"] == "ok" and record["task"] == "support-tickets"
        assert record["eval_split"] == str(test) and record["n_eval"] == 9 and record["n_train"] == 6  # 2 per class
        assert record["settings"]["data"] == {
            "train_sha256": sha256(train), "eval_sha256": sha256(test),
            "columns": {"text_column": "utterance", "text_pair_column": None, "label_column": "intent",
                        "multi_label": False}}
        assert 0.0 <= record["metrics"]["accuracy"] <= 1.0
    assert records[next(iter(records))]["train_label_counts"] == {"complaint": 2, "praise": 2, "question": 2}

    assert main(args) == 0  # resumed: nothing left to run
    assert "2 already finished, 0 finished now" in capsys.readouterr().out

    assert main(["report", str(results)]) == 0
    report = capsys.readouterr().out
    # one column of the file's task, one row of the method: the mean ± std over the two seeds
    assert "| method | support-tickets (n_p=0) |" in report
    assert re.search(r"\| linear-probe \| \*\*0\.\d{4} ± 0\.\d{4} \(2\)\*\* \|", report), report
    assert "Set-up against the paper" not in report

    before = {path: path.read_bytes() for path in results.rglob("*.json")}
    with train.open("a", encoding="utf-8") as handle:
        handle.write("lovely story,praise\n")
    for command in (args, [*args, "--list"]):
        assert main(command) == 2
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and "made from another version of" in error, error
        assert f"{train} (sha256 " in error and f", {sha256(train)[:12]} now)" in error
    assert {path: path.read_bytes() for path in results.rglob("*.json")} == before  # nothing was rerun or mixed


def test_grid_keys_name_the_file_columns_and_task(support_files, tmp_path):
    train, test = support_files
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"methods: [linear-probe, warp]\nshots: [4]\nseeds: [1]\nn_prompts: [1]\n"
                    f"grids:\n  - tasks: [sst2]\n  - train_file: {train}\n    eval_file: {test}\n"
                    f"    task_name: support\n    text_column: utterance\n    label_column: intent\n",
                    encoding="utf-8")
    cells = load_cells(grid)
    assert sorted(cell.id for cell in cells) == sorted(
        f"task={task}/method={method}/shots=4/np={1 if method == 'warp' else 0}/seed=1"
        for task in ("sst2", "support") for method in ("linear-probe", "warp"))
    cell = next(cell for cell in cells if cell.task == "support" and cell.method == "warp")
    spec = cell.run_spec()
    assert (spec.task, spec.task_name, spec.train_file, spec.eval_file) == (None, "support", str(train), str(test))
    assert (spec.text_column, spec.label_column) == ("utterance", "intent")
    assert "data" not in next(c for c in cells if c.task == "sst2").settings()  # built-in cells keep their hashes
    # --tasks picks a file block by its task's name
    assert {c.task for c in load_cells(grid, {"tasks": ["support"]})} == {"support"}
    assert {c.task for c in load_cells(grid, {"tasks": ["sst2"]})} == {"sst2"}


@pytest.mark.parametrize(("grid", "overrides", "message"), [
    ("tasks: [sst2]\ntrain_file: {train}\n", {}, r"grid.yaml.tasks: a block with train_file takes its task from"),
    ("grids:\n  - tasks: [sst2]\n    train_file: {train}\n", {}, r"grids\[0\].tasks: a block with train_file"),
    ("tasks: [sst2]\n", {"eval_file": "x.csv"}, r"grid.yaml.eval_file: goes with train_file"),
    ("tasks: [sst2]\n", {"text_column": "utterance"}, r"text_column: goes with train_file"),
    ("train_file: {train}\n", {}, r"support tickets.csv:1: no column 'text'"),  # the default columns are absent
    ("train_file: {train}\nlabel_column: intent\ntext_column: utterance\ntask_name: sst2\n", {},
     r"task name 'sst2' is a built-in task"),
    ("train_file: {missing}\n", {}, r"no such file"),
])
def test_file_grids_are_checked_before_any_cell_runs(support_files, tmp_path, grid, overrides, message):
    train, _ = support_files
    path = tmp_path / "grid.yaml"
    path.write_text(grid.format(train=train, missing=tmp_path / "missing.csv"), encoding="utf-8")
    with pytest.raises(UserError, match=message):
        load_cells(path, overrides)


class FakeBackbone:
    class model:  # noqa: N801 - mimics Backbone.model
        @staticmethod
        def eval():
            return None


def test_a_file_changed_while_the_sweep_runs_stops_it(support_files, tmp_path):
    train, test = support_files
    cells = load_cells(None, {"methods": ["linear-probe"], "shots": [2], "seeds": [1, 2, 3], "train_file": str(train),
                              "eval_file": str(test), "text_column": "utterance", "label_column": "intent"})
    calls = []

    def runner(spec, out, *, overwrite, backbone):
        calls.append(spec.seed)
        test.write_text(test.read_text(encoding="utf-8") + "good film,praise\n", encoding="utf-8")
        return {"task": spec.task_name, "method": spec.method, "shots": spec.shots, "n_prompts": 0, "seed": spec.seed,
                "backbone": spec.backbone, "primary_metric": "accuracy", "metrics": {"accuracy": 0.5}}

    backbones = BackboneCache(loader=lambda name, cache_dir=None: FakeBackbone())
    with pytest.raises(UserError, match=r"support-test.csv changed while the sweep ran \(sha256 \w{12} when it "):
        run_sweep(cells, tmp_path / "results", runner=runner, backbones=backbones, progress=False,
                  echo=lambda _: None)
    assert calls == [1]  # the first cell ran on the file as loaded; none after it changed
    recorded = [json.loads(p.read_text()) for p in (tmp_path / "results").rglob("*.json")]
    assert [r["seed"] for r in recorded] == [1]


def test_a_tracked_sweep_on_your_file_names_its_runs_by_cell_and_registers_each_model(support_files, tiny_bert_dir,
                                                                                      tmp_path, monkeypatch,
                                                                                      one_thread):
    mlflow = pytest.importorskip("mlflow")
    train, test = support_files
    store, results = tmp_path / "mlruns", tmp_path / "results"
    assert main(["sweep", "--grid", grid_file(tmp_path, tiny_bert_dir), "--train-file", str(train), "--eval-file",
                 str(test), "--task-name", "support", "--text-column", "utterance", "--label-column", "intent",
                 "--methods", "linear-probe", "--shots", "2", "--seeds", "1,2", "--results", str(results), "--quiet",
                 "--track", "mlflow", "--tracking-uri", str(store), "--register-model", "support"]) == 0
    records = {r["cell"]: r for r in load_records(results)}
    assert set(records) == {f"task=support/method=linear-probe/shots=2/np=0/seed={seed}" for seed in (1, 2)}
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.chdir(tmp_path)  # MLflow 3.18 makes ./mlflow.db when it searches a file store's registry
    client = mlflow.MlflowClient(store.as_uri())
    for cell_id, record in records.items():
        run = client.get_run(record["tracking"]["run_id"])
        assert run.data.tags["mlflow.runName"] == cell_id and run.data.params["task"] == "support"
        assert run.data.params["spec.train_file"] == str(train)
    versions = {record["tracking"]["registered_model_version"] for record in records.values()}
    assert versions == {"1", "2"}
    assert {str(v.version) for v in client.search_model_versions("name='support'")} == versions


def test_without_an_evaluation_file_the_sweep_says_report_has_nothing_to_tabulate(support_files, tiny_bert_dir,
                                                                                  tmp_path, capsys, one_thread):
    train, _ = support_files
    results = tmp_path / "results"
    assert main(["sweep", "--grid", grid_file(tmp_path, tiny_bert_dir), "--train-file", str(train), "--text-column",
                 "utterance", "--label-column", "intent", "--methods", "linear-probe", "--shots", "2", "--seeds", "1",
                 "--results", str(results), "--quiet"]) == 0
    assert "support-tickets has no evaluation file (--eval-file)" in capsys.readouterr().err
    [record] = load_records(results)
    assert record["status"] == "ok" and record["metrics"] == {} and record["settings"]["data"].keys() == {
        "train_sha256", "columns"}
    assert main(["report", str(results)]) == 2
    assert "has metrics to tabulate (a sweep on your own file evaluates its cells only with --eval-file)" in \
        capsys.readouterr().err
