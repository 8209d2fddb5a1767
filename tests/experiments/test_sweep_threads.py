"""A sweep's cells share the CPUs among its workers; a Ray cell gets its CPU request; ``--threads`` wins."""

from __future__ import annotations

import json
import os

import pytest
import torch

from infoprompt import threads
from infoprompt.cli import main
from infoprompt.experiments.grid import load_cells
from infoprompt.experiments.store import load_records


@pytest.fixture
def fresh(monkeypatch):
    """A machine of four usable CPUs that torch also counts, no thread count applied yet, no OMP_NUM_THREADS."""
    previous = torch.get_num_threads()
    monkeypatch.setattr(threads, "usable_cpus", lambda: (4, "cpu-count"))
    monkeypatch.setattr(threads, "_applied", None)
    monkeypatch.setattr(threads, "_torch_start", 4)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    yield
    torch.set_num_threads(previous)


def sweep_args(toy_task, backbone, results, *extra: str) -> list[str]:
    task, data_dir = toy_task
    grid = results.parent / f"{results.name}.yaml"
    grid.write_text(f"backbone: {backbone}\ntasks: [{task}]\nmethods: [linear-probe]\nshots: [8]\nseeds: [1]\n"
                    "classifier: {max_length: 32}\ntraining: {epochs: 1}\n", encoding="utf-8")
    return ["sweep", "--grid", str(grid), "--results", str(results), "--data-dir", str(data_dir), "--quiet", *extra]


def test_sweep_workers_share_the_cpus_and_the_record_says_so(fresh, toy_task, tiny_bert_dir, tmp_path):
    assert main(sweep_args(toy_task, tiny_bert_dir, tmp_path / "two", "--workers", "2")) == 0
    [record] = load_records(tmp_path / "two")
    assert {key: record["environment"][key] for key in ("threads", "threads_from", "cpus")} == \
        {"threads": 2, "threads_from": "cpus/workers", "cpus": 4}
    assert main(sweep_args(toy_task, tiny_bert_dir, tmp_path / "flag", "--workers", "2", "--threads", "1")) == 0
    [record] = load_records(tmp_path / "flag")
    assert (record["environment"]["threads"], record["environment"]["threads_from"]) == (1, "--threads")


def test_workers_with_ray_is_a_one_line_error(toy_task, tiny_bert_dir, tmp_path, capsys):
    pytest.importorskip("ray")
    assert main(sweep_args(toy_task, tiny_bert_dir, tmp_path, "--workers", "2", "--backend", "ray")) == 2
    assert "--workers is for local sweeps" in capsys.readouterr().err


def test_a_ray_cell_runs_with_its_cpu_request_unless_threads_is_given(fresh, monkeypatch, tmp_path):
    pytest.importorskip("ray")
    from infoprompt.experiments import ray_backend

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what Ray sets in a worker: not a user's choice
    [cell] = load_cells(None, {"tasks": ["sst2"], "methods": ["linear-probe"], "shots": [8], "seeds": [1]})
    seen = []

    def runner(spec, out, *, overwrite, backbone):
        seen.append(torch.get_num_threads())
        return {"status": "ok", "metrics": {}}

    monkeypatch.setattr("infoprompt.experiments.sweep.BackboneCache.get", lambda self, name, cache_dir=None: None)
    monkeypatch.setattr(ray_backend, "_WORKER_BACKBONES", None)
    for requested, cpus_per_cell in ((None, 2.0), (None, 0.5), (3, 2.0)):
        outcome = ray_backend.run_cell_task(cell, str(tmp_path), runner, False, requested, cpus_per_cell, os.getcwd())
        assert not outcome["failed"], json.dumps(outcome, default=str)
    assert seen == [2, 1, 3]
