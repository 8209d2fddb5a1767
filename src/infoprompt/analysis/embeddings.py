"""The token-embedding matrix as a space: ordinary rows, their statistics and their top-2 principal plane."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infoprompt.backbones import Backbone


def ordinary_rows(backbone: Backbone) -> torch.Tensor:
    """Embeddings (V', D) of every vocabulary token except the tokenizer's special tokens, on the CPU (also
    when a training run left the encoder on a GPU), where the plane, its grids and the random draws live."""
    weight = backbone.input_embeddings.weight.detach().to("cpu", torch.float32)
    keep = torch.ones(weight.shape[0], dtype=torch.bool)
    special = [i for i in set(backbone.tokenizer.all_special_ids) if 0 <= i < weight.shape[0]]
    keep[torch.tensor(special, dtype=torch.long)] = False
    return weight[keep]


def embedding_statistics(backbone: Backbone) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and per-dimension standard deviation of the ordinary token embeddings."""
    rows = ordinary_rows(backbone)
    return rows.mean(0), rows.std(0)


@dataclass
class Plane:
    """A 2-D affine subspace of embedding space: ``origin + a·axes[0] + b·axes[1]``.

    Attributes:
        origin: (D,) the mean token embedding.
        axes: (2, D) orthonormal principal directions, largest variance first.
        variance: (2,) variance of the token embeddings along each axis.
        explained: (2,) fraction of the total variance each axis explains.
    """

    origin: torch.Tensor
    axes: torch.Tensor
    variance: torch.Tensor
    explained: torch.Tensor

    def project(self, vectors: torch.Tensor) -> torch.Tensor:
        """Coordinates (..., 2) of ``vectors`` (..., D): offsets from the origin along the two axes."""
        return (vectors.to(torch.float32) - self.origin) @ self.axes.T

    def points(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """Embedding vectors (len(ys), len(xs), D) at every grid offset (row = y, column = x)."""
        grid_y, grid_x = torch.meshgrid(ys.to(torch.float32), xs.to(torch.float32), indexing="ij")
        return self.origin + grid_x.unsqueeze(-1) * self.axes[0] + grid_y.unsqueeze(-1) * self.axes[1]


def principal_plane(rows: torch.Tensor) -> Plane:
    """Top-2 principal components of embedding rows (V, D), signs fixed so the result is deterministic."""
    rows = rows.to(torch.float64)
    origin = rows.mean(0)
    centred = rows - origin
    covariance = centred.T @ centred / max(rows.shape[0] - 1, 1)
    values, vectors = torch.linalg.eigh(covariance)  # ascending
    order = torch.argsort(values, descending=True)[:2]
    axes = vectors[:, order].T.clone()
    for axis in axes:
        # An eigenvector's sign is arbitrary: make its largest-magnitude component positive.
        if axis[axis.abs().argmax()] < 0:
            axis.neg_()
    top = values[order].clamp_min(0)
    total = values.clamp_min(0).sum().clamp_min(1e-30)
    return Plane(
        origin=origin.float(), axes=axes.float(), variance=top.float(), explained=(top / total).float()
    )
