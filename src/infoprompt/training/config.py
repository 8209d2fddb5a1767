"""Optimisation settings of a training run: :class:`TrainConfig` and the names its options take."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from infoprompt.options import COUNT, FRACTION, NON_NEGATIVE, POSITIVE, POSITIVE_FLOAT, option
from infoprompt.validation import check_fields

PRECISIONS = ("fp32", "bf16")
SELECTIONS = ("none", "holdout")


@dataclass
class TrainConfig:
    """Optimisation settings; the paper's defaults for prompt methods.

    Attributes:
        epochs: passes over the training set.
        batch_size: training batch size.
        lr: AdamW learning rate; ``None`` takes the method's default (1e-3 prompts, 2e-5 fine-tuning).
        weight_decay: AdamW weight decay.
        seed: seeds shuffling, negative sampling and the variational noise.
        max_steps: stop after this many optimiser steps (``None``: run all epochs).
        grad_clip: clip the gradient norm to this value (``None``: no clipping).
        eval_every: run a periodic evaluation every this many steps (0: once per ``eval_every_epochs``).
        eval_every_epochs: periodic evaluation every this many epochs when ``eval_every`` is 0 (0: never).
        eval_subset: periodic evaluations use the first this many eval examples (0: all); the final
            evaluation always uses the whole split. They feed learning curves, never model selection.
        eval_batch_size: batch size of evaluation and prediction.
        feature_cache: compute the no-prompt pass once per example instead of at every step.
        progress: show progress bars.
        device: ``auto`` (this process's GPU when CUDA is available, else the CPU; under ``accelerate launch``
            the device accelerate gives this process), ``cpu``, ``cuda`` or ``cuda:N``. Random draws (batch
            order, negatives, noise) come from CPU generators on every device, so a seed means the same draws
            everywhere.
        precision: ``fp32``, or ``bf16`` to run the encoder passes under bfloat16 autocast (faster on GPUs
            and on CPUs with AVX512-BF16/AMX; parameters, optimiser state and losses stay float32).
        feature_store: keep the evaluation examples' no-prompt pass on disk (see :mod:`infoprompt.feature_store`)
            and reuse it in every later run that needs the same pass (same backbone, template, budget, pooling,
            readout, examples); the numbers are the same, only the second pass is skipped.
        feature_store_dir: where the store lives (``None``: ``~/.cache/infoprompt``, ``$XDG_CACHE_HOME`` aware).
        select: how many epochs to train. ``none``: all ``epochs`` (the paper). ``holdout``: train on a
            stratified ``1 − holdout_fraction`` of the training examples for up to ``epochs`` epochs, score the
            held-out rest after every epoch (epoch 0 included), pick the best epoch count, then train again
            on every training example for that many epochs. Only the few-shot draw is read; under selection
            no periodic evaluation runs, so the evaluation split is read once, after training. ``None``
            takes the method's.
        holdout_fraction: share of each class held out by ``select="holdout"``.
        patience: ``select="holdout"`` stops the selection pass after this many epochs without a better
            held-out score (0: run all ``epochs``).
        warm_start: before training, fit the head by logistic regression on the initial adapter's features
            of the training examples (the linear probe's solution on this readout). ``None`` takes the
            method's.
    """

    epochs: int = option(30, "passes over the training set (at least 1; default 30)", type=POSITIVE)
    batch_size: int = option(8, "training examples per step (default 8)", type=POSITIVE)
    lr: float | None = option(None, "learning rate (default: the method's, 1e-3 for prompts)", type=POSITIVE_FLOAT)
    weight_decay: float = option(0.01, "AdamW weight decay (default 0.01)", type=NON_NEGATIVE)
    seed: int = 1
    max_steps: int | None = option(None, "stop after this many steps", type=POSITIVE)
    grad_clip: float | None = option(1.0, type=POSITIVE_FLOAT)
    eval_every: int = option(0, "periodic evaluation every N steps", type=COUNT)
    eval_every_epochs: int = option(5, "periodic evaluation every N epochs (0: none)", type=COUNT)
    eval_subset: int = option(256, "eval examples used by periodic evaluations", type=COUNT)
    eval_batch_size: int = option(64, type=POSITIVE)
    feature_cache: bool = option(True, "recompute the no-prompt pass every step", switch="negate")
    progress: bool = True
    device: str = "auto"
    precision: str = option("fp32", choices=PRECISIONS)
    feature_store: bool = True
    feature_store_dir: str | None = None
    select: str | None = option(None, "none: train all epochs; holdout: pick the epoch count on a held-out slice of "
                                "the few-shot draw, then retrain on all of it (default: the method's)",
                                choices=SELECTIONS)
    holdout_fraction: float = option(0.25, "share of each class held out by --select holdout", type=FRACTION)
    patience: int = option(5, "--select holdout stops after N epochs without improvement", type=COUNT)
    warm_start: bool | None = option(None, "start the head at the logistic-regression fit on the initial features "
                                     "(default: the method's)", switch="flag")

    def __post_init__(self) -> None:
        check_fields(self)


# The fields every kind's fit reads (or that only say where and how a run happens), and every field: what a
# kind trained by the engine's gradient loop reads (see infoprompt.kinds.registry.Kind.training_options).
COMMON_TRAINING = frozenset({"seed", "progress", "device", "precision", "eval_batch_size", "feature_store",
                             "feature_store_dir"})
ENGINE_TRAINING = frozenset(f.name for f in dataclasses.fields(TrainConfig))
