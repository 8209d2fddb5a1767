"""infoprompt: few-shot text classification with adapters of a few megabytes on one frozen encoder (train,
evaluate, predict, serve many on one encoder), and the reproduction of InfoPrompt (NeurIPS 2023) and the
prompt-tuning methods it is compared with."""

from __future__ import annotations

import importlib
from typing import Any

from infoprompt.threads import check_environment_before_torch
from infoprompt.version import __version__  # noqa: F401  (re-exported)

# Garbage, zero, negative or huge OMP_NUM_THREADS and friends are fixed in os.environ before torch can load
# (libgomp would print three lines and ignore them); what was changed is said once threads are set.
check_environment_before_torch()

# The public API: name -> the module that defines it, imported on first use so that `infoprompt.theory`
# (NumPy/SciPy only) never loads torch.
_API = {
    "load_backbone": "infoprompt.backbones",
    "Backbone": "infoprompt.backbones",
    "get_task": "infoprompt.tasks",
    "load_split": "infoprompt.tasks",
    "sample_few_shot": "infoprompt.tasks",
    "Example": "infoprompt.tasks",
    "TaskSpec": "infoprompt.tasks",
    "METHODS": "infoprompt.kinds",
    "KINDS": "infoprompt.kinds",
    "ClassifierConfig": "infoprompt.kinds.config",
    "make_classifier": "infoprompt.kinds",
    "train": "infoprompt.kinds",
    "load_adapter": "infoprompt.kinds",
    "FitResult": "infoprompt.training.contract",
    "TrainConfig": "infoprompt.training.config",
    "evaluate": "infoprompt.training.inference",
    "predict": "infoprompt.training.inference",
    "RunSpec": "infoprompt.pipeline",
    "run_training": "infoprompt.pipeline",
    "UserError": "infoprompt.errors",
    "Classifier": "infoprompt.classifier",
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'infoprompt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
