"""The ``setfit-lora`` kind: SetFit's contrastive pair training with only PEFT LoRA weights inside the frozen,
shared encoder trained, then SetFit's logistic-regression head; saved as the LoRA weights and the head."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.io_utils import atomic_write_json, replaced_directory, write_safetensors
from infoprompt.kinds.common import quiet_peft_wrap, write_adapter
from infoprompt.kinds.config import FORMAT_VERSION, ClassifierConfig, read_weights
from infoprompt.kinds.registry import Kind, Method, get_method
from infoprompt.kinds.setfit import (
    HEAD_ATTRIBUTES,
    HEAD_FILE,
    SetFitClassifier,
    SetFitSettings,
    build_body,
    fit_setfit,
    pair_options,
    read_settings,
    require_setfit,
)
from infoprompt.validation import check_lora_config

SETTINGS_NAME = "setfit_lora_config.json"
PEFT_DIR = "peft"  # the LoRA weights in peft's own layout
PEFT_WEIGHTS_NAME = "adapter_model.safetensors"
# The modules LoRA adapts when no --lora-targets are named, per layer set and architecture (peft's own table
# lacks MPNet). "attention-qv": the attention query and value projections (peft's default); "all-linear": every
# linear layer of each transformer block, the four attention projections and both feed-forward layers (the
# "output.dense" suffix also matches BERT's attention output projection).
_BERT_ALL = ("query", "key", "value", "intermediate.dense", "output.dense")
LAYER_SETS = {
    "attention-qv": {"bert": ("query", "value"), "roberta": ("query", "value"), "xlm-roberta": ("query", "value"),
                     "mpnet": ("q", "v")},
    "all-linear": {"bert": _BERT_ALL, "roberta": _BERT_ALL, "xlm-roberta": _BERT_ALL,
                   "mpnet": ("q", "k", "v", "o", "intermediate.dense", "output.dense")},
}


@dataclass(frozen=True)
class SetFitLoraSettings(SetFitSettings):
    """SetFit's settings (pairs, epochs, batch, head) with LoRA's; the body learning rate is LoRA's.

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


def structure_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module``'s modules that shares every parameter and buffer tensor with it: LoRA layers can be
    injected into the copy while the shared encoder, and every other adapter on it, stays as it is."""
    shared = {id(tensor): tensor for tensor in itertools.chain(module.parameters(), module.buffers())}
    return copy.deepcopy(module, shared)


def lora_options(config: ClassifierConfig) -> dict[str, object]:
    """The LoRA settings an adapter config sets (``lora_rank``, ``lora_alpha``, ``lora_targets``)."""
    chosen = {"rank": config.lora_rank, "alpha": config.lora_alpha, "targets": config.lora_targets}
    return {name: value for name, value in chosen.items() if value is not None}


def lora_targets(encoder: nn.Module, settings: SetFitLoraSettings) -> list[str]:
    """The module names LoRA adapts: the settings' own, each checked against the encoder, or the architecture's
    modules of the settings' layer set."""
    if settings.targets:
        names = [name for name, _ in encoder.named_modules()]
        missing = [target for target in settings.targets
                   if not any(name == target or name.endswith(f".{target}") for name in names)]  # peft's matching
        if missing:
            linear = {name.rsplit(".", 1)[-1] for name, module in encoder.named_modules() if isinstance(module, nn.Linear)}
            raise UserError(f"LoRA target {missing[0]!r} names no module of this encoder; its linear layers are "
                            f"{', '.join(sorted(linear))}")
        return list(settings.targets)
    model_type = getattr(getattr(encoder, "config", None), "model_type", "")
    defaults = LAYER_SETS[settings.layers]
    if model_type not in defaults:
        raise UserError(f"setfit-lora has no default LoRA targets for a {model_type or 'unknown'} encoder; "
                        f"name the projection modules to adapt (--lora-targets)")
    return list(defaults[model_type])


@dataclass(frozen=True)
class LoraMethod(Method):
    """A :class:`~infoprompt.kinds.registry.Method` row with its LoRA preset (``--lora-*`` override it).

    Attributes:
        lora_rank: rank r of each LoRA update.
        lora_alpha: LoRA's scaling numerator α.
        lora_layers: the layer set LoRA adapts, a key of :data:`LAYER_SETS`.
    """

    lora_rank: int = 8
    lora_alpha: int = 16
    lora_layers: str = "attention-qv"


def preset_lora(method: str) -> dict[str, object]:
    """The LoRA settings the method's row presets (none for a row without them)."""
    preset = get_method(method)
    if not isinstance(preset, LoraMethod):
        return {}
    return {"rank": preset.lora_rank, "alpha": preset.lora_alpha, "layers": preset.lora_layers}


class SetFitLoraClassifier(SetFitClassifier):
    """SetFit whose body is the shared backbone with LoRA adapters: only the LoRA weights (and the head) are
    the adapter's; the backbone's own weights are shared, never copied or changed."""

    settings_type: type = SetFitLoraSettings  # what ``load`` reads the saved settings as

    def default_settings(self) -> SetFitLoraSettings:
        """setfit-lora's defaults with the adapter config's options (``--pair-iterations``, ``--lora-*``)."""
        return SetFitLoraSettings(**pair_options(self.config),
                                  **{**preset_lora(self.config.method), **lora_options(self.config)})

    def _make_body(self, backbone: Backbone) -> Any:
        from peft import get_peft_model

        body = build_body(backbone, self.config.max_length, copy_weights=False)
        encoder = structure_copy(backbone.model)
        with torch.random.fork_rng(), quiet_peft_wrap():
            torch.manual_seed(self.config.init_seed)  # LoRA's A matrices start random, B at zero
            body[0].model = get_peft_model(encoder, self.lora_config(encoder))  # auto_model reads it
        return body

    def lora_config(self, encoder: nn.Module) -> Any:
        """peft's ``LoraConfig`` of this adapter's LoRA in ``encoder``."""
        from peft import LoraConfig

        settings = self.settings
        return LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.lora_dropout,
                          target_modules=lora_targets(encoder, settings), bias="none")

    @property
    def lora_model(self) -> Any:
        """The peft model the body runs (sentence-transformers' ``auto_model`` may hide the wrapper)."""
        return self.body[0].model

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

    def save_pretrained(self, directory: str | Path) -> None:
        """The LoRA weights in peft's own format (``peft/``: ``PeftModel.from_pretrained(encoder, DIR/peft)``
        loads them), the linear head (``adapter_model.safetensors``), the regression's arrays, settings, config."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with replaced_directory(directory / PEFT_DIR) as staging:
            self.lora_model.save_pretrained(str(staging))
        write_safetensors(directory / HEAD_FILE, self.head_arrays(), FORMAT_VERSION)
        atomic_write_json(directory / SETTINGS_NAME, {"settings": self.settings.to_json(), "fitted": self.fitted,
                                                       "body": "Transformer+LoRA -> Pooling(mean) -> Normalize"})
        write_adapter(directory, self.saved_state(), self.config)  # last: its config marks a complete adapter

    @classmethod
    def load(cls, directory: Path, config: ClassifierConfig, backbone: Backbone) -> SetFitLoraClassifier:
        from peft import set_peft_model_state_dict

        require_setfit()
        settings, fitted = read_settings(directory / SETTINGS_NAME, cls.settings_type)
        model = cls(backbone, config, settings)
        if not (directory / PEFT_DIR).is_dir():
            raise UserError(f"adapter directory {directory} lacks its LoRA weights {directory / PEFT_DIR}")
        lora = read_weights(directory / PEFT_DIR, model.lora_state(), name=PEFT_WEIGHTS_NAME)
        check_lora_config(directory / PEFT_DIR, model.lora_model.peft_config["default"].to_dict(),
                          [config.backbone, backbone.model.name_or_path or config.backbone])
        set_peft_model_state_dict(model.lora_model, lora)
        head = read_weights(directory, model.saved_state())
        model.head.load_state_dict({"weight": head["head.weight"], "bias": head["head.bias"]})
        if fitted:
            model.restore_head(read_weights(directory, model.head_arrays(), free_shapes=HEAD_ATTRIBUTES, name=HEAD_FILE))
        return model.eval()


def fit_setfit_lora(model: SetFitLoraClassifier, train_examples, eval_examples=None, config=None, log_path=None):
    """SetFit's fit (contrastive pairs, then the logistic head) on the LoRA body; see :func:`fit_setfit`."""
    return fit_setfit(model, train_examples, eval_examples, config, log_path)


SETFIT_LORA = LoraMethod(
    "setfit-lora", None, "none", "cls", 0.0, 0.0, False, 5e-4, kind="setfit-lora", table_order=13,
    description="SetFit's contrastive pairs training only LoRA weights (r=8, q/v) in the frozen shared encoder, "
                "+ logistic regression")

KIND = Kind("setfit-lora", SetFitLoraClassifier, fit_setfit_lora, require=require_setfit, methods=(
    SETFIT_LORA,
    # r=4 keeps six adapted layers a block within the 5 MB adapter goal on MPNet (2.7 MB against r=8 q/v's 1.2 MB).
    replace(SETFIT_LORA, name="setfit-lora-all", lora_rank=4, lora_alpha=8, lora_layers="all-linear",
            baselines=("setfit-lora", "setfit", "linear-probe"),
            description="setfit-lora with LoRA (r=4) on every linear layer of each block (attention q/k/v/o and "
                        "the feed-forward pair)"),
))
