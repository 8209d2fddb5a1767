"""The released kind's trainer: the engine's gradient loop without gradient clipping (the released code clips
nothing); the warm-up/decay schedule comes from the model's ``lr_schedule``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from infoprompt.tasks import Example
from infoprompt.training.config import TrainConfig
from infoprompt.training.contract import FitResult
from infoprompt.training.loop import train


def fit_released(model, train_examples: Sequence[Example], eval_examples: Sequence[Example] | None = None,
                 config: TrainConfig | None = None, log_path: Path | None = None) -> FitResult:
    config = dataclasses.replace(config or TrainConfig(), grad_clip=None)
    return train(model, train_examples, eval_examples, config, log_path)
