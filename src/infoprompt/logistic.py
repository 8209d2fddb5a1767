"""Logistic regression (scikit-learn) as a linear head: the probe's fit, also used to warm-start prompt heads."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression

from infoprompt.errors import UserError

# Inverse L2 strength of the logistic regression: scikit-learn's default, left untuned (no eval-split tuning).
REGULARISATION_C = 1.0
MAX_ITER = 2000


def head_from_sklearn(classifier: LogisticRegression, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a linear head whose softmax equals ``predict_proba`` (binary and multinomial alike).

    Classes missing from the training sample get a very low bias, so they are never predicted.
    """
    dim = classifier.coef_.shape[1]
    weight = np.zeros((n_classes, dim))
    bias = np.full(n_classes, -1e4)
    classes = [int(c) for c in classifier.classes_]
    if len(classes) == 2:
        # scikit-learn keeps one row w for P(second class) = sigmoid(w·x + b): logits 0 and w·x + b.
        bias[classes[0]] = 0.0
        weight[classes[1]], bias[classes[1]] = classifier.coef_[0], classifier.intercept_[0]
    else:
        for row, c in enumerate(classes):
            weight[c], bias[c] = classifier.coef_[row], classifier.intercept_[row]
    return weight, bias


def fit_logistic_head(
    features: np.ndarray, labels: np.ndarray, n_classes: int, seed: int, c: float = REGULARISATION_C
) -> tuple[np.ndarray, np.ndarray, int]:
    """Fit an L2 logistic regression of inverse strength ``c``; returns head weight, bias and iterations."""
    if len(np.unique(labels)) < 2:
        raise UserError("a logistic-regression head needs training examples of at least two classes")
    classifier = LogisticRegression(C=c, max_iter=MAX_ITER, random_state=seed)
    classifier.fit(features.astype(np.float64), labels)
    weight, bias = head_from_sklearn(classifier, n_classes)
    return weight, bias, int(np.max(classifier.n_iter_))


def fit_one_vs_rest_head(features: np.ndarray, targets: np.ndarray, seed: int,
                         c: float = REGULARISATION_C) -> tuple[np.ndarray, np.ndarray, int]:
    """Multi-label: one L2 logistic regression per label on 0/1 ``targets`` (examples x labels); returns the rows
    of a head whose sigmoid gives each label's probability, the biases, and the most iterations one fit took.
    A label that every (or no) training example carries gets a constant probability instead of a fit."""
    n_labels = targets.shape[1]
    weight = np.zeros((n_labels, features.shape[1]))
    bias = np.zeros(n_labels)
    iterations = 0
    for label in range(n_labels):
        column = targets[:, label]
        if column.min() == column.max():
            bias[label] = 10.0 if column[0] else -10.0
            continue
        classifier = LogisticRegression(C=c, max_iter=MAX_ITER, random_state=seed)
        classifier.fit(features.astype(np.float64), column.astype(np.int64))
        weight[label], bias[label] = classifier.coef_[0], classifier.intercept_[0]
        iterations = max(iterations, int(np.max(classifier.n_iter_)))
    return weight, bias, iterations


# Decision thresholds a multi-label head may pick, on held-out examples of the few-shot draw.
THRESHOLDS = tuple(round(0.05 * step, 2) for step in range(1, 20))


def pick_threshold(probabilities: np.ndarray, targets: np.ndarray) -> float:
    """The threshold of :data:`THRESHOLDS` with the best micro-F1 of ``probabilities >= threshold`` against 0/1
    ``targets`` (ties: the one nearest 0.5)."""
    def micro_f1(threshold: float) -> float:
        predicted = probabilities >= threshold
        true_positive = float((predicted & (targets > 0)).sum())
        denominator = float(predicted.sum() + (targets > 0).sum())
        return 2 * true_positive / denominator if denominator else 0.0

    return max(THRESHOLDS, key=lambda threshold: (micro_f1(threshold), -abs(threshold - 0.5)))
