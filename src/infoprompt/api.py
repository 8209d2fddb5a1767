"""Convenience constructors for the Python API."""

from __future__ import annotations

from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.kinds import build_model
from infoprompt.model import ClassifierConfig


def make_classifier(
    backbone: Backbone, task: str, method: str = "infoprompt", n_prompts: int = 4, seed: int = 0, **options: object
) -> nn.Module:
    """A fresh classifier for ``task`` and ``method`` on ``backbone`` (any method of ``infoprompt methods``).

    ``options`` override :class:`~infoprompt.model.ClassifierConfig` fields (``beta``, ``gamma``, ``n_negatives``,
    ``template``, ``max_length``, ...); ``seed`` fixes the initialisation.
    """
    config = ClassifierConfig(task=task, method=method, backbone=backbone.name, n_prompts=n_prompts, init_seed=seed, **options)
    return build_model(backbone, config)
