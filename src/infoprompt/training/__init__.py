"""Training, evaluation and prediction of the prompt kinds, and the data layer the analyses share."""

from infoprompt.training.config import PRECISIONS, SELECTIONS, TrainConfig
from infoprompt.training.data import (
    EncodedSet,
    batches,
    cache_eval_features,
    cache_features,
    encode_examples,
    features_for,
    generator_inputs,
    length_sorted,
    pad_id,
    plain_batch,
    prompted_batch,
    subset,
)
from infoprompt.training.inference import evaluate, evaluate_encoded, predict, predict_encoded, task_metrics
from infoprompt.training.loop import SATURATION, JsonlLog, Saturation, batch_losses, train, warm_start_head
from infoprompt.training.runtime import (
    autocast,
    model_device,
    process_state,
    resolve_device,
    start_accelerator,
)
from infoprompt.training.selection import holdout_scores, holdout_split, select_epochs

__all__ = [
    "PRECISIONS",
    "SATURATION",
    "SELECTIONS",
    "EncodedSet",
    "JsonlLog",
    "Saturation",
    "TrainConfig",
    "autocast",
    "batch_losses",
    "batches",
    "cache_eval_features",
    "cache_features",
    "encode_examples",
    "evaluate",
    "evaluate_encoded",
    "features_for",
    "generator_inputs",
    "holdout_scores",
    "holdout_split",
    "length_sorted",
    "model_device",
    "pad_id",
    "plain_batch",
    "predict",
    "predict_encoded",
    "process_state",
    "prompted_batch",
    "resolve_device",
    "select_epochs",
    "start_accelerator",
    "subset",
    "task_metrics",
    "train",
    "warm_start_head",
]
