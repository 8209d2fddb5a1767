"""Class probabilities, predictions and the task's metrics of a model on encoded or raw examples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from infoprompt.errors import UserError
from infoprompt.metrics import compute_metrics
from infoprompt.tasks import Example, is_multi_label
from infoprompt.training.contract import Adapter
from infoprompt.training.data import (
    EncodedSet,
    batches,
    encode_examples,
    generator_inputs,
    length_sorted,
    prompted_batch,
    report_truncation,
)
from infoprompt.training.runtime import autocast, map_chunks, model_device

if TYPE_CHECKING:
    from accelerate import Accelerator


@torch.no_grad()
def predict_encoded(
    model: Adapter, encoded: EncodedSet, batch_size: int = 64, progress: bool = False,
    accelerator: Accelerator | None = None, precision: str = "fp32",
) -> torch.Tensor:
    """Class probabilities (N, C) on the CPU, in input order (under ``accelerate launch``, when the run's
    ``accelerator`` is given, each process predicts a share of the batches and every process gets all rows).
    Multi-label: each label's own (sigmoid) probability, so rows need not sum to 1."""
    device = model_device(model)
    was_training = model.training
    model.eval()
    multi = is_multi_label(model.task)

    def probabilities(chunk: list[int]) -> tuple[torch.Tensor]:
        logits, _, _ = model(prompted_batch(model, encoded, chunk), generator_inputs(model, encoded, chunk))
        return (logits.float().sigmoid() if multi else logits.float().softmax(-1),)

    with autocast(device, precision):
        (result,) = map_chunks(accelerator, batches(length_sorted(encoded), batch_size), len(encoded),
                               (len(model.config.labels),), probabilities, device, "predict", progress)
    model.train(was_training)
    return result.cpu()


def evaluate_encoded(
    model: Adapter, encoded: EncodedSet, batch_size: int = 64, progress: bool = False,
    accelerator: Accelerator | None = None, precision: str = "fp32",
) -> dict[str, float]:
    return evaluate_with_shares(model, encoded, batch_size, progress, accelerator, precision)[0]


def evaluate_with_shares(
    model: Adapter, encoded: EncodedSet, batch_size: int = 64, progress: bool = False,
    accelerator: Accelerator | None = None, precision: str = "fp32",
) -> tuple[dict[str, float], dict[str, object] | None]:
    """The task's metrics and :func:`prediction_shares` of one prediction pass over labelled examples."""
    if encoded.labels is None:
        raise UserError("evaluation needs labelled examples")
    probabilities = predict_encoded(model, encoded, batch_size, progress, accelerator, precision)
    return task_metrics(model, encoded.labels, probabilities), prediction_shares(model, encoded.labels, probabilities)


def prediction_shares(model: Adapter, labels: torch.Tensor, probabilities: torch.Tensor) -> dict[str, object] | None:
    """The most-predicted class and its share of the decisions beside the most frequent gold class and its share:
    a classifier whose top share nears 1 puts (almost) every text in one class, whatever its accuracy says.
    ``None`` for a multi-label task (no single decision per text) or no examples."""
    if is_multi_label(model.task) or not len(labels):
        return None
    names = model.config.labels
    predicted = torch.bincount(probabilities.argmax(-1), minlength=len(names))
    gold = torch.bincount(labels, minlength=len(names))
    return {"top_class": names[int(predicted.argmax())], "top_share": round(float(predicted.max()) / len(labels), 6),
            "majority_class": names[int(gold.argmax())], "majority_share": round(float(gold.max()) / len(labels), 6)}


def task_metrics(model: Adapter, labels: torch.Tensor, probabilities: torch.Tensor) -> dict[str, float]:
    """The task's metrics (primary first) of the argmax predictions against label indices (multi-label: of the
    labels at or over the adapter's threshold against the 0/1 label matrix)."""
    task = model.task
    if is_multi_label(task):
        gold = [row.nonzero().flatten().tolist() for row in labels]
        chosen = [row.nonzero().flatten().tolist() for row in probabilities >= threshold_of(model)]
        return compute_metrics(task.metrics, gold, chosen, model.config.labels, None)  # type: ignore[arg-type]
    predicted = probabilities.argmax(-1).tolist()
    return compute_metrics(task.metrics, labels.tolist(), predicted, model.config.labels, task.positive_label)


def threshold_of(model: Adapter) -> float:
    """A multi-label adapter's decision threshold (0.5 before a fit has picked one)."""
    return 0.5 if model.config.threshold is None else model.config.threshold


def evaluate(
    model: Adapter, examples: Sequence[Example], batch_size: int = 64, progress: bool = False,
    precision: str = "fp32",
) -> dict[str, float]:
    """Metrics of ``model`` on labelled ``examples`` (the task's metrics, primary first), on the model's device."""
    return evaluate_encoded(model, encode_examples(model, examples), batch_size, progress, precision=precision)


def predict(
    model: Adapter, inputs: Sequence[dict[str, str]], batch_size: int = 64, precision: str = "fp32",
    sources: Sequence[str] | None = None,
) -> list[dict[str, object]]:
    """One ``{"label", "probabilities"}`` record per input (a dict of the task's text fields; multi-label:
    ``{"labels", "probabilities"}``, the labels at or over the threshold); ``sources`` name the inputs in error
    messages (default ``input N``)."""
    if not inputs:
        return []
    sources = sources or [f"input {i + 1}" for i in range(len(inputs))]
    encoded = encode_examples(model, [Example(fields=f, source=s) for f, s in zip(inputs, sources, strict=True)])
    report_truncation(sum(p.truncated for p in encoded.pairs), len(encoded), "inputs", model.config.max_length)
    return prediction_records(model, predict_encoded(model, encoded, batch_size, precision=precision))


def prediction_records(model: Adapter, probabilities: torch.Tensor) -> list[dict[str, object]]:
    """The records of :func:`predict` from the class probabilities (N, C) of ``model``'s inputs."""
    labels = model.config.labels
    records = []
    for row in probabilities:
        record: dict[str, object] = {"probabilities": {label: round(float(p), 6) for label, p in zip(labels, row, strict=True)}}
        if is_multi_label(model.task):
            record["labels"] = [label for label, p in zip(labels, row, strict=True) if p >= threshold_of(model)]
        else:
            record["label"] = labels[int(row.argmax())]
        records.append(record)
    return records
