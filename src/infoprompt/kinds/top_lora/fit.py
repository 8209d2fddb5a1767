"""top-lora's training: the draw's lower-block states computed once, then in-batch contrastive steps through the
top blocks only, an optional epoch count picked on a held-out slice of the draw, and the logistic head."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression

from infoprompt.errors import UserError
from infoprompt.kinds.common import finish_fit
from infoprompt.kinds.setfit import select_head_c
from infoprompt.kinds.top_lora.blocks import SplitEncoder
from infoprompt.kinds.top_lora.losses import make_loss
from infoprompt.kinds.top_lora.model import TopLoraClassifier, TopLoraSettings, pair_features
from infoprompt.kinds.top_lora.options import BALANCED_METRICS
from infoprompt.progress import step_progress
from infoprompt.tasks import Example
from infoprompt.training.config import TrainConfig
from infoprompt.training.contract import FitResult
from infoprompt.training.data import encode_examples
from infoprompt.training.inference import task_metrics
from infoprompt.training.loop import JsonlLog
from infoprompt.training.runtime import resolve_device
from infoprompt.training.selection import holdout_split

# What the fit reads of a TrainConfig besides what every fit reads: --lr and --max-steps override the settings'
# learning rate and step cap; its epochs and batch size are its own options (set by --epochs and --batch-size).
TOP_LORA_TRAINING = frozenset({"lr", "max_steps"})


def epoch_batches(labels: Sequence[int], batch_size: int, generator: torch.Generator) -> list[list[int]]:
    """One epoch's batches of row indices: ⌈n / batch_size⌉ batches, each class shuffled and dealt over them two
    rows at a time (a class's odd last row joins its previous pair), so that every text has a text of its own
    class in its batch whenever its class has two or more in the draw."""
    n_batches = max(1, -(-len(labels) // batch_size))
    batches: list[list[int]] = [[] for _ in range(n_batches)]
    turn = 0
    for label in sorted(set(labels)):
        members = [i for i, value in enumerate(labels) if value == label]
        members = [members[i] for i in torch.randperm(len(members), generator=generator).tolist()]
        groups = [members[i : i + 2] for i in range(0, len(members), 2)]
        if len(groups) > 1 and len(groups[-1]) == 1:
            odd = groups.pop()
            groups[-1] += odd
        for group in groups:
            batches[turn % n_batches] += group
            turn += 1
    order = torch.randperm(n_batches, generator=generator).tolist()
    return [batches[i] for i in order if batches[i]]


def pair_contrast(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """What the in-batch objective compares of pairs read apart: ``[|u - v|, u * v]`` of the normalised
    embeddings, the part of :func:`pair_features` that says how the two texts relate, not what they say."""
    u, v = torch.nn.functional.normalize(u, dim=-1), torch.nn.functional.normalize(v, dim=-1)
    return torch.cat([(u - v).abs(), u * v], dim=-1)


class Plateau:
    """Whether an epoch's mean loss has stopped improving: less than ``tolerance`` × the first epoch's mean loss
    below the best epoch before it, ``patience`` epochs running."""

    def __init__(self, tolerance: float, patience: int):
        self.tolerance, self.patience = tolerance, patience
        self.first: float | None = None
        self.best = float("inf")
        self.flat = 0

    def reached(self, loss: float) -> bool:
        if self.first is None:
            self.first = abs(loss) or 1.0
        self.flat = self.flat + 1 if self.best - loss < self.tolerance * self.first else 0
        self.best = min(self.best, loss)
        return self.flat >= self.patience


class TopBlocksTrainer:
    """The training state of one run: the cached lower-block states of the draw and the loop over the top blocks."""

    def __init__(self, model: TopLoraClassifier, settings: TopLoraSettings, token_ids: Sequence[Sequence[int]],
                 device: torch.device):
        self.model, self.settings = model, settings
        self.split = SplitEncoder(model.lora_encoder, settings.top_layers, model.backbone.tokenizer.pad_token_id)
        # A pair read apart is two texts: the first texts' states at [0, n), the second texts' at [n, 2n).
        self.apart = len(token_ids) if model.reads_pairs_apart else 0
        if self.apart:
            halves = [model.split_pair(list(ids)) for ids in token_ids]
            token_ids = [a for a, _ in halves] + [b for _, b in halves]
        started = time.perf_counter()
        self.states = self.split.lower_states(token_ids, device=device)
        self.cache_seconds = time.perf_counter() - started
        self.loss = make_loss(settings.loss, settings.temperature, settings.margin)
        self.initial = [p.detach().clone() for p in self.lora_parameters()]

    def lora_parameters(self) -> list[torch.nn.Parameter]:
        return [p for name, p in self.model.lora_model.named_parameters() if "lora_" in name]

    def reset(self) -> None:
        """LoRA back to the weights it had when this trainer was made."""
        with torch.no_grad():
            for parameter, initial in zip(self.lora_parameters(), self.initial, strict=True):
                parameter.copy_(initial)

    def pooled(self, rows: Sequence[int]) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The top blocks' mean-pooled states of ``rows``: one text each, or both texts of each pair read apart."""
        pooled = self.split.pooled([self.states[i] for i in rows], self.settings.encode_batch)
        if not self.apart:
            return pooled
        return pooled, self.split.pooled([self.states[self.apart + i] for i in rows], self.settings.encode_batch)

    @torch.no_grad()
    def embeddings(self, rows: Sequence[int]) -> np.ndarray:
        """What the head reads of ``rows`` (eval mode): the normalised sentence embeddings, or the pair features."""
        self.split.upper.eval()
        pooled = self.pooled(rows)
        features = pair_features(*pooled) if self.apart else torch.nn.functional.normalize(pooled, dim=-1)
        return features.double().cpu().numpy()

    def optimizer(self, total_steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        """AdamW on the LoRA weights with SetFit's schedule: linear warm-up, then linear decay to zero."""
        from transformers import get_linear_schedule_with_warmup

        optimizer = torch.optim.AdamW(self.lora_parameters(), lr=self.settings.body_learning_rate)
        warmup = int(self.settings.warmup_proportion * total_steps)
        return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total_steps)

    def step(self, rows: Sequence[int], labels: torch.Tensor, optimizer: torch.optim.Optimizer,
             schedule: torch.optim.lr_scheduler.LRScheduler) -> float:
        """One optimisation step on the texts ``rows`` (their ``labels``): each encoded once by the top blocks,
        every pair among them scored. Returns the loss."""
        self.split.upper.train(self.settings.top_dropout)
        pooled = self.pooled(rows)
        loss = self.loss(pair_contrast(*pooled) if self.apart else pooled, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.lora_parameters(), 1.0)
        optimizer.step()
        schedule.step()
        return float(loss.detach())

    def train(self, rows: Sequence[int], labels: Sequence[int], epochs: int, seed: int, log: JsonlLog,
              progress: bool, phase: str, after_epoch: Callable[[int], bool] | None = None) -> tuple[int, float]:
        """``epochs`` epochs of in-batch steps on ``rows`` (their ``labels``); ``after_epoch(epoch)`` returning
        True stops early. Returns the steps taken and the last loss."""
        settings = self.settings
        generator = torch.Generator().manual_seed(seed)
        plan = [epoch_batches(list(labels), settings.batch_size, generator) for _ in range(epochs)]
        total = sum(len(p) for p in plan)
        if settings.max_steps > 0:
            total = min(total, settings.max_steps)
        optimizer, schedule = self.optimizer(total)
        label_tensor = torch.tensor(list(labels))
        steps, last = 0, float("nan")
        bar = step_progress(total, f"{phase} {self.model.config.method}", progress)
        plateau = Plateau(settings.plateau_tolerance, settings.plateau_patience) if settings.stop == "plateau" else None
        torch.manual_seed(seed)  # the top blocks' dropout masks
        for epoch, batches in enumerate(plan, start=1):
            losses = []
            for batch in batches[: total - steps]:
                last = self.step([rows[i] for i in batch], label_tensor[batch], optimizer, schedule)
                losses.append(last)
                steps += 1
                log.write({"type": "step", "phase": phase, "step": steps, "epoch": epoch, "loss_total": last,
                           f"loss_{settings.loss}": last, "lr": schedule.get_last_lr()[0]})
                # The loss first, without a redraw of its own: the step's update shows it.
                bar.set_postfix(loss=f"{last:.4f}", refresh=False)
                bar.update(1)
            stop = after_epoch is not None and after_epoch(epoch)
            if plateau is not None and losses and plateau.reached(sum(losses) / len(losses)):
                log.write({"type": "plateau", "phase": phase, "step": steps, "epoch": epoch})
                stop = True
            if stop or steps >= total:
                break
        bar.close()
        self.split.upper.eval()
        return steps, last


def fit_head(settings: TopLoraSettings, features: np.ndarray, labels: Sequence[int], seed: int,
             c: float | None = None) -> LogisticRegression:
    head = LogisticRegression(C=c or settings.head_c, max_iter=settings.head_max_iter, random_state=seed,
                              class_weight="balanced" if settings.head_balanced else None)
    return head.fit(features, list(labels))


def select_epochs(trainer: TopBlocksTrainer, model: TopLoraClassifier, labels: list[int], config: TrainConfig,
                  log: JsonlLog) -> dict[str, object]:
    """The epoch count whose body, with the head refitted on the rest, scores best on a held-out slice of each
    class (the task's primary metric, then the lower held-out log-loss, then fewer epochs); checks every
    ``check_every`` epochs, epoch 0 included, stopping after ``patience`` checks without a better score."""
    settings = trainer.settings
    fit, held = holdout_split(labels, settings.holdout_fraction, config.seed)
    fit_labels, held_labels = [labels[i] for i in fit], [labels[i] for i in held]
    primary = model.task.primary_metric
    candidates: list[dict[str, float]] = []

    def rank(candidate: dict[str, float]) -> tuple[float, float, float]:
        return candidate[primary], -candidate["loss"], -candidate["epoch"]

    def score(epoch: int) -> bool:
        if epoch % settings.check_every and epoch != settings.epochs:
            return False
        head = fit_head(settings, trainer.embeddings(fit), fit_labels, model.config.init_seed)
        probabilities = np.full((len(held), len(model.config.labels)), 1e-12)
        probabilities[:, head.classes_] = head.predict_proba(trainer.embeddings(held))
        truth = torch.tensor(held_labels)
        loss = float(-np.log(probabilities[np.arange(len(held)), held_labels]).mean())
        scores = {"epoch": epoch, "loss": loss, **task_metrics(model, truth, torch.from_numpy(probabilities))}
        candidates.append(scores)
        log.write({"type": "holdout", "n_holdout": len(held), **scores})
        best = max(candidates, key=rank)["epoch"]
        checks_since = sum(1 for c in candidates if c["epoch"] > best)
        return bool(settings.patience) and checks_since >= settings.patience

    score(0)
    trainer.train(fit, fit_labels, settings.epochs, config.seed, log, config.progress, "select", after_epoch=score)
    trainer.reset()
    best = max(candidates, key=rank)
    return {"method": "holdout", "criterion": f"held-out {primary}, then lower held-out log-loss, then fewer epochs",
            "holdout_fraction": settings.holdout_fraction, "n_fit": len(fit), "n_holdout": len(held),
            "max_epochs": settings.epochs, "check_every": settings.check_every, "patience": settings.patience,
            "epochs": int(best["epoch"]), "refit_on": "all training examples", "candidates": candidates}


def record_trained_options(model: TopLoraClassifier) -> None:
    """The adapter's saved options made to say what trained it: a run's ``--lr`` and ``--max-steps``, and the
    head's class weighting as the fit resolved it, so that ``infoprompt_adapter.json`` and the settings agree."""
    settings = model.settings
    trained = dataclasses.replace(model.options, body_learning_rate=settings.body_learning_rate,
                                  max_steps=None if settings.max_steps == -1 else settings.max_steps,
                                  head_balanced=settings.head_balanced)
    model.config = dataclasses.replace(model.config, options=trained)


def fit_top_lora(model: TopLoraClassifier, train_examples: Sequence[Example], eval_examples: Sequence[Example] | None = None,
                 config: TrainConfig | None = None, log_path: Path | None = None) -> FitResult:
    """Train top-lora on the draw (see the module docstring) and evaluate on ``eval_examples``."""
    config = config or TrainConfig()
    started = time.perf_counter()
    settings = model.settings
    if config.lr is not None or config.max_steps is not None:
        settings = dataclasses.replace(
            settings, body_learning_rate=config.lr if config.lr is not None else settings.body_learning_rate,
            max_steps=config.max_steps if config.max_steps is not None else settings.max_steps)
        model.settings = settings
    if settings.head_balanced is None:
        balanced = model.task.primary_metric in BALANCED_METRICS
        settings = model.settings = dataclasses.replace(settings, head_balanced=balanced)
    device = resolve_device(config.device)
    train_set = encode_examples(model, train_examples)
    if train_set.labels is None:
        raise UserError("training examples must all be labelled")
    if train_set.labels.dim() != 1:
        raise UserError("top-lora trains on single-label tasks only")
    labels = train_set.labels.tolist()
    if len(set(labels)) < 2:
        raise UserError("top-lora needs training examples of at least two classes")
    log = JsonlLog(log_path)
    log.write({"type": "top-lora", "step": 0, "n_train": len(labels), **settings.to_json()})
    model.to(device)
    train_started = time.perf_counter()
    trainer = TopBlocksTrainer(model, settings, [p.prompted.input_ids for p in train_set.pairs], device)
    selection = None
    epochs = settings.epochs if settings.pair_training or not model.reads_pairs_apart else 0
    selection_seconds = 0.0
    if settings.select == "holdout" and epochs:
        selection_started = time.perf_counter()
        selection = select_epochs(trainer, model, labels, config, log)
        epochs = int(selection["epochs"])
        selection_seconds = time.perf_counter() - selection_started
    steps, last = 0, 0.0
    if epochs:
        steps, last = trainer.train(list(range(len(labels))), labels, epochs, config.seed, log, config.progress, "train")
    features = trainer.embeddings(range(len(labels)))
    if settings.head_c_choices:
        chosen, scores = select_head_c(features, np.asarray(labels), settings.head_c_choices, settings.head_max_iter,
                                       config.seed)
        settings = model.settings = dataclasses.replace(settings, head_c=chosen)
        selection = {**(selection or {}), "head_c": chosen, "head_c_log_loss": scores}
    model.set_head(fit_head(settings, features, labels, model.config.init_seed))
    record_trained_options(model)
    train_seconds = time.perf_counter() - train_started
    model.to(device).eval()
    if selection is not None:
        log.write({"type": "selection", "step": steps, **selection})
    result = finish_fit(model, train_set, eval_examples, config, log, steps=steps, loss=last, term=settings.loss,
                        lr=settings.body_learning_rate, started=started, cache_seconds=trainer.cache_seconds,
                        train_seconds=train_seconds)
    result.timings["step_s"] = (train_seconds - trainer.cache_seconds - selection_seconds) / steps if steps else 0.0
    result.timings["selection_s"] = selection_seconds
    result.selection = selection
    return result
