"""Report sections on the information terms' saturation and on held-out selection."""

from __future__ import annotations

import math

from infoprompt.experiments.diagnostics import information_markdown, information_rows, selection_markdown


def record(method, seed, share, step, epochs=None):
    cap = math.log(33)
    out = {"method": method, "task": "sst2", "shots": 64, "seed": seed, "status": "ok",
           "information": {"mi_rep": {"cap": cap, "last_epoch_bound": share * cap, "last_epoch_share_of_cap": share,
                                      "saturated_at_step": step}}}
    if epochs is not None:
        out["selection"] = {"epochs": epochs}
    return out


def test_information_rows_count_saturated_runs_and_their_median_step():
    rows = information_rows([record("infoprompt", 1, 0.99, 20), record("infoprompt", 2, 0.97, 30),
                             record("infoprompt", 3, 0.60, None), {"method": "warp", "status": "ok"}])
    (row,) = rows
    assert row["runs"] == 3 and row["saturated_runs"] == 2 and row["median_saturation_step"] == 25
    assert math.isclose(row["share_of_cap"], (0.99 + 0.97 + 0.60) / 3)


def test_sections_render_as_markdown_tables_and_vanish_without_data():
    text = information_markdown([record("infoprompt", 1, 0.99, 20)])
    header = next(line for line in text.splitlines() if line.startswith("| method"))
    row = next(line for line in text.splitlines() if line.startswith("| infoprompt"))
    assert row.count("|") - row.count(r"\|") == header.count("|")  # the term's own '|' is escaped
    assert "1/1" in row
    assert "| infoprompt-plus | sst2 | 64 | 3, 0 |" in selection_markdown(
        [record("infoprompt-plus", 1, 0.1, None, 3), record("infoprompt-plus", 2, 0.1, None, 0)])
    assert information_markdown([{"method": "warp", "status": "ok"}]) == "" and selection_markdown([]) == ""
    # A head C picked by --select-head-c (no epochs) gets its own table; a selection of neither adds nothing.
    picked = [{"method": "setfit-lora", "task": "semeval", "shots": 64, "status": "ok", "selection": {"head_c": c}}
              for c in (10.0, 0.1)]
    text = selection_markdown([*picked, record("infoprompt-plus", 1, 0.1, None, 3)])
    assert "| setfit-lora | semeval | 64 | 10, 0.1 |" in text and "| infoprompt-plus | sst2 | 64 | 3 |" in text
    assert text.count("### Selection") == 1 and "| method | task | shots | head C picked |" in text
    assert selection_markdown([{"method": "m", "task": "t", "status": "ok", "selection": {"other": 1}}]) == ""
