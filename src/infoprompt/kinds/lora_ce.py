"""The ``lora`` kind: LoRA inside the shared, frozen encoder and a linear head on its mean pool, trained with
cross-entropy alone; the control that tells "adapts the body" from "contrastive" beside ``setfit-lora``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.kinds.common import BaselineModel, quiet_peft_wrap, write_adapter
from infoprompt.kinds.config import ClassifierConfig, read_weights
from infoprompt.kinds.readouts import mean_pool
from infoprompt.kinds.registry import Kind, Method
from infoprompt.kinds.setfit_lora import SetFitLoraSettings, lora_options, lora_targets, structure_copy
from infoprompt.templates import Batch
from infoprompt.training import train

# setfit-lora's LoRA (rank, scaling, query/value projections), so that the two differ in the objective alone;
# --lora-rank, --lora-alpha and --lora-targets change it for both.
LORA = SetFitLoraSettings()


class LoraClassifier(BaselineModel):
    """``head(mean_pool(encoder + LoRA)(X))``: peft's LoRA on a structure copy of the shared encoder (its weights
    are the backbone's own tensors, never changed), and a linear head. LoRA's B matrices start at zero, so before
    the first step the features are the linear probe's, and the probe-initialised head is the probe."""

    def __init__(self, backbone: Backbone, config: ClassifierConfig):
        from peft import LoraConfig, get_peft_model

        super().__init__(backbone, config)
        encoder = structure_copy(backbone.model)
        settings = dataclasses.replace(LORA, **lora_options(self.config))
        lora = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.lora_dropout,
                          target_modules=lora_targets(encoder, settings), bias="none")
        with torch.random.fork_rng(), quiet_peft_wrap():
            torch.manual_seed(self.config.init_seed)
            self.lora_model = get_peft_model(encoder, lora)
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

    def save_pretrained(self, directory: str | Path) -> None:
        write_adapter(Path(directory), self.trainable_state(), self.config)

    @classmethod
    def load(cls, directory: Path, config: ClassifierConfig, backbone: Backbone) -> LoraClassifier:
        model = cls(backbone, config)
        model.load_state_dict(read_weights(Path(directory), model.trainable_state()), strict=False)
        return model.eval()


KIND = Kind("lora", LoraClassifier, train, methods=(
    Method("lora-ce", None, "none", "mean", 0.0, 0.0, False, 5e-4, kind="lora", warm_start=True, select="holdout",
           table_order=14, baselines=("setfit-lora", "linear-probe"),
           description="control: setfit-lora's LoRA (r=8, q/v) in the shared encoder + a head on the mean pool, "
                       "cross-entropy only, probe-initialised head, epochs picked on held-out shots"),
))
