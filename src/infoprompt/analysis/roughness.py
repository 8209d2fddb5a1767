"""Roughness index of a 2-D surface: normalised total variation along random lines through its centre.

For a line through the centre of the grid at angle θ, sample the bilinear interpolant ``f`` at ``S`` evenly
spaced points of the chord from boundary to boundary and take

    r(θ) = Σ_s |f(t_{s+1}) − f(t_s)|  /  (max_s f − min_s f).

``r = 1`` means ``f`` is monotone along the line, ``r = 2`` one valley or one peak, and every further local
extremum adds about 2; dividing by the range makes the index free of the loss's units, so a task loss and a
representation loss on different scales compare. A line along which ``f`` is constant has ``r = 1``.
The index of a surface is the mean (and variance) of ``r`` over ``n_directions`` random angles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import RegularGridInterpolator


@dataclass
class Roughness:
    """Per-direction indices and their summary."""

    mean: float
    variance: float
    angles: np.ndarray  # (M,) radians in [0, π)
    values: np.ndarray  # (M,)
    samples: int

    def as_dict(self) -> dict[str, object]:
        return {
            "mean": self.mean,
            "variance": self.variance,
            "n_directions": int(self.values.size),
            "samples_per_line": self.samples,
        }


def line_profiles(
    surface: np.ndarray, xs: np.ndarray, ys: np.ndarray, angles: np.ndarray, samples: int
) -> np.ndarray:
    """Values (M, S) of the bilinear interpolant of ``surface`` (len(ys), len(xs)) along each chord."""
    surface = np.asarray(surface, dtype=np.float64)
    if surface.shape != (len(ys), len(xs)):
        raise ValueError(f"surface shape {surface.shape} does not match the axes ({len(ys)}, {len(xs)})")
    interpolate = RegularGridInterpolator(
        (np.asarray(ys, float), np.asarray(xs, float)), surface, method="linear"
    )
    cx, cy = (xs[0] + xs[-1]) / 2, (ys[0] + ys[-1]) / 2
    hx, hy = (xs[-1] - xs[0]) / 2, (ys[-1] - ys[0]) / 2
    profiles = np.empty((len(angles), samples))
    for row, theta in enumerate(angles):
        dx, dy = math.cos(theta), math.sin(theta)
        # Half-length of the chord: the line leaves the rectangle at the nearer boundary.
        reach = min(
            hx / abs(dx) if abs(dx) > 1e-12 else math.inf, hy / abs(dy) if abs(dy) > 1e-12 else math.inf
        )
        t = np.linspace(-reach, reach, samples)
        x = np.clip(cx + t * dx, xs[0], xs[-1])
        y = np.clip(cy + t * dy, ys[0], ys[-1])
        profiles[row] = interpolate(np.stack([y, x], axis=-1))
    return profiles


def normalised_total_variation(profile: np.ndarray) -> float:
    profile = np.asarray(profile, dtype=np.float64)
    spread = float(profile.max() - profile.min())
    if spread <= 1e-12 * (1.0 + float(np.abs(profile).max())):
        return 1.0
    return float(np.abs(np.diff(profile)).sum() / spread)


def roughness_index(
    surface: np.ndarray,
    xs: np.ndarray,
    ys: np.ndarray,
    n_directions: int = 64,
    samples: int | None = None,
    seed: int = 0,
) -> Roughness:
    """Mean and variance of the normalised total variation over ``n_directions`` lines through the centre."""
    xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    if len(xs) < 2 or len(ys) < 2:
        raise ValueError("the roughness index needs a grid of at least 2 × 2 points")
    if n_directions < 1:
        raise ValueError(f"n_directions must be at least 1, got {n_directions}")
    samples = samples or 4 * max(len(xs), len(ys))
    angles = np.random.default_rng(seed).uniform(0.0, math.pi, size=n_directions)
    values = np.array(
        [normalised_total_variation(p) for p in line_profiles(surface, xs, ys, angles, samples)]
    )
    variance = float(values.var(ddof=1)) if values.size > 1 else 0.0
    return Roughness(
        mean=float(values.mean()), variance=variance, angles=angles, values=values, samples=samples
    )
