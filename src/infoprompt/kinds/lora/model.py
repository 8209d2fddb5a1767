"""LoraClassifier: LoRA inside the shared, frozen encoder and a linear head on its mean pool, trained with
cross-entropy alone."""

from __future__ import annotations

import torch
from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.kinds.common import BaselineModel
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.lora_layers import LoraOptions, ReleasedEncoder, lora_encoder
from infoprompt.kinds.readouts import mean_pool
from infoprompt.templates import Batch

# setfit-lora's layer set (the attention query and value projections) and dropout, so that the two kinds differ
# in the objective alone.
LAYERS = "attention-qv"
DROPOUT = 0.0


class LoraClassifier(BaselineModel):
    """``head(mean_pool(encoder + LoRA)(X))``: peft's LoRA on a structure copy of the shared encoder (its weights
    are the backbone's own tensors, never changed), and a linear head. LoRA's B matrices start at zero, so before
    the first step the features are the linear probe's, and the probe-initialised head is the probe."""

    def __init__(self, backbone: Backbone, config: ClassifierConfig):
        super().__init__(backbone, config)
        options: LoraOptions = self.config.options
        with torch.random.fork_rng():
            torch.manual_seed(self.config.init_seed)
            self.lora_model = lora_encoder(backbone.model, options.lora_rank, options.lora_alpha,
                                           options.lora_targets or (), LAYERS, DROPOUT)
            self.head = nn.Linear(backbone.hidden_size, len(self.config.labels))
            nn.init.normal_(self.head.weight, std=0.02)
            nn.init.zeros_(self.head.bias)
        self.to(backbone.device)

    def train(self, mode: bool = True) -> LoraClassifier:
        super().train(mode)
        self.lora_model.eval()  # the frozen encoder's dropout stays off, as for every frozen-encoder kind
        return self

    def forward(self, batch: Batch, pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, None]:
        states = self.lora_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        features = mean_pool(states, batch.attention_mask)
        return self.head(features), features, None

    def release_lora_encoder(self) -> None:
        """Drop this adapter's peft module tree around the backbone (see
        :func:`infoprompt.kinds.mixed_lora.keep_mixed_parts_only`, which keeps its LoRA tensors first); the head
        stays, so :meth:`readout_logits` still runs."""
        self.lora_model = ReleasedEncoder(self.backbone.model.config)

    def readout_logits(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The logits ``forward`` gives from the LoRA encoder's last hidden states (a mixed batch's, see
        :mod:`infoprompt.kinds.mixed_lora`)."""
        return self.head(mean_pool(states, attention_mask))
