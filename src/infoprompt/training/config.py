"""Optimisation settings of a training run: :class:`TrainConfig` and the names its options take."""

from __future__ import annotations

from dataclasses import dataclass

from infoprompt.validation import validate_train_config

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

    epochs: int = 30
    batch_size: int = 8
    lr: float | None = None
    weight_decay: float = 0.01
    seed: int = 1
    max_steps: int | None = None
    grad_clip: float | None = 1.0
    eval_every: int = 0
    eval_every_epochs: int = 5
    eval_subset: int = 256
    eval_batch_size: int = 64
    feature_cache: bool = True
    progress: bool = True
    device: str = "auto"
    precision: str = "fp32"
    feature_store: bool = True
    feature_store_dir: str | None = None
    select: str | None = None
    holdout_fraction: float = 0.25
    patience: int = 5
    warm_start: bool | None = None

    def __post_init__(self) -> None:
        validate_train_config(self, PRECISIONS, SELECTIONS)
