"""A short training loop that records the prompt after every step (the trajectories of the loss landscapes).

It is the loop of :func:`infoprompt.training.train` (same optimiser, clipping, shuffling and seeding, built from
its batching helpers and :meth:`PromptClassifier.losses`) with a per-step record of the prompt vector and
the loss terms; the training loop has no per-step hook, and this keeps it that way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from infoprompt.errors import UserError
from infoprompt.kinds.prompt.model import PromptClassifier
from infoprompt.kinds.prompt.prompts import StaticPrompt
from infoprompt.progress import bar_disabled
from infoprompt.tasks import Example
from infoprompt.training.data import (
    EncodedSet,
    batches,
    cache_features,
    encode_examples,
    features_for,
    prompted_batch,
)

LOSS_NAMES = ("total", "pred", "rep", "head", "kl")


@dataclass
class TrajectoryConfig:
    """Settings of the recorded run (the defaults are those of :class:`~infoprompt.training.TrainConfig`).

    Attributes:
        steps: optimiser steps to record (epochs are repeated until reached).
        batch_size: training batch size.
        lr: AdamW learning rate; ``None`` takes the method's.
        weight_decay: AdamW weight decay.
        grad_clip: gradient-norm clip (``None``: none).
        seed: seeds shuffling, negatives and variational noise.
        progress: show a progress bar.
    """

    steps: int = 500
    batch_size: int = 8
    lr: float | None = None
    weight_decay: float = 0.01
    grad_clip: float | None = 1.0
    seed: int = 1
    progress: bool = True


@dataclass
class Trajectory:
    """Prompt vectors (steps+1, D), row 0 before training, and the loss terms of each step (steps,)."""

    prompts: np.ndarray
    losses: dict[str, np.ndarray] = field(default_factory=dict)


def prompt_vector(model: PromptClassifier, probe: EncodedSet) -> torch.Tensor:
    """The single prompt vector (D,): a static prompt itself, a generated one averaged over ``probe``."""
    if model.prompt is None or model.config.n_prompts != 1:
        raise UserError(
            f"the landscape needs exactly one prompt token; method {model.config.method} has "
            f"{model.config.n_prompts}"
        )
    with torch.no_grad():
        if isinstance(model.prompt, StaticPrompt):
            return model.prompt.weight[0].detach().clone()
        return model.prompt(len(probe), probe.pooled)[:, 0].mean(0).detach().clone()


def record_trajectory(
    model: PromptClassifier,
    train_examples: Sequence[Example],
    probe_examples: Sequence[Example],
    config: TrajectoryConfig | None = None,
    label: str = "",
) -> Trajectory:
    """Train ``model`` in place for ``config.steps`` steps, recording its prompt (on ``probe_examples``)."""
    config = config or TrajectoryConfig()
    if config.steps < 1:
        raise UserError(f"trajectory steps must be at least 1, got {config.steps}")
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    train_set = encode_examples(model, train_examples)
    if train_set.labels is None:
        raise UserError("trajectory training examples must all be labelled")
    probe = encode_examples(model, probe_examples)
    cache_features(model, train_set, 64)
    cache_features(model, probe, 64)
    lr = config.lr if config.lr is not None else model.preset.lr
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=config.weight_decay)
    prompts = [prompt_vector(model, probe)]
    losses: dict[str, list[float]] = {name: [] for name in LOSS_NAMES}
    model.train()
    step = 0
    bar = tqdm(
        total=config.steps, desc=f"trajectory {label or model.config.method}", disable=bar_disabled(config.progress)
    )
    while step < config.steps:
        order = torch.randperm(len(train_set), generator=generator).tolist()
        for chunk in batches(order, config.batch_size):
            if step >= config.steps:
                break
            pooled, z_plain = features_for(model, train_set, chunk)
            terms = model.losses(
                prompted_batch(model, train_set, chunk), train_set.labels[chunk], pooled, z_plain, generator
            )
            optimizer.zero_grad(set_to_none=True)
            terms.total.backward()
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_(parameters, config.grad_clip)
            optimizer.step()
            step += 1
            for name, value in terms.as_floats().items():
                losses[name].append(value)
            prompts.append(prompt_vector(model, probe))
            bar.update(1)
    bar.close()
    model.eval()
    return Trajectory(
        prompts=torch.stack(prompts).numpy(), losses={k: np.asarray(v) for k, v in losses.items()}
    )
