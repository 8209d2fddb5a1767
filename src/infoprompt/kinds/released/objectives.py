"""The released code's auxiliary losses: the head term, the bottleneck term (both InfoNCE with the positive's
log-probability clamped at −2) and the KL of the variational head's Gaussians to N(0, I)."""

from __future__ import annotations

import math

import torch

from infoprompt.kinds.prompt.objectives import standard_normal

# Both InfoNCE terms clamp the positive's log-probability from below at −2, so each term is at most 2 and an
# example whose positive scores worse than that gives no gradient (the released code's ``[:, 0].clamp(min=-2)``).
LOG_PROB_FLOOR = -2.0
# Samples of the no-prompt Gaussian per example and per batch row: the released code draws 4 × batch size.
NEGATIVES_PER_ROW = 4


def clamped_nce(logits: torch.Tensor) -> torch.Tensor:
    """Per row, ``−max(log softmax(logits)[0], −2)``: InfoNCE with the positive in column 0, at most 2."""
    return -torch.log_softmax(logits, dim=-1)[:, 0].clamp(min=LOG_PROB_FLOOR)


def head_term(prompt_mean: torch.Tensor, label_rows: torch.Tensor, token_embeddings: torch.Tensor,
              token_mask: torch.Tensor) -> torch.Tensor:
    """The mean prompt (B, D) against the input's own word embeddings (B, L, D), both scored by their dot
    product with the mean label-word row θ̄ over √D; ``token_mask`` (B, L) drops padding and prompt slots.
    Per example (B,)."""
    summary = label_rows.mean(0)
    scale = math.sqrt(summary.shape[-1])
    positive = (prompt_mean @ summary / scale).unsqueeze(1)
    negatives = (token_embeddings @ summary / scale).masked_fill(~token_mask, float("-inf"))
    return clamped_nce(torch.cat([positive, negatives], dim=1))


def bottleneck_term(head: torch.nn.Module, prompts: torch.Tensor, prompted: tuple[torch.Tensor, torch.Tensor],
                    plain: tuple[torch.Tensor, torch.Tensor], generator: torch.Generator | None) -> torch.Tensor:
    """One sample of the prompted pass's Gaussian against ``4 × B`` samples of the example's own no-prompt
    Gaussian, each decoded to D and scored against a critic's map of the (detached) mean prompt. Per example (B,)."""
    context = head.prompt_critic(prompts.detach()).mean(1)
    scale = math.sqrt(context.shape[-1])
    (mean, log_std), (plain_mean, plain_log_std) = prompted, plain
    batch, width = mean.shape
    positive = mean.unsqueeze(1) + standard_normal((batch, 1, width), generator, mean) * log_std.exp().unsqueeze(1)
    count = NEGATIVES_PER_ROW * batch
    negatives = (plain_mean.unsqueeze(1)
                 + standard_normal((batch, count, width), generator, mean) * plain_log_std.exp().unsqueeze(1))
    samples = head.output(torch.cat([positive, negatives], dim=1))
    return clamped_nce(torch.einsum("bkd,bd->bk", samples, context) / scale)


def mean_kl(mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """KL(N(μ, σ²) ‖ N(0, 1)) averaged over examples and latent dimensions (the released code's mean, not a sum)."""
    return (-log_std + 0.5 * (2 * log_std).exp() + 0.5 * mean.pow(2) - 0.5).mean()
