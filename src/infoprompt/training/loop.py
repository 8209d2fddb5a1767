"""The training loop of the prompt kinds: setup, optional epoch selection, the epochs, the final evaluation."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from infoprompt.errors import UserError
from infoprompt.progress import step_progress
from infoprompt.tasks import Example
from infoprompt.training.config import SELECTIONS, TrainConfig
from infoprompt.training.contract import Adapter, FitResult, LossTerms
from infoprompt.training.data import (
    EncodedSet,
    batches,
    cache_eval_features,
    cache_features,
    encode_examples,
    features_for,
    generator_inputs,
    length_sorted,
    prompted_batch,
    subset,
)
from infoprompt.training.inference import evaluate_encoded, evaluate_with_shares
from infoprompt.training.runtime import LossPass, autocast, model_device, run_device, start_accelerator
from infoprompt.training.selection import select_epochs
from infoprompt.validation import check_finite

if TYPE_CHECKING:
    from accelerate import Accelerator

# An information term counts as saturated once its bound reaches this share of its cap log(K+1).
SATURATION = 0.95
LOSS_NAMES = ("total", "pred", "rep", "head", "kl")


def train(
    model: Adapter,
    train_examples: Sequence[Example],
    eval_examples: Sequence[Example] | None = None,
    config: TrainConfig | None = None,
    log_path: Path | None = None,
) -> FitResult:
    """Train ``model`` (any kind trained by gradient steps) in place; returns the final evaluation, timings, the
    last loss terms, the information terms' saturation and, under ``select="holdout"``, what was selected.

    Under ``accelerate launch --num_processes N`` (or ``torchrun``) the N processes split every batch and
    DDP averages their gradients; every process ends with the same model and metrics, and only the main
    process writes ``log_path``.
    """
    config = config or TrainConfig()
    started = time.perf_counter()
    precision = config.precision  # TrainConfig and autocast both refuse an unknown one
    accelerator = start_accelerator(precision)
    device = run_device(config.device, accelerator)
    select = config.select if config.select is not None else model.preset.select
    if select not in SELECTIONS:
        raise UserError(f"unknown selection {select!r}; valid: {', '.join(SELECTIONS)}")
    model.to(device)
    torch.manual_seed(config.seed)
    train_set = encode_examples(model, train_examples)
    if train_set.labels is None:
        raise UserError("training examples must all be labelled")
    # Under selection the evaluation split is encoded only after training: nothing before then can read it.
    eval_set = encode_examples(model, eval_examples) if eval_examples and select == "none" else None

    cache_started = time.perf_counter()
    progress = config.progress and accelerator.is_main_process
    if config.feature_cache:
        cache_features(model, train_set, config.eval_batch_size, progress, accelerator, precision)
    cache_seconds = time.perf_counter() - cache_started
    evaluation = Evaluation(model, eval_examples, eval_set, config, accelerator, precision, progress)
    periodic_set = evaluation.periodic_set(select)
    run = Run(
        model=model, config=config, accelerator=accelerator,
        # DDP under a launcher (see LossPass for what it holds and why); the module itself in one process.
        loss_pass=accelerator.prepare(LossPass(model)),
        parameters=[p for p in model.parameters() if p.requires_grad],
        lr=config.lr if config.lr is not None else model.preset.lr,
        precision=precision,
        warm_start=config.warm_start if config.warm_start is not None else model.preset.warm_start,
        progress=progress,
        log=JsonlLog(log_path if accelerator.is_main_process else None),
        periodic_set=periodic_set,
    )

    selection: dict[str, object] | None = None
    selection_started = time.perf_counter()
    epochs = config.epochs
    if select == "holdout":
        selection = select_epochs(model, train_set, config, run.run_epochs, run.log, precision)
        epochs = int(selection["epochs"])
    selection_seconds = time.perf_counter() - selection_started if selection is not None else 0.0

    train_started = time.perf_counter()
    step, last, saturation = run.run_epochs(train_set, epochs, "train")
    check_finite({n: p for n, p in model.named_parameters() if p.requires_grad}, "training diverged: parameter")
    train_seconds = time.perf_counter() - train_started - run.eval_seconds
    final, final_seconds = evaluation.final(step, run.log)
    run.finish()
    return FitResult(
        metrics=final, steps=step, last_losses=last, information=saturation.summary(), n_train=len(train_set),
        n_eval=evaluation.size, truncated_train=sum(p.truncated for p in train_set.pairs), lr=run.lr,
        world_size=accelerator.num_processes, eval_feature_store=evaluation.store_status, selection=selection,
        prediction_shares=evaluation.shares,
        timings={
            "total_s": time.perf_counter() - started,
            "feature_cache_s": cache_seconds,
            "selection_s": selection_seconds,
            "train_s": train_seconds,
            "periodic_eval_s": run.eval_seconds,
            "final_eval_s": final_seconds,
            "step_s": train_seconds / step if step else 0.0,
        },
    )


@dataclass
class Evaluation:
    """The evaluation split of one :func:`train` call: the periodic evaluations' share of it and the final
    evaluation, with the no-prompt pass cached (or read from the feature store) where the model needs one."""

    model: Adapter
    examples: Sequence[Example] | None
    encoded: EncodedSet | None
    config: TrainConfig
    accelerator: Accelerator
    precision: str
    progress: bool
    store_status: str = "off"
    shares: dict[str, object] | None = None

    @property
    def cache_plain_pass(self) -> bool:
        # Evaluation needs the no-prompt pass only when the prompt generator reads it.
        return self.config.feature_cache and self.model.inference_needs_plain_pass

    @property
    def size(self) -> int:
        return len(self.encoded) if self.encoded is not None else 0

    def periodic_set(self, select: str) -> EncodedSet | None:
        """The examples of the periodic evaluations (none under held-out selection)."""
        config = self.config
        periodic = (config.eval_every or config.eval_every_epochs) if select == "none" else 0
        if self.encoded is None or not periodic:
            return None
        if self.cache_plain_pass:
            self.store_status = cache_eval_features(self.model, self.examples, self.encoded, config, self.accelerator,
                                                    self.precision, self.progress)
        if config.eval_subset and len(self.encoded) > config.eval_subset:
            return subset(self.encoded, list(range(config.eval_subset)))
        return self.encoded

    def final(self, step: int, log: JsonlLog) -> tuple[dict[str, float], float]:
        """The final metrics (empty without evaluation examples) and the seconds they took."""
        if not self.examples:
            return {}, 0.0
        started = time.perf_counter()
        if self.encoded is None:
            self.encoded = encode_examples(self.model, self.examples)
        if self.cache_plain_pass and self.encoded.pooled is None:
            self.store_status = cache_eval_features(self.model, self.examples, self.encoded, self.config,
                                                    self.accelerator, self.precision)
        metrics, self.shares = evaluate_with_shares(self.model, self.encoded, self.config.eval_batch_size,
                                                    self.progress, self.accelerator, self.precision)
        log.write({"type": "final_eval", "step": step, "n_eval": len(self.encoded), **metrics})
        return metrics, time.perf_counter() - started


@dataclass
class Run:
    """What the epochs of one :func:`train` call share: the model, its prepared training pass, the settings,
    the log and the periodic evaluations' examples and time."""

    model: Adapter
    config: TrainConfig
    accelerator: Accelerator
    loss_pass: nn.Module | None
    parameters: list[nn.Parameter]
    lr: float
    precision: str
    warm_start: bool
    progress: bool
    log: JsonlLog
    periodic_set: EncodedSet | None
    eval_seconds: float = 0.0

    def run_epochs(
        self, data: EncodedSet, epochs: int, phase: str, after_epoch: Callable[[int], bool] | None = None,
    ) -> tuple[int, dict[str, float], Saturation]:
        """``epochs`` passes over ``data`` with fresh optimiser and generators seeded by the run's seed, so a
        refit after selection is exactly a run with that many epochs. ``after_epoch(epoch)`` runs before the
        first epoch and after each; returning True stops the loop."""
        config, model, accelerator = self.config, self.model, self.accelerator
        order_generator = torch.Generator().manual_seed(config.seed)
        generator = order_generator
        if accelerator.num_processes > 1:
            # Every process must draw the same batch order; the sampling noise (negatives, z) differs per process.
            generator = torch.Generator().manual_seed(config.seed + 7919 * (accelerator.process_index + 1))
        refit_head = model.preset.refit_head
        if self.warm_start or refit_head:
            self.fit_head(data, phase, epoch=0)
        optimizer = accelerator.prepare(torch.optim.AdamW(self.parameters, lr=self.lr, weight_decay=config.weight_decay))
        total_steps = ((len(data) + config.batch_size - 1) // config.batch_size) * epochs
        if config.max_steps is not None:
            total_steps = min(total_steps, config.max_steps)
        scheduler = learning_rate_schedule(model, optimizer, total_steps)
        step, last, saturation = 0, {}, Saturation()
        stop = after_epoch is not None and after_epoch(0)
        model.train()
        bar = step_progress(total_steps, f"{phase} {model.config.method}", self.progress)
        for epoch in range(epochs):
            if step >= total_steps or stop:
                break
            order = torch.randperm(len(data), generator=order_generator).tolist()
            for chunk in batches(order, config.batch_size):
                if step >= total_steps:
                    break
                optimizer.zero_grad(set_to_none=True)
                last, bounds = self.backward(data, chunk, generator)
                if config.grad_clip:
                    accelerator.clip_grad_norm_(self.parameters, config.grad_clip)
                lr = optimizer.param_groups[0]["lr"] if scheduler is not None else self.lr
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                step += 1
                if not math.isfinite(last["total"]):
                    bar.close()
                    self.log.close()
                    raise UserError(
                        f"training diverged: the loss is {last['total']} at step {step} (epoch {epoch + 1}); "
                        f"try a smaller --lr (was {self.lr:g}), smaller --beta/--gamma, or another --seed"
                    )
                saturation.update(step, bounds)
                self.log.write({"type": "step", "phase": phase, "step": step, "epoch": epoch + 1, "lr": lr,
                                **{f"loss_{k}": v for k, v in last.items()}, **bounds})
                # The loss first, without a redraw of its own: the step's update shows it.
                bar.set_postfix(loss=f"{last['total']:.3f}", refresh=False)
                bar.update(1)
                if self.periodic_set is not None and config.eval_every and step % config.eval_every == 0:
                    self.periodic_eval(step, epoch + 1)
            saturation.end_epoch()
            if refit_head:
                self.fit_head(data, phase, epoch + 1)
            if self.periodic_set is not None and not config.eval_every and (epoch + 1) % config.eval_every_epochs == 0:
                self.periodic_eval(step, epoch + 1)
            if after_epoch is not None:
                stop = after_epoch(epoch + 1)
        bar.close()
        return step, last, saturation

    def fit_head(self, data: EncodedSet, phase: str, epoch: int) -> None:
        """Fit the head by logistic regression on the model's current features of ``data`` (and log it)."""
        iterations = warm_start_head(self.model, data, self.config.eval_batch_size, self.config.seed, self.precision)
        record = {"type": "warm_start", "phase": phase, "n": len(data), "iterations": iterations}
        self.log.write(record if epoch == 0 else {**record, "type": "head_refit", "epoch": epoch})

    def finish(self) -> None:
        """Close the log and leave the model in eval mode; under DDP drop the wrapper, and its gradient hooks on
        the model's parameters with it."""
        self.log.close()
        self.model.eval()
        if self.accelerator.num_processes > 1:
            self.loss_pass = None
            self.accelerator.free_memory()

    def backward(self, data: EncodedSet, chunk: list[int], generator: torch.Generator) -> tuple[dict[str, float], dict[str, float]]:
        """Backpropagate one batch's loss; returns the whole batch's loss terms and, with one process, the
        information terms' bounds (under DDP each process saw only its share, so none are reported)."""
        accelerator = self.accelerator
        if accelerator.num_processes == 1:
            terms = batch_losses(self.model, data, chunk, generator, self.precision, self.loss_pass)
            accelerator.backward(terms.total)
            return terms.as_floats(), terms.mi_bounds()
        # Each process takes a contiguous share of the batch. DDP averages the processes' gradients, so a share's
        # mean loss is weighted by its size times the number of processes: the average is then the gradient of
        # the whole batch's mean loss, whatever the shares' sizes. A process left without an example (a short
        # last batch) runs a zero-weighted one, since every process must join every gradient reduction.
        with accelerator.split_between_processes(chunk) as mine:
            weight = len(mine) / len(chunk)
            terms = batch_losses(self.model, data, mine or chunk[:1], generator, self.precision, self.loss_pass)
        accelerator.backward(terms.total * (weight * accelerator.num_processes))
        values = torch.stack([getattr(terms, name).detach().float() for name in LOSS_NAMES]) * weight
        return dict(zip(LOSS_NAMES, accelerator.reduce(values, "sum").tolist(), strict=True)), {}

    def periodic_eval(self, step: int, epoch: int) -> None:
        t0 = time.perf_counter()
        metrics = evaluate_encoded(self.model, self.periodic_set, self.config.eval_batch_size,
                                   accelerator=self.accelerator, precision=self.precision)
        self.eval_seconds += time.perf_counter() - t0
        self.log.write({"type": "eval", "step": step, "epoch": epoch, "n_eval": len(self.periodic_set), **metrics})


def learning_rate_schedule(model: Adapter, optimizer: torch.optim.Optimizer, total_steps: int) -> object | None:
    """The model's own learning-rate schedule over ``total_steps`` steps (``model.lr_schedule(optimizer,
    total_steps)``, stepped after every optimiser step); ``None`` where its kind has none, and the rate stays
    constant (every kind but ``released``)."""
    return model.lr_schedule(optimizer, total_steps)


def batch_losses(
    model: Adapter, train_set: EncodedSet, chunk: list[int], generator: torch.Generator, precision: str,
    loss_pass: nn.Module | None = None,
) -> LossTerms:
    """The loss terms of one training batch (encoder passes under ``precision``'s autocast). ``loss_pass`` is
    the run's prepared :class:`~infoprompt.training.runtime.LossPass` (DDP must see the pass); by default
    ``model.losses`` runs directly."""
    device = model_device(model)
    pooled, z_plain = features_for(model, train_set, chunk)
    with autocast(device, precision):
        return (loss_pass or model.losses)(
            prompted_batch(model, train_set, chunk), train_set.labels[chunk].to(device), pooled, z_plain, generator
        )


@torch.no_grad()
def warm_start_head(model: Adapter, encoded: EncodedSet, batch_size: int, seed: int, precision: str) -> int:
    """Fit the head by logistic regression on the adapter's current features of ``encoded``; returns the
    solver's iterations. The head then starts where the linear probe on this readout ends. Every process of
    a multi-process run fits the same head on all of ``encoded``."""
    # scikit-learn is imported only when it is needed
    from infoprompt.logistic import fit_logistic_head, fit_one_vs_rest_head

    device = model_device(model)
    was_training = model.training
    model.eval()
    features = torch.empty(len(encoded), model.feature_width)
    with autocast(device, precision):
        for chunk in batches(length_sorted(encoded), batch_size):
            _, z, _ = model(prompted_batch(model, encoded, chunk), generator_inputs(model, encoded, chunk))
            features[chunk] = z.float().cpu()
    model.train(was_training)
    if encoded.labels.dim() == 2:  # multi-label: one sigmoid per label
        weight, bias, iterations = fit_one_vs_rest_head(features.double().numpy(), encoded.labels.numpy(), seed)
    else:
        weight, bias, iterations = fit_logistic_head(
            features.double().numpy(), encoded.labels.numpy(), len(model.config.labels), seed
        )
    model.set_head(weight, bias)
    return iterations


class Saturation:
    """Tracks each information term's bound: the first step it reached :data:`SATURATION` of its cap, and its
    mean over the last epoch, so that a run says whether β and γ still gave a gradient."""

    def __init__(self) -> None:
        self.first: dict[str, int] = {}
        self.caps: dict[str, float] = {}
        self.epoch_values: dict[str, list[float]] = {}
        self.last_epoch: dict[str, float] = {}

    def update(self, step: int, bounds: dict[str, float]) -> None:
        for key, value in bounds.items():
            if key.endswith("_cap"):
                continue
            cap = bounds[f"{key}_cap"]
            if cap <= 0:
                continue  # an in-batch term on a batch of one example has no negative, hence no bound
            self.caps[key] = cap
            self.epoch_values.setdefault(key, []).append(value)
            if key not in self.first and value >= SATURATION * cap:
                self.first[key] = step

    def end_epoch(self) -> None:
        self.last_epoch = {key: sum(v) / len(v) for key, v in self.epoch_values.items() if v}
        self.epoch_values = {}

    def summary(self) -> dict[str, dict[str, object]]:
        return {
            key: {
                "cap": self.caps[key],
                "last_epoch_bound": self.last_epoch.get(key),
                "last_epoch_share_of_cap": (self.last_epoch[key] / self.caps[key]) if key in self.last_epoch else None,
                "saturated_at_step": self.first.get(key),
            }
            for key in self.caps
        }


class JsonlLog:
    """Append-only JSONL log, flushed per record so that an interrupted run keeps what it logged."""

    def __init__(self, path: Path | None):
        self.handle = path.open("a", encoding="utf-8") if path is not None else None

    def write(self, record: dict[str, object]) -> None:
        if self.handle is not None:
            self.handle.write(json.dumps(record, sort_keys=True, allow_nan=False) + "\n")
            self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
