"""Training loop, evaluation, prediction and the no-prompt feature cache."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from infoprompt.errors import UserError
from infoprompt.metrics import compute_metrics
from infoprompt.model import PromptClassifier
from infoprompt.tasks import Example
from infoprompt.templates import Batch, EncodedPair, collate


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


@dataclass
class EncodedSet:
    """Examples encoded once for a classifier, with label indices and (optionally) cached plain features."""

    pairs: list[EncodedPair]
    labels: torch.Tensor | None
    pooled: torch.Tensor | None = None
    z_plain: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.pairs)


def encode_examples(model: PromptClassifier, examples: Sequence[Example]) -> EncodedSet:
    pairs = model.template_encoder.encode_many([e.fields for e in examples], [e.source for e in examples])
    if all(e.label is not None for e in examples):
        labels = torch.tensor(
            [model.config.labels.index(model.task.labels[model.task.label_index(e.label, e.source)]) for e in examples]
        )
    else:
        labels = None
    return EncodedSet(pairs=pairs, labels=labels)


def pad_id(model: PromptClassifier) -> int:
    tokenizer = model.backbone.tokenizer
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def batches(indices: Sequence[int], size: int) -> list[list[int]]:
    return [list(indices[i : i + size]) for i in range(0, len(indices), size)]


def length_sorted(encoded: EncodedSet) -> list[int]:
    """Indices ordered by length so evaluation batches carry little padding."""
    return sorted(range(len(encoded)), key=lambda i: len(encoded.pairs[i].prompted.input_ids))


def cache_features(model: PromptClassifier, encoded: EncodedSet, batch_size: int, progress: bool = False) -> None:
    """Run the frozen no-prompt pass once per example and keep ``P'`` and ``Z'`` on ``encoded``."""
    if not model.needs_features or encoded.pooled is not None:
        return
    hidden = model.backbone.hidden_size
    pooled = torch.empty(len(encoded), hidden)
    z_plain = torch.empty(len(encoded), hidden)
    was_training = model.training
    model.eval()
    for chunk in tqdm(batches(length_sorted(encoded), batch_size), desc="no-prompt features", disable=not progress, leave=False):
        batch = collate([encoded.pairs[i].plain for i in chunk], pad_id(model))
        p, z = model.plain_features(batch)
        pooled[chunk], z_plain[chunk] = p, z
    model.train(was_training)
    encoded.pooled, encoded.z_plain = pooled, z_plain


def features_for(model: PromptClassifier, encoded: EncodedSet, chunk: list[int]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if not model.needs_features:
        return None, None
    if encoded.pooled is not None:
        return encoded.pooled[chunk], encoded.z_plain[chunk]
    return model.plain_features(collate([encoded.pairs[i].plain for i in chunk], pad_id(model)))


def prompted_batch(model: PromptClassifier, encoded: EncodedSet, chunk: list[int]) -> Batch:
    return collate([encoded.pairs[i].prompted for i in chunk], pad_id(model))


@torch.no_grad()
def predict_encoded(model: PromptClassifier, encoded: EncodedSet, batch_size: int = 64, progress: bool = False) -> torch.Tensor:
    """Class probabilities (N, C) in input order."""
    was_training = model.training
    model.eval()
    probabilities = torch.empty(len(encoded), len(model.config.labels))
    for chunk in tqdm(batches(length_sorted(encoded), batch_size), desc="predict", disable=not progress, leave=False):
        pooled, _ = features_for(model, encoded, chunk)
        logits, _, _ = model(prompted_batch(model, encoded, chunk), pooled)
        probabilities[chunk] = logits.float().softmax(-1)
    model.train(was_training)
    return probabilities


def evaluate_encoded(model: PromptClassifier, encoded: EncodedSet, batch_size: int = 64, progress: bool = False) -> dict[str, float]:
    if encoded.labels is None:
        raise UserError("evaluation needs labelled examples")
    predicted = predict_encoded(model, encoded, batch_size, progress).argmax(-1)
    task = model.task
    return compute_metrics(task.metrics, encoded.labels.tolist(), predicted.tolist(), model.config.labels, task.positive_label)


def evaluate(model: PromptClassifier, examples: Sequence[Example], batch_size: int = 64, progress: bool = False) -> dict[str, float]:
    """Metrics of ``model`` on labelled ``examples`` (the task's metrics, primary first)."""
    return evaluate_encoded(model, encode_examples(model, examples), batch_size, progress)


def predict(model: PromptClassifier, inputs: Sequence[dict[str, str]], batch_size: int = 64) -> list[dict[str, object]]:
    """One ``{"label", "probabilities"}`` record per input (a dict of the task's text fields)."""
    if not inputs:
        return []
    encoded = encode_examples(model, [Example(fields=f, source=f"input {i + 1}") for i, f in enumerate(inputs)])
    probabilities = predict_encoded(model, encoded, batch_size)
    labels = model.config.labels
    return [
        {"label": labels[int(row.argmax())], "probabilities": {label: round(float(p), 6) for label, p in zip(labels, row, strict=True)}}
        for row in probabilities
    ]


class JsonlLog:
    """Append-only JSONL log, flushed per record so that an interrupted run keeps what it logged."""

    def __init__(self, path: Path | None):
        self.handle = path.open("a", encoding="utf-8") if path is not None else None

    def write(self, record: dict[str, object]) -> None:
        if self.handle is not None:
            self.handle.write(json.dumps(record, sort_keys=True) + "\n")
            self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def train(
    model: PromptClassifier,
    train_examples: Sequence[Example],
    eval_examples: Sequence[Example] | None = None,
    config: TrainConfig | None = None,
    log_path: Path | None = None,
) -> dict[str, object]:
    """Train ``model`` in place; returns final eval metrics, timings and the last loss terms."""
    config = config or TrainConfig()
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    train_set = encode_examples(model, train_examples)
    if train_set.labels is None:
        raise UserError("training examples must all be labelled")
    eval_set = encode_examples(model, eval_examples) if eval_examples else None

    cache_started = time.perf_counter()
    if config.feature_cache:
        cache_features(model, train_set, config.eval_batch_size, config.progress)
    cache_seconds = time.perf_counter() - cache_started
    periodic = config.eval_every or config.eval_every_epochs
    if eval_set is not None and config.feature_cache and periodic:
        cache_features(model, eval_set, config.eval_batch_size, config.progress)
    periodic_set = eval_set
    if eval_set is not None and config.eval_subset and len(eval_set) > config.eval_subset:
        n = config.eval_subset
        periodic_set = EncodedSet(
            eval_set.pairs[:n], eval_set.labels[:n],
            None if eval_set.pooled is None else eval_set.pooled[:n],
            None if eval_set.z_plain is None else eval_set.z_plain[:n],
        )

    lr = config.lr if config.lr is not None else model.preset.lr
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=config.weight_decay)
    steps_per_epoch = (len(train_set) + config.batch_size - 1) // config.batch_size
    total_steps = steps_per_epoch * config.epochs
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    log = JsonlLog(log_path)
    step, eval_seconds, last = 0, 0.0, {}

    def periodic_eval(epoch: int) -> None:
        nonlocal eval_seconds
        if periodic_set is None:
            return
        t0 = time.perf_counter()
        metrics = evaluate_encoded(model, periodic_set, config.eval_batch_size)
        eval_seconds += time.perf_counter() - t0
        log.write({"type": "eval", "step": step, "epoch": epoch, "n_eval": len(periodic_set), **metrics})

    model.train()
    train_started = time.perf_counter()
    bar = tqdm(total=total_steps, desc=f"train {model.config.method}", disable=not config.progress)
    for epoch in range(config.epochs):
        if step >= total_steps:
            break
        order = torch.randperm(len(train_set), generator=generator).tolist()
        for chunk in batches(order, config.batch_size):
            if step >= total_steps:
                break
            pooled, z_plain = features_for(model, train_set, chunk)
            terms = model.losses(prompted_batch(model, train_set, chunk), train_set.labels[chunk], pooled, z_plain, generator)
            optimizer.zero_grad(set_to_none=True)
            terms.total.backward()
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_(parameters, config.grad_clip)
            optimizer.step()
            step += 1
            last = terms.as_floats()
            log.write({"type": "step", "step": step, "epoch": epoch + 1, "lr": lr, **{f"loss_{k}": v for k, v in last.items()}})
            bar.update(1)
            bar.set_postfix(loss=f"{last['total']:.3f}")
            if config.eval_every and step % config.eval_every == 0:
                periodic_eval(epoch + 1)
        if not config.eval_every and config.eval_every_epochs and (epoch + 1) % config.eval_every_epochs == 0:
            periodic_eval(epoch + 1)
    bar.close()
    train_seconds = time.perf_counter() - train_started - eval_seconds

    final: dict[str, float] = {}
    final_seconds = 0.0
    if eval_set is not None:
        t0 = time.perf_counter()
        if config.feature_cache:
            cache_features(model, eval_set, config.eval_batch_size)
        final = evaluate_encoded(model, eval_set, config.eval_batch_size, config.progress)
        final_seconds = time.perf_counter() - t0
        log.write({"type": "final_eval", "step": step, "n_eval": len(eval_set), **final})
    log.close()
    model.eval()
    return {
        "metrics": final,
        "steps": step,
        "last_losses": last,
        "n_train": len(train_set),
        "n_eval": len(eval_set) if eval_set is not None else 0,
        "truncated_train": sum(p.truncated for p in train_set.pairs),
        "lr": lr,
        "timings": {
            "total_s": time.perf_counter() - started,
            "feature_cache_s": cache_seconds,
            "train_s": train_seconds,
            "periodic_eval_s": eval_seconds,
            "final_eval_s": final_seconds,
            "step_s": train_seconds / step if step else 0.0,
        },
    }
