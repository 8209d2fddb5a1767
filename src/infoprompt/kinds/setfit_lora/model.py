"""SetFitLoraClassifier: SetFit's contrastive pair training with only PEFT LoRA weights inside the frozen, shared
encoder trained, then SetFit's logistic-regression head; saved as the LoRA weights and the head."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from infoprompt.backbones import Backbone, portable_name
from infoprompt.errors import UserError
from infoprompt.io_utils import ADAPTER_CONFIG_NAME, adapter_config_file, replaced_directory
from infoprompt.kinds.common import save_peft
from infoprompt.kinds.config import ClassifierConfig, read_weights
from infoprompt.kinds.lora_layers import LAYER_SETS, ReleasedEncoder, lora_config, with_lora
from infoprompt.kinds.setfit import (
    HEAD_ATTRIBUTES,
    HEAD_FILE,
    SetFitClassifier,
    SetFitSettings,
    build_body,
    pair_options,
    read_settings,
    require_setfit,
)
from infoprompt.kinds.setfit_lora.options import SetFitLoraOptions
from infoprompt.validation import check_lora_config, check_options_match_settings

SETTINGS_NAME = "setfit_lora_config.json"
PEFT_DIR = "peft"  # the LoRA weights in peft's own layout
PEFT_WEIGHTS_NAME = "adapter_model.safetensors"


@dataclass(frozen=True)
class SetFitLoraSettings(SetFitSettings):
    """SetFit's settings (pairs, epochs, batch, head) with LoRA's, as setfit's trainer gets them and the adapter
    records them (``setfit_lora_config.json``); the body learning rate is LoRA's.

    Attributes:
        rank: LoRA rank r of each adapted projection.
        alpha: LoRA scaling numerator (the update is ``alpha / rank · B A x``).
        lora_dropout: dropout on LoRA's input during training.
        targets: module names LoRA adapts (``()``: the architecture's modules of ``layers``).
        layers: the layer set adapted when ``targets`` is empty, a key of :data:`LAYER_SETS` (``attention-qv``:
            the attention query and value projections; ``all-linear``: every linear layer of each block).
    """

    body_learning_rate: float = 5e-4
    rank: int = 8
    alpha: int = 16
    lora_dropout: float = 0.0
    targets: tuple[str, ...] = ()
    layers: str = "attention-qv"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("rank", "alpha"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"setfit-lora {name} must be a positive integer, got {value!r}")
        if not 0.0 <= float(self.lora_dropout) < 1.0:
            raise UserError(f"setfit-lora lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if self.layers not in LAYER_SETS:
            raise UserError(f"setfit-lora layers must be one of {', '.join(LAYER_SETS)}, got {self.layers!r}")
        object.__setattr__(self, "targets", tuple(self.targets))

    def to_json(self) -> dict[str, object]:
        data = super().to_json()
        data["targets"] = list(self.targets)
        return data


class SetFitLoraClassifier(SetFitClassifier):
    """SetFit whose body is the shared backbone with LoRA adapters: only the LoRA weights (and the head) are
    the adapter's; the backbone's own weights are shared, never copied or changed."""

    settings_type: type = SetFitLoraSettings  # what ``load`` reads the saved settings as

    def default_settings(self) -> SetFitLoraSettings:
        """setfit-lora's defaults with the adapter's options (``--pair-iterations``, ``--lora-*``, ...)."""
        options: SetFitLoraOptions = self.options
        return SetFitLoraSettings(**pair_options(options), rank=options.lora_rank, alpha=options.lora_alpha,
                                  targets=options.lora_targets or (), layers=options.lora_layers)

    def _make_body(self, backbone: Backbone) -> Any:
        body = build_body(backbone, self.config.max_length, copy_weights=False)
        with torch.random.fork_rng():
            torch.manual_seed(self.config.init_seed)  # LoRA's A matrices start random, B at zero
            body[0].model = with_lora(backbone.model, self.lora_config)  # what the Transformer module runs
        return body

    def lora_config(self, encoder: nn.Module) -> Any:
        """peft's ``LoraConfig`` of this adapter's LoRA in ``encoder`` (from its settings)."""
        settings = self.settings
        return lora_config(encoder, settings.rank, settings.alpha, settings.targets, settings.layers,
                           settings.lora_dropout)

    @property
    def lora_model(self) -> Any:
        """The peft model the body runs (sentence-transformers' ``auto_model`` may hide the wrapper)."""
        return self.body[0].model

    def release_lora_encoder(self) -> None:
        """Drop this adapter's peft module tree around the backbone (see
        :func:`infoprompt.kinds.mixed_lora.keep_mixed_parts_only`, which keeps its LoRA tensors first); the
        tokenizer, pooling and head stay, so :meth:`readout_logits` still runs."""
        self.body[0].model = ReleasedEncoder(self.backbone.model.config)

    def readout_logits(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The log-probabilities ``forward`` gives from the LoRA encoder's last hidden states (a mixed batch's,
        see :mod:`infoprompt.kinds.mixed_lora`): the body's modules after its transformer (mean pooling,
        normalisation), then the head."""
        features: dict[str, torch.Tensor] = {"token_embeddings": states, "attention_mask": attention_mask}
        for module in list(self.body)[1:]:
            features = module(features)
        return self.head(features["sentence_embedding"]).log_softmax(-1)

    def lora_state(self) -> dict[str, torch.Tensor]:
        """The LoRA weights under peft's own names (those of ``peft/adapter_model.safetensors``)."""
        from peft import get_peft_model_state_dict

        return {name: t.detach().contiguous().cpu().clone()
                for name, t in get_peft_model_state_dict(self.lora_model).items()}

    def trainable_state(self) -> dict[str, torch.Tensor]:
        return self.lora_state()

    def parameter_counts(self) -> dict[str, int]:
        lora = sum(t.numel() for t in self.lora_state().values())
        head = self.head.weight.numel() + self.head.bias.numel()
        frozen = sum(p.numel() for p in self.backbone.model.parameters())
        return {"trainable": lora + head, "frozen": frozen, "total": lora + head + frozen}

    def save_pretrained(self, directory: str | Path, keep_training_state: bool = False) -> None:
        """The LoRA weights in peft's own format (``peft/``: ``PeftModel.from_pretrained(encoder, DIR/peft)``
        loads them), the linear head (``adapter_model.safetensors``), the regression's arrays, settings, config."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with replaced_directory(directory / PEFT_DIR) as staging:
            save_peft(self.lora_model, staging, self.config)
        self.save_head(directory, SETTINGS_NAME, "Transformer+LoRA -> Pooling(mean) -> Normalize")

    @classmethod
    def load(cls, directory: Path, config: ClassifierConfig, backbone: Backbone) -> SetFitLoraClassifier:
        from peft import set_peft_model_state_dict

        require_setfit()
        settings, fitted = read_settings(directory / SETTINGS_NAME, cls.settings_type)
        check_options_match_settings(adapter_config_file(directory) or directory / ADAPTER_CONFIG_NAME,
                                     config.options, directory / SETTINGS_NAME, settings)
        model = cls(backbone, config, settings)
        if not (directory / PEFT_DIR).is_dir():
            raise UserError(f"adapter directory {directory} lacks its LoRA weights {directory / PEFT_DIR}")
        lora = read_weights(directory / PEFT_DIR, model.lora_state(), name=PEFT_WEIGHTS_NAME)
        check_lora_config(directory / PEFT_DIR, model.lora_model.peft_config["default"].to_dict(),
                          [config.backbone, portable_name(config.backbone), backbone.model.name_or_path or config.backbone])
        set_peft_model_state_dict(model.lora_model, lora)
        head = read_weights(directory, model.saved_state())
        model.head.load_state_dict({"weight": head["head.weight"], "bias": head["head.bias"]})
        if fitted:
            model.restore_head(read_weights(directory, model.head_arrays(), free_shapes=HEAD_ATTRIBUTES, name=HEAD_FILE))
        return model.eval()
