"""Task metrics by name (accuracy, binary F1, Matthews correlation), computed with scikit-learn."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from infoprompt.errors import UserError

# A metric sees gold and predicted class indices and the task's label names (for label-aware metrics).
Metric = Callable[[Sequence[int], Sequence[int], Sequence[str], str | None], float]


def accuracy(gold: Sequence[int], predicted: Sequence[int], labels: Sequence[str], positive: str | None) -> float:
    return float(accuracy_score(gold, predicted))


def f1(gold: Sequence[int], predicted: Sequence[int], labels: Sequence[str], positive: str | None) -> float:
    """Binary F1 of the positive label; macro F1 over all labels when the task names none."""
    if positive is None:
        return float(f1_score(gold, predicted, labels=list(range(len(labels))), average="macro", zero_division=0))
    return float(f1_score(gold, predicted, pos_label=labels.index(positive), average="binary", zero_division=0))


def mcc(gold: Sequence[int], predicted: Sequence[int], labels: Sequence[str], positive: str | None) -> float:
    return float(matthews_corrcoef(gold, predicted))


METRICS: dict[str, Metric] = {"accuracy": accuracy, "f1": f1, "mcc": mcc}


def register_metric(name: str, metric: Metric) -> None:
    METRICS[name] = metric


def compute_metrics(
    names: Sequence[str],
    gold: Sequence[int],
    predicted: Sequence[int],
    labels: Sequence[str],
    positive: str | None = None,
) -> dict[str, float]:
    """Compute every metric in ``names`` on class indices ``gold`` and ``predicted``."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold labels but {len(predicted)} predictions")
    if not len(gold):
        raise UserError("cannot compute metrics on an empty evaluation set")
    results = {}
    for name in names:
        if name not in METRICS:
            raise UserError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
        results[name] = METRICS[name](gold, predicted, labels, positive)
    return results
