"""SetFit's fit: contrastive pair training of the body and the logistic head through ``setfit.Trainer``, with the
head's C picked on the draw when asked."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression

from infoprompt.errors import UserError
from infoprompt.kinds.common import finish_fit
from infoprompt.kinds.setfit.model import SetFitClassifier, require_setfit
from infoprompt.kinds.setfit.options import HEAD_CV_FOLDS, SetFitSettings
from infoprompt.progress import StepProgress, step_progress
from infoprompt.tasks import Example
from infoprompt.training.config import TrainConfig
from infoprompt.training.contract import FitResult
from infoprompt.training.data import encode_examples
from infoprompt.training.loop import JsonlLog
from infoprompt.training.runtime import resolve_device

# SetFit's contrastive loss on its sentence pairs, named as the setfit library logs it (``embedding_loss``).
LOSS_TERM = "embedding"

# What the fit reads of a TrainConfig besides what every fit reads (SetFit's own epochs and batch size stand).
SETFIT_TRAINING = frozenset({"lr", "max_steps"})


def select_head_c(features: np.ndarray, labels: np.ndarray, choices: Sequence[float], max_iter: int,
                  seed: int) -> tuple[float, dict[str, float]]:
    """The C of ``choices`` whose logistic regression has the lowest stratified k-fold log-loss on the draw
    (ties: the smaller C), and each C's mean held-out log-loss. A class missing from a fold's training part gets
    probability 1e-6 on that fold's held-out rows; k is at most the draw's smallest class count (at least 2)."""
    import warnings

    from sklearn.model_selection import StratifiedKFold

    classes = np.unique(labels)
    smallest = int(np.bincount(np.searchsorted(classes, labels)).min())
    folds = StratifiedKFold(n_splits=max(2, min(HEAD_CV_FOLDS, smallest)), shuffle=True, random_state=seed)
    losses: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "least populated class has fewer members than n_splits" is expected
        splits = list(folds.split(features, labels))
        for c in choices:
            total = 0.0
            for fit_rows, held_rows in splits:
                classifier = LogisticRegression(C=c, max_iter=max_iter, random_state=seed)
                classifier.fit(features[fit_rows], labels[fit_rows])
                probabilities = np.full((len(held_rows), len(classes)), 1e-6)
                probabilities[:, np.searchsorted(classes, classifier.classes_)] = classifier.predict_proba(
                    features[held_rows])
                truth = probabilities[np.arange(len(held_rows)), np.searchsorted(classes, labels[held_rows])]
                total -= float(np.log(np.clip(truth, 1e-12, None)).sum())
            losses[f"{c:g}"] = total / len(labels)
    best = min(choices, key=lambda c: (losses[f"{c:g}"], c))
    return float(best), losses


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """setfit logs its run banner at INFO and datasets draws a bar per map (carriage returns in a file): the run's
    one training bar (:func:`~infoprompt.progress.step_progress`) says what they would."""
    import datasets

    loggers = [logging.getLogger(name) for name in ("setfit", "sentence_transformers", "transformers.trainer")]
    levels = [logger.level for logger in loggers]
    bars = datasets.utils.logging.is_progress_bar_enabled()
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        if bars:
            datasets.enable_progress_bars()


def train_body(model: SetFitClassifier, texts: list[str], labels: list[int], settings: SetFitSettings,
               config: TrainConfig, log: JsonlLog, device: torch.device,
               callbacks: Sequence[Any] = ()) -> tuple[int, list[float]]:
    """SetFit's contrastive training of the body and its head fit, through ``setfit.Trainer``; returns the steps
    taken and the logged contrastive losses (each also written to the run's JSONL ``log``). ``callbacks``: more
    ``transformers.TrainerCallback`` objects for the body's training loop."""
    from datasets import Dataset
    from setfit import Trainer, TrainingArguments
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class LossLog(TrainerCallback):
        """Each logged step's contrastive loss, in the run's JSONL log."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "embedding_loss" in logs:
                loss = float(logs["embedding_loss"])
                log.write({"type": "step", "step": state.global_step, "epoch": logs.get("epoch"),
                           "lr": logs.get("learning_rate"), "loss_total": loss, f"loss_{LOSS_TERM}": loss})

    class StepBar(TrainerCallback):
        """The run's training bar, as every kind draws it (:func:`~infoprompt.progress.step_progress`). It moves on
        each step's log (every step logs), after the loss is set, so that a line shows that step's loss."""

        bar: StepProgress | None = None
        seen = 0

        def on_train_begin(self, args, state, control, **kwargs):
            self.bar = step_progress(state.max_steps, f"train {model.config.method}", config.progress)

        def advance(self, state) -> None:
            self.bar.update(state.global_step - self.seen)
            self.seen = state.global_step

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.bar is not None and logs and "embedding_loss" in logs:
                self.bar.set_postfix(loss=f"{float(logs['embedding_loss']):.4f}", refresh=False)
                self.advance(state)

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.advance(state)
                self.bar.close()

    with tempfile.TemporaryDirectory(prefix="infoprompt-setfit-") as scratch, quiet_libraries():
        args = TrainingArguments(
            output_dir=scratch,
            batch_size=(settings.batch_size, settings.batch_size),
            num_epochs=(settings.epochs, 1),
            num_iterations=settings.num_iterations,
            body_learning_rate=(settings.body_learning_rate, settings.body_learning_rate),
            warmup_proportion=settings.warmup_proportion,
            max_steps=settings.max_steps,
            max_length=model.config.max_length,
            seed=config.seed,
            report_to="none",
            save_strategy="no",
            logging_strategy="steps",
            logging_steps=1,
            logging_first_step=True,
            show_progress_bar=False,  # the head's encoding pass: a second bar after the run's one
        )
        trainer = Trainer(model=model.setfit, args=args, callbacks=[LossLog(), StepBar(), *callbacks],
                          train_dataset=Dataset.from_dict({"text": texts, "label": labels}))
        # transformers' bar writes every step's log dict to stdout (ProgressCallback.on_log), its PrinterCallback
        # prints them outright, and in a notebook its widget draws a second bar: StepBar replaces them all, and the
        # JSONL log keeps the losses.
        for callback in list(trainer.st_trainer.callback_handler.callbacks):
            if isinstance(callback, ProgressCallback | PrinterCallback) or type(callback).__name__.endswith(
                    "NotebookProgressCallback"):
                trainer.st_trainer.remove_callback(callback)
        if device.type == "cpu":
            trainer.st_trainer.args.dataloader_pin_memory = False  # pinning needs an accelerator
        trainer.train()
        steps = int(trainer.st_trainer.state.global_step)
        losses = [h["embedding_loss"] for h in trainer.st_trainer.state.log_history if "embedding_loss" in h]
    return steps, losses


def fit_setfit(
    model: SetFitClassifier,
    train_examples: Sequence[Example],
    eval_examples: Sequence[Example] | None = None,
    config: TrainConfig | None = None,
    log_path: Path | None = None,
    *,
    callbacks: Sequence[Any] = (),
) -> FitResult:
    """Fine-tune the body contrastively and fit the head with ``setfit.Trainer``; ``callbacks`` (more
    ``transformers.TrainerCallback`` objects) see the body's training loop (``benchmarks/tiny_adapters.py`` times
    its steps with one)."""
    require_setfit()
    config = config or TrainConfig()
    started = time.perf_counter()
    settings = model.settings
    if config.lr is not None or config.max_steps is not None:
        settings = dataclasses.replace(
            settings,
            body_learning_rate=config.lr if config.lr is not None else settings.body_learning_rate,
            max_steps=config.max_steps if config.max_steps is not None else settings.max_steps,
        )
        model.settings = settings
    device = resolve_device(config.device)
    train_set = encode_examples(model, train_examples)
    if train_set.labels is None:
        raise UserError("training examples must all be labelled")
    labels = train_set.labels.tolist()
    if len(set(labels)) < 2:
        raise UserError("setfit needs training examples of at least two classes")
    texts = model.texts(train_examples)
    log = JsonlLog(log_path)
    log.write({"type": "setfit", "step": 0, "n_train": len(texts), **settings.to_json()})

    model.body.to(device)
    model.head.to(device)
    train_started = time.perf_counter()
    steps, losses = train_body(model, texts, labels, settings, config, log, device, callbacks)
    selection = None
    if settings.head_c_choices:
        features = model.head_features(texts)
        chosen, scores = select_head_c(features, np.asarray(labels), settings.head_c_choices, settings.head_max_iter,
                                       config.seed)
        settings = model.settings = dataclasses.replace(settings, head_c=chosen)
        head = LogisticRegression(C=chosen, max_iter=settings.head_max_iter, random_state=model.config.init_seed)
        model.setfit.model_head = head.fit(features, labels)
        selection = {"head_c": chosen, "head_c_log_loss": scores}
        log.write({"type": "selection", "step": steps, **selection})
    train_seconds = time.perf_counter() - train_started
    model.set_head(model.setfit.model_head)
    # The transformers trainer places the body itself (on the GPU when there is one): evaluate on ``device``.
    model.to(device).eval()
    last = float(losses[-1]) if losses else 0.0

    result = finish_fit(model, train_set, eval_examples, config, log, steps=steps, loss=last,
                        term=LOSS_TERM, lr=settings.body_learning_rate, started=started, cache_seconds=0.0, train_seconds=train_seconds)
    result.timings["step_s"] = train_seconds / steps if steps else 0.0
    result.selection = selection
    return result
