"""Training loop, evaluation, prediction and the no-prompt feature cache."""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from infoprompt.errors import UserError
from infoprompt.metrics import compute_metrics
from infoprompt.model import PromptClassifier
from infoprompt.progress import bar_disabled
from infoprompt.tasks import Example
from infoprompt.templates import Batch, EncodedPair, collate
from infoprompt.validation import check_finite, positive_int, validate_train_config


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
        device: ``auto`` (this process's GPU when CUDA is available, else the CPU), ``cpu``, ``cuda`` or
            ``cuda:N``. Random draws (batch order, negatives, noise) come from CPU generators on every
            device, so a seed means the same draws everywhere.
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


PRECISIONS = ("fp32", "bf16")
SELECTIONS = ("none", "holdout")
# An information term counts as saturated once its bound reaches this share of its cap log(K+1).
SATURATION = 0.95


@dataclass
class EncodedSet:
    """Examples encoded once for a classifier, with label indices and (optionally) cached plain features."""

    pairs: list[EncodedPair]
    labels: torch.Tensor | None
    pooled: torch.Tensor | None = None
    z_plain: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.pairs)


@dataclass(frozen=True)
class Distributed:
    """This process's place in a multi-process run (``accelerate launch``, ``torchrun``); one process otherwise.

    Each process takes an interleaved share of every batch; gradients, loss terms, cached features and
    predictions are summed across processes, so every process holds the same model and the same metrics.
    """

    rank: int = 0
    world_size: int = 1

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def share(self, items: list[int]) -> list[int]:
        return items[self.rank :: self.world_size] if self.active else items

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.active:
            torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.SUM)
        return tensor


def distributed_context() -> Distributed:
    """Join the process group a launcher announced through ``WORLD_SIZE``/``RANK`` (else a single process)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Distributed()
    if not torch.distributed.is_initialized():
        from accelerate import PartialState

        PartialState()  # initialises torch.distributed with the launcher's settings (gloo on CPU, nccl on GPU)
    return Distributed(rank=torch.distributed.get_rank(), world_size=torch.distributed.get_world_size())


def resolve_device(name: str, ddp: Distributed | None = None) -> torch.device:
    """The torch device for ``TrainConfig.device``; each process of a multi-GPU run takes its local GPU."""
    local = int(os.environ.get("LOCAL_RANK", (ddp or Distributed()).rank))
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {name!r}; valid: auto, cpu, cuda, cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {name!r} asked for, but this torch {torch.__version__} sees no CUDA GPU; use --device cpu")
        if device.index is None:
            device = torch.device("cuda", local % torch.cuda.device_count())
        elif device.index >= torch.cuda.device_count():
            raise UserError(f"device {name!r} asked for, but only {torch.cuda.device_count()} CUDA GPU(s) are visible")
    elif device.type != "cpu":
        raise UserError(f"device {name!r} is not supported; valid: auto, cpu, cuda, cuda:N")
    return device


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@contextlib.contextmanager
def autocast(device: torch.device, precision: str) -> Iterator[None]:
    """bfloat16 autocast for ``precision="bf16"``, nothing for ``fp32``."""
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    if precision == "fp32":
        yield
        return
    with torch.autocast(device.type, dtype=torch.bfloat16):
        yield


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
    positive_int(size, "batch size")  # a size < 1 would make no batch at all and leave results unset
    return [list(indices[i : i + size]) for i in range(0, len(indices), size)]


def length_sorted(encoded: EncodedSet) -> list[int]:
    """Indices ordered by length so evaluation batches carry little padding."""
    return sorted(range(len(encoded)), key=lambda i: len(encoded.pairs[i].prompted.input_ids))


def plain_batch(model: PromptClassifier, encoded: EncodedSet, chunk: list[int]) -> Batch:
    return collate([encoded.pairs[i].plain for i in chunk], pad_id(model)).to(model_device(model))


def cache_features(
    model: PromptClassifier, encoded: EncodedSet, batch_size: int, progress: bool = False, ddp: Distributed | None = None,
    precision: str = "fp32",
) -> None:
    """Run the frozen no-prompt pass once per example and keep ``P'`` and ``Z'`` on ``encoded`` (on the model's device)."""
    if not model.needs_features or encoded.pooled is not None:
        return
    ddp = ddp or Distributed()
    device = model_device(model)
    hidden = model.backbone.hidden_size
    # Z' is as wide as the readout (several hidden sizes for concatenated entity spans). Zeros: under DDP the
    # rows are summed across processes, so rows another process fills must be 0 here.
    pooled = torch.zeros(len(encoded), hidden, device=device)
    z_plain = torch.zeros(len(encoded), model.head.in_features, device=device)
    was_training = model.training
    model.eval()
    chunks = ddp.share(batches(length_sorted(encoded), batch_size))
    with autocast(device, precision):
        for chunk in tqdm(chunks, desc="no-prompt features", disable=bar_disabled(progress), leave=False):
            p, z = model.plain_features(plain_batch(model, encoded, chunk))
            pooled[chunk], z_plain[chunk] = p.float(), z.float()
    model.train(was_training)
    encoded.pooled, encoded.z_plain = ddp.sum_(pooled), ddp.sum_(z_plain)


def cache_eval_features(
    model: PromptClassifier, examples: Sequence[Example], encoded: EncodedSet, config: TrainConfig,
    ddp: Distributed, precision: str, progress: bool = False,
) -> str:
    """Fill ``encoded``'s no-prompt features from the feature store, or compute and store them. Returns
    ``hit``, ``miss`` or ``off`` (store disabled, or a multi-process run, which computes its share)."""
    from infoprompt.backbones import default_cache_dir
    from infoprompt.feature_store import feature_key, load_features, save_features, store_path

    if not config.feature_store or ddp.active:
        cache_features(model, encoded, config.eval_batch_size, progress, ddp, precision)
        return "off"
    path = store_path(config.feature_store_dir or default_cache_dir(), feature_key(model, examples, encoded.pairs, precision))
    stored = load_features(path, len(encoded))
    if stored is not None:
        device = model_device(model)
        encoded.pooled, encoded.z_plain = stored[0].to(device), stored[1].to(device)
        return "hit"
    cache_features(model, encoded, config.eval_batch_size, progress, ddp, precision)
    save_features(path, encoded.pooled, encoded.z_plain)
    return "miss"


def features_for(model: PromptClassifier, encoded: EncodedSet, chunk: list[int]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if not model.needs_features:
        return None, None
    if encoded.pooled is not None:
        return encoded.pooled[chunk], encoded.z_plain[chunk]
    return model.plain_features(plain_batch(model, encoded, chunk))


def generator_inputs(model: PromptClassifier, encoded: EncodedSet, chunk: list[int]) -> torch.Tensor | None:
    """What prediction needs from the no-prompt side: ``P'`` for generated prompts (cached, or computed, which
    is a whole encoder pass unless the generator reads input embeddings), nothing otherwise."""
    if not getattr(model, "generates_prompts", False):
        return None
    if encoded.pooled is not None:
        return encoded.pooled[chunk]
    return model.generator_input(plain_batch(model, encoded, chunk))


def prompted_batch(model: PromptClassifier, encoded: EncodedSet, chunk: list[int]) -> Batch:
    return collate([encoded.pairs[i].prompted for i in chunk], pad_id(model)).to(model_device(model))


@torch.no_grad()
def predict_encoded(
    model: PromptClassifier, encoded: EncodedSet, batch_size: int = 64, progress: bool = False,
    ddp: Distributed | None = None, precision: str = "fp32",
) -> torch.Tensor:
    """Class probabilities (N, C) on the CPU, in input order (batches split over processes when ``ddp`` is active)."""
    ddp = ddp or Distributed()
    device = model_device(model)
    was_training = model.training
    model.eval()
    probabilities = torch.zeros(len(encoded), len(model.config.labels), device=device)
    chunks = ddp.share(batches(length_sorted(encoded), batch_size))
    with autocast(device, precision):
        for chunk in tqdm(chunks, desc="predict", disable=bar_disabled(progress), leave=False):
            logits, _, _ = model(prompted_batch(model, encoded, chunk), generator_inputs(model, encoded, chunk))
            probabilities[chunk] = logits.float().softmax(-1)
    model.train(was_training)
    return ddp.sum_(probabilities).cpu()


def evaluate_encoded(
    model: PromptClassifier, encoded: EncodedSet, batch_size: int = 64, progress: bool = False,
    ddp: Distributed | None = None, precision: str = "fp32",
) -> dict[str, float]:
    if encoded.labels is None:
        raise UserError("evaluation needs labelled examples")
    return task_metrics(model, encoded.labels, predict_encoded(model, encoded, batch_size, progress, ddp, precision))


def task_metrics(model: PromptClassifier, labels: torch.Tensor, probabilities: torch.Tensor) -> dict[str, float]:
    """The task's metrics (primary first) of the argmax predictions against label indices."""
    task = model.task
    predicted = probabilities.argmax(-1).tolist()
    return compute_metrics(task.metrics, labels.tolist(), predicted, model.config.labels, task.positive_label)


def evaluate(
    model: PromptClassifier, examples: Sequence[Example], batch_size: int = 64, progress: bool = False,
    precision: str = "fp32",
) -> dict[str, float]:
    """Metrics of ``model`` on labelled ``examples`` (the task's metrics, primary first), on the model's device."""
    return evaluate_encoded(model, encode_examples(model, examples), batch_size, progress, precision=precision)


def predict(
    model: PromptClassifier, inputs: Sequence[dict[str, str]], batch_size: int = 64, precision: str = "fp32",
    sources: Sequence[str] | None = None,
) -> list[dict[str, object]]:
    """One ``{"label", "probabilities"}`` record per input (a dict of the task's text fields); ``sources``
    name the inputs in error messages (default ``input N``)."""
    if not inputs:
        return []
    sources = sources or [f"input {i + 1}" for i in range(len(inputs))]
    encoded = encode_examples(model, [Example(fields=f, source=s) for f, s in zip(inputs, sources, strict=True)])
    probabilities = predict_encoded(model, encoded, batch_size, precision=precision)
    labels = model.config.labels
    return [
        {"label": labels[int(row.argmax())], "probabilities": {label: round(float(p), 6) for label, p in zip(labels, row, strict=True)}}
        for row in probabilities
    ]


def batch_losses(
    model: PromptClassifier, train_set: EncodedSet, chunk: list[int], generator: torch.Generator, precision: str
):
    """The loss terms of one training batch (encoder passes under ``precision``'s autocast)."""
    device = model_device(model)
    pooled, z_plain = features_for(model, train_set, chunk)
    with autocast(device, precision):
        return model.losses(
            prompted_batch(model, train_set, chunk), train_set.labels[chunk].to(device), pooled, z_plain, generator
        )


def _distributed_backward(
    model: PromptClassifier, train_set: EncodedSet, chunk: list[int], ddp: Distributed,
    parameters: list[torch.nn.Parameter], generator: torch.Generator, precision: str,
) -> dict[str, float]:
    """This process's share of one batch: backward of its loss weighted by its share, then the gradients
    summed over processes, which gives every process the gradient of the whole batch's mean loss."""
    mine = ddp.share(chunk)
    weight = len(mine) / len(chunk)
    values = torch.zeros(5, device=model_device(model))
    if mine:
        terms = batch_losses(model, train_set, mine, generator, precision)
        (terms.total * weight).backward()
        values = torch.stack([v.detach().float() for v in (terms.total, terms.pred, terms.rep, terms.head, terms.kl)]) * weight
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
    flat = ddp.sum_(torch.cat([g.reshape(-1) for g in grads] + [values]))
    offset = 0
    for p, g in zip(parameters, grads, strict=True):
        p.grad = flat[offset : offset + g.numel()].view_as(g).clone()
        offset += g.numel()
    return dict(zip(("total", "pred", "rep", "head", "kl"), flat[offset:].tolist(), strict=True))


def _broadcast_parameters(parameters: list[torch.nn.Parameter], ddp: Distributed) -> None:
    """Make every process hold the main process's values (guards against any drift in initialisation)."""
    if ddp.active:
        with torch.no_grad():
            for p in parameters:
                torch.distributed.broadcast(p.data, src=0)


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


def holdout_split(labels: Sequence[int], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Indices to fit on and to hold out: ``fraction`` of every class (rounded down) is held out, each class
    keeping at least one example to fit on. Depends only on the labels and ``seed``."""
    if not 0 < fraction < 1:
        raise UserError(f"holdout_fraction must be between 0 and 1, got {fraction}")
    generator = torch.Generator().manual_seed(seed)
    fit, held = [], []
    for label in sorted(set(labels)):
        members = [i for i, value in enumerate(labels) if value == label]
        shuffled = [members[i] for i in torch.randperm(len(members), generator=generator).tolist()]
        n_held = min(int(len(members) * fraction), len(members) - 1)
        held += shuffled[:n_held]
        fit += shuffled[n_held:]
    if not held:
        raise UserError(f"holdout selection with fraction {fraction} leaves nothing to hold out of {len(labels)} examples")
    return sorted(fit), sorted(held)


def subset(encoded: EncodedSet, indices: list[int]) -> EncodedSet:
    pick = torch.tensor(indices, dtype=torch.long)
    return EncodedSet(
        [encoded.pairs[i] for i in indices],
        None if encoded.labels is None else encoded.labels[pick],
        None if encoded.pooled is None else encoded.pooled[pick.to(encoded.pooled.device)],
        None if encoded.z_plain is None else encoded.z_plain[pick.to(encoded.z_plain.device)],
    )


@torch.no_grad()
def warm_start_head(model: PromptClassifier, encoded: EncodedSet, batch_size: int, seed: int, precision: str) -> int:
    """Fit the head by logistic regression on the adapter's current features of ``encoded``; returns the
    solver's iterations. The head then starts where the linear probe on this readout ends."""
    from infoprompt.logistic import fit_logistic_head  # scikit-learn is imported only when it is needed

    device = model_device(model)
    was_training = model.training
    model.eval()
    features = torch.empty(len(encoded), model.head.in_features)
    with autocast(device, precision):
        for chunk in batches(length_sorted(encoded), batch_size):
            _, z, _ = model(prompted_batch(model, encoded, chunk), generator_inputs(model, encoded, chunk))
            features[chunk] = z.float().cpu()
    model.train(was_training)
    weight, bias, iterations = fit_logistic_head(
        features.double().numpy(), encoded.labels.numpy(), len(model.config.labels), seed
    )
    model.head.weight.copy_(torch.as_tensor(weight, dtype=model.head.weight.dtype))
    model.head.bias.copy_(torch.as_tensor(bias, dtype=model.head.bias.dtype))
    return iterations


@torch.no_grad()
def holdout_scores(model: PromptClassifier, encoded: EncodedSet, batch_size: int, precision: str) -> dict[str, float]:
    """Cross-entropy and the task's metrics on held-out training examples."""
    probabilities = predict_encoded(model, encoded, batch_size, precision=precision)
    loss = float(torch.nn.functional.nll_loss(probabilities.clamp_min(1e-12).log(), encoded.labels))
    return {"loss": loss, **task_metrics(model, encoded.labels, probabilities)}


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


def train(
    model: PromptClassifier,
    train_examples: Sequence[Example],
    eval_examples: Sequence[Example] | None = None,
    config: TrainConfig | None = None,
    log_path: Path | None = None,
) -> dict[str, object]:
    """Train ``model`` in place; returns final eval metrics, timings, the last loss terms, the information
    terms' saturation and, under ``select="holdout"``, what was selected and from what.

    Under ``accelerate launch --num_processes N`` (or ``torchrun``) the N processes split every batch and
    all-reduce gradients; only the main process writes ``log_path``.
    """
    config = config or TrainConfig()
    started = time.perf_counter()
    ddp = distributed_context()
    device = resolve_device(config.device, ddp)
    precision = config.precision
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    select = config.select if config.select is not None else model.preset.select
    if select not in SELECTIONS:
        raise UserError(f"unknown selection {select!r}; valid: {', '.join(SELECTIONS)}")
    warm_start = config.warm_start if config.warm_start is not None else model.preset.warm_start
    model.to(device)
    torch.manual_seed(config.seed)
    train_set = encode_examples(model, train_examples)
    if train_set.labels is None:
        raise UserError("training examples must all be labelled")
    # Under selection the evaluation split is encoded only after training: nothing before then can read it.
    eval_set = encode_examples(model, eval_examples) if eval_examples and select == "none" else None

    cache_started = time.perf_counter()
    progress = config.progress and ddp.is_main
    if config.feature_cache:
        cache_features(model, train_set, config.eval_batch_size, progress, ddp, precision)
    cache_seconds = time.perf_counter() - cache_started
    periodic = (config.eval_every or config.eval_every_epochs) if select == "none" else 0
    # Evaluation needs the no-prompt pass only when the prompt generator reads it.
    cache_eval = config.feature_cache and getattr(model, "inference_needs_plain_pass", False)
    store_status = "off"
    if eval_set is not None and cache_eval and periodic:
        store_status = cache_eval_features(model, eval_examples, eval_set, config, ddp, precision, progress)
    periodic_set = eval_set if periodic else None
    if periodic_set is not None and config.eval_subset and len(periodic_set) > config.eval_subset:
        periodic_set = subset(periodic_set, list(range(config.eval_subset)))

    lr = config.lr if config.lr is not None else model.preset.lr
    parameters = [p for p in model.parameters() if p.requires_grad]
    _broadcast_parameters(parameters, ddp)
    log = JsonlLog(log_path if ddp.is_main else None)
    eval_seconds = 0.0

    def periodic_eval(step: int, epoch: int) -> None:
        nonlocal eval_seconds
        t0 = time.perf_counter()
        metrics = evaluate_encoded(model, periodic_set, config.eval_batch_size, ddp=ddp, precision=precision)
        eval_seconds += time.perf_counter() - t0
        log.write({"type": "eval", "step": step, "epoch": epoch, "n_eval": len(periodic_set), **metrics})

    def run_epochs(
        data: EncodedSet, epochs: int, phase: str, after_epoch: Callable[[int], bool] | None = None,
    ) -> tuple[int, dict, Saturation]:
        """The loop: ``epochs`` passes over ``data`` with fresh optimiser and generators seeded by the run's
        seed, so a refit after selection is exactly a run with that many epochs. ``after_epoch(epoch)`` runs
        before the first epoch and after each; returning True stops the loop."""
        generator = torch.Generator().manual_seed(config.seed)
        order_generator = generator
        if ddp.active:
            # Every process must draw the same batch order; the sampling noise (negatives, z) differs per process.
            generator = torch.Generator().manual_seed(config.seed + 7919 * (ddp.rank + 1))
        if warm_start:
            log.write({"type": "warm_start", "phase": phase, "n": len(data),
                       "iterations": warm_start_head(model, data, config.eval_batch_size, config.seed, precision)})
        optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=config.weight_decay)
        total_steps = ((len(data) + config.batch_size - 1) // config.batch_size) * epochs
        if config.max_steps is not None:
            total_steps = min(total_steps, config.max_steps)
        step, last, saturation = 0, {}, Saturation()
        stop = after_epoch is not None and after_epoch(0)
        model.train()
        bar = tqdm(total=total_steps, desc=f"{phase} {model.config.method}", disable=bar_disabled(progress))
        for epoch in range(epochs):
            if step >= total_steps or stop:
                break
            order = torch.randperm(len(data), generator=order_generator).tolist()
            for chunk in batches(order, config.batch_size):
                if step >= total_steps:
                    break
                bounds: dict[str, float] = {}
                if ddp.active:
                    optimizer.zero_grad(set_to_none=True)
                    last = _distributed_backward(model, data, chunk, ddp, parameters, generator, precision)
                else:
                    terms = batch_losses(model, data, chunk, generator, precision)
                    optimizer.zero_grad(set_to_none=True)
                    terms.total.backward()
                    last, bounds = terms.as_floats(), terms.mi_bounds()
                if config.grad_clip:
                    torch.nn.utils.clip_grad_norm_(parameters, config.grad_clip)
                optimizer.step()
                step += 1
                if not math.isfinite(last["total"]):
                    bar.close()
                    log.close()
                    raise UserError(
                        f"training diverged: the loss is {last['total']} at step {step} (epoch {epoch + 1}); "
                        f"try a smaller --lr (was {lr:g}), smaller --beta/--gamma, or another --seed"
                    )
                saturation.update(step, bounds)
                log.write({"type": "step", "phase": phase, "step": step, "epoch": epoch + 1, "lr": lr,
                           **{f"loss_{k}": v for k, v in last.items()}, **bounds})
                bar.update(1)
                bar.set_postfix(loss=f"{last['total']:.3f}")
                if periodic_set is not None and config.eval_every and step % config.eval_every == 0:
                    periodic_eval(step, epoch + 1)
            saturation.end_epoch()
            if periodic_set is not None and not config.eval_every and (epoch + 1) % config.eval_every_epochs == 0:
                periodic_eval(step, epoch + 1)
            if after_epoch is not None:
                stop = after_epoch(epoch + 1)
        bar.close()
        return step, last, saturation

    selection: dict[str, object] | None = None
    selection_seconds = 0.0
    epochs = config.epochs
    if select == "holdout":
        t0 = time.perf_counter()
        selection = select_epochs(model, train_set, config, run_epochs, log, precision)
        epochs = int(selection["epochs"])
        selection_seconds = time.perf_counter() - t0

    train_started = time.perf_counter()
    step, last, saturation = run_epochs(train_set, epochs, "train")
    _broadcast_parameters(parameters, ddp)
    check_finite({n: p for n, p in model.named_parameters() if p.requires_grad}, "training diverged: parameter")
    train_seconds = time.perf_counter() - train_started - eval_seconds

    final: dict[str, float] = {}
    final_seconds = 0.0
    if eval_examples:
        t0 = time.perf_counter()
        if eval_set is None:
            eval_set = encode_examples(model, eval_examples)
        if cache_eval and eval_set.pooled is None:
            store_status = cache_eval_features(model, eval_examples, eval_set, config, ddp, precision)
        final = evaluate_encoded(model, eval_set, config.eval_batch_size, progress, ddp, precision)
        final_seconds = time.perf_counter() - t0
        log.write({"type": "final_eval", "step": step, "n_eval": len(eval_set), **final})
    log.close()
    model.eval()
    result: dict[str, object] = {
        "metrics": final,
        "steps": step,
        "last_losses": last,
        "information": saturation.summary(),
        "n_train": len(train_set),
        "n_eval": len(eval_set) if eval_set is not None else 0,
        "truncated_train": sum(p.truncated for p in train_set.pairs),
        "lr": lr,
        "world_size": ddp.world_size,
        "eval_feature_store": store_status,
        "timings": {
            "total_s": time.perf_counter() - started,
            "feature_cache_s": cache_seconds,
            "selection_s": selection_seconds,
            "train_s": train_seconds,
            "periodic_eval_s": eval_seconds,
            "final_eval_s": final_seconds,
            "step_s": train_seconds / step if step else 0.0,
        },
    }
    if selection is not None:
        result["selection"] = selection
    return result


def select_epochs(
    model: PromptClassifier, train_set: EncodedSet, config: TrainConfig,
    run_epochs: Callable[..., tuple[int, dict, Saturation]], log: JsonlLog, precision: str,
) -> dict[str, object]:
    """Pick the number of epochs on a held-out slice of the training examples, then put the adapter back to
    its initial parameters. Best held-out primary metric wins; ties go to the lower held-out loss, then to
    fewer epochs. The pass stops after ``config.patience`` epochs without a better score."""
    initial = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    fit, held = holdout_split(train_set.labels.tolist(), config.holdout_fraction, config.seed)
    fit_set, held_set = subset(train_set, fit), subset(train_set, held)
    primary = model.task.primary_metric
    candidates: list[dict[str, float]] = []

    def rank(candidate: dict[str, float]) -> tuple[float, float, float]:
        return candidate[primary], -candidate["loss"], -candidate["epoch"]

    def score(epoch: int) -> bool:
        scores = holdout_scores(model, held_set, config.eval_batch_size, precision)
        candidates.append({"epoch": epoch, **scores})
        log.write({"type": "holdout", "epoch": epoch, "n_holdout": len(held), **scores})
        best_epoch = max(candidates, key=rank)["epoch"]
        return bool(config.patience) and epoch - best_epoch >= config.patience

    run_epochs(fit_set, config.epochs, "select", after_epoch=score)
    best = max(candidates, key=rank)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in initial:
                p.copy_(initial[name])
    return {
        "method": "holdout",
        "criterion": f"held-out {primary}, then lower held-out loss, then fewer epochs",
        "holdout_fraction": config.holdout_fraction,
        "n_fit": len(fit),
        "n_holdout": len(held),
        "max_epochs": config.epochs,
        "patience": config.patience,
        "epochs_scored": len(candidates) - 1,
        "epochs": int(best["epoch"]),
        "refit_on": "all training examples",
        "candidates": candidates,
    }
