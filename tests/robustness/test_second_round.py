"""Regression tests of issue 32: device outputs, streamed prediction, untrusted adapters, report directories,
feature-store entries, YAML aliases and signals."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest
from robust_helpers import run_cli

import infoprompt.io_utils as io_utils
from infoprompt.errors import UserError
from infoprompt.io_utils import adapter_config_file, decode_lines

ROWS = b'{"sentence": "great movie"}\n{"sentence": "bad film"}\n{"sentence": "boring story"}\n'


@pytest.fixture
def no_rename(monkeypatch):
    """Any temp-and-rename would fail the test (and, run as root, not replace a device)."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"os.replace{args} was called")

    monkeypatch.setattr(io_utils.os, "replace", refuse)


# -- 1: devices, FIFOs and - are written in place ---------------------------------------------------------------
@pytest.mark.parametrize("target", ["/dev/null", "/dev/stdout", "-"])
def test_stream_targets_are_recognised(target):
    assert io_utils.is_stream_target(target)


def test_regular_files_and_new_paths_are_not_streamed(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    assert not io_utils.is_stream_target(tmp_path / "old.txt") and not io_utils.is_stream_target(tmp_path / "new.txt")


@pytest.mark.parametrize("target", ["/dev/null", "/dev/stdout"])
def test_predict_writes_to_a_device_in_place(tiny_run, tmp_path, no_rename, target):
    (tmp_path / "in.jsonl").write_bytes(ROWS)
    result = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.jsonl", "--output", target, "--quiet")
    assert result.code == 0, result.err
    assert os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if target == "/dev/stdout":
        assert [json.loads(line)["line"] for line in result.out.splitlines()] == [1, 2, 3]
    assert [p.name for p in tmp_path.iterdir()] == ["in.jsonl"]


def test_predict_writes_into_a_fifo(tiny_run, tmp_path, no_rename):
    (tmp_path / "in.jsonl").write_bytes(ROWS)
    fifo = tmp_path / "preds"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.jsonl", "--output", fifo, "--quiet")
    reader.join(timeout=60)
    assert result.code == 0, result.err
    assert received and len(received[0].splitlines()) == 3
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_eval_output_to_dev_null_is_written_in_place(tiny_run, sst2_dir, no_rename):
    result = run_cli("eval", "--adapter", tiny_run, "--data-dir", sst2_dir, "--output", "/dev/null", "--quiet")
    assert result.code == 0, result.err


def test_a_failed_regular_output_leaves_nothing(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError), io_utils.open_output(target) as handle:
        handle.write(b"half")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_a_symlinked_output_stays_a_link(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    (tmp_path / "link.txt").symlink_to(real)
    io_utils.atomic_write_text(tmp_path / "link.txt", "new")
    assert (tmp_path / "link.txt").is_symlink() and real.read_text() == "new"


# -- 7: predict streams: read, predict, write in chunks --------------------------------------------------------
class InterruptedStdin(io.RawIOBase):
    """Standard input that gives one line per read, then is interrupted (as by Ctrl-C or SIGTERM)."""

    def __init__(self, lines: list[bytes]):
        self.lines = list(lines)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self.lines:
            raise KeyboardInterrupt
        line = self.lines.pop(0)
        buffer[: len(line)] = line
        return len(line)


def test_predict_writes_each_chunk_before_reading_on(tiny_run, monkeypatch):
    monkeypatch.setattr("infoprompt.inputs.CHUNK_ROWS", 2)
    lines = [b'{"sentence": "great movie"}\n'] * 5
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(InterruptedStdin(lines), 64)))
    result = run_cli("predict", "--adapter", tiny_run, "--input", "-", "--quiet")
    assert result.code == 130 and "interrupted" in result.err
    # The two full chunks were predicted and written before the interrupt; the fifth row was still pending.
    assert [json.loads(line)["line"] for line in result.out.splitlines()] == [1, 2, 3, 4]


def test_a_file_input_is_checked_whole_before_the_encoder_loads(tiny_run, tmp_path, monkeypatch):
    monkeypatch.setattr("infoprompt.inputs.CHUNK_ROWS", 2)
    (tmp_path / "in.jsonl").write_bytes(ROWS * 3 + b'{"sentence": ""}\n')
    monkeypatch.setattr("infoprompt.kinds.load_adapter", lambda *a, **k: pytest.fail("the adapter was loaded"))
    result = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.jsonl", "--quiet")
    assert result.one_line_error and "in.jsonl:10: empty text field(s) sentence" in result.err and result.out == ""


def test_chunked_predictions_equal_whole_ones(tiny_run, tmp_path, monkeypatch):
    (tmp_path / "in.jsonl").write_bytes(ROWS * 4)
    whole = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.jsonl", "--quiet")
    monkeypatch.setattr("infoprompt.inputs.CHUNK_ROWS", 5)
    chunked = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.jsonl", "--quiet")
    assert whole.code == chunked.code == 0 and whole.out == chunked.out and len(whole.out.splitlines()) == 12


# -- 8 and severity 3/4 of predict input ------------------------------------------------------------------------
def test_a_lone_surrogate_is_one_line(tiny_run):
    result = run_cli("predict", "--adapter", tiny_run, "--input", "-", "--quiet", stdin=b'{"sentence": "a \\ud800"}\n')
    assert result.one_line_error and "<stdin>:1: field sentence holds a lone surrogate (U+D800)" in result.err


def test_a_codec_that_is_not_a_text_encoding_is_one_line(tiny_run):
    result = run_cli("predict", "--adapter", tiny_run, "--input", "-", "--encoding", "rot13", "--quiet",
                     stdin=b"good film\n")
    assert result.one_line_error and "'rot13' is not a text encoding" in result.err


@pytest.mark.parametrize("text", ["\u200b", "\u200b\u200d \ufeff"])
def test_zero_width_text_counts_as_empty(tiny_run, text):
    line = json.dumps({"sentence": text}).encode() + b"\n"
    result = run_cli("predict", "--adapter", tiny_run, "--input", "-", "--quiet", stdin=line)
    assert result.one_line_error and "empty text field(s) sentence" in result.err


def test_a_duplicated_tsv_column_is_refused(tiny_run, tmp_path):
    (tmp_path / "in.tsv").write_text("sentence\tsentence\ngood film\tbad film\n")
    result = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.tsv", "--quiet")
    assert result.one_line_error and "in.tsv:1: the header names column(s) sentence more than once" in result.err


def test_cr_line_endings_are_read_as_lines(tiny_run, tmp_path):
    assert decode_lines(b"sentence\tlabel\rgood\t1\rbad\t0\r", "x") == [(1, "sentence\tlabel"), (2, "good\t1"),
                                                                        (3, "bad\t0"), (4, "")]
    (tmp_path / "in.tsv").write_bytes(b"sentence\rgood film\rbad film\r")
    result = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.tsv", "--quiet")
    assert result.code == 0, result.err
    assert [json.loads(line)["line"] for line in result.out.splitlines()] == [2, 3]


def test_an_output_name_over_the_limit_is_one_line(tiny_run, tmp_path):
    (tmp_path / "in.jsonl").write_bytes(ROWS)
    result = run_cli("predict", "--adapter", tiny_run, "--input", tmp_path / "in.jsonl", "--quiet",
                     "--output", tmp_path / ("p" * 300))
    assert result.one_line_error and "is longer than" in result.err


def test_a_legal_long_name_gets_a_legal_scratch_name(tmp_path):
    target = tmp_path / ("r" * 250)
    io_utils.atomic_write_text(target, "x")
    assert target.read_text() == "x"
    with io_utils.staged_directory(tmp_path / ("d" * 250)) as staging:
        (staging / "f").write_text("y")
    assert (tmp_path / ("d" * 250) / "f").read_text() == "y"


def test_a_long_name_for_a_run_is_one_line(tmp_path):
    with pytest.raises(UserError, match="is longer than"), io_utils.staged_directory(tmp_path / ("d" * 300)):
        pass


@pytest.mark.parametrize("policy", ["cut-end", "cut-start", "cut-middle", "keep"])
def test_cutting_characters_first_keeps_the_same_tokens(bert_backbone, policy):
    from infoprompt.templates import Template, TemplateEncoder, clip_characters

    template = Template.parse(f"<cls> <p> {{sentence:{policy}}} <p> <mask> <sep>")
    encoder = TemplateEncoder(bert_backbone.tokenizer, template, 2, 32)
    text = " ".join(["great movie and a boring story", "the actor was brilliant"] * 2000)
    clipped = clip_characters(text, 32, policy)
    assert len(clipped) < len(text) // 10
    assert encoder.encode_many([{"sentence": clipped}]) == encoder.encode_many([{"sentence": text}])


def test_a_huge_line_reaches_the_tokenizer_cut(tiny_run, monkeypatch):
    from infoprompt.templates import CHARS_PER_TOKEN, TemplateEncoder

    seen: list[int] = []
    original = TemplateEncoder.encode_many

    def spy(self, field_texts, sources=None):
        seen.extend(len(text) for fields in field_texts for text in fields.values())
        return original(self, field_texts, sources)

    monkeypatch.setattr(TemplateEncoder, "encode_many", spy)
    line = json.dumps({"sentence": "good film " * 300_000}).encode() + b"\n"
    result = run_cli("predict", "--adapter", tiny_run, "--input", "-", "--quiet", stdin=line)
    assert result.code == 0, result.err
    assert seen and max(seen) <= 32 * CHARS_PER_TOKEN  # the tiny run's max_length is 32


# -- 2: an adapter never runs its backbone's code ----------------------------------------------------------------
EVIL_MODULE = '''
import pathlib
pathlib.Path(MARKER).write_text("the backbone's code ran")
from transformers import PretrainedConfig
class EvilConfig(PretrainedConfig):
    model_type = "evilnet"
'''


def evil_adapter(tiny_run, tmp_path, make_backbone):
    backbone = tmp_path / "evil-backbone"
    make_backbone(backbone)
    adapter = tmp_path / "adapter"
    shutil.copytree(tiny_run, adapter)
    config = json.loads(adapter_config_file(adapter).read_text())
    config["backbone"] = str(backbone)
    adapter_config_file(adapter).write_text(json.dumps(config))
    return adapter, backbone


def remote_code_backbone(directory):
    directory.mkdir()
    (directory / "evil.py").write_text(EVIL_MODULE.replace("MARKER", repr(str(directory.parent / "RAN"))))
    (directory / "config.json").write_text(json.dumps(
        {"model_type": "evilnet", "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}}))


@pytest.mark.parametrize("command", ["eval", "predict"])
def test_an_adapter_backbone_with_custom_code_never_runs_it(tiny_run, tmp_path, sst2_dir, command):
    adapter, backbone = evil_adapter(tiny_run, tmp_path, remote_code_backbone)
    (tmp_path / "in.jsonl").write_bytes(ROWS)
    extra = ("--data-dir", sst2_dir) if command == "eval" else ("--input", tmp_path / "in.jsonl")
    result = run_cli(command, "--adapter", adapter, "--quiet", *extra, stdin=b"y\ny\ny\n")
    assert not (tmp_path / "RAN").exists()
    assert result.one_line_error and "never runs a model's code" in result.err


def test_an_adapter_backbone_is_never_downloaded(tiny_run, tmp_path, sst2_dir, monkeypatch):
    import infoprompt.backbones as backbones

    calls = []
    original = backbones.AutoConfig.from_pretrained

    def spy(location, **kwargs):
        calls.append(kwargs)
        return original(location, **kwargs)

    monkeypatch.setattr(backbones.AutoConfig, "from_pretrained", spy)
    result = run_cli("eval", "--adapter", tiny_run, "--data-dir", sst2_dir, "--quiet")
    assert result.code == 0, result.err
    assert calls and all(c.get("local_files_only") is True and c.get("trust_remote_code") is False for c in calls)


def test_a_backbone_with_a_malicious_pickle_is_one_line(tiny_run, tmp_path, sst2_dir, tiny_bert, monkeypatch):
    monkeypatch.chdir(tmp_path)
    def pickled_backbone(directory):
        shutil.copytree(tiny_bert, directory)
        (directory / "model.safetensors").unlink()
        (directory / "pytorch_model.bin").write_bytes(pickle.dumps(MaliciousPickle(), protocol=2))

    adapter, backbone = evil_adapter(tiny_run, tmp_path, pickled_backbone)
    result = run_cli("eval", "--adapter", adapter, "--data-dir", sst2_dir, "--quiet")
    assert not (tmp_path / "PICKLE-RAN").exists()
    assert result.one_line_error and "pickled weights were refused" in result.err


class MaliciousPickle:
    def __reduce__(self):
        return (os.system, ("touch PICKLE-RAN",))


# -- 3 and 11: report directories ----------------------------------------------------------------------------
def stored_results(root):
    from infoprompt.experiments.grid import Cell
    from infoprompt.experiments.store import write_record

    for seed, value in ((1, 0.5), (2, 0.7)):
        record = {"task": "sst2", "method": "warp", "shots": 64, "n_prompts": 4, "seed": seed, "backbone": "minilm",
                  "primary_metric": "accuracy", "metrics": {"accuracy": value}, "status": "ok"}
        write_record(root, Cell("sst2", "warp", 64, 4, seed), record)
    return root


@pytest.mark.parametrize("content", ["report.md", "table-np-shots=64.csv", "thesis.tex"])
def test_report_refuses_a_directory_that_is_not_a_report(tmp_path, content):
    results = stored_results(tmp_path / "results")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / content).write_text("precious")
    result = run_cli("report", results, "--out", mine)
    assert result.one_line_error and "is not a report directory" in result.err
    assert [p.name for p in mine.iterdir()] == [content] and (mine / content).read_text() == "precious"


def test_report_refuses_a_file_as_its_directory(tmp_path):
    results = stored_results(tmp_path / "results")
    (tmp_path / "file").write_text("x")
    result = run_cli("report", results, "--out", tmp_path / "file")
    assert result.one_line_error and "is not a directory" in result.err and (tmp_path / "file").read_text() == "x"


def test_report_replaces_its_own_directory_and_keeps_other_files(tmp_path):
    results = stored_results(tmp_path / "results")
    assert run_cli("report", results, "--out", tmp_path / "out").code == 0
    (tmp_path / "out" / "notes.md").write_text("mine")
    assert run_cli("report", results, "--out", tmp_path / "out").code == 0
    assert (tmp_path / "out" / "notes.md").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "results"]


@pytest.mark.parametrize("failure", [KeyboardInterrupt(), OSError(28, "No space left on device")])
def test_a_report_that_fails_half_way_leaves_the_old_one_whole(tmp_path, monkeypatch, failure):
    import builtins

    results = stored_results(tmp_path / "results")
    assert run_cli("report", results, "--out", tmp_path / "out").code == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    from infoprompt.experiments.grid import Cell
    from infoprompt.experiments.store import write_record

    write_record(results, Cell("sst2", "warp", 64, 4, 3), {
        "task": "sst2", "method": "warp", "shots": 64, "n_prompts": 4, "seed": 3, "backbone": "minilm",
        "primary_metric": "accuracy", "metrics": {"accuracy": 0.9}, "status": "ok"})
    real_open, opened = builtins.open, []

    def failing_open(file, mode="r", *args, **kwargs):
        if "w" in mode and str(file).endswith((".md", ".csv")):
            opened.append(file)
            if len(opened) == 3:
                raise failure
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", failing_open)
    result = run_cli("report", results, "--out", tmp_path / "out")
    monkeypatch.undo()
    assert result.code == (130 if isinstance(failure, KeyboardInterrupt) else 2)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "results"]


# -- 4: an adapter must name its backbone's fingerprint -----------------------------------------------------------
@pytest.mark.parametrize("fingerprint", [None, {}, {"model_type": "bert"}])
def test_an_adapter_without_a_backbone_fingerprint_is_refused(tiny_run, tmp_path, sst2_dir, fingerprint):
    adapter = tmp_path / "adapter"
    shutil.copytree(tiny_run, adapter)
    config = json.loads(adapter_config_file(adapter).read_text())
    if fingerprint is None:
        del config["backbone_fingerprint"]
    else:
        config["backbone_fingerprint"] = fingerprint
    adapter_config_file(adapter).write_text(json.dumps(config))
    result = run_cli("eval", "--adapter", adapter, "--data-dir", sst2_dir, "--quiet")
    assert result.one_line_error and "backbone_fingerprint" in result.err and "retrain" in result.err


def test_the_committed_adapter_fixtures_have_fingerprints():
    from pathlib import Path

    from infoprompt.validation import require_fingerprint

    configs = sorted((Path(__file__).parents[1] / "fixtures" / "adapters").glob("*/adapter_config.json"))
    assert len(configs) >= 4
    for path in configs:
        require_fingerprint(json.loads(path.read_text()), str(path))


def test_deeply_nested_json_is_one_line(tiny_run, tmp_path, sst2_dir):
    adapter = tmp_path / "adapter"
    shutil.copytree(tiny_run, adapter)
    adapter_config_file(adapter).write_text("[" * 200_000)
    result = run_cli("eval", "--adapter", adapter, "--data-dir", sst2_dir, "--quiet")
    assert result.one_line_error and "nested too deeply" in result.err
    results = stored_results(tmp_path / "results")
    next(results.rglob("seed=1.json")).write_text("[" * 200_000)
    result = run_cli("report", results, "--out", tmp_path / "out")
    assert result.one_line_error and "nested too deeply" in result.err


# -- 5: a peft adapter's own weights are checked ----------------------------------------------------------------
def peft_adapter(tmp_path, tiny_bert):
    from pathlib import Path

    adapter = tmp_path / "peft-adapter"
    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "adapters" / "peft", adapter)
    config = json.loads(adapter_config_file(adapter).read_text())
    config["backbone"] = str(tiny_bert)
    adapter_config_file(adapter).write_text(json.dumps(config))
    return adapter


def test_the_peft_fixture_loads_on_the_tiny_backbone(tmp_path, sst2_dir, tiny_bert):
    result = run_cli("eval", "--adapter", peft_adapter(tmp_path, tiny_bert), "--data-dir", sst2_dir, "--quiet")
    assert result.code == 0, result.err


def corrupt_nan(peft_dir):
    import torch
    from safetensors.torch import load_file, save_file

    state = load_file(str(peft_dir / "adapter_model.safetensors"))
    state["prompt_embeddings"] = torch.full_like(state["prompt_embeddings"], float("nan"))
    save_file(state, str(peft_dir / "adapter_model.safetensors"))


def to_pickle(peft_dir):
    (peft_dir / "adapter_model.safetensors").unlink()
    (peft_dir / "adapter_model.bin").write_bytes(pickle.dumps(MaliciousPickle(), protocol=2))


def edit_config(**changes):
    def edit(peft_dir):
        config = json.loads((peft_dir / "adapter_config.json").read_text())
        (peft_dir / "adapter_config.json").write_text(json.dumps({**config, **changes}))
    return edit


@pytest.mark.parametrize(("corrupt", "message"), [
    (corrupt_nan, "prompt_embeddings holds NaN or infinite values"),
    (to_pickle, "only a pickled adapter_model.bin"),
    (edit_config(num_virtual_tokens=5), "num_virtual_tokens is 5"),
    (edit_config(peft_type="LORA"), "peft_type must be PROMPT_TUNING"),
])
@pytest.mark.parametrize("command", ["eval", "predict"])
def test_a_broken_peft_adapter_is_one_line(tmp_path, sst2_dir, tiny_bert, monkeypatch, corrupt, message, command):
    monkeypatch.chdir(tmp_path)
    adapter = peft_adapter(tmp_path, tiny_bert)
    corrupt(adapter / "peft")
    (tmp_path / "in.jsonl").write_bytes(ROWS)
    extra = ("--data-dir", sst2_dir) if command == "eval" else ("--input", tmp_path / "in.jsonl")
    result = run_cli(command, "--adapter", adapter, "--quiet", *extra)
    assert result.one_line_error and message in result.err and result.out == ""
    assert not (tmp_path / "PICKLE-RAN").exists()


# -- 9: YAML aliases in grids ---------------------------------------------------------------------------------
BILLION_LAUGHS = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(9)]
    + ["tasks: *j", "methods: [warp]"]) + "\n"


def test_a_grid_with_aliases_is_refused_in_one_line(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(BILLION_LAUGHS)
    result = run_cli("sweep", "--grid", grid, "--results", tmp_path / "results", "--list")
    assert result.one_line_error and "grid.yaml:2: not valid YAML (aliases (*a) are not allowed" in result.err
    assert not (tmp_path / "results").exists()


# -- 10: SIGTERM is an interrupt; another host's claim is named ----------------------------------------------------
class TerminatingStdin(io.RawIOBase):
    """Standard input whose first read brings a SIGTERM, as ``timeout`` or ``docker stop`` sends it."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this
        return 0


def test_sigterm_during_predict_removes_the_temporary_output(tiny_run, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(TerminatingStdin())))
    previous = signal.getsignal(signal.SIGTERM)
    result = run_cli("predict", "--adapter", tiny_run, "--input", "-", "--output", tmp_path / "preds.jsonl", "--quiet")
    assert result.code == 143 and result.err == "infoprompt: terminated (SIGTERM); unfinished outputs were removed\n"
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is previous


def test_sigterm_during_a_sweep_releases_its_claim(tmp_path, monkeypatch):
    from infoprompt.experiments.sweep import BackboneCache

    def terminated(self, name, cache_dir):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    monkeypatch.setattr(BackboneCache, "get", terminated)
    result = run_cli("sweep", "--results", tmp_path / "results", "--tasks", "sst2", "--methods", "warp",
                     "--shots", "8", "--n-prompts", "1", "--seeds", "1", "--quiet")
    assert result.code == 143 and "terminated (SIGTERM)" in result.err
    assert not list((tmp_path / "results").rglob("*.claim")) and not list((tmp_path / "results").rglob("*.json"))


def test_sigterm_from_outside_ends_predict_cleanly(tiny_run, tmp_path):
    out = tmp_path / "preds.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "infoprompt.cli", "predict", "--adapter", str(tiny_run), "--input", "-",
         "--output", str(out), "--quiet"], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    process.stdin.write(b'{"sentence": "great movie"}\n')
    process.stdin.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob(".preds.jsonl.*.tmp")):
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143 and err.decode().endswith("terminated (SIGTERM); unfinished outputs were removed\n")
    assert list(tmp_path.iterdir()) == []


def test_a_claim_of_another_host_is_named_with_its_age_and_release(tmp_path):
    from infoprompt.experiments.grid import load_cells
    from infoprompt.experiments.store import claim_path
    from infoprompt.experiments.sweep import BackboneCache, run_sweep

    cells = load_cells(None, {"tasks": ["sst2"], "methods": ["warp"], "shots": [64], "n_prompts": [4], "seeds": [1]})
    path = claim_path(tmp_path, cells[0])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"host": "gpu-node-17", "pid": 4242, "started": "2026-01-01T00:00:00+00:00"}))
    three_days = time.time() - 3 * 86400 - 7200
    os.utime(path, (three_days, three_days))
    lines: list[str] = []
    summary = run_sweep(cells, tmp_path, runner=lambda *a, **k: pytest.fail("ran a claimed cell"),
                        backbones=BackboneCache(loader=lambda name, cache_dir=None: None), progress=False,
                        echo=lines.append)
    assert summary.claimed_elsewhere == 1
    (line,) = lines
    assert "held by host gpu-node-17 (pid 4242) for 3 d 2 h" in line and f"rm {path}" in line


def test_a_report_directory_name_over_the_limit_is_one_line(tmp_path):
    results = stored_results(tmp_path / "results")
    result = run_cli("report", results, "--out", tmp_path / ("r" * 300))
    assert result.one_line_error and "is longer than" in result.err


# -- severity 4: a SetFit adapter's settings are typed -----------------------------------------------------------
def test_setfit_settings_of_the_wrong_type_are_one_line(tmp_path, sst2_dir, tiny_bert):
    from pathlib import Path

    pytest.importorskip("setfit")
    adapter = tmp_path / "setfit-adapter"
    shutil.copytree(Path(__file__).parents[1] / "fixtures" / "adapters" / "setfit", adapter)
    config = json.loads(adapter_config_file(adapter).read_text())
    adapter_config_file(adapter).write_text(json.dumps({**config, "backbone": str(tiny_bert)}))
    assert run_cli("eval", "--adapter", adapter, "--data-dir", sst2_dir, "--quiet").code == 0
    saved = json.loads((adapter / "setfit_config.json").read_text())
    saved["settings"]["head_c"] = "strong"
    (adapter / "setfit_config.json").write_text(json.dumps(saved))
    result = run_cli("eval", "--adapter", adapter, "--data-dir", sst2_dir, "--quiet")
    assert result.one_line_error and "setfit_config.json: head_c must be of type float, got 'strong'" in result.err


def test_sigterm_during_training_leaves_no_partial_run(tmp_path, sst2_dir, tiny_bert, monkeypatch):
    from robust_helpers import TRAIN_ARGS

    class TerminatedKind:
        """A kind whose fit is interrupted by SIGTERM, as `timeout`, `docker stop` and SLURM send it."""

        def trainer(self):
            def fit(*args, **kwargs):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            return fit

    monkeypatch.setattr("infoprompt.pipeline.kind_of", lambda method: TerminatedKind())
    out = tmp_path / "runs" / "run"
    result = run_cli("train", *TRAIN_ARGS, "--backbone", tiny_bert, "--data-dir", sst2_dir, "--out", out)
    assert result.code == 143 and "terminated (SIGTERM)" in result.err
    assert list((tmp_path / "runs").iterdir()) == []


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK), reason="no writable /dev/shm")
def test_files_in_dev_shm_are_ordinary_files():
    assert not io_utils.is_stream_target("/dev/shm/infoprompt-test-output.jsonl")
