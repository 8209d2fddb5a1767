"""The linear probe's fit: logistic regression on the frozen features of the few-shot draw (one-vs-rest with a
held-out threshold on multi-label tasks)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from infoprompt.errors import UserError
from infoprompt.kinds.common import finish_fit
from infoprompt.kinds.probe.model import LinearProbe
from infoprompt.logistic import REGULARISATION_C, fit_logistic_head, fit_one_vs_rest_head, pick_threshold
from infoprompt.progress import step_progress
from infoprompt.tasks import Example, is_multi_label
from infoprompt.training.config import TrainConfig
from infoprompt.training.contract import FitResult
from infoprompt.training.data import batches, encode_examples, length_sorted, prompted_batch
from infoprompt.training.loop import JsonlLog
from infoprompt.training.runtime import autocast, resolve_device

# What the fit reads of a TrainConfig besides what every fit reads: the held-out share of a multi-label draw.
PROBE_TRAINING = frozenset({"holdout_fraction"})
LOSS_TERM = "logistic"  # the head's cross-entropy on the draw: the probe's one loss, as its records name it


def fit_linear_probe(
    model: LinearProbe,
    train_examples: Sequence[Example],
    eval_examples: Sequence[Example] | None = None,
    config: TrainConfig | None = None,
    log_path: Path | None = None,
) -> FitResult:
    """Fit the head by logistic regression; returns its :class:`~infoprompt.training.contract.FitResult`."""

    config = config or TrainConfig()
    started = time.perf_counter()
    train_set = encode_examples(model, train_examples)
    if train_set.labels is None:
        raise UserError("training examples must all be labelled")
    device = resolve_device(config.device)
    model.to(device).eval()
    features = torch.empty(len(train_set), model.feature_width)
    chunks = list(batches(length_sorted(train_set), config.eval_batch_size))
    # The encoder's passes over the draw are the probe's training time (the logistic regression after them is
    # quick), so its bar, the same as every kind's, counts those batches.
    bar = step_progress(len(chunks), f"train {model.config.method}", config.progress)
    with autocast(device, config.precision):
        for chunk in chunks:
            features[chunk] = model.features(prompted_batch(model, train_set, chunk)).float().cpu()
            bar.update(1)
    bar.close()
    cache_seconds = time.perf_counter() - started

    fit_started = time.perf_counter()
    labels = train_set.labels.numpy()
    head_c = model.config.options.head_c
    extra: dict[str, object] = {}
    if is_multi_label(model.task):
        weight, bias, iterations, model.config.threshold = fit_multi_label(features.numpy(), labels, config, head_c)
        extra = {"threshold": model.config.threshold}
    else:
        weight, bias, iterations = fit_logistic_head(features.numpy(), labels, len(model.config.labels), config.seed,
                                                     head_c)
    model.set_head(weight, bias)
    fit_seconds = time.perf_counter() - fit_started
    with torch.no_grad():
        logits, targets = model.head(features.to(device)), train_set.labels.to(device)
        loss = nn.functional.binary_cross_entropy_with_logits if extra else nn.functional.cross_entropy
        train_loss = float(loss(logits, targets))
    log = JsonlLog(log_path)
    log.write({"type": "fit", "step": iterations, "loss_total": train_loss, f"loss_{LOSS_TERM}": train_loss, "C": head_c,
               **extra})

    return finish_fit(model, train_set, eval_examples, config, log, steps=iterations, loss=train_loss, term=LOSS_TERM, lr=None,
                      started=started, cache_seconds=cache_seconds, train_seconds=fit_seconds)


def fit_multi_label(features: np.ndarray, targets: np.ndarray, config: TrainConfig,
                    c: float = REGULARISATION_C) -> tuple[np.ndarray, np.ndarray, int, float]:
    """One-vs-rest logistic regression (inverse strength ``c``) on the whole draw, with the decision threshold
    picked on a seeded held-out slice (``holdout_fraction`` of the examples, at least one) by a fit on the rest."""
    order = np.random.default_rng(config.seed).permutation(len(features))
    held = order[: max(1, round(config.holdout_fraction * len(features)))]
    kept = order[len(held):]
    threshold = 0.5
    if len(kept):
        weight, bias, _ = fit_one_vs_rest_head(features[kept], targets[kept], config.seed, c)
        probabilities = 1 / (1 + np.exp(-(features[held] @ weight.T + bias)))
        threshold = pick_threshold(probabilities, targets[held])
    weight, bias, iterations = fit_one_vs_rest_head(features, targets, config.seed, c)
    return weight, bias, iterations, threshold
