"""Roughness index: smooth surfaces score low, the same surfaces plus high-frequency noise score high."""

from __future__ import annotations

import numpy as np
import pytest

from infoprompt.analysis.roughness import line_profiles, normalised_total_variation, roughness_index

XS = np.linspace(-2.0, 2.0, 25)
YS = np.linspace(-2.0, 2.0, 25)
GX, GY = np.meshgrid(XS, YS)  # rows follow ys, columns xs


def test_a_bowl_has_one_valley_along_every_line():
    result = roughness_index(GX**2 + 0.5 * GY**2, XS, YS, n_directions=32, seed=0)
    assert result.mean == pytest.approx(2.0, abs=0.05)
    assert result.variance < 1e-3
    assert result.values.shape == (32,) and result.angles.shape == (32,)


def test_a_plane_is_monotone_and_a_constant_counts_as_smooth():
    assert roughness_index(GX + 2 * GY + 1, XS, YS, seed=1).mean == pytest.approx(1.0, abs=1e-9)
    assert roughness_index(np.full_like(GX, 3.0), XS, YS, seed=1).mean == 1.0


def test_smooth_function_is_less_rough_than_the_same_function_plus_high_frequency_noise():
    smooth = np.sin(GX) + np.cos(0.7 * GY)
    rng = np.random.default_rng(0)
    noisy = smooth + 0.3 * np.sin(9 * GX) * np.cos(9 * GY) + 0.1 * rng.standard_normal(GX.shape)
    r_smooth = roughness_index(smooth, XS, YS, seed=2)
    r_noisy = roughness_index(noisy, XS, YS, seed=2)
    assert r_smooth.mean < 2.5
    assert r_noisy.mean > 1.5 * r_smooth.mean
    # Same seed, same lines: the noise makes nearly every line rougher, not only the average.
    assert (r_noisy.values > r_smooth.values).mean() > 0.9


def test_index_is_free_of_the_units_of_the_loss():
    surface = np.sin(GX) * np.cos(GY) + 0.1 * GX
    a = roughness_index(surface, XS, YS, seed=3)
    b = roughness_index(1000 * surface + 7, XS, YS, seed=3)
    assert a.mean == pytest.approx(b.mean)


def test_profiles_follow_chords_through_the_centre():
    angles = np.array([0.0, np.pi / 2])
    profiles = line_profiles(GX, XS, YS, angles, samples=9)
    np.testing.assert_allclose(profiles[0], np.linspace(-2, 2, 9), atol=1e-12)  # along x: f = x
    np.testing.assert_allclose(profiles[1], 0.0, atol=1e-12)  # along y: x stays 0
    assert normalised_total_variation(np.array([0.0, 1.0, 0.0, 1.0])) == pytest.approx(3.0)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="does not match"):
        roughness_index(np.zeros((3, 4)), XS, YS)
    with pytest.raises(ValueError, match="2 × 2"):
        roughness_index(np.zeros((1, 1)), XS[:1], YS[:1])
