"""Bottleneck adapters (down, GELU, up, residual) hooked onto the output of every transformer layer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


class Bottleneck(nn.Module):
    """``h + up(gelu(down(h)))`` with a zero-initialised up-projection, so a fresh adapter is the identity."""

    def __init__(self, hidden_size: int, size: int):
        super().__init__()
        self.down = nn.Linear(hidden_size, size)
        self.up = nn.Linear(size, hidden_size)
        nn.init.normal_(self.down.weight, std=0.02)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.up(nn.functional.gelu(self.down(hidden)))


def transformer_layers(encoder: nn.Module) -> nn.ModuleList:
    """The encoder's list of transformer blocks (BERT, RoBERTa, MPNet, DeBERTa, ELECTRA, DistilBERT, ...)."""
    for path in ("encoder.layer", "transformer.layer", "layers", "encoder.layers"):
        module: nn.Module | None = encoder
        for name in path.split("."):
            module = getattr(module, name, None)
            if module is None:
                break
        if isinstance(module, nn.ModuleList) and len(module):
            return module
    count = getattr(getattr(encoder, "config", None), "num_hidden_layers", None)
    for _, module in encoder.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    raise ValueError(f"cannot find the transformer layers of {type(encoder).__name__}")


class BottleneckAdapters(nn.Module):
    """One :class:`Bottleneck` per transformer layer, applied to that layer's output hidden states.

    The adapters are attached with forward hooks only for the duration of one pass (:meth:`attached`), so a
    backbone shared with other classifiers (one backbone per sweep process) never runs them by accident.
    """

    def __init__(self, n_layers: int, hidden_size: int, size: int):
        super().__init__()
        self.blocks = nn.ModuleList(Bottleneck(hidden_size, size) for _ in range(n_layers))

    @classmethod
    def for_encoder(cls, encoder: nn.Module, hidden_size: int, size: int) -> BottleneckAdapters:
        return cls(len(transformer_layers(encoder)), hidden_size, size)

    @contextmanager
    def attached(self, encoder: nn.Module) -> Iterator[None]:
        layers = transformer_layers(encoder)
        if len(layers) != len(self.blocks):
            raise ValueError(f"{len(self.blocks)} adapters for an encoder with {len(layers)} layers")
        handles = [layer.register_forward_hook(self._hook(block)) for layer, block in zip(layers, self.blocks, strict=True)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    @staticmethod
    def _hook(block: Bottleneck):
        def apply(module: nn.Module, args: object, output: object) -> object:
            # Layers return the hidden states alone (transformers 5) or a tuple led by them (older releases).
            if isinstance(output, tuple):
                return (block(output[0]), *output[1:])
            return block(output)

        return apply
