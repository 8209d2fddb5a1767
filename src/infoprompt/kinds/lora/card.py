"""What a lora-ce adapter's model card says: LoRA under infoprompt's module names, mean pooling, a linear head."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infoprompt.kinds.model_card import linear_head_text
from infoprompt.kinds.registry import CardText


def computes(config: Any, directory: Path, base: str) -> str:
    options = config.options
    return (f"peft LoRA (rank {options.lora_rank}, alpha {options.lora_alpha}) in the encoder's attention query and "
            "value projections, mean pooling of the last hidden states over the real tokens (not normalised), and "
            "a linear head trained with cross-entropy. " + linear_head_text(config)
            + " The LoRA weights are stored under infoprompt's module names (`lora_model.…lora_A/lora_B…`), not in "
            "a peft folder: load this adapter with infoprompt.")


CARD = CardText(computes)  # no native snippet: its LoRA is not in peft's layout
