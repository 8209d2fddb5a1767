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


def packed_rows(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Row indices packed into rows of at most ``budget`` tokens, longest first, each into the first row with room
    (a text longer than ``budget`` has a row of its own)."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        fits = next((r for r, free in enumerate(room) if lengths[i] <= free), None)
        if fits is None:
            rows.append([])
            room.append(budget)
            fits = len(rows) - 1
        rows[fits].append(i)
        room[fits] -= lengths[i]
    return rows


def pack_states(states: Sequence[torch.Tensor], rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The states of each row's texts one after another (R, T, D), zero-padded to the longest row, and the
    additive attention mask (R, 1, T, T) that lets a token see only the tokens of its own text (a padding token
    only itself, so that no softmax row is empty)."""
    lengths = [sum(states[i].shape[0] for i in row) for row in rows]
    length, width = max(lengths), states[rows[0][0]].shape[1]
    packed = states[rows[0][0]].new_zeros((len(rows), length, width))
    segment = torch.arange(-1, -length - 1, -1, device=packed.device).repeat(len(rows), 1)
    for r, row in enumerate(rows):
        start = 0
        for i in row:
            end = start + states[i].shape[0]
            packed[r, start:end] = states[i]
            segment[r, start:end] = i
            start = end
    apart = segment[:, :, None] != segment[:, None, :]
    mask = packed.new_zeros(apart.shape).masked_fill_(apart, torch.finfo(packed.dtype).min)
    return packed, mask[:, None]


def by_length(lengths: Sequence[int], size: int) -> list[list[int]]:
    """Row indices in chunks of at most ``size``, longest first, so that each chunk pads to little."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i : i + size] for i in range(0, len(order), size)]


# Tokens per packed row of texts: attention within a row costs its length squared, so rows stay short enough that
# it is little beside the blocks' linear layers, and long enough that a row holds many short texts.
PACK_TOKENS = 128


class SplitEncoder:
    """One encoder (with LoRA in its top blocks, or none) cut before block ``L − top_layers``.

    ``lower_states`` runs the frozen lower blocks once per text, without gradients, in eval mode: those blocks
    carry no trained weights, so their output is the same at every step. ``pooled`` runs the top blocks from
    such states: a training step costs ``top_layers`` blocks forward and backward instead of all of them.
    """

    def __init__(self, model: nn.Module, top_layers: int, pad_id: int, pack_tokens: int = PACK_TOKENS):
        depth = len(encoder_blocks(model))
        self.top_layers = check_top_layers(top_layers, depth)
        self.split = depth - self.top_layers
        self.pad_id = pad_id
        self.lower = blocks_view(model, 0, self.split, embeddings=True)
        self.upper = blocks_view(model, self.split, depth, embeddings=False)
        self.pack_tokens = pack_tokens
        self.packs: bool | None = None if pack_tokens else False  # decided on the first texts pooled

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
        """Mean-pooled last-layer states (B, D) of the top blocks run from ``states``, in input order. Gradients
        flow when enabled. The texts are packed into rows of at most ``pack_tokens`` tokens, each text attending
        to itself only, where the encoder computes the same that way (checked once, see :meth:`packing_agrees`):
        a few-shot batch of short and long texts padded to its longest is mostly padding. Otherwise chunks of
        ``batch_size`` texts of similar length, each padded to its own longest text."""
        if self.packs is None and len(states) > 1:
            self.packs = self.packing_agrees(states)
        if self.packs:
            return self.pooled_packed(states, self.pack_tokens)
        return self.pooled_padded(states, batch_size)

    def pooled_padded(self, states: Sequence[torch.Tensor], batch_size: int) -> torch.Tensor:
        out: list[torch.Tensor | None] = [None] * len(states)
        for rows in by_length([s.shape[0] for s in states], batch_size):
            padded, mask = pad_states([states[i] for i in rows])
            hidden = self.upper(inputs_embeds=padded, attention_mask=mask).last_hidden_state
            for row, vector in zip(rows, mean_pool(hidden, mask), strict=True):
                out[row] = vector
        return torch.stack(out)  # type: ignore[arg-type]

    def pooled_packed(self, states: Sequence[torch.Tensor], budget: int) -> torch.Tensor:
        out: list[torch.Tensor | None] = [None] * len(states)
        rows = packed_rows([s.shape[0] for s in states], budget)
        packed, mask = pack_states(states, rows)
        hidden = self.upper(inputs_embeds=packed, attention_mask=mask).last_hidden_state
        for r, row in enumerate(rows):
            sizes = [states[i].shape[0] for i in row]
            for i, text in zip(row, hidden[r, : sum(sizes)].split(sizes), strict=True):
                out[i] = text.mean(dim=0)
        return torch.stack(out)  # type: ignore[arg-type]

    @torch.no_grad()
    def packing_agrees(self, states: Sequence[torch.Tensor]) -> bool:
        """Whether the top blocks give each text the same pooled state packed as padded, on (up to) three of
        ``states`` in eval mode, all three in one row. True for encoders whose blocks see positions only through
        the embeddings or as relative offsets (BERT, RoBERTa, MPNet); an encoder that reads absolute positions or masks in its own way
        inside its blocks is padded instead."""
        sample = list(states[:3])
        training = self.upper.training
        self.upper.eval()
        try:
            padded = self.pooled_padded(sample, len(sample))
            packed = self.pooled_packed(sample, sum(s.shape[0] for s in sample))
        except (RuntimeError, ValueError):
            return False
        finally:
            self.upper.train(training)
        scale = padded.abs().max().clamp_min(1e-6)
        return bool(torch.isfinite(packed).all() and ((packed - padded).abs().max() / scale) < 1e-2)
