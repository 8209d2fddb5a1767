"""The contract between the training engine and every kind of adapter: the model interface (:class:`Adapter`),
the loss terms of a training step (:class:`LossTerms`) and what a kind's fit returns (:class:`FitResult`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from infoprompt.backbones import Backbone
from infoprompt.tasks import Example, TaskSpec
from infoprompt.templates import Batch, TemplateEncoder
from infoprompt.training.config import TrainConfig


@runtime_checkable
class Adapter(Protocol):
    """What the engine (encoding, training, inference, the pipeline), the export and the server need of a model
    of any kind; :class:`~infoprompt.kinds.common.AdapterModel` gives the defaults a kind overrides.

    A kind's model is a ``torch.nn.Module`` built as ``Model(backbone, config)`` and read back by
    ``Model.load(directory, config, backbone)``. Every module it runs, the backbone's encoder too, is a registered
    submodule, so that ``model.to(device)`` moves all of it.

    Predicting: ``template_encoder`` encodes examples; ``forward`` maps an encoded batch to logits. A model that
    reads the no-prompt pass says so by its three flags and gives that pass (``plain_features``,
    ``generator_input``) and what it depends on (``plain_pass_identity``, the feature store's key); a kind without
    one keeps the flags ``False`` and never sees those calls. A kind with the shared-plain-pass capability
    (:data:`~infoprompt.kinds.registry.SHARED_PLAIN_PASS`) predicts ``head_logits(features)`` from the features
    ``forward`` returns, which depend on the plain input alone, so the server computes them once for every such
    adapter on a backbone.

    Training: ``losses`` gives a step's loss terms; ``lr_schedule`` a scheduler the gradient loop steps after
    every optimiser step (``None``: a constant rate); ``set_head`` sets a linear head from a logistic regression
    (warm start, refits) on features ``feature_width`` wide. Saving: ``save_pretrained`` writes what prediction
    needs, and with ``keep_training_state`` the ``training_only_names`` parameters too.
    """

    config: Any  # the kind's adapter config (a :class:`~infoprompt.kinds.config.ClassifierConfig`)
    preset: Any  # its method's row (:class:`~infoprompt.kinds.registry.Method`): lr, select, warm_start defaults
    task: TaskSpec
    backbone: Backbone
    template_encoder: TemplateEncoder
    needs_features: bool  # training reads the cached no-prompt pass (P', Z')
    generates_prompts: bool  # the model's prompts are generated from the no-prompt pass P'
    inference_needs_plain_pass: bool  # predicting runs the no-prompt pass first
    feature_width: int  # width of the features the head reads (forward's second output, Z)

    def forward(self, batch: Batch, pooled: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Logits (B, C), the head's input features (B, F) or None, and the prompts (B, n_p, D) or None."""
        ...

    def head_logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) from features of ``forward`` (shared-plain-pass kinds)."""
        ...

    def plain_features(self, plain: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The no-prompt pass: ``P'`` (B, D) and ``Z'`` (B, F) (kinds with ``needs_features``)."""
        ...

    def generator_input(self, plain: Batch) -> torch.Tensor:
        """``P'`` alone (kinds with ``generates_prompts``)."""
        ...

    def plain_pass_identity(self) -> dict[str, object]:
        """What the no-prompt pass depends on besides backbone, template and token budget."""
        ...

    def losses(self, batch: Batch, labels: torch.Tensor, pooled: torch.Tensor | None,
               z_plain: torch.Tensor | None, generator: torch.Generator | None = None) -> LossTerms: ...

    def lr_schedule(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Any: ...

    def set_head(self, weight: Any, bias: Any) -> None: ...

    def trainable_state(self) -> dict[str, torch.Tensor]: ...

    def training_only_names(self) -> set[str]: ...

    def parameter_counts(self) -> dict[str, int]: ...

    def save_pretrained(self, directory: str | Path, keep_training_state: bool = False) -> None: ...


@dataclass
class FitResult:
    """What a kind's fit returns: the final evaluation, the run's size and timings, and what it logged.

    Attributes:
        metrics: the task's metrics on the evaluation examples (empty without any).
        steps: optimisation steps taken.
        last_losses: the last step's ``total`` loss and the kind's own named terms (the prompt kinds' ``pred``,
            ``rep``, ``head``, ``kl``; the probe's ``logistic``; SetFit's ``embedding``; top-lora's objective,
            ``supcon`` by default).
        n_train / n_eval: examples trained on and evaluated.
        truncated_train: training inputs shortened to the token budget.
        lr: the learning rate used (``None`` where the kind has none).
        timings: seconds per phase (``total_s``, ``train_s``, ``step_s``, ...).
        information: each information term's saturation summary (prompt kinds).
        world_size: processes the run was spread over.
        eval_feature_store: how the evaluation split's no-prompt pass was obtained (``off``, ``hit``, ``miss``).
        selection: what a held-out selection picked and from which scores (``None`` without one).
        prediction_shares: the evaluation's most-predicted class and its share beside the majority class's
            (:func:`~infoprompt.training.inference.prediction_shares`; ``None`` without evaluation).
    """

    metrics: dict[str, float]
    steps: int
    last_losses: dict[str, float]
    n_train: int
    n_eval: int
    truncated_train: int
    lr: float | None
    timings: dict[str, float]
    information: dict[str, dict[str, object]] = field(default_factory=dict)
    world_size: int | None = None
    eval_feature_store: str = "off"
    selection: dict[str, object] | None = None
    prediction_shares: dict[str, object] | None = None


# A kind's trainer: ``fit(model, train_examples, eval_examples, TrainConfig, log_path) -> FitResult``.
FitFunction = Callable[[Any, Sequence[Example], Sequence[Example] | None, TrainConfig | None, Path | None], FitResult]


@dataclass
class LossTerms:
    """A training step's objective (``total``, which the step minimises) and its terms (batch means), kept apart
    for the logs: ``pred`` the kind's own loss; ``rep``, ``head`` and ``kl`` the information terms of the kinds
    that have them (zero where a kind has none), ``caps`` the cap log(K+1) of each active InfoNCE term."""

    total: torch.Tensor
    pred: torch.Tensor
    rep: torch.Tensor | None = None
    head: torch.Tensor | None = None
    kl: torch.Tensor | None = None
    caps: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("rep", "head", "kl"):
            if getattr(self, name) is None:
                setattr(self, name, self.pred.new_zeros(()))

    def as_floats(self) -> dict[str, float]:
        return {name: float(getattr(self, name).detach()) for name in ("total", "pred", "rep", "head", "kl")}

    def mi_bounds(self) -> dict[str, float]:
        """Each active information term's lower bound ``log(K+1) − nce`` and its cap ``log(K+1)``: a bound at
        its cap means the critic separates every negative and the term gives no more gradient."""
        out: dict[str, float] = {}
        for name, cap in self.caps.items():
            out[f"mi_{name}"] = cap - float(getattr(self, name).detach())
            out[f"mi_{name}_cap"] = cap
        return out


