"""Task metrics by name (accuracy, binary F1, Matthews correlation), computed with scikit-learn."""

from __future__ import annotations

import re
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


# -- relation extraction and entity typing -------------------------------------------------------------------

def macro_f1(gold: Sequence[int], predicted: Sequence[int], labels: Sequence[str], positive: str | None) -> float:
    """Unweighted mean of the per-class F1 over every label of the task."""
    return float(f1_score(gold, predicted, labels=list(range(len(labels))), average="macro", zero_division=0))


def _prf(correct: int, proposed: int, actual: int) -> float:
    """F1 from counts; precision or recall of an empty denominator is 0, as in the SemEval scorer."""
    precision = correct / proposed if proposed else 0.0
    recall = correct / actual if actual else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


SEMEVAL_OTHER = "Other"
_DIRECTION = re.compile(r"\((e[12]),(e[12])\)$")


def relation_type(label: str) -> str:
    """``Cause-Effect(e2,e1)`` -> ``Cause-Effect``; labels without a direction are returned unchanged."""
    return _DIRECTION.sub("", label)


def semeval_macro_f1(gold: Sequence[int], predicted: Sequence[int], labels: Sequence[str], positive: str | None) -> float:
    """The official SemEval-2010 Task 8 score as a fraction: (9+1)-way, direction taken into account.

    For each relation type ``R`` other than ``Other`` that occurs in the gold labels:
    ``P = correct / #predicted with type R`` and ``R = correct / #gold with type R``, where a prediction is
    correct only if type and direction both match (a right type with the wrong direction counts against
    precision and recall, the scorer's ``xDIRx`` column). The score is the unweighted mean of the per-type F1;
    the scorer prints the same value times 100 (every example has a prediction, so coverage is 100%).
    """
    types = [relation_type(label) for label in labels]
    gold_types = [types[g] for g in gold]
    predicted_types = [types[p] for p in predicted]
    scored = sorted({t for t in gold_types if t != SEMEVAL_OTHER})
    if not scored:
        return 0.0
    scores = []
    for name in scored:
        correct = sum(1 for g, p, t in zip(gold, predicted, gold_types, strict=True) if g == p and t == name)
        proposed = sum(1 for t in predicted_types if t == name)
        actual = sum(1 for t in gold_types if t == name)
        scores.append(_prf(correct, proposed, actual))
    return sum(scores) / len(scores)


NO_RELATION = "no_relation"


def re_micro_f1(gold: Sequence[int], predicted: Sequence[int], labels: Sequence[str], positive: str | None) -> float:
    """Micro-F1 over relation labels, ``no_relation`` excluded: the usual relation-extraction score.

    A pair counts as found when its label is predicted exactly (ordered pairs make it direction-aware);
    predicting ``no_relation`` is abstaining. Without a ``no_relation`` label this equals accuracy.
    """
    none = labels.index(NO_RELATION) if NO_RELATION in labels else -1
    correct = sum(1 for g, p in zip(gold, predicted, strict=True) if g == p and g != none)
    proposed = sum(1 for p in predicted if p != none)
    actual = sum(1 for g in gold if g != none)
    return _prf(correct, proposed, actual)


register_metric("macro_f1", macro_f1)
register_metric("semeval_macro_f1", semeval_macro_f1)
register_metric("re_micro_f1", re_micro_f1)
