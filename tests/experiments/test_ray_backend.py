"""The sweep's Ray backend on a loopback Ray head with two workers: every cell once, records as the local backend's."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.experiments.grid import load_cells
from infoprompt.experiments.store import load_records, record_path
from infoprompt.experiments.sweep import BackboneCache, failure_record, run_sweep
from infoprompt.pipeline import run_training

ray = pytest.importorskip("ray")

from infoprompt.experiments.ray_backend import RayOptions, run_sweep_ray  # noqa: E402

HERE = Path(__file__).parent
# What differs between any two runs of one cell: clocks, the machine's description, the failure's stack.
VOLATILE = {"timings", "finished_at", "recorded_at", "seconds", "environment", "traceback"}


@pytest.fixture(scope="module")
def ray_head():
    """A Ray head on 127.0.0.1 with two CPUs (two worker processes); its workers import this folder's helpers."""
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), previous) if p)
    try:
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level=logging.WARNING,
                 log_to_driver=False)
        yield
    finally:
        ray.shutdown()
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


def _grid(backbone, data_dir, **changes):
    grid = {"tasks": ["sst2"], "methods": ["warp", "linear-probe"], "shots": [8], "seeds": [1, 2],
            "backbone": str(backbone), "data_dir": str(data_dir), "classifier": {"max_length": 32},
            "training": {"epochs": 1, "batch_size": 4, "eval_every_epochs": 0}}
    return load_cells(None, {**grid, **changes})


def _stable(record):
    return {key: value for key, value in record.items() if key not in VOLATILE}


def _quiet(_line):
    return None


@pytest.mark.slow
def test_ray_sweep_survives_a_killed_worker_and_matches_the_local_backend(ray_head, tiny_bert_dir, data_dir, tmp_path,
                                                                         one_thread):
    import ray_cells

    # Four cells that train, and one that fails (more shots than SST-2 has): recorded, not fatal.
    cells = _grid(tiny_bert_dir, data_dir) + _grid(tiny_bert_dir, data_dir, methods=["warp"], shots=[10**7], seeds=[1])
    ok_ids = {cell.id for cell in cells if cell.shots == 8}
    marker, ledger = tmp_path / "killed", tmp_path / "ledger"
    runner = ray_cells.KillOnce(victim=("warp", 1), marker=str(marker), ledger=str(ledger))
    options = RayOptions(max_retries=2)

    summary = run_sweep_ray(cells, tmp_path / "ray", runner=runner, options=options, progress=False, echo=_quiet)
    assert marker.exists(), "the victim cell's first try should have killed its worker"
    finished = ledger.read_text().splitlines()
    assert sorted(finished) == sorted(ok_ids)  # every cell finished exactly once, the killed one included
    assert summary.finished == 4 and [cell for cell, _ in summary.failed] == [cells[-1].id]
    assert not list((tmp_path / "ray").rglob("*.claim")) and not list((tmp_path / "ray").rglob("*.tmp"))

    run_sweep(cells, tmp_path / "local", runner=run_training, backbones=BackboneCache(), progress=False, echo=_quiet)
    on_ray = {r["cell"]: r for r in load_records(tmp_path / "ray")}
    local = {r["cell"]: r for r in load_records(tmp_path / "local")}
    assert on_ray.keys() == local.keys() == {cell.id for cell in cells}
    for cell_id in local:
        assert _stable(on_ray[cell_id]) == _stable(local[cell_id]), cell_id

    # A rerun starts nothing that finished: only the failed cell is tried again, as the local backend does.
    before = {cell.id: record_path(tmp_path / "ray", cell).read_bytes() for cell in cells if cell.id in ok_ids}
    again = run_sweep_ray(cells, tmp_path / "ray", runner=runner, options=options, progress=False, echo=_quiet)
    assert again.skipped == 4 and again.finished == 0 and len(again.failed) == 1
    assert ledger.read_text().splitlines() == finished
    assert {i: record_path(tmp_path / "ray", c).read_bytes() for c in cells if (i := c.id) in ok_ids} == before
    finished_only = [cell for cell in cells if cell.id in ok_ids]
    idle = run_sweep_ray(finished_only, tmp_path / "ray", runner=runner, options=options, progress=False, echo=_quiet)
    assert (idle.skipped, idle.finished, idle.failed) == (4, 0, [])


@pytest.mark.slow
def test_a_cell_whose_worker_dies_on_every_try_is_recorded_as_failed(ray_head, tiny_bert_dir, data_dir, tmp_path):
    import ray_cells

    cells = _grid(tiny_bert_dir, data_dir, methods=["linear-probe"], seeds=[1], training={})  # the probe reads none
    tries = tmp_path / "tries"
    summary = run_sweep_ray(cells, tmp_path / "res", runner=ray_cells.AlwaysDie(str(tries)),
                            options=RayOptions(max_retries=1), progress=False, echo=_quiet)
    assert len(tries.read_text().splitlines()) == 2  # the first try and one retry
    assert [cell for cell, _ in summary.failed] == [cells[0].id] and summary.finished == 0
    record = json.loads(record_path(tmp_path / "res", cells[0]).read_text())
    assert record["status"] == "failed" and "died" in record["error"].lower()
    assert set(record) == set(failure_record(cells[0], RuntimeError("x"), 0.0))  # the local backend's schema
    assert not list((tmp_path / "res").rglob("*.claim"))


@pytest.mark.slow
def test_a_backbone_that_cannot_load_stops_the_ray_sweep_with_its_error(ray_head, data_dir, tmp_path, capsys):
    results = tmp_path / "res"
    args = ["sweep", "--results", str(results), "--tasks", "sst2", "--methods", "linear-probe", "--seeds", "1",
            "--backbone", str(tmp_path / "no-such-backbone"), "--data-dir", str(data_dir), "--quiet",
            "--backend", "ray", "--cpus-per-cell", "1", "--max-retries", "0"]
    assert main(args) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("infoprompt: error: ") and "no-such-backbone" in error
    assert not list(results.rglob("*.json")) and not list(results.rglob("*.claim"))


@pytest.mark.slow
def test_ray_workers_log_their_cells_to_mlflow(ray_head, tiny_bert_dir, data_dir, tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)  # the default store ./mlruns is this directory's, on the workers too
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # for this process's reading client
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"backbone: {tiny_bert_dir}\ntasks: [sst2]\nmethods: [linear-probe]\nshots: [8]\nseeds: [1, 2]\n"
                    "classifier: {max_length: 32}\ntraining: {epochs: 1, eval_every_epochs: 0}\n")
    assert main(["sweep", "--grid", str(grid), "--results", "res", "--data-dir", str(data_dir), "--quiet",
                 "--backend", "ray", "--track", "mlflow"]) == 0
    records = load_records(tmp_path / "res")
    client = mlflow.MlflowClient((tmp_path / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("infoprompt")
    runs = {run.info.run_id: run for run in client.search_runs([experiment.experiment_id])}
    assert len(records) == 2 and {r["tracking"]["run_id"] for r in records} == set(runs)
    for record in records:
        assert runs[record["tracking"]["run_id"]].data.tags["mlflow.runName"] == record["cell"]


@pytest.mark.parametrize("flag", [["--address", "auto"], ["--cpus-per-cell", "2"], ["--max-retries", "0"]])
def test_ray_flags_need_the_ray_backend(flag, tmp_path, capsys):
    assert main(["sweep", "--results", str(tmp_path / "res"), "--tasks", "sst2", *flag]) == 2
    assert f"{flag[0]} needs --backend ray" in capsys.readouterr().err
    assert not (tmp_path / "res").exists()


def test_an_address_where_no_head_answers_is_one_line_and_writes_nothing(tmp_path, capsys):
    import socket

    with socket.socket() as probe:  # a loopback port that nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = tmp_path / "res"
    args = ["sweep", "--results", str(results), "--tasks", "sst2", "--methods", "linear-probe", "--seeds", "1",
            "--backend", "ray", "--address", f"127.0.0.1:{port}", "--quiet"]
    assert main(args) == 2
    assert f"--address 127.0.0.1:{port}: no Ray head answers there" in capsys.readouterr().err
    assert not results.exists()


def test_a_cell_too_big_for_every_node_is_an_error_on_a_fixed_instance_and_a_warning_on_a_cluster():
    from infoprompt.experiments.ray_backend import fits_check

    nodes = [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 1.0}}]
    assert fits_check(nodes, RayOptions(cpus_per_cell=2), can_grow=False) is None
    with pytest.raises(UserError, match=r"--gpus-per-cell 0.5: the largest Ray node has 0 GPU\(s\)"):
        fits_check(nodes, RayOptions(gpus_per_cell=0.5), can_grow=False)
    assert "--cpus-per-cell 4" in fits_check(nodes, RayOptions(cpus_per_cell=4), can_grow=True)


def test_bad_ray_resources_are_user_errors():
    with pytest.raises(UserError, match="cpus-per-cell"):
        RayOptions(cpus_per_cell=0)
    with pytest.raises(UserError, match="gpus-per-cell"):
        RayOptions(gpus_per_cell=-1)


@pytest.mark.slow
def test_the_head_check_knows_a_real_ray_head(ray_head):
    from infoprompt.experiments.ray_backend import _check_reachable

    _check_reachable(ray.get_runtime_context().gcs_address)  # answers in HTTP/2, as gRPC does: no error


@pytest.mark.slow
def test_a_sweep_on_your_file_runs_on_ray_as_locally_and_a_changed_file_stops_it(ray_head, tiny_bert_dir, tmp_path,
                                                                                  one_thread):
    from test_sweep_files import write_csv

    train, test = tmp_path / "intents.csv", tmp_path / "intents-test.csv"
    write_csv(train, 6)
    write_csv(test, 3, offset=2)
    settings = {"methods": ["linear-probe"], "shots": [2], "seeds": [1, 2], "backbone": str(tiny_bert_dir),
                "classifier": {"max_length": 32}, "train_file": str(train), "eval_file": str(test),
                "text_column": "utterance", "label_column": "intent"}
    cells = load_cells(None, settings)
    summary = run_sweep_ray(cells, tmp_path / "ray", runner=run_training, options=RayOptions(), progress=False,
                            echo=_quiet)
    assert summary.finished == 2 and not summary.failed
    run_sweep(cells, tmp_path / "local", runner=run_training, backbones=BackboneCache(), progress=False, echo=_quiet)
    on_ray = {r["cell"]: r for r in load_records(tmp_path / "ray")}
    local = {r["cell"]: r for r in load_records(tmp_path / "local")}
    assert on_ray.keys() == local.keys() == {f"task=intents/method=linear-probe/shots=2/np=0/seed={s}" for s in (1, 2)}
    for cell_id in local:
        assert _stable(on_ray[cell_id]) == _stable(local[cell_id]), cell_id

    # The file changes once the sweep has loaded it: the worker refuses the cell, and the sweep stops with its line.
    more = load_cells(None, {**settings, "seeds": [3]})
    with train.open("a", encoding="utf-8") as handle:
        handle.write("good film,praise\n")
    with pytest.raises(UserError, match=r"intents.csv changed while the sweep ran"):
        run_sweep_ray(more, tmp_path / "ray", runner=run_training, options=RayOptions(max_retries=0), progress=False,
                      echo=_quiet)
    assert len(load_records(tmp_path / "ray")) == 2 and not list((tmp_path / "ray").rglob("*.claim"))
