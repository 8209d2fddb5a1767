"""Multi-process training: batches split over processes, gradients all-reduced, same numbers as one process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infoprompt.training import Distributed, distributed_context

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ddp_check.py"


def test_single_process_context_is_inactive(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    context = distributed_context()
    assert not context.active and context.is_main and context.share([3, 1, 2]) == [3, 1, 2]


def test_shares_interleave_and_cover_a_batch():
    batch = [7, 3, 9, 1, 4]
    shares = [Distributed(rank, 2).share(batch) for rank in range(2)]
    assert shares == [[7, 9, 4], [3, 1]]
    assert Distributed(2, 3).share([5, 6]) == []  # a process may get nothing from a short last batch


@pytest.mark.heavy
def test_two_gloo_processes_match_one(tiny_model_dirs, data_dir, tmp_path):
    """benchmarks/ddp_check.py: warp follows the same loss curve and metrics with 1 and 2 CPU processes."""
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--backbone", str(tiny_model_dirs["bert"]), "--data-dir", str(data_dir),
         "--task", "sst2", "--shots", "16", "--epochs", "2", "--max-length", "48", "--methods", "warp",
         "--json", str(tmp_path / "ddp.json")],
        capture_output=True, text=True, timeout=900,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr[-3000:]
    assert "| warp |" in completed.stdout and completed.stdout.rstrip().endswith("OK")
