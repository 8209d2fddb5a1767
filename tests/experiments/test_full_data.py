"""Full-training-split cells: the paper's Table 1 / Table 2 layouts per task family, and the test of whether a
method's gain at few shots holds with the full split, on hand-made records with known gains."""

from __future__ import annotations

import csv
import io

import pytest
from test_report import record, store

from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.experiments.full_vs_few import full_vs_few
from infoprompt.experiments.paired import sign_flip_p_value
from infoprompt.experiments.report import build_report
from infoprompt.experiments.tables import build_tables, collect

SEEDS = (1, 2, 3)
# Per task: the baseline's value per seed, the method's gain per seed at 64 shots and with the full split.
WARP = {"sst2": (0.60, 0.62, 0.64), "mrpc": (0.66, 0.68, 0.70)}
GAIN_FEW = {"sst2": (0.10, 0.12, 0.08), "mrpc": (0.04, 0.06, 0.02)}
GAIN_FULL = {"sst2": (0.01, 0.00, 0.02), "mrpc": (-0.01, 0.01, 0.00)}


def glue_records(shots, gains):
    out = []
    for task, base in WARP.items():
        metric = "accuracy"
        for seed, value, gain in zip(SEEDS, base, gains[task], strict=True):
            value += 0.2 if shots == "full" else 0.0
            out.append(record(task, "warp", shots, 4, seed, value, metric))
            out.append(record(task, "infoprompt", shots, 4, seed, value + gain, metric))
    return out


RECORDS = [
    *glue_records(64, GAIN_FEW),
    *glue_records("full", GAIN_FULL),
    *(record(t, "linear-probe", "full", 0, s, 0.7) for t in ("sst2", "mrpc") for s in SEEDS),
    record("sst2", "infoprompt-released", "full", 1, 1, 0.75),
    *(record(t, "warp", "full", 4, s, 0.3, "semeval_macro_f1") for t in ("semeval",) for s in (1, 2)),
    record("conll04-re", "warp", "full", 4, 1, 0.2, "re_micro_f1"),
    record("conll04-re", "warp", "full", 1, 1, 0.1, "re_micro_f1"),
    record("conll04-re", "linear-probe", "full", 0, 1, 0.25, "re_micro_f1"),
]


def test_full_data_cells_get_a_table_per_task_family():
    tables = {t.name: t for t in build_tables(collect(RECORDS))}
    glue, relations = tables["table-full-glue"], tables["table-full-relations"]
    assert glue.columns == ["sst2", "mrpc"]  # the task registry's order, as in every other table
    assert list(glue.rows) == ["warp", "infoprompt", "linear-probe", "infoprompt-released"]
    warp = glue.rows["warp"]
    assert [s.mean for s in warp] == pytest.approx([0.82, 0.88]) and [s.n for s in warp] == [3, 3]
    assert glue.average("warp") == pytest.approx(0.85) and glue.average("infoprompt-released") is None
    assert glue.notes == ["prompt tokens per row: warp n_p=4, infoprompt n_p=4, infoprompt-released n_p=1"]
    assert relations.columns == ["semeval", "conll04-re"]
    # warp ran conll04-re with two n_p at full data: a row per n_p
    assert list(relations.rows) == ["warp[n_p=1]", "warp[n_p=4]", "linear-probe"]
    assert relations.rows["warp[n_p=1]"][0] is None and relations.rows["warp[n_p=4]"][0].mean == pytest.approx(0.3)
    # the few-shot layouts stay as they were
    assert {"table-np-shots=64", "table-np-shots=full", "table-shots-np=4"} <= set(tables)


def test_full_tables_are_written_and_removed_with_the_report(tmp_path):
    store(tmp_path / "results", RECORDS)
    text, written = build_report(tmp_path / "results", tmp_path / "out")
    names = {p.name for p in written}
    assert {"table-full-glue.md", "table-full-glue.csv", "table-full-relations.md", "full-vs-few.csv"} <= names
    assert "### full training split, GLUE: columns task (paper Table 1 layout)" in text
    assert "| method | sst2 | mrpc | Average | adapter | time / cell |" in text
    few_only = tmp_path / "few"
    store(few_only, [r for r in RECORDS if r["shots"] != "full"])
    (tmp_path / "out" / "notes.md").write_text("mine")
    _, again = build_report(few_only, tmp_path / "out")
    on_disk = {p.name for p in (tmp_path / "out").iterdir()}
    assert on_disk == {p.name for p in again} | {"notes.md"} and not any("full" in name for name in on_disk)


def test_gain_at_few_shots_is_set_against_the_gain_with_the_full_split():
    shifts = {s.column: s for s in full_vs_few(RECORDS, [("infoprompt", "warp")])}
    assert list(shifts) == ["mrpc (n_p=4)", "sst2 (n_p=4)", "all 2 columns pooled"]
    sst2 = shifts["sst2 (n_p=4)"]
    assert sst2.few_shots == 64 and sst2.mean_few == pytest.approx(0.10) and sst2.mean_full == pytest.approx(0.01)
    assert sst2.values == pytest.approx((0.09, 0.12, 0.06)) and sst2.mean == pytest.approx(0.09)
    assert sst2.record == (3, 0, 0) and sst2.p_value == pytest.approx(0.25)  # 2 of 8 sign patterns
    pooled = shifts["all 2 columns pooled"]
    assert pooled.n == 6 and pooled.record == (6, 0, 0)
    assert pooled.p_value == pytest.approx(2 / 64) == pytest.approx(sign_flip_p_value(pooled.values))
    assert pooled.mean == pytest.approx((0.09 + 0.12 + 0.06 + 0.05 + 0.05 + 0.02) / 6)
    # the default comparisons are infoprompt's table baselines present at both sizes: warp only here
    assert {(s.method, s.baseline) for s in full_vs_few(RECORDS)} == {("infoprompt", "warp")}
    with pytest.raises(UserError, match="--full-vs-few linear-probe:warp: no task and seed"):
        full_vs_few(RECORDS, [("linear-probe", "warp")], explicit=True)
    assert full_vs_few(RECORDS, [("linear-probe", "warp")]) == []


def test_report_cli_writes_the_full_vs_few_section_and_csv(tmp_path, capsys):
    store(tmp_path / "results", RECORDS)
    out = tmp_path / "out"
    assert main(["report", str(tmp_path / "results"), "--out", str(out), "--full-vs-few", "infoprompt:warp"]) == 0
    text = (out / "report.md").read_text()
    assert "### Gain at few shots against gain with the full training split" in text
    assert "| infoprompt − warp | 64 | sst2 (n_p=4) | +0.1000 | +0.0100 | +0.0900 ± 0.0300 (3) | 3 / 0 / 0 | 0.250 |" in text
    rows = list(csv.DictReader(io.StringIO((out / "full-vs-few.csv").read_text())))
    pooled = rows[-1]
    assert pooled["column"] == "all 2 columns pooled" and pooled["n_pairs"] == "6" and pooled["few_larger"] == "6"
    assert float(pooled["p_sign_flip"]) == pytest.approx(0.03125)
    assert main(["report", str(tmp_path / "results"), "--out", str(out), "--full-vs-few", "infoprompt"]) == 2
    assert "--full-vs-few expects METHOD:BASELINE" in capsys.readouterr().err


def test_the_full_data_grid_expands_to_the_issue_cells():
    from pathlib import Path

    from infoprompt.experiments.grid import load_cells

    cells = load_cells(Path(__file__).resolve().parents[2] / "configs" / "full-minilm.yaml")
    assert len(cells) == 6 * 8 and {c.shots for c in cells} == {None} and {c.seed for c in cells} == {1}
    assert {c.n_prompts for c in cells if c.method == "infoprompt-released"} == {1}
    assert {c.training.get("max_steps") for c in cells if c.task == "sst2"} == {12000}
    assert {c.training.get("max_steps") for c in cells if c.task != "sst2"} == {None}
    assert {c.task for c in cells} == {"sst2", "mrpc", "rte", "cola", "semeval", "conll04-re"}


# The step-budgeted slice (configs/full-minilm-slice.yaml) read with the 64-shot cells of results/glue-minilm:
# records as the sweep writes them (settings, resolved training config, n_train, steps, environment).
SLICE_SIZES = {"mrpc": 3668, "rte": 2490, "cola": 8551}
FEW_SHOT_TRAINING = {"epochs": 30, "batch_size": 8}
PROBE_TRAINING = {"epochs": 30, "batch_size": 8, "eval_every_epochs": 0}
SLICE_TRAINING = {**PROBE_TRAINING, "max_steps": 1400}
# Per method: its gain over warp at 64 shots and with the full split (every task and seed).
GAINS = {"warp": (0.0, 0.0), "infoprompt": (0.05, 0.01), "infoprompt-ce": (0.02, 0.01), "linear-probe": (0.10, 0.03)}


def swept(task, method, shots, seed, value, training, n_train, steps, device="cpu"):
    n_prompts = 0 if method == "linear-probe" else 4
    return record(task, method, shots, n_prompts, seed, value,
                  settings={"backbone": "minilm", "classifier": {}, "source": "files", "training": training},
                  spec={"training": {"epochs": 30, "batch_size": 8, "max_steps": None, **training}},
                  n_train=n_train, steps=steps, environment={"device": device, "cpu": "Test CPU", "threads": 1})


def few_shot_records():
    out = []
    for task in SLICE_SIZES:
        for seed in (1, 2, 3):
            for method, (gain, _) in GAINS.items():
                probe = method == "linear-probe"
                out.append(swept(task, method, 64, seed, 0.5 + seed / 100 + gain,
                                 PROBE_TRAINING if probe else FEW_SHOT_TRAINING, 64, 11 if probe else 240))
    return out


def slice_records(training=SLICE_TRAINING, steps=1400, device="cpu"):
    out = []
    for task, size in SLICE_SIZES.items():
        for method, (_, gain) in GAINS.items():
            probe = method == "linear-probe"
            out.append(swept(task, method, "full", 1, 0.7 + gain, PROBE_TRAINING if probe else training, size,
                             15 if probe else steps, device))
    return out


def test_a_step_budgeted_slice_heads_its_table_with_what_differs_from_the_paper(tmp_path):
    store(tmp_path / "slice", slice_records())
    store(tmp_path / "glue", few_shot_records())
    text, written = build_report([tmp_path / "slice", tmp_path / "glue"], tmp_path / "out")
    header = [
        "Set-up against the paper's Tables 1–2 (RoBERTa-large, 30 epochs of batch 8, mean over 5 seeds):",
        "",
        "- backbone: minilm",
        "- training: warp, infoprompt, infoprompt-ce: a budget of 1,400 steps of batch 8 instead of 30 epochs, "
        "i.e. 3.05 epochs of mrpc (3,668 training examples), 4.50 epochs of rte (2,490 training examples), 1.31 "
        "epochs of cola (8,551 training examples); linear-probe: own schedule, not counted in epochs",
        "- seeds: 1 per cell (seed 1), not 5",
        "- device: cpu (Test CPU)",
        "",
        "| method | mrpc | rte | cola | Average | adapter | time / cell |",
    ]
    block = "\n".join(["### full training split, GLUE: columns task (paper Table 1 layout)", "", *header])
    assert block in text and block in (tmp_path / "out" / "table-full-glue.md").read_text()
    assert text.count("Set-up against the paper") == 1  # the few-shot tables are not headed so
    assert "[max_steps" not in text  # the budget differs between cells, not within one: no variant rows


def test_a_budgeted_slice_pairs_with_the_few_shot_cells_of_the_same_method_n_p_and_seed(tmp_path):
    store(tmp_path / "slice", slice_records())
    store(tmp_path / "glue", few_shot_records())
    text, _ = build_report([tmp_path / "slice", tmp_path / "glue"], tmp_path / "out")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "full-vs-few.csv").read_text())))
    pairs = {(r["method"], r["baseline"], r["column"]): r for r in rows}
    # infoprompt's default baselines present at both sizes; only seed 1 ran with the full split
    assert {(m, b) for m, b, _ in pairs} == {("infoprompt", "infoprompt-ce"), ("infoprompt", "warp"),
                                             ("infoprompt", "linear-probe")}
    mrpc = pairs[("infoprompt", "warp", "mrpc (n_p=4)")]
    assert mrpc["few_shots"] == "64" and mrpc["n_pairs"] == "1"
    assert float(mrpc["mean_gain_few"]) == pytest.approx(0.05) and float(mrpc["mean_gain_full"]) == pytest.approx(0.01)
    assert mrpc["full_training"] == "1,400 steps of 8 (3.05 epochs)"
    pooled = pairs[("infoprompt", "warp", "all 3 columns pooled")]
    assert pooled["n_pairs"] == "3" and pooled["few_larger"] == "3"
    assert pooled["full_training"] == "1,400 steps of 8 (1.31–4.50 epochs)"
    probe = pairs[("infoprompt", "linear-probe", "rte (n_p=4)")]
    assert float(probe["mean_gain_few"]) == pytest.approx(-0.05) and float(probe["mean_gain_full"]) == pytest.approx(-0.02)
    assert probe["full_training"] == "1,400 steps of 8 (4.50 epochs); linear-probe: own schedule, not counted in epochs"
    # the budget stands beside each test in report.md
    assert ("| infoprompt − warp | 64 | all 3 columns pooled | +0.0500 | +0.0100 | +0.0400 ± 0.0000 (3) | 3 / 0 / 0 "
            "| 0.250 | 1,400 steps of 8 (1.31–4.50 epochs) |") in text


def test_a_thirty_epoch_gpu_run_is_headed_as_the_papers_schedule_on_its_device():
    records = slice_records(training=PROBE_TRAINING, steps=None, device="NVIDIA H100 80GB HBM3")
    for r in records:  # 30 epochs of batch 8: the steps the sweep records
        if r["method"] != "linear-probe":
            r["steps"] = -(-r["n_train"] // 8) * 30
    glue = {t.name: t for t in build_tables(collect(records))}["table-full-glue"]
    assert glue.header[3] == ("- training: warp, infoprompt, infoprompt-ce: 30 epochs of batch 8, as the paper; "
                              "linear-probe: own schedule, not counted in epochs")
    assert glue.header[5] == "- device: NVIDIA H100 80GB HBM3"
    # records that say nothing of their training or device (older ones) are said to be so
    bare = {t.name: t for t in build_tables(collect(RECORDS))}["table-full-glue"]
    assert bare.header[3].endswith(": not recorded") and bare.header[5] == "- device: not recorded"
    assert bare.header[4] == "- seeds: 1–3 per cell, not 5"


def test_the_slice_grid_expands_to_the_budgeted_cells_and_the_probe_of_the_full_grid():
    from pathlib import Path

    from infoprompt.experiments.grid import load_cells

    configs = Path(__file__).resolve().parents[2] / "configs"
    cells = load_cells(configs / "full-minilm-slice.yaml")
    assert len(cells) == 4 * 4 and {c.shots for c in cells} == {None} and {c.seed for c in cells} == {1}
    prompt = [c for c in cells if c.method != "linear-probe"]
    assert {c.method for c in prompt} == {"infoprompt", "infoprompt-ce", "warp"} and {c.n_prompts for c in prompt} == {4}
    assert {c.training.get("max_steps") for c in prompt} == {1400}
    assert {(c.training.get("batch_size"), c.training.get("eval_every_epochs")) for c in cells} == {(8, 0)}
    main_slice = load_cells(configs / "full-minilm-slice.yaml", {"tasks": ["mrpc", "rte", "cola"]})
    assert len(main_slice) == 12 and "sst2" not in {c.task for c in main_slice}
    # the probe's MRPC, RTE and CoLA cells have the whole grid's settings: their records count there too
    whole = {c.id: c for c in load_cells(configs / "full-minilm.yaml")}
    probes = [c for c in main_slice if c.method == "linear-probe"]
    assert len(probes) == 3 and all(whole[c.id].settings_hash == c.settings_hash for c in probes)
