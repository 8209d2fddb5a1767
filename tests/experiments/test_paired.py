"""Paired comparisons: exact sign-flip p-values worked out by hand, seed pairing, pooling and clear errors."""

from __future__ import annotations

import pytest

from infoprompt.errors import UserError
from infoprompt.experiments.grid import Cell
from infoprompt.experiments.paired import paired_comparisons, parse_comparison, sign_flip_p_value
from infoprompt.experiments.report import build_report
from infoprompt.experiments.store import write_record


def record(task, method, n_prompts, seed, value, status="ok"):
    return {"task": task, "method": method, "shots": 64, "n_prompts": n_prompts, "seed": seed, "backbone": "minilm",
            "primary_metric": "accuracy", "metrics": {"accuracy": value}, "status": status}


@pytest.mark.parametrize(("diffs", "expected"), [
    ((1.0, 2.0, 3.0), 2 / 8),         # all positive: only the all-plus and all-minus patterns reach |mean| = 2
    ((1.0, -1.0), 1.0),               # mean 0: every pattern is at least as extreme
    ((3.0, -1.0, 2.0, 2.0), 4 / 16),  # |sum| >= 6 of (3, 1, 2, 2): all same sign, or only the 1 flipped
    ((0.5,), 1.0),
])
def test_exact_p_values_by_hand(diffs, expected):
    assert sign_flip_p_value(diffs) == pytest.approx(expected)


def test_many_pairs_use_a_seeded_monte_carlo():
    assert sign_flip_p_value([1.0] * 30) < 1e-3
    noisy = [(-1.0) ** i * (1 + i / 10) for i in range(30)]
    assert sign_flip_p_value(noisy) == sign_flip_p_value(noisy) and sign_flip_p_value(noisy) > 0.5


def test_pairs_follow_seeds_and_promptless_baselines_pair_with_every_n_p():
    records = [
        *(record("sst2", "infoprompt", 4, s, v) for s, v in ((1, 0.8), (2, 0.7), (3, 0.9))),
        *(record("sst2", "warp", 4, s, v) for s, v in ((1, 0.6), (2, 0.75))),  # seed 3 missing: two pairs
        *(record("rte", "infoprompt", 4, s, 0.6) for s in (1, 2)),
        *(record("rte", "warp", 4, s, 0.5) for s in (1, 2)),
        record("rte", "warp", 4, 3, 0.1, status="failed"),
        *(record("sst2", "linear-probe", 0, s, 0.5) for s in (1, 2, 3)),
    ]
    pairs = {(p.baseline, p.column): p for p in paired_comparisons(records)}
    sst2 = pairs[("warp", "sst2 (64 shots, n_p=4)")]
    assert sst2.diffs == pytest.approx((0.2, -0.05)) and sst2.record == (1, 0, 1)
    pooled = pairs[("warp", "all 2 columns pooled")]
    assert pooled.n == 4 and pooled.mean == pytest.approx((0.2 - 0.05 + 0.1 + 0.1) / 4)
    probe = pairs[("linear-probe", "sst2 (64 shots, n_p=4)")]
    assert probe.diffs == pytest.approx((0.3, 0.2, 0.4)) and probe.p_value == pytest.approx(0.25)


def test_default_comparisons_pit_both_infoprompt_presets_against_setfit():
    records = [record("sst2", m, 0 if m == "setfit" else 4, 1, v)
               for m, v in (("infoprompt", 0.8), ("infoprompt-plus", 0.82), ("setfit", 0.85), ("warp", 0.6))]
    pairs = {(p.method, p.baseline) for p in paired_comparisons(records)}
    assert pairs == {("infoprompt", "setfit"), ("infoprompt", "warp"), ("infoprompt-plus", "setfit"),
                     ("infoprompt-plus", "infoprompt"), ("infoprompt-plus", "warp")}


def test_bad_comparisons_are_user_errors():
    with pytest.raises(UserError, match="METHOD:BASELINE"):
        parse_comparison("infoprompt")
    with pytest.raises(UserError, match="no finished results for idpg"):
        paired_comparisons([record("sst2", "infoprompt", 4, 1, 0.5)], [("infoprompt", "idpg")])


def test_report_has_the_paired_section_and_csv(tmp_path):
    for r in [record("sst2", m, 4, s, v + s / 100) for m, v in (("infoprompt", 0.7), ("warp", 0.6)) for s in (1, 2, 3)]:
        write_record(tmp_path, Cell(r["task"], r["method"], 64, 4, r["seed"]), r)
    text, written = build_report(tmp_path, comparisons=[("warp", "infoprompt")])
    assert "| warp − infoprompt | sst2 (64 shots, n_p=4) | -0.1000 ± 0.0000 (3) | 0 / 0 / 3 | 0.250 |" in text
    assert (tmp_path / "report" / "paired.csv") in written
