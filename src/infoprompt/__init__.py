"""InfoPrompt: information-theoretic soft prompt tuning of frozen encoders."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from infoprompt.version import __version__  # noqa: F401  (re-exported)

# The public API, imported lazily so that `infoprompt.theory` (NumPy/SciPy only) never loads torch.
_API = {
    "load_backbone": "infoprompt.backbones",
    "Backbone": "infoprompt.backbones",
    "get_task": "infoprompt.tasks",
    "load_split": "infoprompt.tasks",
    "sample_few_shot": "infoprompt.tasks",
    "Example": "infoprompt.tasks",
    "TaskSpec": "infoprompt.tasks",
    "METHODS": "infoprompt.methods",
    "ClassifierConfig": "infoprompt.model",
    "PromptClassifier": "infoprompt.model",
    "make_classifier": "infoprompt.api",
    "TrainConfig": "infoprompt.training.config",
    "train": "infoprompt.kinds",
    "load_adapter": "infoprompt.kinds",
    "evaluate": "infoprompt.training.inference",
    "predict": "infoprompt.training.inference",
    "RunSpec": "infoprompt.pipeline",
    "run_training": "infoprompt.pipeline",
    "UserError": "infoprompt.errors",
}
__all__ = [
    "Backbone",
    "ClassifierConfig",
    "Example",
    "METHODS",
    "PromptClassifier",
    "RunSpec",
    "TaskSpec",
    "TrainConfig",
    "UserError",
    "evaluate",
    "get_task",
    "load_adapter",
    "load_backbone",
    "load_split",
    "make_classifier",
    "predict",
    "run_training",
    "sample_few_shot",
    "train",
]

if TYPE_CHECKING:
    from infoprompt.api import make_classifier
    from infoprompt.backbones import Backbone, load_backbone
    from infoprompt.errors import UserError
    from infoprompt.kinds import load_adapter, train
    from infoprompt.methods import METHODS
    from infoprompt.model import ClassifierConfig, PromptClassifier
    from infoprompt.pipeline import RunSpec, run_training
    from infoprompt.tasks import Example, TaskSpec, get_task, load_split, sample_few_shot
    from infoprompt.training.config import TrainConfig
    from infoprompt.training.inference import evaluate, predict


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'infoprompt' has no attribute {name!r}")
