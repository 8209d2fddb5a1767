"""Readouts: how a pass's last-layer states become the head's features (a token, the text mean, entity spans)."""

from __future__ import annotations

import torch

from infoprompt.templates import Batch, Template

# mask: the [MASK] slot (the paper); cls: position 0; mean: the mean over the text-field tokens; spans: the
# mean state of each entity mention, concatenated (span tasks: the span probe's features, read from the
# prompted pass).
READOUTS = ("mask", "cls", "mean", "spans")


def mean_pool(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the states over the real (unpadded) tokens."""
    mask = attention_mask.unsqueeze(-1).to(states.dtype)
    return (states * mask).sum(1) / mask.sum(1)


def text_mean(states: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean state over each example's text-field tokens (B, L, D), (B, C), (B, C) -> (B, D).

    Template words, special tokens and prompt slots are left out; an example whose text was cut away entirely
    pools to zeros.
    """
    gathered = states.gather(1, positions.unsqueeze(-1).expand(-1, -1, states.shape[-1]))
    weights = mask.unsqueeze(-1).to(states.dtype)
    return (gathered * weights).sum(1) / weights.sum(1).clamp(min=1.0)


def span_pool(states: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean state over each span's tokens, spans concatenated: (B, L, D), (B, S, W) -> (B, S·D)."""
    batch, n_spans, width = positions.shape
    gathered = states.gather(1, positions.reshape(batch, -1, 1).expand(-1, -1, states.shape[-1]))
    gathered = gathered.reshape(batch, n_spans, width, -1)
    weights = mask.unsqueeze(-1).to(states.dtype)
    # A mention cut away entirely (possible only when nothing else is left to cut) pools to zeros.
    pooled = (gathered * weights).sum(2) / weights.sum(2).clamp(min=1.0)
    return pooled.reshape(batch, -1)


def read_out(states: torch.Tensor, batch: Batch, readout: str) -> torch.Tensor:
    """The head's features of one pass under ``readout`` (one of :data:`READOUTS`)."""
    if readout == "mask":
        return states[torch.arange(states.shape[0], device=states.device), batch.readout_position]
    if readout == "cls":
        return states[:, 0]
    if readout == "mean":
        return text_mean(states, batch.context_positions, batch.context_mask)
    if readout == "spans":
        if batch.span_positions is None:
            raise ValueError("the spans readout needs a template with entity fields ({name:keep})")
        return span_pool(states, batch.span_positions, batch.span_mask)
    raise ValueError(f"unknown readout {readout!r}; valid: {', '.join(READOUTS)}")


def readout_width(readout: str, hidden_size: int, n_spans: int) -> int:
    """Feature size of ``readout``: the hidden size, times the number of mentions for ``spans``."""
    return hidden_size * n_spans if readout == "spans" else hidden_size


def count_spans(template: Template) -> int:
    """Entity mentions a template marks (its ``{name:keep}`` fields)."""
    return sum(policy == "keep" for policy in template.cut_policies.values())
