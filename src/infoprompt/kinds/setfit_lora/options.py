"""The setfit-lora kind's options: SetFit's and LoRA's, and the layer set LoRA adapts (what a method is)."""

from __future__ import annotations

from dataclasses import dataclass

from infoprompt.kinds.lora_layers import LAYER_SETS, LoraOptions
from infoprompt.kinds.setfit.options import SetFitOptions
from infoprompt.options import option


@dataclass(frozen=True)
class SetFitLoraOptions(SetFitOptions, LoraOptions):
    """:class:`~infoprompt.kinds.setfit.options.SetFitOptions` and
    :class:`~infoprompt.kinds.lora_layers.LoraOptions`, plus ``lora_layers``: the layer set LoRA adapts when no
    targets are named, a key of :data:`~infoprompt.kinds.lora_layers.LAYER_SETS` (``attention-qv``: the
    attention query and value projections; ``all-linear``: every linear layer of each block)."""

    lora_layers: str = option("attention-qv", choices=tuple(LAYER_SETS), preset=True)
