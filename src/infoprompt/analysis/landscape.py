"""Loss landscapes over one prompt vector: task and representation loss on a grid in the principal plane.

At a prompt vector ``p`` (one prompt token, the same for every example) the *task loss* is the cross-entropy
of a fixed head on the prompted pass with ``p`` inserted, and the *representation loss* is the InfoNCE
representation term ``nce_rep(p, Z(p), Z')`` of fixed critics; both are averaged over the same probe
examples. The representation term draws variational noise and negatives; the same draws are reused at every
grid point (common random numbers), so the surface shows how the loss changes with ``p``, not the noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from infoprompt.errors import UserError
from infoprompt.kinds.prompt.model import PromptClassifier
from infoprompt.progress import bar_disabled
from infoprompt.tasks import Example
from infoprompt.templates import Batch
from infoprompt.training.data import cache_features, encode_examples, prompted_batch


@dataclass
class Surfaces:
    """Loss values on a grid: rows follow ``ys`` (second principal axis), columns ``xs`` (first)."""

    xs: np.ndarray
    ys: np.ndarray
    task: np.ndarray  # (len(ys), len(xs))
    rep: np.ndarray | None  # (len(ys), len(xs)); None when the reference model has no representation critic


def grid_axis(extent: float, size: int) -> np.ndarray:
    if size < 2:
        raise UserError(f"the landscape grid needs at least 2 points per axis, got {size}")
    if not extent > 0:
        raise UserError(f"the landscape extent must be positive, got {extent}")
    return np.linspace(-extent, extent, size)


def auto_extent(coordinates: np.ndarray, spread: float, margin: float = 1.15) -> float:
    """Half-width covering every trajectory point (N, 2) and ±2 token-embedding stds along the first axis."""
    reach = float(np.abs(coordinates).max()) if coordinates.size else 0.0
    return margin * max(reach, 2.0 * spread)


def _repeat(batch: Batch, times: int) -> Batch:
    return Batch(
        **{name: None if value is None else value.repeat((times,) + (1,) * (value.dim() - 1))
           for name, value in vars(batch).items()}
    )


class LandscapeEvaluator:
    """Task and representation losses of a reference model at arbitrary single prompt vectors.

    ``points_per_pass`` grid points share one encoder call (their copies of the probe batch are stacked).
    """

    def __init__(
        self,
        model: PromptClassifier,
        probe_examples: Sequence[Example],
        noise_seed: int = 0,
        points_per_pass: int = 4,
    ):
        if model.config.n_prompts != 1:
            raise UserError(
                f"the landscape needs a reference model with one prompt token, got {model.config.n_prompts}"
            )
        self.model = model.cpu().eval()  # CPU math (CPU generators, numpy out), also for a model a run left on a GPU
        self.encoded = encode_examples(model, probe_examples)
        if self.encoded.labels is None:
            raise UserError("the landscape probe examples must all be labelled")
        if model.rep_mi is not None:
            cache_features(model, self.encoded, 64)
            if self.encoded.z_plain is None:
                raise UserError("the representation loss needs the no-prompt states of the probe examples")
        self.batch = prompted_batch(model, self.encoded, list(range(len(self.encoded))))
        self.noise_seed = noise_seed
        self.points_per_pass = max(1, points_per_pass)

    @property
    def has_rep(self) -> bool:
        return self.model.rep_mi is not None

    @torch.no_grad()
    def losses(self, points: torch.Tensor) -> tuple[np.ndarray, np.ndarray | None]:
        """Mean task and representation loss over the probe examples at each prompt vector (G, D)."""
        n = len(self.encoded)
        g = points.shape[0]
        prompts = (
            points.to(torch.float32).repeat_interleave(n, dim=0).unsqueeze(1)
        )  # (G·n, 1, D), point-major
        states = self.model.encode_states(_repeat(self.batch, g), prompts)
        z = self.model.readout(states, _repeat(self.batch, g).readout_position)
        labels = self.encoded.labels.repeat(g)
        ce = (
            torch.nn.functional.cross_entropy(self.model.head(z), labels, reduction="none").view(g, n).mean(1)
        )
        if not self.has_rep:
            return ce.numpy(), None
        rep = torch.empty(g)
        for index in range(g):
            # Common random numbers: the same noise and negatives at every grid point.
            generator = torch.Generator().manual_seed(self.noise_seed)
            block = slice(index * n, (index + 1) * n)
            nce, _ = self.model.rep_mi(
                prompts[block, 0], z[block], self.encoded.z_plain, self.model.options.n_negatives, generator
            )
            rep[index] = nce.mean()
        return ce.numpy(), rep.numpy()

    def surfaces(self, grid: torch.Tensor, xs: np.ndarray, ys: np.ndarray, progress: bool = True) -> Surfaces:
        """Evaluate every point of ``grid`` (len(ys), len(xs), D)."""
        flat = grid.reshape(-1, grid.shape[-1])
        task = np.empty(flat.shape[0])
        rep = np.empty(flat.shape[0]) if self.has_rep else None
        starts = range(0, flat.shape[0], self.points_per_pass)
        for start in tqdm(starts, desc="landscape grid", disable=bar_disabled(progress)):
            chunk = flat[start : start + self.points_per_pass]
            ce, nce = self.losses(chunk)
            task[start : start + len(chunk)] = ce
            if rep is not None:
                rep[start : start + len(chunk)] = nce
        shape = grid.shape[:2]
        return Surfaces(
            xs=xs, ys=ys, task=task.reshape(shape), rep=None if rep is None else rep.reshape(shape)
        )
