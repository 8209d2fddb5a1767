"""Regression tests of issue 14: bad input never loses data, emits garbage or shows a traceback."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
import torch
from robust_helpers import TRAIN_ARGS, listing, run_cli, write_sst2
from safetensors.torch import load_file, save_file

from infoprompt.errors import UserError
from infoprompt.experiments.grid import load_cells
from infoprompt.experiments.store import (
    CLAIM_GRACE_S,
    claim_path,
    is_stale,
    load_records,
    read_claim,
    record_path,
    try_claim,
)
from infoprompt.experiments.sweep import BackboneCache, cell_status, run_sweep
from infoprompt.inputs import read_inputs
from infoprompt.io_utils import atomic_write_json, decode_lines, staged_directory
from infoprompt.kinds import load_adapter
from infoprompt.kinds.config import CONFIG_NAME, ClassifierConfig
from infoprompt.pipeline import RunSpec, build_classifier, run_training
from infoprompt.tasks import TASKS, TaskSpec, get_task, load_split, register_task
from infoprompt.tasks.glue import read_tsv
from infoprompt.training import TrainConfig, batches, train

SST2 = get_task("sst2")


def train_args(tiny_bert, data_dir, out, *extra):
    return ("train", *TRAIN_ARGS, "--backbone", tiny_bert, "--data-dir", data_dir, "--out", out, *extra)


def copy_run(tiny_run, tmp_path):
    target = tmp_path / "adapter"
    shutil.copytree(tiny_run, target)
    return target


# -- data loss and corruption ---------------------------------------------------------------------------------
def test_the_later_of_two_runs_loses_cleanly(tmp_path):
    final = tmp_path / "cc"
    first_ctx = staged_directory(final)
    first = first_ctx.__enter__()
    second_ctx = staged_directory(final)
    second = second_ctx.__enter__()
    assert first != second and first.name.startswith(".cc.") and first.name.endswith(".partial")
    (first / "train_log.jsonl").write_text("first")
    (second / "train_log.jsonl").write_text("second")
    first_ctx.__exit__(None, None, None)
    with pytest.raises(UserError, match="already exists"):
        second_ctx.__exit__(None, None, None)
    assert (final / "train_log.jsonl").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cc"]


def test_a_removed_staging_directory_is_not_installed(tmp_path):
    final = tmp_path / "cc"
    with pytest.raises(UserError, match="was removed"), staged_directory(final) as staging:
        shutil.rmtree(staging)
    assert not final.exists()


def test_overwrite_refuses_a_directory_that_is_not_a_run(tmp_path, sst2_dir, tiny_bert):
    data = tmp_path / "mydata"
    (data / "sub").mkdir(parents=True)
    (data / "thesis.tex").write_text("precious")
    before = listing(tmp_path)
    result = run_cli(*train_args(tiny_bert, sst2_dir, data, "--overwrite"))
    assert result.one_line_error and "not one, so it is left alone" in result.err
    assert listing(tmp_path) == before and (data / "thesis.tex").read_text() == "precious"


def test_overwrite_replaces_a_run_directory(tmp_path, sst2_dir, tiny_bert, tiny_run):
    out = copy_run(tiny_run, tmp_path)
    (out / "stale.txt").write_text("old run file")
    result = run_cli(*train_args(tiny_bert, sst2_dir, out, "--overwrite"))
    assert result.code == 0, result.err
    assert not (out / "stale.txt").exists() and (out / "train_log.jsonl").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]


@pytest.mark.parametrize("target", [".", "file.txt"])
def test_overwrite_onto_the_current_directory_or_a_file_is_refused_before_training(tmp_path, monkeypatch, sst2_dir,
                                                                                   tiny_bert, target):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("keep")
    result = run_cli(*train_args(tiny_bert, sst2_dir, target, "--overwrite"))
    assert result.one_line_error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


@pytest.mark.parametrize("command", ["eval", "predict"])
def test_negative_or_zero_batch_size_is_refused(tiny_run, sst2_dir, tmp_path, command):
    (tmp_path / "in.jsonl").write_text('{"sentence": "great movie"}\n')
    extra = ("--data-dir", sst2_dir) if command == "eval" else ("--input", tmp_path / "in.jsonl")
    for size in ("-1", "0"):
        result = run_cli(command, "--adapter", tiny_run, "--batch-size", size, "--quiet", *extra)
        assert result.one_line_error and "--batch-size" in result.err and result.out == ""


def test_a_batch_size_below_one_never_reaches_the_loop():
    with pytest.raises(UserError, match="batch size"):
        batches([1, 2, 3], -1)


@pytest.mark.parametrize("option,value", [
    ("--lr", "inf"), ("--lr", "nan"), ("--lr", "-1"), ("--lr", "-0.001"), ("--lr", "0"), ("--beta", "nan"),
    ("--gamma", "-inf"), ("--beta", "-1"), ("--weight-decay", "-1"), ("--epochs", "0"), ("--epochs", "-2"),
    ("--max-steps", "-1"), ("--max-steps", "0"), ("--batch-size", "-4"), ("--batch-size", "0"),
    ("--max-length", "0"), ("--n-prompts", "-1"), ("--kl-weight", "nan"), ("--epochs", "two"),
])
def test_bad_numbers_are_refused_with_the_option_named(tmp_path, sst2_dir, tiny_bert, option, value):
    result = run_cli(*train_args(tiny_bert, sst2_dir, tmp_path / "run", f"{option}={value}"))
    assert result.one_line_error and option in result.err and value in result.err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("field,value", [
    ("epochs", 0), ("epochs", -2), ("batch_size", 0), ("lr", float("inf")), ("lr", -1e-3), ("lr", float("nan")),
    ("weight_decay", -1.0), ("max_steps", -1), ("epochs", "two"), ("grad_clip", float("nan")), ("precision", "fp8"),
    ("eval_subset", -1), ("feature_cache", "yes"),
])
def test_train_config_refuses_bad_values(field, value):
    with pytest.raises(UserError, match=field if field != "precision" else "unknown precision"):
        TrainConfig(**{field: value})


@pytest.mark.parametrize("field,value", [
    ("n_prompts", "four"), ("beta", float("nan")), ("gamma", -1.0), ("max_length", 0), ("rank", 0),
    ("n_negatives", 0), ("truncate", "no"), ("labels", ("a", "a")), ("kl_weight", float("inf")),
])
def test_classifier_config_refuses_bad_values(field, value):
    with pytest.raises(UserError, match=field):
        ClassifierConfig.create(task="sst2", method="warp", backbone="minilm", **{field: value})


def test_a_diverging_run_stops_with_a_clear_error_and_stores_nothing(tmp_path, sst2_dir, tiny_bert):
    result = run_cli(*train_args(tiny_bert, sst2_dir, tmp_path / "run", "--lr", "1e30", "--epochs", "3"))
    assert result.one_line_error and "training diverged" in result.err
    assert not any(tmp_path.iterdir())


def test_a_nan_loss_stops_training_at_that_step(bert_backbone, toy_examples, monkeypatch):
    model = build_classifier(RunSpec(task="sst2", method="warp", classifier={"max_length": 32}), bert_backbone)
    original = model.losses

    def poisoned(*args, **kwargs):
        terms = original(*args, **kwargs)
        terms.total = terms.total * float("nan")
        return terms

    monkeypatch.setattr(model, "losses", poisoned)
    with pytest.raises(UserError, match=r"loss is nan at step 1 \(epoch 1\); try a smaller --lr"):
        train(model, toy_examples, None, TrainConfig(epochs=1, batch_size=4, progress=False))


def test_non_finite_adapter_weights_are_refused(tiny_run, tmp_path, sst2_dir):
    adapter = copy_run(tiny_run, tmp_path)
    weights = adapter / "adapter_model.safetensors"
    state = load_file(str(weights))
    name = sorted(state)[0]
    state[name] = torch.full_like(state[name], float("nan"))
    save_file(state, str(weights))
    (tmp_path / "in.jsonl").write_text('{"sentence": "great movie"}\n')
    for args in (("eval", "--data-dir", sst2_dir), ("predict", "--input", tmp_path / "in.jsonl")):
        result = run_cli(args[0], "--adapter", adapter, "--quiet", *args[1:])
        assert result.one_line_error and "NaN or infinite" in result.err and result.out == ""


def test_json_writers_are_strict(tmp_path):
    with pytest.raises(ValueError, match="not JSON compliant"):
        atomic_write_json(tmp_path / "x.json", {"loss": float("nan")})
    assert not any(tmp_path.iterdir())


def test_training_tsv_header_is_checked(tmp_path):
    path = tmp_path / "SST-2" / "train.tsv"
    path.parent.mkdir()
    path.write_text("text\tgold\ngreat movie\t1\n")
    with pytest.raises(UserError, match=r"train.tsv:1: header 'text\\tgold' is not the expected 'sentence\\tlabel'"):
        load_split(SST2, "train", tmp_path)
    path.write_text("great movie\t1\nbad film\t0\n")
    with pytest.raises(UserError, match="train.tsv:1: the file has no header line"):
        load_split(SST2, "train", tmp_path)


def test_a_header_of_any_names_must_not_be_a_data_row(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("great movie\t1\nbad film\t0\n")
    with pytest.raises(UserError, match="no header line"):
        read_tsv(path, columns={"sentence": 0}, label_column=1, n_columns=2, header=True,
                 label_names={"0": "negative", "1": "positive"})


# -- sweeps ---------------------------------------------------------------------------------------------------
class FailingRunner:
    def __init__(self):
        self.calls = []

    def __call__(self, spec, out, *, overwrite, backbone):
        self.calls.append(spec.seed)
        time.sleep(0.05)
        raise RuntimeError(f"boom {spec.seed}")


def _backbones():
    class Fake:
        class model:  # noqa: N801 - mimics Backbone.model
            @staticmethod
            def eval():
                return None

    return BackboneCache(loader=lambda name, cache_dir=None: Fake())


CELLS = {"tasks": ["sst2"], "methods": ["warp"], "shots": [64], "n_prompts": [4], "seeds": [1, 2, 3, 4]}


def test_a_failing_cell_runs_once_per_pass_across_workers(tmp_path):
    cells = load_cells(None, CELLS)
    runners = [FailingRunner(), FailingRunner()]
    common = {"backbones": _backbones(), "progress": False, "echo": lambda _: None, "pass_started": time.time()}
    threads = [threading.Thread(target=run_sweep, args=(cells, tmp_path), kwargs={"runner": r, **common})
               for r in runners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(runners[0].calls + runners[1].calls) == [1, 2, 3, 4]
    # without a shared start, a worker that starts after a failure was recorded retries that cell (a new pass)
    # a later pass retries the failures
    again = FailingRunner()
    run_sweep(cells, tmp_path, runner=again, backbones=_backbones(), progress=False, echo=lambda _: None)
    assert sorted(again.calls) == [1, 2, 3, 4]


def test_an_empty_claim_goes_stale_after_its_grace_period(tmp_path):
    cells = load_cells(None, {**CELLS, "seeds": [1]})
    path = claim_path(tmp_path, cells[0])
    path.parent.mkdir(parents=True)
    path.write_text("")
    assert cell_status(tmp_path, cells)[cells[0].id] == "running" and not try_claim(tmp_path, cells[0])
    old = time.time() - CLAIM_GRACE_S - 5
    os.utime(path, (old, old))
    assert is_stale(read_claim(path)) and cell_status(tmp_path, cells)[cells[0].id] == "todo"
    runner = FailingRunner()
    run_sweep(cells, tmp_path, runner=runner, backbones=_backbones(), progress=False, echo=lambda _: None)
    assert runner.calls == [1] and not path.exists()


def test_only_one_worker_takes_over_a_stale_claim(tmp_path):
    cells = load_cells(None, {**CELLS, "seeds": [1]})
    path = claim_path(tmp_path, cells[0])
    for _ in range(20):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"host": socket.gethostname(), "pid": 2**22 + 12345, "started": "x"}))
        barrier = threading.Barrier(4)
        won = []

        def take(barrier=barrier, won=won):
            barrier.wait()
            won.append(try_claim(tmp_path, cells[0]))

        threads = [threading.Thread(target=take) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert won.count(True) == 1
        assert read_claim(path)["pid"] == os.getpid() and not list(tmp_path.rglob("*.takeover"))
        path.unlink()


def test_taking_over_a_stale_claim_removes_the_dead_workers_working_copies(tmp_path):
    cells = load_cells(None, {**CELLS, "seeds": [1]})
    path, record = claim_path(tmp_path, cells[0]), record_path(tmp_path, cells[0])
    path.parent.mkdir(parents=True)
    dead = 2**22 + 12345
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": dead, "started": "x"}))
    abandoned = record.with_name(f".{record.name}.{dead}.k3x9.partial")
    (abandoned / "run").mkdir(parents=True)
    (abandoned / "run" / "adapter.safetensors").write_bytes(b"half written")
    # another cell's copy of the same pid, and a live worker's copy of this cell, are not this takeover's
    other = record.with_name(f".seed=2.json.{dead}.k3x9.partial")
    live = record.with_name(f".{record.name}.{os.getppid()}.q7w2.partial")
    other.mkdir()
    live.mkdir()
    assert try_claim(tmp_path, cells[0])
    assert not abandoned.exists() and other.is_dir() and live.is_dir()
    assert read_claim(path)["pid"] == os.getpid()


def test_grid_training_values_are_checked_at_load():
    for training, message in (({"epochs": "two"}, "epochs must be"), ({"lr": -1}, "lr must be"),
                              ({"lr": "1e-3"}, "in YAML write numbers")):
        with pytest.raises(UserError, match=message):
            load_cells(None, {**CELLS, "training": training})
    with pytest.raises(UserError, match="beta must be"):
        load_cells(None, {**CELLS, "classifier": {"beta": -1}})


def test_report_names_a_record_without_fields(tmp_path):
    cells = load_cells(None, {**CELLS, "seeds": [1]})
    path = record_path(tmp_path / "results", cells[0])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"status": "ok", "task": "sst2"}))
    with pytest.raises(UserError, match="lacks the field 'method'"):
        load_records(tmp_path / "results")
    result = run_cli("report", tmp_path / "results")
    assert result.one_line_error and str(path) in result.err
    good = {"status": "ok", "task": "sst2", "method": "warp", "backbone": "minilm", "shots": 64, "n_prompts": 4,
            "seed": 1, "metrics": {"accuracy": 0.5}}
    for change in ({"settings": True}, {"settings": {"training": [1]}}, {"metrics": {"accuracy": float("inf")}},
                   {"primary_metric": ["accuracy"]}, {"seed": "1"}, {"shots": True}):
        path.write_text(json.dumps({**good, **change}))  # found by the hypothesis suite: settings=true crashed
        result = run_cli("report", tmp_path / "results")
        assert result.one_line_error and "result record field" in result.err, change


# -- encodings and inputs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("data,message", [
    (b"sentence\tlabel\ngr\xe9at movie\t1\n", r"train.tsv:2: not valid utf-8 text \(byte 0xe9 at column 3\); re-encode"),
    ("sentence\tlabel\ngreat\t1\n".encode("utf-16"), "train.tsv: the file is UTF-16 text"),
])
def test_training_files_in_another_encoding_name_the_line_and_the_remedy(tmp_path, data, message):
    path = tmp_path / "SST-2" / "train.tsv"
    path.parent.mkdir()
    path.write_bytes(data)
    with pytest.raises(UserError, match=message):
        load_split(SST2, "train", tmp_path)


def test_predict_decodes_with_encoding_and_names_bad_bytes(tiny_run, tmp_path):
    latin = tmp_path / "in.tsv"
    latin.write_bytes("sentence\ngreat movie caf\u00e9\n".encode("latin-1"))
    result = run_cli("predict", "--adapter", tiny_run, "--input", latin, "--quiet")
    assert result.one_line_error and "in.tsv:2: not valid utf-8" in result.err and "--encoding" in result.err
    result = run_cli("predict", "--adapter", tiny_run, "--input", latin, "--encoding", "latin-1", "--quiet")
    assert result.code == 0 and json.loads(result.out)["line"] == 2
    wide = tmp_path / "wide.jsonl"
    wide.write_bytes('{"sentence": "great movie"}\n'.encode("utf-16"))
    assert run_cli("predict", "--adapter", tiny_run, "--input", wide, "--quiet").one_line_error
    result = run_cli("predict", "--adapter", tiny_run, "--input", wide, "--encoding", "utf-16", "--quiet")
    assert result.code == 0 and len(result.out.splitlines()) == 1


def test_stdin_bytes_that_are_not_utf8_are_one_line(tiny_run):
    result = run_cli("predict", "--adapter", tiny_run, "--input", "-", "--quiet", stdin=b"good film\n\xff\xfe bad\n")
    assert result.one_line_error and "<stdin>:2: not valid utf-8" in result.err and result.out == ""


def test_stdin_records_carry_their_line_and_blank_lines_are_counted(tiny_run):
    result = run_cli("predict", "--adapter", tiny_run, "--input", "-", stdin=b"good film\n\n  \nbad film\n")
    assert result.code == 0
    assert [json.loads(line)["line"] for line in result.out.splitlines()] == [1, 4]
    assert "skipped 2 blank line(s)" in result.err


@pytest.mark.parametrize("line", ['{"sentence": ""}', '{"sentence": "   "}', '{"sentence": "\\t"}'])
def test_predict_refuses_empty_text(tiny_run, tmp_path, line):
    path = tmp_path / "in.jsonl"
    path.write_text(f'{{"sentence": "good film"}}\n{line}\n')
    result = run_cli("predict", "--adapter", tiny_run, "--input", path, "--quiet")
    assert result.one_line_error and "in.jsonl:2: empty text field(s) sentence" in result.err and result.out == ""


def test_decode_lines_numbers_lines_and_skips_a_utf8_bom():
    assert decode_lines(b"\xef\xbb\xbfa\r\nb\n", "x") == [(1, "a"), (2, "b"), (3, "")]
    with pytest.raises(UserError, match="unknown text encoding"):
        decode_lines(b"a", "x", "no-such-codec")


def test_read_inputs_keeps_line_numbers_of_a_tsv(tmp_path):
    path = tmp_path / "in.tsv"
    path.write_text("sentence\ngood\n\nbad\n")
    inputs = read_inputs(str(path), SST2)
    assert inputs.lines == [2, 4] and inputs.sources == [f"{path}:2", f"{path}:4"] and inputs.skipped == 1


# -- unwritable outputs ---------------------------------------------------------------------------------------
def test_unwritable_outputs_are_one_line_before_any_work(tiny_run, tmp_path, sst2_dir, tiny_bert):
    (tmp_path / "in.jsonl").write_text('{"sentence": "great movie"}\n')
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    before = listing(tmp_path)
    cases = [
        ("predict", "--adapter", tiny_run, "--input", tmp_path / "in.jsonl", "--output", tmp_path / "a-dir"),
        ("predict", "--adapter", tiny_run, "--input", tmp_path / "in.jsonl", "--output", tmp_path / "a-file" / "o"),
        ("eval", "--adapter", tiny_run, "--data-dir", sst2_dir, "--output", tmp_path / "a-dir"),
        ("eval", "--adapter", tiny_run, "--data-dir", sst2_dir, "--output", tmp_path / "a-file" / "m.json"),
        train_args(tiny_bert, sst2_dir, tmp_path / "a-file" / "run"),
        ("report", tiny_run.parent, "--out", tmp_path / "a-file" / "report"),
        ("sweep", "--results", tmp_path / "a-file" / "results", "--tasks", "sst2", "--seeds", "1", "--quiet"),
    ]
    for args in cases:
        result = run_cli(*args, "--quiet") if args[0] in ("predict", "eval") else run_cli(*args)
        assert result.code == 2 and result.err.count("\n") == 1 and "Traceback" not in result.err, (args, result)
    assert listing(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_is_refused_before_training(tmp_path, sst2_dir, tiny_bert):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = run_cli(*train_args(tiny_bert, sst2_dir, locked / "run"))
        assert result.one_line_error and "not writable" in result.err
    finally:
        locked.chmod(0o700)


# -- adapter configs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("change,message", [
    ({"n_prompts": "four"}, "n_prompts must be of type int, got 'four'"),
    ({"task": "cola"}, "are not those of task cola"),
    ({"labels": "negative"}, "labels must be a list"),
    ({"beta": "nan"}, "beta must be of type"),
    ({"max_length": -5}, "max_length must be a positive integer"),
])
def test_wrong_adapter_configs_are_one_line(tiny_run, tmp_path, sst2_dir, change, message):
    adapter = copy_run(tiny_run, tmp_path)
    path = adapter / CONFIG_NAME
    saved = json.loads(path.read_text())
    for key, value in change.items():  # an option of the kind, or a field every kind has
        (saved["options"] if key in saved["options"] else saved)[key] = value
    path.write_text(json.dumps(saved))
    result = run_cli("eval", "--adapter", adapter, "--data-dir", sst2_dir, "--quiet")
    assert result.one_line_error and message in result.err and CONFIG_NAME in result.err


def test_adapter_files_are_byte_identical_between_identical_runs(tmp_path, sst2_dir, tiny_bert):
    for name in ("a", "b"):
        assert run_cli(*train_args(tiny_bert, sst2_dir, tmp_path / name)).code == 0
    first, second = ((tmp_path / n / "adapter_model.safetensors").read_bytes() for n in ("a", "b"))
    assert first == second
    assert load_file(str(tmp_path / "a" / "adapter_model.safetensors"))  # still a valid file


# -- unclear or minor -----------------------------------------------------------------------------------------
def test_an_unknown_backbone_fails_fast_offline(monkeypatch):
    from infoprompt import backbones

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not backbones.hub_reachable()
    started = time.perf_counter()
    with pytest.raises(UserError, match="unknown backbone 'no-such-encoder'"):
        backbones.load_backbone("no-such-encoder")
    assert time.perf_counter() - started < 10


def test_a_huge_row_is_truncated_without_an_indexing_warning(tiny_run, tmp_path, capfd):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"sentence": "great movie " * 9000}) + "\n")
    result = run_cli("predict", "--adapter", tiny_run, "--input", path, "--quiet")
    assert result.code == 0 and "indexing errors" not in result.err + capfd.readouterr().err


def test_an_empty_row_range_names_the_range(tmp_path):
    write_sst2(tmp_path, n_train=5)
    task = TaskSpec(name="tiny-ranged", fields=("sentence",), labels=("negative", "positive"), label_words={},
                    metrics=("accuracy",), template=SST2.template, reader=SST2.reader,
                    splits={"train": "SST-2/train.tsv[:-800]", "dev": "SST-2/train.tsv[-800:]"})
    register_task(task)
    try:
        with pytest.raises(UserError, match=r"rows \[:-800\] of .*holds only 5 example\(s\): that range is empty"):
            load_split(task, "train", tmp_path)
    finally:
        TASKS.pop(task.name)


def test_predict_names_the_line_of_a_too_long_input_without_truncation(tmp_path, sst2_dir, tiny_bert):
    out = tmp_path / "run"
    assert run_cli(*train_args(tiny_bert, sst2_dir, out, "--no-truncate")).code == 0
    path = tmp_path / "in.jsonl"
    path.write_text('{"sentence": "good film"}\n' + json.dumps({"sentence": "great movie " * 40}) + "\n")
    result = run_cli("predict", "--adapter", out, "--input", path, "--quiet")
    assert result.one_line_error and "in.jsonl:2: input has" in result.err and "shorten the input" in result.err


def test_quiet_hides_the_loading_bar(tiny_run, tmp_path):
    import subprocess
    import sys

    path = tmp_path / "in.jsonl"
    path.write_text('{"sentence": "great movie"}\n')
    # A process of its own: in this one an earlier --quiet may already have turned the bars off.
    done = subprocess.run([sys.executable, "-m", "infoprompt.cli", "predict", "--adapter", str(tiny_run), "--input",
                           str(path), "--quiet"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Loading" not in done.stderr and json.loads(done.stdout)["line"] == 1


def test_run_spec_and_from_pretrained_agree_with_the_cli(tiny_run, tiny_bert):
    with pytest.raises(UserError, match="shots must be a positive integer"):
        RunSpec(task="sst2", method="warp", shots=0)
    with pytest.raises(UserError, match="already exists"):
        run_training(RunSpec(task="sst2", method="warp"), tiny_run)
    model = load_adapter(tiny_run)
    assert all(math.isfinite(float(p.sum())) for p in model.trainable_state().values())


@pytest.mark.parametrize("key,value", [("sampling", {}), ("source", []), ("data_dir", [1]), ("cache_dir", 3)])
def test_grid_settings_of_the_wrong_type_are_one_error(key, value):
    with pytest.raises(UserError, match=key):  # found by the hypothesis suite: sampling={} raised a TypeError
        load_cells(None, {**CELLS, key: value})


def test_user_text_with_line_breaks_stays_on_one_line():
    with pytest.raises(UserError) as info:  # found by the hypothesis suite: a grid key "\n" broke the line
        load_cells(None, {**CELLS, "training": {"\n": 1}})
    assert "\n" not in str(info.value) and "unknown key(s) \\n" in str(info.value)
    result = run_cli("train", "--task", "a\nb", "--out", "x", "--data-dir", "/no/such\ndir")
    assert result.one_line_error


@pytest.mark.parametrize("data", [b"?", b"1: 2\ntasks: [sst2]\n", b"tasks: [sst2]\x00\xff\n", b"\xff\xfe"])
def test_odd_grid_files_are_one_error(tmp_path, data):
    path = tmp_path / "grid.yaml"
    path.write_bytes(data)  # found by the hypothesis suite: a null key ("?") raised a TypeError
    with pytest.raises(UserError):
        load_cells(path)


def test_an_overwrite_that_loses_the_race_leaves_the_winner(tmp_path, monkeypatch):
    import infoprompt.io_utils as io_utils

    final = tmp_path / "run"
    final.mkdir()
    for name in (CONFIG_NAME, "metrics.json"):
        (final / name).write_text("old")
    real_rename = os.rename

    def rename_after_a_rival(source, target):
        if Path(target) == final and not final.exists():  # a rival run installs between backup and rename
            final.mkdir()
            for name in (CONFIG_NAME, "metrics.json"):
                (final / name).write_text("rival")
        return real_rename(source, target)

    monkeypatch.setattr(io_utils.os, "rename", rename_after_a_rival)
    with (pytest.raises(UserError, match="another run may have finished there first"),
          staged_directory(final, overwrite=True) as staging):
        (staging / "metrics.json").write_text("mine")
    assert (final / "metrics.json").read_text() == "rival" and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_an_unwritable_parent_is_refused_before_any_work(tmp_path, monkeypatch, sst2_dir, tiny_bert):
    import infoprompt.io_utils as io_utils

    # Root writes into read-only directories, so the permission is simulated where it is looked up.
    monkeypatch.setattr(io_utils.os, "access", lambda path, mode: Path(path) != tmp_path)
    result = run_cli(*train_args(tiny_bert, sst2_dir, tmp_path / "run"))
    assert result.one_line_error and f"directory {tmp_path} is not writable" in result.err
    result = run_cli("report", tmp_path, "--out", tmp_path / "r")
    assert result.code == 2 and not any(tmp_path.iterdir())


def test_an_overwrite_whose_old_run_was_moved_by_a_rival_still_installs(tmp_path, monkeypatch):
    import infoprompt.io_utils as io_utils

    final = tmp_path / "out" / "run"
    final.mkdir(parents=True)
    for name in (CONFIG_NAME, "metrics.json"):
        (final / name).write_text("old")
    real_replace = os.replace

    def rival_moves_it_first(source, target):
        if Path(source) == final and final.exists():  # found by the hypothesis suite: this raised OSError
            real_replace(final, tmp_path / "rival-backup")
        return real_replace(source, target)

    monkeypatch.setattr(io_utils.os, "replace", rival_moves_it_first)
    with staged_directory(final, overwrite=True) as staging:
        (staging / "metrics.json").write_text("mine")
    assert (final / "metrics.json").read_text() == "mine" and [p.name for p in final.parent.iterdir()] == ["run"]
