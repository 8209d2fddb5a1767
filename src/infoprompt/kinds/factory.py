"""Build, train and load a model of any kind through the registry: the one path for each verb."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.kinds.config import ClassifierConfig, load_saved, read_adapter_config, task_identity
from infoprompt.kinds.registry import kind_of
from infoprompt.tasks import TaskSpec
from infoprompt.training.config import TrainConfig
from infoprompt.training.contract import FitResult

# Fields a caller sets through make_classifier's own arguments, not through ``options``.
_NAMED = {"task", "task_spec", "method", "backbone", "options", "n_prompts", "init_seed", "backbone_fingerprint"}


def make_classifier(
    backbone: Backbone, task: str | TaskSpec, method: str, n_prompts: int = 4, seed: int = 0, **options: object
) -> Any:
    """A fresh model of ``method`` (any row of ``infoprompt methods``) for ``task`` on ``backbone``.

    ``task`` is a task name or a task (:func:`~infoprompt.tasks.task_from_file`, :func:`~infoprompt.tasks.user_task`);
    one that is not built in travels inside the adapter's config, so the saved adapter loads anywhere.

    ``options`` are the shared :class:`~infoprompt.kinds.config.ClassifierConfig` fields (``template``,
    ``max_length``, ...) and the options of the method's kind (``beta``, ``lora_rank``, ...), over the method's
    preset; an option the kind lacks is a one-line error naming the kind. ``n_prompts`` is the prompt count of a
    kind with prompts (the sweep's axis; kinds without prompts take none); ``seed`` fixes the initialisation.
    """
    named = sorted(set(options) & _NAMED)
    if named:
        raise UserError(f"{', '.join(named)} is set by make_classifier's own arguments, not as an option")
    if "n_prompts" in kind_of(method).options.names():
        options["n_prompts"] = n_prompts
    config = ClassifierConfig.create(**task_identity(task), method=method, backbone=backbone.name, init_seed=seed,
                                     **options)
    return build_model(backbone, config)


def build_model(backbone: Backbone, config: ClassifierConfig) -> Any:
    """A fresh model for ``config`` of whatever kind its method is, on the backbone's device: its new parameters
    join an encoder that a training run may have left on a GPU."""
    return kind_of(config.method).model(backbone, config).to(backbone.device)


def train(model: Any, train_examples: Sequence, eval_examples: Sequence | None = None,
          config: TrainConfig | None = None, log_path: Path | None = None) -> FitResult:
    """Train ``model`` with its own kind's fit (prompt methods, peft, the probe, SetFit alike)."""
    return model.config.kind.trainer()(model, train_examples, eval_examples, config, log_path)


def load_adapter(directory: str | Path, backbone: Backbone | None = None, cache_dir: str | None = None, *,
                 config: ClassifierConfig | None = None) -> Any:
    """Load a saved adapter of any kind; its backbone is loaded from the saved name unless one is given (and
    must match). The model is on the backbone's device (a backbone that a training run moved to a GPU stays
    there). ``config``: the adapter's config when the caller has already read it
    (:func:`~infoprompt.kinds.config.read_adapter_config`)."""
    directory = Path(directory)
    config = config or read_adapter_config(directory)
    return load_saved(kind_of(config.method).model, directory, config, backbone, cache_dir)
