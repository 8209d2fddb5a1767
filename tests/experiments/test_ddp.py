"""Multi-process training through accelerate: two CPU processes follow the loss curve of one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from infoprompt.errors import UserError
from infoprompt.training.runtime import map_chunks, process_state

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ddp_check.py"


def test_a_plain_process_is_the_main_and_only_one(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    state = process_state()
    assert state.is_main_process and state.num_processes == 1


def test_a_launch_accelerate_did_not_see_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it, without accelerate's process group behind it
    with pytest.raises(UserError, match="ACCELERATE_USE_CPU"):
        process_state()


def test_one_process_maps_every_chunk_in_example_order():
    rows = map_chunks(None, [[2, 0], [1]], 3, (2,), lambda chunk: (torch.tensor(chunk).float()[:, None].repeat(1, 2),),
                      torch.device("cpu"), "test")
    assert torch.equal(rows[0], torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.heavy  # two accelerate processes training two methods: minutes on two cores
def test_two_cpu_processes_match_one(tiny_model_dirs, data_dir, tmp_path):
    """warp and infoprompt-ce (no sampling noise) under ``accelerate launch --num_processes 2`` (gloo): the same
    per-step loss of the whole batch, the same trained parameters and metrics as one process, on every process.
    17 shots in batches of 8 leave a last batch of one, so one process runs a batch without an example."""
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("this torch build has no gloo backend: two CPU processes cannot be launched here")
    report = tmp_path / "ddp.json"
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--backbone", str(tiny_model_dirs["bert"]), "--data-dir", str(data_dir),
         "--task", "sst2", "--shots", "17", "--epochs", "3", "--lr", "0.05", "--max-length", "48",
         "--eval-every-epochs", "1", "--methods", "warp", "infoprompt-ce", "--loss-tolerance", "1e-5",
         "--param-tolerance", "1e-5", "--port", str(free_port()), "--timeout", "600", "--json", str(report)],
        capture_output=True, text=True, timeout=900,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr[-3000:]
    result = json.loads(report.read_text())
    assert result["failures"] == []
    for row in result["rows"]:
        assert row["world_size"] == 2 and row["steps"] == 9
        assert row["single_curve"] == pytest.approx(row["multi_curve"], abs=1e-5)
        assert row["single_curve"][0] != pytest.approx(row["single_curve"][-1], abs=1e-3)  # the model did move
        assert row["max_metric_diff"] == 0.0 and row["max_param_diff"] < 1e-5
