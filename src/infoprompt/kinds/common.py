"""What kinds' models share: the contract's defaults (AdapterModel), the plain-input base (BaselineModel), the plain
template, adapter files, a fitted model's result, peft wrapping."""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from infoprompt.backbones import Backbone, portable_name
from infoprompt.errors import UserError
from infoprompt.io_utils import CARD_NAME, atomic_write_json, atomic_write_text, write_safetensors
from infoprompt.kinds.config import (
    CONFIG_NAME,
    FORMAT_VERSION,
    WEIGHTS_NAME,
    ClassifierConfig,
    check_backbone,
    config_task,
    read_weights,
)
from infoprompt.kinds.model_card import peft_pointer, write_model_card
from infoprompt.kinds.registry import get_method
from infoprompt.tasks import TaskSpec
from infoprompt.templates import Batch, Template, TemplateEncoder
from infoprompt.training.config import TrainConfig
from infoprompt.training.contract import FitResult, LossTerms
from infoprompt.training.data import EncodedSet, encode_examples
from infoprompt.training.inference import evaluate_with_shares
from infoprompt.training.loop import JsonlLog


def plain_template(task: TaskSpec) -> str:
    """The task's template without prompt or mask slots: ``<p>`` dropped, ``<mask>`` turned into ``<sep>``.

    GLUE gives the tokenizer's usual layouts (``<cls> A <sep>``, ``<cls> A <sep> B <sep>``); span tasks keep
    their field order, truncation policies and literal markers, with a separator where the readout was.
    """
    parts: list[str] = []
    for part in Template.parse(task.template).parts:
        part = "<sep>" if part == "<mask>" else part
        if part == "<p>" or (part == "<sep>" and parts and parts[-1] == "<sep>"):
            continue
        parts.append(part)
    if "<cls>" not in parts:
        parts.insert(0, "<cls>")
    if parts[-1] != "<sep>":
        parts.append("<sep>")
    return " ".join(parts)


class AdapterModel(nn.Module):
    """The defaults of the :class:`~infoprompt.training.contract.Adapter` contract for a kind's model.

    Trained parameters are those with ``requires_grad``; none is training-only; the learning rate is constant;
    the model reads no no-prompt pass (the three flags are False); its ``head`` is a linear layer on the
    features ``forward`` returns, which a warm start sets. It is saved as ``adapter_model.safetensors`` (the
    trained parameters) and ``infoprompt_adapter.json`` (the config) and loaded back into a fresh model of the
    same config. A kind overrides what differs.
    """

    needs_features = False
    generates_prompts = False
    inference_needs_plain_pass = False

    def trainable_state(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().contiguous() for name, p in self.named_parameters() if p.requires_grad}

    def parameter_counts(self) -> dict[str, int]:
        # A module shared twice (PEFT keeps the original head beside its trained copy) is counted once.
        unique = {id(p): p for p in self.parameters()}.values()
        trainable = sum(p.numel() for p in unique if p.requires_grad)
        total = sum(p.numel() for p in unique)
        return {"trainable": trainable, "frozen": total - trainable, "total": total}

    def training_only_names(self) -> set[str]:
        """Trained parameters that prediction never reads (kept out of the adapter unless asked for)."""
        return set()

    def lr_schedule(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
        """The learning-rate scheduler the gradient loop steps after every optimiser step; ``None``: constant."""
        return None

    @property
    def feature_width(self) -> int:
        """Width of the features the head reads (the second output of ``forward``)."""
        return self.head.in_features

    def set_head(self, weight: Any, bias: Any) -> None:
        """Set the linear head to ``weight`` (C, F) and ``bias`` (C,) (a logistic regression's, say)."""
        with torch.no_grad():
            self.head.weight.copy_(torch.as_tensor(weight, dtype=self.head.weight.dtype))
            self.head.bias.copy_(torch.as_tensor(bias, dtype=self.head.bias.dtype))

    def head_logits(self, features: torch.Tensor) -> torch.Tensor:
        """The head's logits on features of ``forward`` (the server's shared plain pass reads them this way)."""
        return self.head(features.to(self.head.weight.device, self.head.weight.dtype))

    def plain_features(self, plain: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__} reads no no-prompt pass (needs_features is False)")

    def generator_input(self, plain: Batch) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} generates no prompts (generates_prompts is False)")

    def plain_pass_identity(self) -> dict[str, object]:
        raise NotImplementedError(f"{type(self).__name__} reads no no-prompt pass (needs_features is False)")

    def save_pretrained(self, directory: str | Path, keep_training_state: bool = False) -> None:
        """Write the trained parameters and the config (``keep_training_state``: no training-only ones here)."""
        write_adapter(Path(directory), self.trainable_state(), self.config)

    @classmethod
    def load(cls, directory: Path, config: ClassifierConfig, backbone: Backbone) -> AdapterModel:
        """A model of ``config`` on ``backbone`` with the trained parameters saved in ``directory``, checked."""
        model = cls(backbone, config)
        model.load_state_dict(read_weights(Path(directory), model.trainable_state()), strict=False)
        return model.eval()


class BaselineModel(AdapterModel):
    """Base of the models that read the plain input (no prompt slots in their template): the probe, SetFit, peft,
    LoRA.

    ``config`` is a :class:`~infoprompt.kinds.config.ClassifierConfig` (so adapters of every method share one
    ``infoprompt_adapter.json`` schema). ``template_encoder`` encodes inputs without prompt slots; ``reserved``
    positions stay free for prompts that the baseline adds itself (PEFT prepends its virtual tokens).
    """

    def __init__(self, backbone: Backbone, config: ClassifierConfig, reserved: int = 0):
        super().__init__()
        self.task = config_task(config)
        self.preset = get_method(config.method)
        if config.template is None:
            config = dataclasses.replace(config, template=plain_template(self.task))
        config = config.resolved(self.task)
        check_backbone(config, backbone, reserved)
        self.config = config
        self.backbone = backbone
        template = Template.parse(config.template)
        if "<p>" in template.parts:
            raise UserError(f"method {config.method} adds its own prompts; template {config.template!r} must have no <p>")
        missing = [name for name in template.fields if name not in self.task.fields]
        if missing:
            raise UserError(f"template {config.template!r} names field(s) {missing} that task {self.task.name} lacks")
        self.template_encoder = TemplateEncoder(backbone.tokenizer, template, 0, config.max_length, config.truncate)

    def forward(self, batch: Batch, pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None, None]:
        raise NotImplementedError

    def losses(
        self,
        batch: Batch,
        labels: torch.Tensor,
        pooled: torch.Tensor | None = None,
        z_plain: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> LossTerms:
        logits, _, _ = self(batch, pooled)
        pred = nn.functional.cross_entropy(logits, labels)
        return LossTerms(total=pred, pred=pred)


def write_adapter(directory: Path, state: dict[str, torch.Tensor] | None, config: ClassifierConfig) -> None:
    """Write ``adapter_model.safetensors`` (when ``state`` is given) and ``infoprompt_adapter.json`` atomically,
    then the model card (``README.md``), which describes every file written before it, with what an enclosing
    :func:`~infoprompt.kinds.model_card.card_facts` tells it: every kind's save ends here, so a save writes one card."""
    directory.mkdir(parents=True, exist_ok=True)
    if state is not None:
        write_safetensors(directory / WEIGHTS_NAME, state, FORMAT_VERSION)
    atomic_write_json(directory / CONFIG_NAME, config.to_json())
    write_model_card(directory, config)


def save_peft(model: Any, directory: Path, config: ClassifierConfig) -> None:
    """peft's own ``save_pretrained`` of ``model`` into ``directory``, with two changes so that the folder travels:
    the base model is named by :func:`~infoprompt.backbones.portable_name` (peft records the path it was loaded
    from, inside this machine's site-packages or cache), and peft's blank model-card template becomes a pointer
    to the adapter's card."""
    peft_config = model.peft_config["default"]
    loaded_from = peft_config.base_model_name_or_path
    peft_config.base_model_name_or_path = portable_name(config.backbone)
    try:
        # No kind resizes the vocabulary; "auto" would look the base model up by name (on the Hub) to find out.
        model.save_pretrained(str(directory), save_embedding_layers=False)
    finally:
        peft_config.base_model_name_or_path = loaded_from  # the live model keeps what it was built with
    atomic_write_text(directory / CARD_NAME, peft_pointer(config.kind.name, portable_name(config.backbone)))


def finish_fit(
    model: nn.Module, train_set: EncodedSet, eval_examples, config: TrainConfig, log: JsonlLog, *, steps: int,
    loss: float, term: str | None = None, lr: float | None, started: float, cache_seconds: float, train_seconds: float,
) -> FitResult:
    """The final evaluation of a fitted baseline and its result, its last loss recorded as ``total`` and, named
    ``term``, as the kind's own term (a fitted model has no MI terms, no periodic
    evaluations and, unless its fit says otherwise, no per-step timing of its own)."""
    final: dict[str, float] = {}
    shares = None
    final_seconds = 0.0
    eval_set = encode_examples(model, eval_examples) if eval_examples else None
    if eval_set is not None:
        t0 = time.perf_counter()
        final, shares = evaluate_with_shares(model, eval_set, config.eval_batch_size, config.progress,
                                             precision=config.precision)
        final_seconds = time.perf_counter() - t0
        log.write({"type": "final_eval", "step": steps, "n_eval": len(eval_set), **final})
    log.close()
    return FitResult(
        metrics=final,
        steps=steps,
        last_losses={"total": loss, **({term: loss} if term else {})},
        n_train=len(train_set),
        n_eval=len(eval_set) if eval_set is not None else 0,
        truncated_train=sum(p.truncated for p in train_set.pairs),
        lr=lr,
        prediction_shares=shares,
        timings={
            "total_s": time.perf_counter() - started,
            "feature_cache_s": cache_seconds,
            "selection_s": 0.0,
            "train_s": train_seconds,
            "periodic_eval_s": 0.0,
            "final_eval_s": final_seconds,
            "step_s": 0.0,
        },
    )


@contextlib.contextmanager
def quiet_peft_wrap() -> Iterator[None]:
    """peft reads ``is_gradient_checkpointing`` when it wraps a model, which transformers 5 deprecates; the
    FutureWarning is about peft's code, not the user's, so it is silenced here and nowhere else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield
