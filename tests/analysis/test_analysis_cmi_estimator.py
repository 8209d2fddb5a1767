"""The InfoNCE CMI estimator on synthetic Gaussians whose conditional mutual information is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from infoprompt.analysis.cmi import EstimatorConfig, Inputs, estimate, gaussian_mi, summarise
from infoprompt.errors import UserError


def conditional_gaussians(n: int, dim: int, k: int, strength: float, seed: int) -> Inputs:
    """X ~ N(0, I), P ~ N(0, I), Z = X + a·P + ε; negatives: the same X under K fresh draws of P and ε.

    I(P; Z | X) = dim/2 · log(1 + a²), and the negatives are draws from p(z | X), so the bound is valid.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    p = torch.randn(n, dim, generator=g)
    z = x + strength * p + torch.randn(n, dim, generator=g)
    negatives = (
        x.unsqueeze(1) + strength * torch.randn(n, k, dim, generator=g) + torch.randn(n, k, dim, generator=g)
    )
    return Inputs(prompt=p, z=z, negatives=negatives)


def true_cmi(dim: int, strength: float) -> float:
    return 0.5 * dim * math.log(1.0 + strength**2)


# Small tensors: a second intra-op thread only adds contention on the shared CPU.
pytestmark = pytest.mark.usefixtures("one_thread")


CONFIG = EstimatorConfig(n_negatives=32, steps=200, batch_size=128, lr=1e-2, score_draws=4, seed=0)


def test_bound_is_below_and_close_to_the_true_cmi_on_an_easy_case():
    # Weak dependence per dimension: the bilinear critic is then close to the optimal (quadratic) one.
    dim, strength = 4, 0.4
    fit = conditional_gaussians(768, dim, 32, strength, seed=1)
    score = conditional_gaussians(2048, dim, 32, strength, seed=2)
    result = estimate(fit, score, CONFIG)
    truth = true_cmi(dim, strength)  # 0.297 nats, well under log(33) = 3.5
    s = summarise(result.values)
    assert s.mean <= truth + 3 * s.std / math.sqrt(s.n)
    assert s.mean >= 0.75 * truth


def test_bound_never_exceeds_log_k_plus_one_even_when_the_truth_does():
    dim, strength = 8, 3.0
    fit = conditional_gaussians(512, dim, 32, strength, seed=3)
    score = conditional_gaussians(512, dim, 32, strength, seed=4)
    result = estimate(fit, score, CONFIG)
    assert true_cmi(dim, strength) > 2 * result.cap
    assert result.values.max() <= result.cap + 1e-5
    assert result.values.mean() > 0.7 * result.cap  # a strong dependence still gets near the cap


def test_independent_prompt_gives_about_zero():
    fit = conditional_gaussians(512, 4, 32, 0.0, seed=5)
    score = conditional_gaussians(512, 4, 32, 0.0, seed=6)
    s = summarise(estimate(fit, score, CONFIG).values)
    assert abs(s.mean) < 0.1


def test_single_reference_state_per_example_and_determinism():
    g = torch.Generator().manual_seed(0)
    p, z, ref = (
        torch.randn(40, 6, generator=g),
        torch.randn(40, 6, generator=g),
        torch.randn(40, 6, generator=g),
    )
    config = EstimatorConfig(n_negatives=8, steps=20, batch_size=16, seed=3)
    first = estimate(Inputs(p[:20], z[:20], ref[:20]), Inputs(p[20:], z[20:], ref[20:]), config)
    again = estimate(Inputs(p[:20], z[:20], ref[:20]), Inputs(p[20:], z[20:], ref[20:]), config)
    assert first.values.shape == (20,) and first.fit_curve.shape == (20,)
    np.testing.assert_array_equal(first.values, again.values)
    assert first.values.max() <= math.log(9) + 1e-5


def test_too_few_candidates_or_examples_are_refused():
    inputs = conditional_gaussians(10, 3, 4, 0.5, seed=0)
    with pytest.raises(UserError, match="distinct"):
        estimate(inputs, inputs, EstimatorConfig(n_negatives=8, steps=1))
    with pytest.raises(UserError, match="at least 2 fit"):
        estimate(inputs.subset(torch.arange(1)), inputs, EstimatorConfig(n_negatives=4, steps=1))
    with pytest.raises(ValueError, match="do not match"):
        Inputs(prompt=torch.zeros(3, 2), z=torch.zeros(3, 4), negatives=torch.zeros(3, 4))


def test_summary_interval_brackets_the_mean():
    values = np.random.default_rng(0).normal(1.0, 0.5, size=400)
    s = summarise(values, seed=0)
    assert s.ci_low < s.mean < s.ci_high
    assert abs(s.mean - 1.0) < 0.1
    assert s.ci_high - s.ci_low == pytest.approx(2 * 1.96 * 0.5 / 20, rel=0.25)


def test_gaussian_mi_formula():
    assert gaussian_mi(0.0, 5) == 0.0
    assert gaussian_mi(0.6, 2) == pytest.approx(-math.log(1 - 0.36))
