"""scripts/backfill_adapter_bytes.py: records written before adapter_bytes get the size of an untrained rebuild,
which matches what their trained cell saved; every other record stays byte for byte as it was."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from infoprompt.experiments.grid import load_cells
from infoprompt.experiments.store import record_path
from infoprompt.experiments.sweep import BackboneCache, run_sweep

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "backfill_adapter_bytes.py"


@pytest.fixture(scope="module")
def backfill_script():
    spec = importlib.util.spec_from_file_location("backfill_adapter_bytes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_backfill_fills_records_lacking_the_size_and_leaves_the_others(
        backfill_script, toy_task, tiny_bert_dir, tmp_path, monkeypatch, one_thread, capsys):
    task, data_dir = toy_task
    cells = load_cells(None, {"backbone": str(tiny_bert_dir), "tasks": [task], "methods": ["warp", "linear-probe"],
                              "shots": [8], "seeds": [1, 2], "data_dir": str(data_dir),
                              "classifier": {"max_length": 32},
                              "training": {"epochs": 1, "batch_size": 8, "eval_every_epochs": 0}})
    results = tmp_path / "results"
    run_sweep(cells, results, backbones=BackboneCache(), progress=False, echo=lambda _: None)
    paths = {(cell.method, cell.seed): record_path(results, cell) for cell in cells}
    trained = {key: json.loads(path.read_text())["adapter_bytes"] for key, path in paths.items()}
    # Three records as an earlier version wrote them; linear-probe seed 2 keeps its measured size.
    for key in [("warp", 1), ("warp", 2), ("linear-probe", 1)]:
        record = json.loads(paths[key].read_text())
        del record["adapter_bytes"]
        paths[key].write_text(json.dumps(record))
    untouched = paths["linear-probe", 2].read_bytes()
    failed = results / "task=other/method=warp/shots=8/np=4/seed=1.json"
    failed.parent.mkdir(parents=True)
    failed.write_text(json.dumps({"status": "failed", "error": "RuntimeError: boom", "task": "other"}))

    built = []
    measure = backfill_script.measure
    monkeypatch.setattr(backfill_script, "measure", lambda spec, *rest: built.append(spec.method) or measure(spec, *rest))
    assert backfill_script.main([str(results)]) == 0
    assert "filled 3 record(s); 0 could not be rebuilt" in capsys.readouterr().out
    assert sorted(built) == ["linear-probe", "warp"]  # one build per shape: the two warp seeds share one
    for key in [("warp", 1), ("warp", 2), ("linear-probe", 1)]:
        record = json.loads(paths[key].read_text())
        # Shapes do not depend on training: the untrained rebuild saves as many bytes as the trained cell did.
        assert record["adapter_bytes"] == trained[key] and record["adapter_bytes_from"] == "rebuilt"
    assert paths["linear-probe", 2].read_bytes() == untouched
    assert "adapter_bytes" not in json.loads(failed.read_text())
    assert not [p for p in results.rglob("*") if p.name.startswith(".")]  # no scratch left behind

    before = {key: path.read_bytes() for key, path in paths.items()}
    assert backfill_script.main([str(results)]) == 0  # nothing left to fill
    assert {key: path.read_bytes() for key, path in paths.items()} == before
    assert "filled 0 record(s)" in capsys.readouterr().out


def test_backfill_names_what_it_cannot_rebuild(backfill_script, tmp_path, capsys):
    path = tmp_path / "task=sst2/method=warp/shots=8/np=4/seed=1.json"
    path.parent.mkdir(parents=True)
    record = {"status": "ok", "task": "sst2", "method": "warp", "shots": 8, "n_prompts": 4, "seed": 1,
              "backbone": "minilm", "metrics": {"accuracy": 0.5}}
    path.write_text(json.dumps(record))
    assert backfill_script.main([str(tmp_path)]) == 1
    assert "has no run spec" in capsys.readouterr().err and json.loads(path.read_text()) == record
    assert backfill_script.main([str(tmp_path / "missing")]) == 2
