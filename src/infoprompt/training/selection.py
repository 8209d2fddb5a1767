"""How many epochs to train, picked on a held-out slice of the few-shot draw (``select="holdout"``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from infoprompt.errors import UserError
from infoprompt.training.config import TrainConfig
from infoprompt.training.contract import Adapter
from infoprompt.training.data import EncodedSet, subset
from infoprompt.training.inference import predict_encoded, task_metrics


class RecordLog(Protocol):
    """Where the held-out scores are written (the run's :class:`~infoprompt.training.loop.JsonlLog`)."""

    def write(self, record: dict[str, object]) -> None: ...


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


@torch.no_grad()
def holdout_scores(model: Adapter, encoded: EncodedSet, batch_size: int, precision: str) -> dict[str, float]:
    """Cross-entropy and the task's metrics on held-out training examples (every process scores them all).
    Multi-label: binary cross-entropy, and the metrics at the decision threshold that suits these examples best
    (``threshold`` in the result)."""
    probabilities = predict_encoded(model, encoded, batch_size, precision=precision)
    if encoded.labels.dim() == 2:
        from infoprompt.logistic import pick_threshold

        loss = float(torch.nn.functional.binary_cross_entropy(probabilities.clamp(1e-12, 1 - 1e-12), encoded.labels))
        threshold = pick_threshold(probabilities.double().numpy(), encoded.labels.numpy())
        model.config.threshold = threshold
        return {"loss": loss, "threshold": threshold, **task_metrics(model, encoded.labels, probabilities)}
    loss = float(torch.nn.functional.nll_loss(probabilities.clamp_min(1e-12).log(), encoded.labels))
    return {"loss": loss, **task_metrics(model, encoded.labels, probabilities)}


def select_epochs(
    model: Adapter, train_set: EncodedSet, config: TrainConfig,
    run_epochs: Callable[..., tuple[int, dict, object]], log: RecordLog, precision: str,
) -> dict[str, object]:
    """Pick the number of epochs on a held-out slice of the training examples, then put the adapter back to
    its initial parameters. Best held-out primary metric wins; ties go to the lower held-out loss, then to
    fewer epochs. The pass stops after ``config.patience`` epochs without a better score."""
    initial = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    if train_set.labels.dim() == 2:  # multi-label: label sets are too many to stratify by; a seeded random slice
        order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(config.seed)).tolist()
        n_held = max(1, round(config.holdout_fraction * len(order)))
        fit, held = sorted(order[n_held:]), sorted(order[:n_held])
    else:
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
    if "threshold" in best:
        model.config.threshold = best["threshold"]  # multi-label: the threshold of the epoch count picked
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
