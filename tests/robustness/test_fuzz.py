"""Property-based tests: whatever the input, every case ends in a result or in exit 2 with one line on stderr.

Readers get random bytes and rows, the CLI random option values, adapters and result records random
corruptions, run directories and sweep claims concurrent writers. Tiny random encoders only. CI runs the
``ci`` profile (few examples, derandomised); ``pytest tests/robustness --hypothesis-profile=fuzz`` runs many more.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import threading
import time
from itertools import count
from pathlib import Path

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from robust_helpers import TRAIN_ARGS, listing, run_cli

from infoprompt.cli import build_parser, classifier_overrides, split_flags, training_config
from infoprompt.errors import UserError
from infoprompt.experiments.grid import cells_from_config, load_cells
from infoprompt.experiments.store import CLAIM_GRACE_S, claim_path, write_record
from infoprompt.experiments.sweep import BackboneCache, run_sweep
from infoprompt.inputs import read_inputs
from infoprompt.io_utils import RUN_MARKERS, adapter_config_file, staged_directory
from infoprompt.kinds.config import CONFIG_NAME, ClassifierConfig
from infoprompt.tasks import get_task, load_split

SST2 = get_task("sst2")
_serial = count()


def share(divisor: int) -> settings:
    """A fraction of the profile's examples, for tests that train or load an encoder per example."""
    return settings(max_examples=max(2, settings.default.max_examples // divisor))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A fresh directory per example (function-scoped tmp_path does not reset between examples)."""
    root = tmp_path_factory.mktemp("fuzz")

    def make() -> Path:
        path = root / str(next(_serial))
        path.mkdir()
        return path

    return make


def ends_well(result, where: Path | None = None, before: set[str] | None = None) -> None:
    """A result (exit 0), or exit 2 with one line, no traceback and nothing written."""
    message = re.sub(r"\S*/\S*", "", result.err.split("error: ", 1)[-1])  # paths say little about the kind
    event(f"exit {result.code}" + (f": {' '.join(re.sub(r'[^a-z ]', ' ', message).split()[:3])}" if result.code else ""))
    assert "Traceback" not in result.err
    if result.code != 0:
        assert result.one_line_error, result
        assert result.out == ""
        if where is not None:
            assert listing(where) == before


# -- readers --------------------------------------------------------------------------------------------------
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
CELL = st.one_of(TEXT, st.sampled_from(["0", "1", "2", "", " ", "great movie", "sentence", "label"]))
ROW = st.lists(CELL, min_size=0, max_size=4).map("\t".join)
LINE_END = st.sampled_from(["\n", "\r\n", "\r", ""])


@st.composite
def text_files(draw) -> bytes:
    """Mostly line-structured text in several encodings, sometimes raw bytes."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.binary(max_size=200))
    header = draw(st.sampled_from(["sentence\tlabel", "text\tgold", "sentence", "", "great movie\t1"]))
    rows = draw(st.lists(ROW, max_size=8))
    text = header + draw(LINE_END) + "".join(row + draw(LINE_END) for row in rows)
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8-sig", "latin-1", "utf-16"]))
    data = text.encode(encoding, errors="replace")
    if draw(st.booleans()):
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(max_size=4)) + data[at:]
    return data


@given(data=text_files())
def test_training_reader_gives_examples_or_one_error(scratch, data):
    root = scratch()
    (root / "SST-2").mkdir()
    (root / "SST-2" / "train.tsv").write_bytes(data)
    try:
        examples = load_split(SST2, "train", root)
    except UserError as error:
        assert "\n" not in str(error)
        return
    assert examples and all(e.label in SST2.labels and e.fields["sentence"].strip() for e in examples)
    line_ends = len(re.findall(rb"\r\n|\r|\n", data))  # \n, \r\n and a lone \r (old Mac files) end lines
    assert len(examples) <= line_ends  # the header line is never taken for a row


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8,
)


@st.composite
def jsonl_files(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 5))):
        tokens = draw(st.lists(st.sampled_from(["John", "lives", "in", "Paris", ".", ""]), max_size=6))
        entity = {"start": draw(st.integers(-1, 7)), "end": draw(st.integers(-1, 8)),
                  "type": draw(st.sampled_from(["Loc", "Peop", "Nope"]))}
        record = {"tokens": tokens, "entities": [entity]}
        if draw(st.booleans()):
            record[draw(st.sampled_from(["tokens", "entities", "extra"]))] = draw(JSON_VALUE)
        lines.append(json.dumps(record) if draw(st.integers(0, 6)) else draw(TEXT))
    data = "\n".join(lines).encode("utf-8")
    return data + draw(st.binary(max_size=3)) if draw(st.integers(0, 4)) == 0 else data


@given(data=jsonl_files())
def test_span_reader_gives_examples_or_one_error(scratch, data):
    root = scratch()
    task = get_task("conll04-ner")
    (root / "conll04").mkdir()
    (root / "conll04" / "train.jsonl").write_bytes(data)
    try:
        examples = load_split(task, "train", root)
    except UserError as error:
        assert "\n" not in str(error)
        return
    assert all(e.label in task.labels and e.fields["mention"] for e in examples)


@given(data=text_files(), kind=st.sampled_from([".tsv", ".jsonl", "-"]))
def test_prediction_inputs_keep_their_line_numbers(scratch, data, kind):
    root = scratch()
    import io
    import sys

    source = str(root / f"in{kind}") if kind != "-" else "-"
    saved = sys.stdin
    if kind == "-":
        sys.stdin = io.TextIOWrapper(io.BytesIO(data))
    else:
        Path(source).write_bytes(data)
    try:
        inputs = read_inputs(source, SST2)
    except UserError as error:
        assert "\n" not in str(error)
        return
    finally:
        sys.stdin = saved
    assert len(inputs.rows) == len(inputs.lines) == len(inputs.sources)
    assert inputs.lines == sorted(set(inputs.lines)) and all(r["sentence"].strip() for r in inputs.rows)


@share(2)
@given(data=text_files())
def test_predict_on_stdin_is_one_record_per_line_or_one_error(tiny_run, data):
    result = run_cli("predict", "--adapter", tiny_run, "--input", "-", "--quiet", stdin=data)
    ends_well(result)
    if result.code == 0:
        records = [json.loads(line) for line in result.out.splitlines()]
        assert all(set(r) == {"line", "label", "probabilities"} for r in records)
        assert all(math.isclose(sum(r["probabilities"].values()), 1, abs_tol=1e-4) for r in records)
        assert [r["line"] for r in records] == sorted({r["line"] for r in records})


# -- the CLI boundary -----------------------------------------------------------------------------------------
NUMBER_TEXT = st.one_of(
    st.integers(-10, 10).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "-inf", "inf", "1e400", "0x10", "", " 3", "two", "1_000", "٣"]), TEXT,
)
OPTIONS = ("--epochs", "--batch-size", "--lr", "--weight-decay", "--max-steps", "--eval-every", "--eval-every-epochs",
           "--eval-subset", "--n-prompts", "--beta", "--gamma", "--n-negatives", "--rank", "--kl-weight",
           "--max-length", "--seed")


@given(values=st.dictionaries(st.sampled_from(OPTIONS), NUMBER_TEXT, max_size=4))
def test_train_options_parse_into_valid_configs_or_one_line(values):
    args = ["train", "--task", "sst2", "--out", "x", *[f"{k}={v}" for k, v in values.items()]]
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit as exit_info:
        assert exit_info.code == 2
        return
    try:
        training_config(parsed, parsed.seed)
        ClassifierConfig.create(task="sst2", method="infoprompt", backbone="minilm",
                                **{**classifier_overrides(parsed), **split_flags(parsed)[0]})
    except UserError:
        pass  # values valid alone but not together


@share(3)
@given(
    epochs=st.integers(1, 2), batch=st.integers(1, 9),
    lr=st.sampled_from(["1e-3", "1e-3", "0.5", "1e-30", "1e30"]), method=st.sampled_from(["warp", "infoprompt", "idpg"]),
    beta=st.sampled_from(["0", "0.1", "0.1", "1e30"]), max_length=st.sampled_from(["12", "32", "32", "48", "6", "1000"]),
    shots=st.sampled_from(["2", "8", "8", "full", "30"]),
    truncate=st.booleans(),
)
def test_training_ends_in_a_finished_run_or_one_line(scratch, sst2_dir, tiny_bert, epochs, batch, lr, method, beta,
                                                      max_length, shots, truncate):
    root = scratch()
    args = [*TRAIN_ARGS, "--epochs", epochs, "--batch-size", batch, "--lr", lr, "--method", method, "--beta", beta,
            "--max-length", max_length, "--shots", shots, *([] if truncate else ["--no-truncate"])]
    result = run_cli("train", *args, "--backbone", tiny_bert, "--data-dir", sst2_dir, "--out", root / "run")
    ends_well(result, root, set())
    if result.code == 0:
        record = json.loads((root / "run" / "metrics.json").read_text())
        assert record["steps"] >= 1 and all(math.isfinite(v) for v in record["metrics"].values())
        assert set(RUN_MARKERS) | {"adapter_model.safetensors", "train_log.jsonl"} <= set(listing(root / "run"))
        assert listing(root) == {"run", *(f"run/{p}" for p in listing(root / "run"))}


# -- adapter files --------------------------------------------------------------------------------------------
CONFIG_FIELDS = ("task", "method", "backbone", "labels", "n_prompts", "template", "beta", "gamma", "n_negatives",
                 "rank", "pooling", "head_summary", "verbalizer_init", "generator_bias", "kl_weight", "max_length",
                 "truncate", "init_seed", "backbone_fingerprint", "format_version", "surprise")


@st.composite
def config_mutations(draw):
    edits = draw(st.dictionaries(st.sampled_from(CONFIG_FIELDS), JSON_VALUE | st.sampled_from(
        ["cola", "infoprompt", "idpg", "<cls> <p> {sentence} <mask> <sep>", "{nope}", "mean", "cls"]), max_size=3))
    dropped = draw(st.lists(st.sampled_from(CONFIG_FIELDS), max_size=2))
    return edits, dropped


@share(2)
@given(mutation=config_mutations(), whole=st.one_of(st.none(), st.binary(max_size=40)))
def test_a_corrupted_adapter_config_evaluates_or_fails_in_one_line(scratch, tiny_run, sst2_dir, mutation, whole):
    root = scratch()
    adapter = root / "adapter"
    shutil.copytree(tiny_run, adapter)
    path = adapter / CONFIG_NAME
    if whole is not None:
        path.write_bytes(whole)
    else:
        edits, dropped = mutation
        config = {k: v for k, v in json.loads(path.read_text()).items() if k not in dropped}
        path.write_text(json.dumps({**config, **edits}))
    before = listing(root)
    result = run_cli("eval", "--adapter", adapter, "--data-dir", sst2_dir, "--quiet")
    ends_well(result, root, before)
    if result.code == 0:
        assert all(math.isfinite(v) for v in json.loads(result.out)["metrics"].values())


@st.composite
def weight_corruptions(draw, size: int):
    kind = draw(st.sampled_from(["flip", "truncate", "nan", "random", "header"]))
    if kind == "flip":
        return kind, draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 255)), min_size=1, max_size=5))
    if kind == "truncate":
        return kind, draw(st.integers(0, size - 1))
    if kind == "nan":
        return kind, draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
    if kind == "header":
        return kind, draw(JSON_VALUE)
    return kind, draw(st.binary(max_size=64))


def corrupt(path: Path, corruption) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    kind, value = corruption
    data = bytearray(path.read_bytes())
    if kind == "flip":
        for at, byte in value:
            data[at % len(data)] = byte
    elif kind == "truncate":
        data = data[:value]
    elif kind == "random":
        data = bytearray(value)
    elif kind == "header":
        header = json.dumps(value).encode()
        data = bytearray(len(header).to_bytes(8, "little") + header + data[8 + int.from_bytes(data[:8], "little"):])
    else:
        state = load_file(str(path))
        name = sorted(state)[0]
        state[name] = state[name].clone().view(-1).index_fill(0, torch.tensor([0]), value).view_as(state[name])
        save_file(state, str(path))
        return
    path.write_bytes(bytes(data))


@share(2)
@given(data=st.data(), command=st.sampled_from(["eval", "predict"]))
def test_corrupted_adapter_weights_give_a_result_or_one_line(scratch, tiny_run, sst2_dir, data, command):
    root = scratch()
    adapter = root / "adapter"
    shutil.copytree(tiny_run, adapter)
    weights = adapter / "adapter_model.safetensors"
    corrupt(weights, data.draw(weight_corruptions(weights.stat().st_size)))
    (root / "in.jsonl").write_text('{"sentence": "great movie"}\n')
    before = listing(root)
    extra = ("--data-dir", sst2_dir) if command == "eval" else ("--input", root / "in.jsonl")
    result = run_cli(command, "--adapter", adapter, "--quiet", *extra)
    ends_well(result, root, before)
    if result.code == 0:
        assert "NaN" not in result.out and "Infinity" not in result.out
        json.loads(result.out.splitlines()[0])


# -- result records -------------------------------------------------------------------------------------------
RECORD_FIELDS = ("status", "task", "method", "backbone", "shots", "n_prompts", "seed", "metrics", "primary_metric",
                 "settings", "error", "cell")


@given(records=st.lists(st.tuples(
    st.integers(1, 3), st.sampled_from(["warp", "infoprompt", "linear-probe"]),
    st.dictionaries(st.sampled_from(RECORD_FIELDS), JSON_VALUE, max_size=2),
    st.lists(st.sampled_from(RECORD_FIELDS), max_size=1), st.one_of(st.none(), st.binary(max_size=20)),
), min_size=1, max_size=6))
def test_report_on_corrupted_records_is_a_report_or_one_line(scratch, records):
    root = scratch()
    results = root / "results"
    for seed, method, edits, dropped, raw in records:
        cell = load_cells(None, {"tasks": ["sst2"], "methods": [method], "seeds": [seed]})[0]
        record = {"status": "ok", "task": "sst2", "method": method, "backbone": "minilm", "shots": 64,
                  "n_prompts": cell.n_prompts, "seed": seed, "primary_metric": "accuracy",
                  "metrics": {"accuracy": 0.5 + seed / 10}, "settings": cell.settings()}
        record = {k: v for k, v in {**record, **edits}.items() if k not in dropped}
        path = write_record(results, cell, record)
        if raw is not None:
            path.write_bytes(raw)
    before = listing(root)
    result = run_cli("report", results)
    ends_well(result, root, before)
    if result.code == 0:
        assert (results / "report" / "report.md").is_file()


@given(config=st.dictionaries(st.sampled_from(["tasks", "methods", "shots", "n_prompts", "seeds", "training",
                                               "classifier", "backbone", "grids", "sampling"]),
                              JSON_VALUE | st.dictionaries(st.sampled_from(["epochs", "lr", "batch_size", "beta"]),
                                                           JSON_VALUE, max_size=2), max_size=4))
def test_grids_give_valid_cells_or_one_error(config):
    try:
        cells = cells_from_config({"tasks": ["sst2"], **config}, "grid.yaml")
    except UserError as error:
        assert "\n" not in str(error)
        return
    for cell in cells:
        cell.run_spec()  # every cell builds its run: nothing left to fail at run time for lack of validation


@given(data=st.one_of(st.binary(max_size=80), JSON_VALUE.map(lambda v: json.dumps({"tasks": ["sst2"], "training": v}))
                      .map(str.encode)), suffix=st.sampled_from([".yaml", ".toml"]))
def test_grid_files_give_cells_or_one_error(scratch, data, suffix):
    path = scratch() / f"grid{suffix}"
    path.write_bytes(data)
    try:
        load_cells(path)
    except UserError as error:
        assert "\n" not in str(error)


# -- concurrent writers ---------------------------------------------------------------------------------------
@given(plans=st.lists(st.tuples(st.booleans(), st.booleans(), st.floats(0, 0.01)), min_size=2, max_size=4),
       existing=st.sampled_from(["none", "run", "other"]))
def test_concurrent_runs_on_one_directory_never_mix_or_destroy(scratch, plans, existing):
    root = scratch()
    final = root / "run"
    if existing != "none":
        final.mkdir()
        names = RUN_MARKERS if existing == "run" else ("thesis.tex",)
        for name in names:
            (final / name).write_text("before")
    outcomes = []

    def write(index, overwrite, fail, pause):
        try:
            with staged_directory(final, overwrite=overwrite) as staging:
                for name in (*RUN_MARKERS, "train_log.jsonl"):
                    (staging / name).write_text(str(index))
                    time.sleep(pause)
                if fail:
                    raise RuntimeError("this run failed")
            outcomes.append(("ok", index))
        except UserError:
            outcomes.append(("refused", index))
        except RuntimeError:
            outcomes.append(("failed", index))
        except Exception as error:  # noqa: BLE001 - anything else is the bug this test looks for
            outcomes.append((f"crashed: {error!r}", index))

    threads = [threading.Thread(target=write, args=(i, *plan)) for i, plan in enumerate(plans)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not [o for o, _ in outcomes if o.startswith("crashed")], outcomes
    assert sorted(p.name for p in root.iterdir()) == ([] if not final.exists() else ["run"])  # no scratch left
    if existing == "other":
        assert [p.name for p in final.iterdir()] == ["thesis.tex"] and not any(o == "ok" for o, _ in outcomes)
        return
    winners = [i for outcome, i in outcomes if outcome == "ok"]
    if final.exists() and winners:
        contents = {(final / name).read_text() for name in (*RUN_MARKERS, "train_log.jsonl")}
        assert len(contents) == 1 and int(contents.pop()) in winners  # one run's files, complete
    elif existing == "run":
        assert {(final / name).read_text() for name in RUN_MARKERS} == {"before"}


CLAIMS = st.sampled_from(["none", "live", "dead", "foreign", "empty-new", "empty-old", "garbage-old"])


@given(claims=st.lists(CLAIMS, min_size=3, max_size=3), failing=st.sets(st.integers(1, 3)))
def test_two_workers_run_each_free_cell_once(scratch, claims, failing):
    root = scratch()
    cells = load_cells(None, {"tasks": ["sst2"], "methods": ["warp"], "seeds": [1, 2, 3]})
    dead = 2**22 + 4321
    assume(not _alive(dead))
    for cell, state in zip(cells, claims, strict=True):
        path = claim_path(root, cell)
        path.parent.mkdir(parents=True, exist_ok=True)
        bodies = {"live": {"host": socket.gethostname(), "pid": os.getpid()},
                  "dead": {"host": socket.gethostname(), "pid": dead}, "foreign": {"host": "elsewhere", "pid": 1}}
        if state in bodies:
            path.write_text(json.dumps({**bodies[state], "started": "x"}))
        elif state != "none":
            path.write_text("" if state.startswith("empty") else "{garbage")
            if state.endswith("old"):
                old = time.time() - CLAIM_GRACE_S - 10
                os.utime(path, (old, old))
    calls = []

    def runner(spec, out, *, overwrite, backbone):
        calls.append(spec.seed)
        time.sleep(0.01)
        if spec.seed in failing:
            raise RuntimeError("boom")
        return {"task": spec.task, "method": spec.method, "shots": spec.shots, "n_prompts": spec.n_prompts,
                "seed": spec.seed, "backbone": spec.backbone, "primary_metric": "accuracy", "metrics": {"accuracy": 0.5}}

    class Fake:
        class model:  # noqa: N801 - mimics Backbone.model
            @staticmethod
            def eval():
                return None

    started = time.time()  # one pass: both workers started now (thread start-up skew must not split it)

    def sweep():
        run_sweep(cells, root, runner=runner, backbones=BackboneCache(loader=lambda *a, **k: Fake()), progress=False,
                  echo=lambda _: None, pass_started=started)

    # A "live" claim here is this process's: the other worker threads respect it like a live worker's.
    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    free = {cell.seed for cell, state in zip(cells, claims, strict=True)
            if state in ("none", "dead", "empty-old", "garbage-old")}
    assert sorted(calls) == sorted(free)
    assert not list(root.rglob("*.takeover"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True



# -- issue 32: adapter fingerprints, report directories, signals ----------------------------------------------
FINGERPRINT_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "embedding_sha256")


@share(2)
@given(dropped=st.sets(st.sampled_from(FINGERPRINT_KEYS)), edits=st.dictionaries(
    st.sampled_from(FINGERPRINT_KEYS), JSON_VALUE | st.sampled_from(["bert", 32, 2, "0" * 16]), max_size=2),
    whole=st.sampled_from([None, "drop", {}, [], "x", 0]))
def test_an_adapter_evaluates_only_on_the_backbone_its_fingerprint_names(scratch, tiny_run, sst2_dir, dropped, edits,
                                                                         whole):
    root = scratch()
    adapter = root / "adapter"
    shutil.copytree(tiny_run, adapter)
    path = adapter_config_file(adapter)
    config = json.loads(path.read_text())
    original = config["backbone_fingerprint"]
    if whole == "drop":
        del config["backbone_fingerprint"]
    elif whole is not None:
        config["backbone_fingerprint"] = whole
    else:
        changed = {k: v for k, v in original.items() if k not in dropped}
        config["backbone_fingerprint"] = {**changed, **edits}
    path.write_text(json.dumps(config))
    before = listing(root)
    result = run_cli("eval", "--adapter", adapter, "--data-dir", sst2_dir, "--quiet")
    ends_well(result, root, before)
    assert (result.code == 0) == (config.get("backbone_fingerprint") == original)


REPORT_DIR_ENTRIES = ("report.md", "cells.csv", "paired.csv", "table-np-shots=64.csv", "table-shots-np=4.md",
                      "notes.md", "figure.png", "sub/")


def _stored_results(results: Path) -> None:
    for seed in (1, 2):
        cell = load_cells(None, {"tasks": ["sst2"], "methods": ["warp"], "seeds": [seed]})[0]
        write_record(results, cell, {"status": "ok", "task": "sst2", "method": "warp", "backbone": "minilm", "shots": 64,
                                     "n_prompts": cell.n_prompts, "seed": seed, "primary_metric": "accuracy",
                                     "metrics": {"accuracy": 0.5 + seed / 10}})


def _contents(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


@given(entries=st.sets(st.sampled_from(REPORT_DIR_ENTRIES)), exists=st.booleans(), earlier=st.booleans())
def test_report_writes_only_into_a_new_empty_or_report_directory(scratch, entries, exists, earlier):
    root = scratch()
    _stored_results(root / "results")
    out = root / "out"
    if earlier:  # a report directory that a report wrote (its manifest), then the user's own files put in
        assert run_cli("report", root / "results", "--out", out).code == 0
    elif exists or entries:
        out.mkdir()
    ours = set(json.loads((out / "report-manifest.json").read_text())["files"]) if earlier else set()
    for entry in entries:
        if entry.endswith("/"):
            (out / entry).mkdir()
            (out / entry / "inside.txt").write_text("mine")
        else:
            (out / entry).write_text(f"old {entry}")
    before, before_listing = (_contents(out) if out.exists() else {}), listing(root)
    result = run_cli("report", root / "results", "--out", out)
    ends_well(result, root, before_listing)
    # Only the files an earlier report wrote (its manifest), unchanged since, are ever replaced.
    assert (result.code == 0) == ((earlier or not entries) and not entries & ours)
    after = _contents(out) if out.exists() else {}
    if result.code == 0:
        foreign = {k: v for k, v in before.items() if k.split("/")[0] not in ours | {"report-manifest.json"}}
        assert foreign.items() <= after.items()  # notes, figures, folders, a paired.csv of one's own are kept
        assert {"report.md", "cells.csv"} <= set(after) and not [p for p in root.iterdir() if p.name.startswith(".")]
    else:
        assert after == before


@given(signal_at=st.integers(1, 8), interrupt=st.sampled_from(["SIGTERM", "SIGINT"]))
def test_a_signal_during_a_report_leaves_the_old_report_whole(scratch, signal_at, interrupt):
    import builtins
    import signal

    root = scratch()
    _stored_results(root / "results")
    assert run_cli("report", root / "results", "--out", root / "out").code == 0
    before = _contents(root / "out")
    cell = load_cells(None, {"tasks": ["sst2"], "methods": ["warp"], "seeds": [3]})[0]
    write_record(root / "results", cell, {"status": "ok", "task": "sst2", "method": "warp", "backbone": "minilm",
                                          "shots": 64, "n_prompts": cell.n_prompts, "seed": 3,
                                          "primary_metric": "accuracy", "metrics": {"accuracy": 0.9}})
    real_open, writes = builtins.open, count(1)

    def signalling_open(file, mode="r", *args, **kwargs):
        if "w" in mode and next(writes) == signal_at:
            os.kill(os.getpid(), getattr(signal, interrupt))
        return real_open(file, mode, *args, **kwargs)

    builtins.open = signalling_open
    try:
        result = run_cli("report", root / "results", "--out", root / "out")
    finally:
        builtins.open = real_open
    after = _contents(root / "out")
    if result.code == 0:  # the signal came after the last file write: the new report is whole
        assert after != before and "(3)" in after["report.md"].decode()
    else:
        assert result.code == (143 if interrupt == "SIGTERM" else 130) and after == before
    assert sorted(p.name for p in root.iterdir()) == ["out", "results"]
