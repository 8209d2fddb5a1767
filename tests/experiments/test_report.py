"""Reports: hand-made records with known mean/std give the paper's table layouts in Markdown and CSV."""

from __future__ import annotations

import csv
import io
import math

import pytest

from infoprompt.errors import UserError
from infoprompt.experiments.grid import Cell
from infoprompt.experiments.report import build_report
from infoprompt.experiments.report_format import (
    format_bytes,
    format_seconds,
    format_stat,
    to_csv,
    to_markdown,
)
from infoprompt.experiments.store import write_record
from infoprompt.experiments.tables import build_tables, collect


def record(task, method, shots, n_prompts, seed, value, metric="accuracy", status="ok", **extra):
    return {"task": task, "method": method, "shots": shots, "n_prompts": n_prompts, "seed": seed,
            "backbone": "minilm", "primary_metric": metric, "metrics": {metric: value, "f1": value / 2},
            "status": status, **extra}


def store(tmp_path, records):
    for r in records:
        shots = None if r["shots"] == "full" else r["shots"]
        write_record(tmp_path, Cell(r["task"], r["method"], shots, r["n_prompts"], r["seed"]), r)


RECORDS = [
    # warp on sst2, n_p=4, 64 shots: 0.5, 0.6, 0.7 -> mean 0.6, sample std 0.1
    *(record("sst2", "warp", 64, 4, s, v) for s, v in ((1, 0.5), (2, 0.6), (3, 0.7))),
    *(record("sst2", "infoprompt", 64, 4, s, v) for s, v in ((1, 0.8), (2, 0.9))),
    *(record("sst2", "infoprompt", 64, 1, s, v) for s, v in ((1, 0.4), (2, 0.4))),
    *(record("sst2", "warp", 64, 1, s, v) for s, v in ((1, 0.45),)),
    *(record("cola", "warp", 64, 4, s, v, metric="mcc") for s, v in ((1, 0.1), (2, 0.3))),
    *(record("cola", "infoprompt", 64, 4, s, v, metric="mcc") for s, v in ((1, 0.2), (2, 0.2))),
    *(record("sst2", "finetune", 64, 0, s, v) for s, v in ((1, 0.95), (2, 0.85))),
    *(record("sst2", "infoprompt", 256, 4, s, v) for s, v in ((1, 0.91), (2, 0.93))),
    *(record("sst2", "infoprompt", "full", 4, s, v) for s, v in ((1, 0.95),)),
    record("cola", "idpg", 64, 4, 1, 0.0, status="failed", error="RuntimeError: boom", cell="x/y"),
]


def test_collect_gives_known_mean_std_and_seed_counts():
    stats = collect(RECORDS)
    warp = stats[("minilm", "warp", "sst2", 64, 4)]
    assert warp.mean == pytest.approx(0.6) and warp.std == pytest.approx(0.1) and warp.n == 3
    assert warp.seeds == (1, 2, 3)
    assert math.isnan(stats[("minilm", "warp", "sst2", 64, 1)].std)
    assert stats[("minilm", "warp", "cola", 64, 4)].mean == pytest.approx(0.2)  # CoLA's primary metric is mcc
    assert ("minilm", "idpg", "cola", 64, 4) not in stats  # failed records are not results
    assert collect(RECORDS, "f1")[("minilm", "warp", "sst2", 64, 4)].mean == pytest.approx(0.3)
    assert format_stat(warp) == "0.6000 ± 0.1000 (3)" and format_stat(None) == "—"


def test_np_table_layout_best_marks_and_average():
    tables = {t.name: t for t in build_tables(collect(RECORDS), tasks=["cola", "sst2"])}
    table = tables["table-np-shots=64"]
    # Nothing ran cola with n_p=1, so that column is left out.
    assert table.columns == ["cola (n_p=4)", "sst2 (n_p=1)", "sst2 (n_p=4)"]
    assert list(table.rows) == ["finetune", "warp", "infoprompt"]  # the paper's row order
    # finetune has no prompts: its single sst2 run fills both sst2 columns; it never ran cola.
    assert [s and s.mean for s in table.rows["finetune"]] == [None, pytest.approx(0.9), pytest.approx(0.9)]
    assert table.average("finetune") is None  # incomplete row
    assert table.average("warp") == pytest.approx((0.2 + 0.45 + 0.6) / 3)
    markdown = to_markdown(table)
    lines = {line.split(" | ")[0].lstrip("| "): line for line in markdown.splitlines() if line.startswith("| ")}
    assert lines["method"] == ("| method | cola (n_p=4) | sst2 (n_p=1) | sst2 (n_p=4) | Average | adapter | time / cell |")
    assert "| 0.8500 ± 0.0707 (2) |" in lines["infoprompt"] and "| 0.6000 ± 0.1000 (3) |" in lines["warp"]
    assert "**0.2000 ± 0.1414 (2)**" in lines["warp"] and "**0.2000 ± 0.0000 (2)**" in lines["infoprompt"]  # tie
    assert lines["finetune"].count("**0.9000 ± 0.0707 (2)**") == 2  # best in both sst2 columns
    # Average, then adapter size and time per cell, which these records lack
    assert lines["finetune"].endswith("| — | — | — |") and lines["warp"].endswith("| 0.4167 | — | — |")
    assert lines["infoprompt"].endswith("| **0.4833** | — | — |")  # best average

    rows = list(csv.DictReader(io.StringIO(to_csv(table))))
    warp = next(r for r in rows if r["method"] == "warp")
    assert float(warp["sst2 (n_p=4) mean"]) == pytest.approx(0.6) and float(warp["sst2 (n_p=4) std"]) == pytest.approx(0.1)
    assert warp["sst2 (n_p=4) n"] == "3" and warp["sst2 (n_p=1) std"] == "" and float(warp["average"]) == pytest.approx(0.41667, abs=1e-5)
    finetune = next(r for r in rows if r["method"] == "finetune")
    assert finetune["cola (n_p=4) n"] == "0" and finetune["average"] == ""
    assert list(rows[0])[-3:] == ["average", "adapter_bytes", "train_s"] and warp["adapter_bytes"] == warp["train_s"] == ""


def test_shots_table_and_complete_row_average():
    tables = {t.name: t for t in build_tables(collect(RECORDS), tasks=["sst2"])}
    table = tables["table-shots-np=4"]
    assert table.columns == ["sst2 (64)", "sst2 (256)", "sst2 (full)"]
    assert list(table.rows) == ["finetune", "warp", "infoprompt"]
    assert table.average("infoprompt") == pytest.approx((0.85 + 0.92 + 0.95) / 3)
    _, best_average = table.best()
    assert best_average == {"infoprompt"}
    assert "table-shots-np=1" in tables and "table-np-shots=256" in tables


def test_report_writes_markdown_and_csv_files(tmp_path):
    store(tmp_path / "results", RECORDS)
    text, written = build_report(tmp_path / "results", tmp_path / "out")
    assert (tmp_path / "out" / "report.md").read_text() == text
    assert {p.name for p in written} >= {"report.md", "cells.csv", "table-np-shots=64.csv", "table-shots-np=4.md"}
    assert "Failed cells (1)" in text and "RuntimeError: boom" in text
    assert "17 finished run(s), 1 failed" in text and "cola mcc" in text
    cells = list(csv.DictReader(io.StringIO((tmp_path / "out" / "cells.csv").read_text())))
    warp = next(c for c in cells if c["method"] == "warp" and c["task"] == "sst2" and c["n_prompts"] == "4")
    assert warp["n_seeds"] == "3" and warp["seeds"] == "1 2 3" and float(warp["std"]) == pytest.approx(0.1)


def test_a_rerun_removes_the_tables_the_new_layout_no_longer_has_and_keeps_other_files(tmp_path):
    # one n_p value: 64 shots alone gives the task × n_p table, 64 and 256 give the task × shots one instead
    single_np = [r for r in RECORDS if r["n_prompts"] in (0, 4) and r["status"] == "ok"]
    store(tmp_path / "results", [r for r in single_np if r["shots"] == 64])
    _, first = build_report(tmp_path / "results", tmp_path / "out")
    assert "table-np-shots=64.csv" in {p.name for p in first}
    (tmp_path / "out" / "notes.md").write_text("mine")
    store(tmp_path / "results", [r for r in single_np if r["shots"] == 256])
    _, second = build_report(tmp_path / "results", tmp_path / "out")
    on_disk = {p.name for p in (tmp_path / "out").iterdir()}
    assert on_disk == {p.name for p in second} | {"notes.md"}
    assert "table-shots-np=4.md" in on_disk and "table-np-shots=64.csv" not in on_disk


def test_tasks_choose_the_columns_of_every_section_paired_tests_included(tmp_path):
    store(tmp_path / "results", RECORDS)
    text, _ = build_report(tmp_path / "results", tmp_path / "out", tasks=["sst2"], comparisons=[("infoprompt", "warp")])
    paired = (tmp_path / "out" / "paired.csv").read_text()
    assert "sst2 (64 shots, n_p=4)" in paired and "cola" not in paired
    assert "cola" not in text  # nor the failed CoLA cell, nor CoLA's metric
    whole, _ = build_report(tmp_path / "results", tmp_path / "all", comparisons=[("infoprompt", "warp")])
    assert "cola (64 shots, n_p=4)" in (tmp_path / "all" / "paired.csv").read_text()
    with pytest.raises(UserError, match="no record .* is of these tasks"):
        build_report(tmp_path / "results", tmp_path / "none", tasks=["rte"])


def test_report_of_an_empty_directory_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="holds no result records"):
        build_report(tmp_path)
    with pytest.raises(UserError, match="does not exist"):
        build_report(tmp_path / "missing")


def test_variants_of_one_method_get_their_own_rows_and_directories_merge(tmp_path):
    from infoprompt.experiments.report import label_variants

    def with_settings(r, classifier=None, training=None):
        return {**r, "settings": {"backbone": "minilm", "classifier": classifier or {},
                                  "training": {"epochs": 30, **(training or {})}, "source": "files"}}

    paper = [with_settings(record("sst2", "infoprompt", 64, 4, s, 0.6), training={"eval_every_epochs": 5})
             for s in (1, 2)]
    fast = [with_settings(record("sst2", "infoprompt", 64, 4, s, 0.7), {"pooling": "embeddings"},
                          {"eval_every_epochs": 0}) for s in (1, 2)]
    warp = [with_settings(record("sst2", "warp", 64, 4, s, 0.5)) for s in (1, 2)]
    labelled = label_variants(paper + fast + warp)
    # Only the setting that differs names the variant; measurement-only settings (eval_every_epochs) do not.
    assert [r["method"] for r in labelled] == ["infoprompt"] * 2 + ["infoprompt[pooling=embeddings]"] * 2 + ["warp"] * 2

    first, second = tmp_path / "a", tmp_path / "b"
    store(first, paper + warp)
    for r in fast:
        write_record(second, Cell("sst2", "infoprompt", 64, 4, r["seed"]), r)
    text, _ = build_report([first, second], tmp_path / "out",
                           comparisons=[("infoprompt[pooling=embeddings]", "infoprompt")])
    rows = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| ") and "±" in line]
    assert rows[:3] == ["| warp", "| infoprompt", "| infoprompt[pooling=embeddings]"]
    assert "| infoprompt[pooling=embeddings] − infoprompt | sst2 (64 shots, n_p=4) | +0.1000 ± 0.0000 (2) |" in text


def test_a_setting_that_differs_only_between_tasks_names_no_variant():
    from infoprompt.experiments.report import label_variants

    def run(task, sampling=None):
        settings = {"backbone": "minilm", "classifier": {}, "training": {}, "source": "files"}
        if sampling:
            settings["sampling"] = sampling
        return {**record(task, "warp", 64, 4, 1, 0.5), "settings": settings}

    labelled = label_variants([run("semeval"), run("conll04-re", "balanced")])
    assert [r["method"] for r in labelled] == ["warp", "warp"]
    labelled = label_variants([run("conll04-re"), {**run("conll04-re", "balanced"), "seed": 2}])
    assert [r["method"] for r in labelled] == ["warp", "warp[sampling=balanced]"]


def test_cells_and_tables_carry_the_adapter_size_and_the_time_per_cell(tmp_path):
    def timed(seed, value, size, timings, method="warp"):
        extra = {"timings": timings} if timings is not None else {}
        if size is not None:
            extra["adapter_bytes"] = size
        return record("sst2", method, 64, 4, seed, value, **extra)

    records = [
        timed(1, 0.5, 9_496, {"train_s": 70.0, "total_s": 130.0, "final_eval_s": 25.0, "periodic_eval_s": 5.0}),
        timed(2, 0.6, 9_497, {"total_s": 50.0}),  # fitting: everything but the evaluations
        timed(1, 0.8, None, None, "infoprompt"),  # written before adapter_bytes: left empty, not zero
        timed(1, 0.4, 796_080, {"train_s": 20.0}, "idpg"),  # no total_s: its train_s stands in
        {**timed(1, 0.5, 12_000, {"train_s": 30.0}, "idpg"), "task": "mrpc"},
    ]
    store(tmp_path / "results", records)
    build_report(tmp_path / "results", tmp_path / "out")
    cells = {(c["method"], c["task"]): c
             for c in csv.DictReader(io.StringIO((tmp_path / "out" / "cells.csv").read_text()))}
    assert list(next(iter(cells.values())))[-4:] == ["adapter_bytes", "train_s", "top_share", "majority_share"]
    assert cells["warp", "sst2"]["adapter_bytes"] == "9496"  # the mean over seeds, as an integer
    assert float(cells["warp", "sst2"]["train_s"]) == pytest.approx(75.0)
    assert cells["infoprompt", "sst2"]["adapter_bytes"] == cells["infoprompt", "sst2"]["train_s"] == ""

    table = (tmp_path / "out" / "table-np-shots=64.md").read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("| ")}
    assert rows["warp"].endswith("| 9.5 kB | 1.2 min |") and rows["infoprompt"].endswith("| — | — |")
    assert rows["idpg"].endswith("| 12 kB – 796 kB | 25.0 s |")  # the row's cells differ: their range
    wide = list(csv.DictReader(io.StringIO((tmp_path / "out" / "table-np-shots=64.csv").read_text())))
    idpg = next(r for r in wide if r["method"] == "idpg")
    assert idpg["adapter_bytes"] == str(round((796_080 + 12_000) / 2)) and float(idpg["train_s"]) == pytest.approx(25.0)


def test_sizes_and_times_read_as_people_write_them():
    assert [format_bytes(n) for n in (512, 3_280, 9_496, 796_080, 2_362_952, 90_864_000, 1.2e9)] == [
        "512 B", "3.28 kB", "9.5 kB", "796 kB", "2.36 MB", "90.9 MB", "1.2 GB"]
    assert [format_seconds(s) for s in (0.04, 59.94, 634.5, 7_200.0)] == ["0.0 s", "59.9 s", "10.6 min", "2.0 h"]


def test_cells_show_the_largest_share_one_class_took_beside_the_majority_share(tmp_path):
    """A body that puts nearly every text in one class shows in cells.csv whatever its accuracy (#53)."""
    def shared(seed, top):
        return record("mrpc", "top-lora", 64, 0, seed, 0.68,
                      prediction_shares={"top_class": "equivalent", "top_share": top,
                                         "majority_class": "equivalent", "majority_share": 0.684})

    store(tmp_path / "results", [shared(1, 0.95), shared(2, 0.99), record("mrpc", "setfit", 64, 0, 1, 0.72)])
    build_report(tmp_path / "results", tmp_path / "out")
    cells = {c["method"]: c for c in csv.DictReader(io.StringIO((tmp_path / "out" / "cells.csv").read_text()))}
    assert (cells["top-lora"]["top_share"], cells["top-lora"]["majority_share"]) == ("0.9900", "0.6840")
    assert cells["setfit"]["top_share"] == cells["setfit"]["majority_share"] == ""  # older records say nothing
