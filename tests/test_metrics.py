"""Metrics against values computed by hand."""

from __future__ import annotations

import math

import pytest

from infoprompt.errors import UserError
from infoprompt.metrics import compute_metrics

LABELS = ("no", "yes")


def test_accuracy_f1_mcc_known_values():
    gold = [1, 1, 1, 0, 0, 0, 1, 0]
    pred = [1, 1, 0, 0, 0, 1, 1, 0]
    # tp=3, fp=1, fn=1, tn=3
    results = compute_metrics(("accuracy", "f1", "mcc"), gold, pred, LABELS, positive="yes")
    assert results["accuracy"] == pytest.approx(6 / 8)
    assert results["f1"] == pytest.approx(2 * 3 / (2 * 3 + 1 + 1))
    assert results["mcc"] == pytest.approx((3 * 3 - 1 * 1) / math.sqrt(4 * 4 * 4 * 4))
    assert list(results) == ["accuracy", "f1", "mcc"]


def test_f1_positive_class_matters():
    gold, pred = [1, 1, 0, 0], [1, 1, 1, 0]
    yes = compute_metrics(("f1",), gold, pred, LABELS, positive="yes")["f1"]
    no = compute_metrics(("f1",), gold, pred, LABELS, positive="no")["f1"]
    assert yes == pytest.approx(0.8) and no == pytest.approx(2 / 3)


def test_constant_predictions_give_zero_mcc():
    assert compute_metrics(("mcc",), [0, 1, 0, 1], [1, 1, 1, 1], LABELS)["mcc"] == 0.0


def test_errors():
    with pytest.raises(UserError, match="unknown metric 'bleu'"):
        compute_metrics(("bleu",), [1], [1], LABELS)
    with pytest.raises(UserError, match="empty"):
        compute_metrics(("accuracy",), [], [], LABELS)
