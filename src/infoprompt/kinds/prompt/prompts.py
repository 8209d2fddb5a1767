"""Prompt sources (static and input-generated) and the single function that inserts prompts into embeddings."""

from __future__ import annotations

import torch
from torch import nn


def insert_prompts(embeddings: torch.Tensor, prompts: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Return ``embeddings`` (B, L, D) with ``prompts`` (B, n_p, D) written at ``positions`` (B, n_p).

    This is the only place prompts enter the model: one out-of-place scatter for the whole batch, so every
    example gets its own prompt and gradients flow to the prompts but not into the frozen embeddings.
    """
    if prompts.shape[1] == 0:
        return embeddings
    index = positions.unsqueeze(-1).expand(-1, -1, embeddings.shape[-1])
    return embeddings.scatter(1, index, prompts.to(embeddings.dtype))


class StaticPrompt(nn.Module):
    """WARP-style prompts: ``n_p × D`` free parameters shared by all inputs, initialised from token embeddings."""

    needs_features = False

    def __init__(self, n_prompts: int, init: torch.Tensor):
        super().__init__()
        self.n_prompts = n_prompts
        self.weight = nn.Parameter(init.detach().clone().reshape(n_prompts, -1))

    def forward(self, batch_size: int, pooled: torch.Tensor | None = None) -> torch.Tensor:
        return self.weight.unsqueeze(0).expand(batch_size, -1, -1)


class GeneratedPrompt(nn.Module):
    """IDPG / InfoPrompt prompts: ``p_i = b_i + W_i^up W_i^down P'`` from the pooled no-prompt pass ``P'``.

    One rank-``rank`` down/up pair per slot. The bias ``b_i`` starts at token embeddings (as WARP's
    prompts do) and the up-projections start at zero, so training begins from a sensible prompt and the
    input-dependent part grows from there; with ``bias=False`` the prompt is the pure low-rank map.
    """

    needs_features = True

    def __init__(self, n_prompts: int, hidden_size: int, rank: int, init: torch.Tensor, bias: bool = True):
        super().__init__()
        self.n_prompts = n_prompts
        self.down = nn.Parameter(torch.empty(n_prompts, rank, hidden_size))
        self.up = nn.Parameter(torch.zeros(n_prompts, hidden_size, rank))
        nn.init.normal_(self.down, std=hidden_size**-0.5)
        if bias:
            self.bias = nn.Parameter(init.detach().clone().reshape(n_prompts, hidden_size))
        else:
            nn.init.normal_(self.up, std=rank**-0.5 * 0.02)
            self.register_parameter("bias", None)

    def forward(self, batch_size: int, pooled: torch.Tensor | None = None) -> torch.Tensor:
        if pooled is None:
            raise ValueError("a generated prompt needs the pooled no-prompt features P'")
        low = torch.einsum("nrd,bd->bnr", self.down, pooled)
        prompts = torch.einsum("ndr,bnr->bnd", self.up, low)
        if self.bias is not None:
            prompts = prompts + self.bias
        return prompts
