"""The condition report: PD vs l, empirical Hessian Lipschitz constant, and the regulariser bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infoprompt.theory import (
    SoftmaxRegressionProblem,
    check_conditions,
    exact_newton,
    random_instance,
    solve_reference,
    sufficient_w2_bound,
)


def _run(problem: SoftmaxRegressionProblem, x0: np.ndarray):
    x_star = solve_reference(problem)
    result = exact_newton(problem, x0, tol=0.0, eps=1e-12, x_star=x_star)
    return x_star, [x_star, *result.iterates]


def test_well_conditioned_instance_passes_the_checks_it_should() -> None:
    problem = random_instance(60, 4, np.random.default_rng(0))
    x0 = np.full(problem.d, 0.5)
    x_star, points = _run(problem, x0)
    report = check_conditions(problem, points, ell=1.0, x_star=x_star, x0=x0)
    assert report.hessian_at_least_l and report.hessian_min_eigenvalue >= 1.0
    assert report.meets_sufficient and report.min_w2 >= report.sufficient_w2_bound
    # With the O(·) constant read as 1 the paper's bound is astronomically larger than needed.
    assert not report.meets_paper_bound and report.paper_w2_bound_log > 10 * math.log(report.min_w2)
    assert report.lipschitz_empirical is not None and 0 < report.lipschitz_empirical < math.inf
    assert report.lipschitz_pairs > 0 and report.R >= 4.0
    assert report.initial_point_condition is False
    assert len(report.lines()) == 5


def test_lipschitz_estimate_is_the_largest_pairwise_ratio() -> None:
    problem = random_instance(30, 3, np.random.default_rng(1))
    rng = np.random.default_rng(1)
    points = [rng.standard_normal(3) * 0.2 for _ in range(4)]
    report = check_conditions(problem, points, ell=1.0)
    ratios = [
        np.linalg.norm(problem.hessian(p) - problem.hessian(q), 2) / np.linalg.norm(p - q)
        for i, p in enumerate(points)
        for q in points[i + 1 :]
    ]
    assert report.lipschitz_pairs == 6
    assert report.lipschitz_empirical == pytest.approx(max(ratios), rel=1e-9)
    if report.lipschitz_local is not None:
        assert report.lipschitz_local <= report.lipschitz_empirical


def test_coincident_points_are_not_used_for_the_lipschitz_ratio() -> None:
    problem = random_instance(30, 3, np.random.default_rng(2))
    x = np.ones(3)
    report = check_conditions(problem, [x, x + 1e-15, x], ell=1.0)
    assert report.lipschitz_pairs == 0 and report.lipschitz_empirical is None


def test_too_small_regulariser_fails_the_bound() -> None:
    rng = np.random.default_rng(3)
    n, d = 20, 3
    A, b = rng.standard_normal((n, d)), np.eye(n)[0]
    problem = SoftmaxRegressionProblem(A, b, np.zeros(n))
    points = [2.0 * rng.standard_normal(d) for _ in range(40)]
    report = check_conditions(problem, points, ell=1.0)
    assert not report.meets_sufficient and not report.hessian_at_least_l
    assert report.hessian_min_eigenvalue < 0  # a one-hot target and no regulariser: indefinite somewhere


def test_paper_bound_when_it_is_representable() -> None:
    """A tiny instance with R = 4, where 100M + l/σ² (c = 1) fits in a double: meeting it gives H ⪰ l·I."""
    rng = np.random.default_rng(4)
    n, d = 8, 2
    A = rng.standard_normal((n, d))
    A *= 2.0 / np.linalg.norm(A, 2)
    b = rng.random(n)
    b *= 1.0 / np.linalg.norm(b)
    probe = SoftmaxRegressionProblem(A, b, np.ones(n))
    report = check_conditions(probe, [np.zeros(d)], ell=1.0, x_star=np.zeros(d))
    assert report.R == 4.0 and report.log_M == pytest.approx(16.0 + math.log(n))
    w = np.full(n, math.sqrt(1.01 * math.exp(report.paper_w2_bound_log)))
    problem = SoftmaxRegressionProblem(A, b, w)
    x_star = solve_reference(problem)
    assert np.linalg.norm(x_star) <= 4.0
    points = [x_star, *(rng.standard_normal(d) for _ in range(5))]
    strong = check_conditions(problem, points, ell=1.0, x_star=x_star, x0=x_star)
    assert strong.meets_paper_bound and strong.meets_sufficient and strong.hessian_at_least_l
    assert strong.initial_point_condition is True


def test_sufficient_bound_is_infinite_without_full_column_rank() -> None:
    problem = SoftmaxRegressionProblem(np.ones((5, 2)), np.ones(5), np.ones(5))
    assert sufficient_w2_bound(problem, 1.0) == math.inf


def test_invalid_arguments() -> None:
    problem = random_instance(10, 2, np.random.default_rng(5))
    with pytest.raises(ValueError, match="at least one point"):
        check_conditions(problem, [], ell=1.0)
    with pytest.raises(ValueError, match="must be positive"):
        check_conditions(problem, [np.zeros(2)], ell=0.0)
