"""An encoder split at block L − k: the frozen lower blocks run once per text, the top k blocks from those states."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from infoprompt.errors import UserError
from infoprompt.kinds.readouts import mean_pool


class PassThroughEmbeddings(nn.Module):
    """Stands in for an encoder's embedding layer: the states it is given (``inputs_embeds``) go on unchanged."""

    def forward(self, input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
                **kwargs: object) -> torch.Tensor:
        return inputs_embeds


def encoder_blocks(model: nn.Module) -> nn.ModuleList:
    """The transformer blocks of a BERT-, RoBERTa- or MPNet-style encoder (``model.encoder.layer``)."""
    blocks = getattr(getattr(model, "encoder", None), "layer", None)
    if not isinstance(blocks, nn.ModuleList):
        raise UserError(f"top-lora needs an encoder whose blocks are encoder.layer (BERT, RoBERTa, MPNet); "
                        f"{type(model).__name__} has none")
    return blocks


def check_top_layers(top_layers: object, depth: int) -> int:
    """``top_layers`` as a block count that this encoder (``depth`` blocks) has: 1 to ``depth``."""
    if isinstance(top_layers, bool) or not isinstance(top_layers, int) or not 1 <= top_layers <= depth:
        raise UserError(f"top-lora top_layers must be an integer from 1 to the encoder's {depth} blocks, "
                        f"got {top_layers!r}")
    return top_layers


def blocks_view(model: nn.Module, start: int, stop: int, *, embeddings: bool) -> nn.Module:
    """A module that shares every weight with ``model`` (LoRA layers included) and runs only its blocks
    ``start:stop``: from token ids through the embedding layer when ``embeddings``, else from the hidden states
    entering block ``start``, given as ``inputs_embeds``. ``model`` itself is left as it is."""
    blocks = encoder_blocks(model)
    encoder = copy.copy(model.encoder)
    object.__setattr__(encoder, "_modules", dict(model.encoder._modules))  # a shallow copy shares this dict
    encoder.layer = nn.ModuleList(list(blocks)[start:stop])
    view = copy.copy(model)
    object.__setattr__(view, "_modules", dict(model._modules))
    view.encoder = encoder
    if not embeddings:
        view.embeddings = PassThroughEmbeddings()
    if getattr(view, "pooler", None) is not None:
        view.pooler = None  # the pooler's output is never read here
    return view


def pad_states(states: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad per-text states (T_i, D) into (B, T, D) with zeros, and the attention mask (B, T)."""
    length = max(s.shape[0] for s in states)
    padded = states[0].new_zeros((len(states), length, states[0].shape[1]))
    mask = torch.zeros((len(states), length), dtype=torch.long, device=states[0].device)
    for row, s in enumerate(states):
        padded[row, : s.shape[0]] = s
        mask[row, : s.shape[0]] = 1
    return padded, mask


def by_length(lengths: Sequence[int], size: int) -> list[list[int]]:
    """Row indices in chunks of at most ``size``, longest first, so that each chunk pads to little."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i : i + size] for i in range(0, len(order), size)]


class SplitEncoder:
    """One encoder (with LoRA in its top blocks, or none) cut before block ``L − top_layers``.

    ``lower_states`` runs the frozen lower blocks once per text, without gradients, in eval mode: those blocks
    carry no trained weights, so their output is the same at every step. ``pooled`` runs the top blocks from
    such states: a training step costs ``top_layers`` blocks forward and backward instead of all of them.
    """

    def __init__(self, model: nn.Module, top_layers: int, pad_id: int):
        depth = len(encoder_blocks(model))
        self.top_layers = check_top_layers(top_layers, depth)
        self.split = depth - self.top_layers
        self.pad_id = pad_id
        self.lower = blocks_view(model, 0, self.split, embeddings=True)
        self.upper = blocks_view(model, self.split, depth, embeddings=False)

    @torch.no_grad()
    def lower_states(self, token_ids: Sequence[Sequence[int]], batch_size: int = 32,
                     device: torch.device | str = "cpu") -> list[torch.Tensor]:
        """The hidden states entering block ``L − top_layers`` of each text (T_i, D), in input order."""
        self.lower.eval()
        states: list[torch.Tensor | None] = [None] * len(token_ids)
        for rows in by_length([len(ids) for ids in token_ids], batch_size):
            length = max(len(token_ids[i]) for i in rows)
            ids = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), length), dtype=torch.long)
            for row, i in enumerate(rows):
                ids[row, : len(token_ids[i])] = torch.tensor(list(token_ids[i]), dtype=torch.long)
                mask[row, : len(token_ids[i])] = 1
            out = self.lower(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
            for row, i in enumerate(rows):
                states[i] = out[row, : len(token_ids[i])].detach().clone()
        return states  # type: ignore[return-value]

    def pooled(self, states: Sequence[torch.Tensor], batch_size: int) -> torch.Tensor:
        """Mean-pooled last-layer states (B, D) of the top blocks run from ``states``, in input order: chunks
        of similar length, each padded to its own longest text. Gradients flow when enabled."""
        out: list[torch.Tensor | None] = [None] * len(states)
        for rows in by_length([s.shape[0] for s in states], batch_size):
            padded, mask = pad_states([states[i] for i in rows])
            hidden = self.upper(inputs_embeds=padded, attention_mask=mask).last_hidden_state
            for row, vector in zip(rows, mean_pool(hidden, mask), strict=True):
                out[row] = vector
        return torch.stack(out)  # type: ignore[arg-type]
