"""InfoNCE and the two mutual-information objectives of InfoPrompt (head loss, representation loss)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def info_nce(positive: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
    """Per-example InfoNCE loss ``-log(e^pos / (e^pos + Σ_k e^neg_k))`` for scores (B,) and (B, K).

    ``log(K + 1) - info_nce`` is the mutual-information lower bound; since the loss is ≥ 0 the bound never
    exceeds ``log(K + 1)``.
    """
    scores = torch.cat([positive.unsqueeze(-1), negatives], dim=-1)
    return torch.logsumexp(scores, dim=-1) - positive


def mi_cap(n_negatives: int) -> float:
    """``log(K + 1)``: the most an InfoNCE bound with K negatives can say."""
    return math.log(n_negatives + 1)


def mi_lower_bound(nce: torch.Tensor, n_negatives: int) -> torch.Tensor:
    return mi_cap(n_negatives) - nce


def in_batch_info_nce(scores: torch.Tensor) -> torch.Tensor:
    """Per-example InfoNCE over a (B, B) score matrix whose row ``i`` scores example ``i``'s target against
    every example's prompt: the diagonal is the positive, the other B−1 prompts are the negatives.

    A critic can only win here by recognising the example's *own* prompt among prompts, so the bound
    ``log B − loss`` stays informative where prompts-versus-non-prompts negatives saturate. A batch of one
    example has no negatives and gives 0.
    """
    if scores.shape[0] < 2:
        return scores.new_zeros(scores.shape[0])
    return torch.logsumexp(scores, dim=-1) - scores.diagonal()


class Bilinear(nn.Module):
    """Score ``aᵀ W b / √D`` with ``W`` (D × D_right) initialised to the identity (its leading block when the
    right side is wider, as concatenated span states are)."""

    def __init__(self, hidden_size: int, right_size: int | None = None):
        super().__init__()
        self.weight = nn.Parameter(torch.eye(hidden_size, right_size or hidden_size))
        self.scale = hidden_size**-0.5

    def forward(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        # left (..., D), right (..., D_right) broadcastable
        return ((left @ self.weight) * right).sum(-1) * self.scale

    def pairwise(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        """Scores of every pair: ``[i, j] = score(left_j, right_i)`` for left (B, D) and right (B, D_right)."""
        return right @ (left @ self.weight).T * self.scale


class HeadMI(nn.Module):
    """Head loss: InfoNCE estimate of I(P; θ | X).

    θ is summarised per example as ``θ̃ = softmax(h(Z))ᵀ Θ`` (the head rows weighted by the model's own
    prediction, so no label is used) or as the plain mean of the rows. The positive is ``(P̄, θ̃)``; the
    K−1 negatives replace ``P̄`` with input embeddings of tokens drawn from the example's own context.
    """

    def __init__(self, hidden_size: int, summary: str = "predicted", feature_size: int | None = None):
        super().__init__()
        if summary not in ("predicted", "mean"):
            raise ValueError(f"head summary must be 'predicted' or 'mean', got {summary!r}")
        self.summary = summary
        self.critic = Bilinear(hidden_size, feature_size)

    def summarise(self, logits: torch.Tensor, head_weight: torch.Tensor) -> torch.Tensor:
        if self.summary == "mean":
            return head_weight.mean(0).expand(logits.shape[0], -1)
        return logits.softmax(-1) @ head_weight

    def forward(
        self, prompt_mean: torch.Tensor, logits: torch.Tensor, head_weight: torch.Tensor, context_negatives: torch.Tensor
    ) -> torch.Tensor:
        theta = self.summarise(logits, head_weight)  # (B, D)
        positive = self.critic(prompt_mean, theta)  # (B,)
        negatives = self.critic(context_negatives, theta.unsqueeze(1))  # (B, K-1)
        return info_nce(positive, negatives)

    def in_batch(self, prompt_mean: torch.Tensor, logits: torch.Tensor, head_weight: torch.Tensor) -> torch.Tensor:
        """The same bound with the other examples' prompts ``P̄_j`` as the negatives of ``θ̃_i``."""
        theta = self.summarise(logits, head_weight)
        return in_batch_info_nce(self.critic.pairwise(prompt_mean, theta))


class RepresentationMI(nn.Module):
    """Representation loss: InfoNCE estimate of I(P; Z | X) with Gaussian variational samples.

    ``z⁺ ~ N(f_μ(Z), σ(Z))`` from the prompted pass is the positive; K samples ``z⁻ ~ N(f_μ(Z'), σ(Z'))``
    from the no-prompt pass are the negatives, since ``Z'`` never saw ``P``.
    """

    def __init__(self, hidden_size: int, feature_size: int | None = None):
        super().__init__()
        self.f_mu = nn.Linear(feature_size or hidden_size, hidden_size)
        self.f_sigma = nn.Linear(feature_size or hidden_size, hidden_size)
        self.critic = Bilinear(hidden_size)

    def gaussian(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.f_mu(z), F.softplus(self.f_sigma(z)) + 1e-4

    def forward(
        self,
        prompt_mean: torch.Tensor,
        z_prompted: torch.Tensor,
        z_plain: torch.Tensor,
        n_negatives: int,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the per-example InfoNCE loss and the KL of both Gaussians to N(0, I) (for the optional term)."""
        mu, sigma = self.gaussian(z_prompted)
        mu_neg, sigma_neg = self.gaussian(z_plain)
        noise = standard_normal(mu.shape, generator, mu)
        positive_sample = mu + sigma * noise
        noise_neg = standard_normal((mu.shape[0], n_negatives, mu.shape[1]), generator, mu)
        negative_samples = mu_neg.unsqueeze(1) + sigma_neg.unsqueeze(1) * noise_neg
        positive = self.critic(prompt_mean, positive_sample)
        negatives = self.critic(prompt_mean.unsqueeze(1), negative_samples)
        kl = gaussian_kl(mu, sigma) + gaussian_kl(mu_neg, sigma_neg)
        return info_nce(positive, negatives), kl

    def in_batch(
        self, prompt_mean: torch.Tensor, z_prompted: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The bound with the other examples' prompts as negatives: one sample ``z_i ~ N(f_μ(Z_i), σ(Z_i))``
        per example, scored against every ``P̄_j``; needs no no-prompt pass. Returns InfoNCE and KL."""
        mu, sigma = self.gaussian(z_prompted)
        sample = mu + sigma * standard_normal(mu.shape, generator, mu)
        return in_batch_info_nce(self.critic.pairwise(prompt_mean, sample)), gaussian_kl(mu, sigma)


def standard_normal(shape: tuple[int, ...] | torch.Size, generator: torch.Generator | None, like: torch.Tensor) -> torch.Tensor:
    """N(0, I) noise drawn on the generator's device (the CPU for the training loop's generators) and moved
    to ``like``'s device, so one seed gives the same draws on every device."""
    device = generator.device if generator is not None else like.device
    return torch.randn(shape, generator=generator, device=device, dtype=like.dtype).to(like.device)


def gaussian_kl(mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """KL(N(μ, diag σ²) ‖ N(0, I)) per example."""
    return 0.5 * (sigma.pow(2) + mu.pow(2) - 1.0 - 2.0 * sigma.log()).sum(-1)


def sample_context_negatives(
    embeddings: torch.Tensor, input_ids: torch.Tensor, context_positions: torch.Tensor, context_mask: torch.Tensor,
    count: int, generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw ``count`` context tokens per example (with replacement) and return their input embeddings (B, count, D)."""
    weights = context_mask.to(torch.float32)
    empty = weights.sum(-1) == 0
    if empty.any():
        weights = weights.clone()
        weights[empty, 0] = 1.0  # an example with no text token falls back to position 0 (its first token)
    if generator is not None:
        weights = weights.to(generator.device)  # drawn where the generator lives: same draws on every device
    picks = torch.multinomial(weights, count, replacement=True, generator=generator)  # (B, count)
    positions = context_positions.gather(1, picks.to(context_positions.device))
    token_ids = input_ids.gather(1, positions)
    return embeddings(token_ids)
