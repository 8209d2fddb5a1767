"""In-batch objectives of the top-lora kind: every pair of a batch scored from one encoding of each text."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional


class SupervisedContrastive(nn.Module):
    """Supervised contrastive loss (Khosla et al. 2020) over L2-normalised embeddings, one view per text.

    The same quantity as ``setfit.losses.SupConLoss`` with ``base_temperature`` equal to the temperature (tests check
    it; setfit scales by τ / 0.07 by default, which only rescales the learning rate), except for an anchor whose class has no
    other member in the batch: setfit divides by its zero positives (NaN); here it only serves as a negative.
    Few-shot draws of many-class tasks have such anchors.
    """

    def __init__(self, temperature: float = 0.07):
        super().__init__()
        self.temperature = temperature

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        features = functional.normalize(embeddings, dim=-1)
        logits = features @ features.T / self.temperature
        self_mask = torch.eye(len(labels), dtype=torch.bool, device=logits.device)
        logits = logits.masked_fill(self_mask, float("-inf"))
        log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
        positives = (labels[:, None] == labels[None, :]) & ~self_mask
        counts = positives.sum(1)
        anchors = counts > 0
        if not anchors.any():  # no text of the batch has another of its class: nothing to score (not NaN)
            return embeddings.sum() * 0.0
        mean_positive = log_prob.masked_fill(~positives, 0.0).sum(1)[anchors] / counts[anchors]
        return -mean_positive.mean()


class BatchPairs(nn.Module):
    """SetFit's objective on every pair of the batch: the squared error between the cosine similarity of two
    texts and 1 (same class) or 0 (different classes), as SetFit's ``CosineSimilarityLoss`` scores its pairs."""

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if len(labels) < 2:  # a batch of one text has no pair (not NaN)
            return embeddings.sum() * 0.0
        features = functional.normalize(embeddings, dim=-1)
        similarity = features @ features.T
        target = (labels[:, None] == labels[None, :]).to(similarity.dtype)
        rows, cols = torch.triu_indices(len(labels), len(labels), offset=1, device=similarity.device)
        return functional.mse_loss(similarity[rows, cols], target[rows, cols])


class BatchAllTriplet(nn.Module):
    """sentence-transformers' batch-all triplet loss (every valid triplet of the batch) on cosine distance."""

    def __init__(self, margin: float = 0.25):
        super().__init__()
        from sentence_transformers.sentence_transformer.losses import (
            BatchAllTripletLoss,
            BatchHardTripletLossDistanceFunction,
        )

        self.loss = BatchAllTripletLoss(model=nn.Identity(), margin=margin,
                                        distance_metric=BatchHardTripletLossDistanceFunction.cosine_distance)

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss.batch_all_triplet_loss(labels, embeddings)


LOSSES = {"supcon": SupervisedContrastive, "pairs": BatchPairs, "batch-all": BatchAllTriplet}


def make_loss(name: str, temperature: float, margin: float) -> nn.Module:
    """The objective ``name`` (a key of :data:`LOSSES`) with its one setting."""
    if name == "supcon":
        return SupervisedContrastive(temperature)
    if name == "batch-all":
        return BatchAllTriplet(margin)
    return BatchPairs()
