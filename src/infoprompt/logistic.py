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
    features: np.ndarray, labels: np.ndarray, n_classes: int, seed: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Fit an L2 logistic regression (C = :data:`REGULARISATION_C`); returns head weight, bias and iterations."""
    if len(np.unique(labels)) < 2:
        raise UserError("a logistic-regression head needs training examples of at least two classes")
    classifier = LogisticRegression(C=REGULARISATION_C, max_iter=MAX_ITER, random_state=seed)
    classifier.fit(features.astype(np.float64), labels)
    weight, bias = head_from_sklearn(classifier, n_classes)
    return weight, bias, int(np.max(classifier.n_iter_))
