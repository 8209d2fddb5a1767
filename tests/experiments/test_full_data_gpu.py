"""benchmarks/full_data_gpu.py on the CPU with a tiny model: a budget spent between cells or mid-cell leaves the
finished cells' records, no claim and no scratch, and the next invocation runs the rest."""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path

import pytest

from infoprompt.experiments.grid import load_cells
from infoprompt.experiments.store import load_records
from infoprompt.experiments.sweep import cell_status
from infoprompt.pipeline import run_training

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "full_data_gpu.py"


def load_script():
    spec = importlib.util.spec_from_file_location("full_data_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def setup(tmp_path, toy_task, tiny_bert_dir):
    """A full-split grid of four cells on the toy task, and the script's arguments for it."""
    task, data_dir = toy_task
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"""
backbone: {tiny_bert_dir}
tasks: [{task}]
shots: [full]
seeds: [1, 2]
classifier: {{max_length: 32}}
training: {{epochs: 1, batch_size: 8, eval_every_epochs: 0}}
grids:
  - methods: [warp, linear-probe]
""")
    results = tmp_path / "results"
    args = ["--grid", str(grid), "--results", str(results), "--data-dir", str(data_dir), "--tasks", task,
            "--methods", "warp,linear-probe", "--seeds", "1,2", "--allow-cpu", "--threads", "1", "--quiet"]
    return load_script(), args, results, load_cells(grid, {"data_dir": str(data_dir)})


def leftovers(results: Path) -> list[str]:
    """Claims, takeover locks, scratch directories and temporary files: what could block or litter a rerun."""
    return sorted(p.name for p in results.rglob("*") if p.suffix in (".claim", ".takeover", ".partial", ".tmp"))


def finished_bytes(results: Path) -> dict[str, bytes]:
    return {p.relative_to(results).as_posix(): p.read_bytes() for p in results.rglob("*.json")}


def test_a_budget_spent_between_cells_stops_the_sweep_and_a_rerun_finishes_it(setup, capsys):
    script, args, results, cells = setup
    now = [0.0]

    def runner(spec, out, **kwargs):
        record = run_training(spec, out, **kwargs)
        now[0] += 2000.0  # every cell "takes" 2,000 s of the fake clock (the real alarm, at 3,000 s, never comes)
        return record

    assert script.main(["--budget", "3000", *args], runner=runner, clock=lambda: now[0]) == script.EXIT_BUDGET
    assert "stopped (budget of 3000 s spent); 4 cell(s): 2 done, 0 failed, 0 running elsewhere, 2 to run" in \
        capsys.readouterr().out
    assert len(load_records(results)) == 2 and leftovers(results) == []
    before = finished_bytes(results)

    assert script.main(["--budget", "3600", *args]) == 0
    assert "0 failed" in capsys.readouterr().out
    assert set(cell_status(results, cells).values()) == {"done"} and leftovers(results) == []
    after = finished_bytes(results)
    assert len(after) == 4 and all(after[name] == data for name, data in before.items())  # untouched


@pytest.mark.parametrize("signum", [signal.SIGALRM, signal.SIGTERM], ids=["SIGALRM", "SIGTERM"])
def test_a_signal_mid_cell_leaves_no_record_claim_or_scratch_of_that_cell(setup, monkeypatch, signum):
    import os

    import infoprompt.pipeline as pipeline

    script, args, results, cells = setup
    saves = []
    save_adapter = pipeline.save_adapter

    def interrupted(model, directory, *rest, **kwargs):
        size = save_adapter(model, directory, *rest, **kwargs)
        saves.append(directory)
        if len(saves) == 2:  # the second cell has trained and saved into its scratch: the alarm or SIGTERM comes
            os.kill(os.getpid(), signum)
        return size

    monkeypatch.setattr(pipeline, "save_adapter", interrupted)
    expected = script.EXIT_BUDGET if signum == signal.SIGALRM else script.EXIT_TERMINATED
    assert script.main(["--budget", "3600", *args]) == expected
    assert len(load_records(results)) == 1 and leftovers(results) == []
    assert not saves[1].exists()  # the interrupted cell's saved run went with its scratch directory
    assert signal.getsignal(signal.SIGTERM) is not script._stop and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)

    monkeypatch.setattr(pipeline, "save_adapter", save_adapter)
    assert script.main(["--budget", "3600", *args]) == 0
    assert set(cell_status(results, cells).values()) == {"done"} and leftovers(results) == []


def test_no_gpu_is_refused_unless_allowed(setup, capsys):
    import torch

    script, args, results, _ = setup
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert script.main(["--budget", "10", *[a for a in args if a != "--allow-cpu"]]) == 2
    assert "sees no CUDA GPU" in capsys.readouterr().err and not results.exists()


def test_the_default_cells_are_the_cut_grid_of_the_full_data_grid():
    script = load_script()
    cells = load_cells(script.GRID, {"tasks": list(script.TASKS), "methods": list(script.METHODS),
                                     "seeds": list(script.SEEDS)})
    whole = {cell.id: cell for cell in load_cells(script.GRID)}
    assert len(cells) == 3 * 4 and {c.task for c in cells} == {"mrpc", "rte", "cola"}
    # the same cells, with the same settings, as the whole grid's: the records resume into it
    assert all(whole[c.id].settings_hash == c.settings_hash for c in cells)
    assert {c.training.get("epochs") for c in cells} == {30} and not any("device" in c.training for c in cells)


def test_what_a_signal_inside_the_sweeps_own_cleanup_could_leave_is_removed(tmp_path):
    import json
    import os
    import socket

    from infoprompt.experiments.store import claim_path, record_path
    from infoprompt.io_utils import scratch_directory

    script = load_script()
    cells = load_cells(None, {"tasks": ["sst2"], "methods": ["warp"], "shots": ["full"], "seeds": [1, 2]})
    mine, other = (claim_path(tmp_path, cell) for cell in cells)
    for path, pid in ((mine, os.getpid()), (other, os.getpid() + 1)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"host": socket.gethostname(), "pid": pid, "started": "2026-01-01T00:00:00"}))
    scratch = scratch_directory(record_path(tmp_path, cells[0]), "test")
    script.leave_resumable(tmp_path, cells)
    assert not mine.exists() and not scratch.exists() and other.exists()  # another worker's claim stays
