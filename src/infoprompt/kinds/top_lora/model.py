"""The top-lora model: LoRA in the top k blocks of the shared encoder, mean pooling and a logistic head, saved as
setfit-lora saves (peft's LoRA layout, the head's arrays, settings and config)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.kinds.registry import Method, get_method
from infoprompt.kinds.setfit import HEAD_C_GRID
from infoprompt.kinds.setfit_lora import LAYER_SETS, SetFitLoraClassifier, lora_options, lora_targets
from infoprompt.kinds.top_lora.blocks import check_top_layers, encoder_blocks
from infoprompt.kinds.top_lora.losses import LOSSES

SELECTIONS = ("none", "holdout")
STOPS = ("none", "plateau")
# Primary metrics that weigh each class alike, for which the head's classes are balanced by default.
BALANCED_METRICS = ("mcc", "macro_f1", "semeval_macro_f1")
DEFAULT_TOP_LAYERS = 4


@dataclass(frozen=True)
class TopLoraSettings:
    """What top-lora trains and how (saved with the adapter as ``setfit_lora_config.json`` is for setfit-lora).

    Attributes:
        top_layers: k, the blocks at the top of the encoder that carry LoRA; the states entering block L − k
            are computed once per text and every step runs only these k blocks. ``None`` (the default):
            :data:`DEFAULT_TOP_LAYERS`, or every block of an encoder with fewer.
        rank / alpha / lora_dropout / targets / layers: LoRA in those blocks, as setfit-lora's settings
            (``layers`` names a key of :data:`~infoprompt.kinds.setfit_lora.LAYER_SETS`).
        loss: the in-batch objective (``supcon``, ``pairs``, ``batch-all``; :mod:`.losses`).
        temperature: ``supcon``'s temperature τ.
        margin: ``batch-all``'s margin on cosine distance.
        epochs: passes over the draw (without selection), or the most the selection pass tries.
        batch_size: texts per step; every pair among them is scored. Classes are dealt out evenly over a
            step's batches, two texts at a time, so that each text meets texts of its own class.
        encode_batch: texts per encoder call within a batch, grouped by length (each padded to its longest).
        body_learning_rate: AdamW's learning rate of the LoRA weights (linear decay after warm-up).
        warmup_proportion: share of the steps spent warming the learning rate up.
        max_steps: stop after this many steps (-1: all epochs).
        top_dropout: dropout active in the top blocks while training (as SetFit trains its body); the cached
            lower blocks always run in eval mode.
        select: ``none`` (train ``epochs``) or ``holdout`` (the epoch count that scores best on a held-out
            slice of the draw, with the head refitted at each check; then trained again on the whole draw).
        holdout_fraction / check_every / patience: the held-out share of each class, the epochs between
            checks, and the checks without a better score after which the selection pass stops (0: never).
        stop: ``none`` or ``plateau``: end training once the epoch's mean loss has improved on the best epoch
            before it by less than ``plateau_tolerance`` × the first epoch's mean loss, ``plateau_patience``
            epochs running (the draw's classes are as separated as the objective makes them; more epochs
            only repeat it).
        head_c / head_max_iter / head_c_choices: the logistic head, as setfit's.
        head_balanced: weigh the head's classes inversely to their counts in the draw (scikit-learn's
            ``class_weight="balanced"``), so that a minority class is not predicted away. ``None`` (the default):
            balanced where the task's primary metric weighs every class alike (:data:`BALANCED_METRICS`:
            Matthews correlation, macro-F1), plain where it counts examples (accuracy); a fit records its choice.
    """

    top_layers: int | None = None
    rank: int = 8
    alpha: int = 16
    lora_dropout: float = 0.0
    targets: tuple[str, ...] = ()
    layers: str = "all-linear"
    loss: str = "supcon"
    temperature: float = 0.07
    margin: float = 0.25
    epochs: int = 20
    batch_size: int = 32
    encode_batch: int = 16
    body_learning_rate: float = 5e-4
    warmup_proportion: float = 0.1
    max_steps: int = -1
    top_dropout: bool = True
    select: str = "none"
    holdout_fraction: float = 0.25
    check_every: int = 2
    patience: int = 2
    stop: str = "none"
    plateau_tolerance: float = 0.01
    plateau_patience: int = 2
    head_c: float = 1.0
    head_max_iter: int = 100
    head_c_choices: tuple[float, ...] = ()
    head_balanced: bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))  # as JSON gives them
        object.__setattr__(self, "head_c_choices", tuple(self.head_c_choices))
        if self.top_layers is not None:
            positive = not isinstance(self.top_layers, bool) and isinstance(self.top_layers, int) and self.top_layers > 0
            if not positive:
                raise UserError(f"top-lora top_layers must be a positive integer, got {self.top_layers!r}")
        for name in ("rank", "alpha", "epochs", "batch_size", "encode_batch", "check_every", "plateau_patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"top-lora {name} must be a positive integer, got {value!r}")
        if self.batch_size < 2:
            raise UserError(f"top-lora batch_size must be at least 2 (pairs within a batch), got {self.batch_size}")
        if self.loss not in LOSSES:
            raise UserError(f"top-lora loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.layers not in LAYER_SETS:
            raise UserError(f"top-lora layers must be one of {', '.join(LAYER_SETS)}, got {self.layers!r}")
        if self.select not in SELECTIONS:
            raise UserError(f"top-lora select must be one of {', '.join(SELECTIONS)}, got {self.select!r}")
        if self.stop not in STOPS:
            raise UserError(f"top-lora stop must be one of {', '.join(STOPS)}, got {self.stop!r}")
        for name in ("temperature", "margin", "body_learning_rate", "head_c", "plateau_tolerance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise UserError(f"top-lora {name} must be a positive number, got {value!r}")
        if not 0.0 <= float(self.lora_dropout) < 1.0 or not 0.0 <= float(self.warmup_proportion) < 1.0:
            raise UserError("top-lora lora_dropout and warmup_proportion must be in [0, 1)")
        if not 0.0 < float(self.holdout_fraction) < 1.0:
            raise UserError(f"top-lora holdout_fraction must be in (0, 1), got {self.holdout_fraction!r}")
        if isinstance(self.patience, bool) or not isinstance(self.patience, int) or self.patience < 0:
            raise UserError(f"top-lora patience must be a non-negative integer, got {self.patience!r}")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps == 0 \
                or self.max_steps < -1:
            raise UserError(f"top-lora max_steps must be -1 (all epochs) or positive, got {self.max_steps!r}")

    def to_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["targets"] = list(self.targets)
        data["head_c_choices"] = list(self.head_c_choices)
        return data


@dataclass(frozen=True)
class TopLoraMethod(Method):
    """A method row of the top-lora kind with its preset of :class:`TopLoraSettings` (name, value pairs)."""

    settings: tuple[tuple[str, object], ...] = ()


def preset_settings(method: str) -> dict[str, object]:
    preset = get_method(method)
    return dict(preset.settings) if isinstance(preset, TopLoraMethod) else {}


class TopLoraClassifier(SetFitLoraClassifier):
    """setfit-lora's model (the shared encoder with LoRA, mean pooling, normalisation, a logistic head) with
    LoRA only in the encoder's top ``top_layers`` blocks: the blocks below stay the backbone's own."""

    settings_type = TopLoraSettings

    def default_settings(self) -> TopLoraSettings:
        options = lora_options(self.config)
        if self.config.head_c is not None:
            options["head_c"] = self.config.head_c
        if self.config.select_head_c:
            options["head_c_choices"] = HEAD_C_GRID
        settings = TopLoraSettings(**{**preset_settings(self.config.method), **options})
        if settings.top_layers is None:
            depth = len(encoder_blocks(self.backbone.model))
            settings = dataclasses.replace(settings, top_layers=min(DEFAULT_TOP_LAYERS, depth))
        return settings

    def _make_body(self, backbone: Backbone) -> Any:
        check_top_layers(self.settings.top_layers, len(encoder_blocks(backbone.model)))
        return super()._make_body(backbone)

    def lora_config(self, encoder: nn.Module) -> Any:
        """setfit-lora's LoRA config restricted to the top ``top_layers`` blocks (peft's ``layers_to_transform``,
        so that ``peft/`` loads onto the whole encoder with ``PeftModel.from_pretrained``)."""
        from peft import LoraConfig

        settings = self.settings
        depth = len(encoder_blocks(encoder))
        return LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.lora_dropout,
                          target_modules=lora_targets(encoder, settings), bias="none",
                          layers_to_transform=list(range(depth - settings.top_layers, depth)), layers_pattern="layer")

    @property
    def lora_encoder(self) -> nn.Module:
        """The encoder with LoRA injected (peft's base model), whose blocks :class:`SplitEncoder` runs."""
        return self.lora_model.base_model.model
