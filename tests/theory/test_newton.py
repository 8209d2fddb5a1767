"""Exact Newton converges quadratically; sketched Newton (Algorithm 1) reaches ε within the predicted T."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from infoprompt.theory import (
    HessianEstimate,
    LeverageScoreHessian,
    SketchConfig,
    SoftmaxRegressionProblem,
    approximate_leverage_scores,
    exact_newton,
    newton_method,
    random_instance,
    sketched_newton,
    solve_reference,
)

# e_{k+1} ≤ C·e_k² with C = 1: measured ratios are ≤ 0.05 on these instances, a wrong Hessian gives ≫ 1.
QUADRATIC_C = 1.0


def _errors(result) -> list[float]:
    return [record.dist_to_opt for record in result.history]


def _quadratic_ratios(errors: list[float], floor: float = 1e-13) -> list[float]:
    return [errors[k + 1] / errors[k] ** 2 for k in range(len(errors) - 1) if errors[k + 1] > floor]


def _small(seed: int):
    problem = random_instance(40, 5, np.random.default_rng(seed))
    return problem, solve_reference(problem)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("radius", (0.5, 2.0))
def test_exact_newton_converges_quadratically(seed: int, radius: float) -> None:
    problem, x_star = _small(seed)
    direction = np.random.default_rng(seed).standard_normal(problem.d)
    x0 = x_star + radius * direction / np.linalg.norm(direction)
    result = exact_newton(problem, x0, tol=0.0, eps=0.0, max_iter=8, x_star=x_star)
    errors = _errors(result)
    ratios = _quadratic_ratios(errors)
    assert len(ratios) >= 2, errors  # at least two steps above the round-off floor were checked
    assert max(ratios) <= QUADRATIC_C, ratios
    assert errors[-1] <= 1e-14


def test_quadratic_check_rejects_a_wrong_hessian() -> None:
    """Negative control: a Hessian off by 10% gives linear convergence, which the check must catch."""
    problem, x_star = _small(0)
    wrong = lambda evaluation: HessianEstimate(1.1 * evaluation.hessian(problem.A), problem.n)  # noqa: E731
    result = newton_method(problem, x_star + 0.5, wrong, tol=0.0, eps=0.0, max_iter=10, x_star=x_star)
    assert max(_quadratic_ratios(_errors(result))) > 100 * QUADRATIC_C


def test_update_is_x_minus_h_inverse_g() -> None:
    """The paper's x + H⁻¹g increases the loss on a convex instance; x − H⁻¹g decreases it."""
    problem, x_star = _small(1)
    x = x_star + 0.3
    evaluation = problem.evaluate(x)
    step = np.linalg.solve(evaluation.hessian(problem.A), evaluation.gradient)
    assert problem.loss(x - step) < evaluation.loss < problem.loss(x + step)
    result = exact_newton(problem, x, max_iter=1)
    assert np.allclose(result.x, x - step)


def _tall(seed: int, n: int = 20_000, d: int = 5):
    problem = random_instance(n, d, np.random.default_rng(seed))
    return problem, solve_reference(problem)


def predicted_iterations(initial_error: float, eps: float, accuracy: float) -> int:
    """T = ⌈log(e0/ε) / log(1/ρ)⌉ with ρ = a/(1 − a), the contraction a (1 ± a)-spectral Hessian gives."""
    rho = accuracy / (1.0 - accuracy)
    return math.ceil(math.log(initial_error / eps) / math.log(1.0 / rho))


@pytest.mark.parametrize("seed", range(5))
def test_sketched_newton_reaches_eps_within_predicted_iterations(seed: int) -> None:
    problem, x_star = _tall(seed)
    x0, eps, config = np.zeros(problem.d), 1e-8, SketchConfig()
    e0 = float(np.linalg.norm(x0 - x_star))
    T = predicted_iterations(e0, eps, config.accuracy)  # 15 for e0 ≈ 0.05: log base 3
    assert math.ceil(math.log(e0 / eps)) >= T  # never more than the paper's T = log(‖x0 − x*‖/ε)
    rng = np.random.default_rng(1000 + seed)
    result = sketched_newton(problem, x0, rng=rng, sketch=config, tol=0.0, eps=0.0, max_iter=T, x_star=x_star)
    errors = _errors(result)
    assert result.iterations == T
    assert errors[-1] <= eps, errors
    rho = config.accuracy / (1 - config.accuracy)
    assert all(errors[k + 1] <= rho * errors[k] for k in range(T) if errors[k] > 1e-12), errors
    rows = [record.rows_used for record in result.history[1:]]
    assert max(rows) < problem.n / 20  # the Hessian really comes from a row sample


def test_sketched_run_is_deterministic_given_the_seed() -> None:
    problem, x_star = _tall(0, n=5000)
    config = SketchConfig(sample_size=200)
    runs = [
        sketched_newton(problem, np.zeros(problem.d), rng=np.random.default_rng(s), sketch=config, max_iter=4)
        for s in (3, 3, 4)
    ]
    assert np.array_equal(runs[0].x, runs[1].x)
    assert [r.loss for r in runs[0].history] == [r.loss for r in runs[1].history]
    assert not np.array_equal(runs[0].x, runs[2].x)


def _coherent(seed: int, n: int = 20_000, d: int = 8, heavy: int = 16) -> SoftmaxRegressionProblem:
    """Rows 0..heavy−1 scaled by 40 carry about half the leverage; uniform sampling misses them."""
    base = random_instance(n, d, np.random.default_rng(seed))
    A = base.A.copy()
    A[:heavy] *= 40.0
    return SoftmaxRegressionProblem(A, base.b, base.w)


def _spectral_error(exact: np.ndarray, approximate: np.ndarray) -> float:
    inverse_root = np.linalg.inv(np.linalg.cholesky(exact))
    eigenvalues = np.linalg.eigvalsh(inverse_root @ approximate @ inverse_root.T)
    return float(max(abs(eigenvalues[0] - 1.0), abs(eigenvalues[-1] - 1.0)))


@pytest.mark.parametrize("seed", range(3))
def test_leverage_sample_approximates_the_hessian_spectrally(seed: int) -> None:
    problem = _coherent(seed)
    evaluation = problem.evaluate(np.zeros(problem.d))
    exact = evaluation.hessian(problem.A)
    config = SketchConfig(accuracy=0.25)
    leverage, near_uniform = [], []
    for draw in range(5):
        estimate = LeverageScoreHessian(problem, config, np.random.default_rng(draw))(evaluation)
        assert estimate.rows_used < problem.n / 20
        leverage.append(_spectral_error(exact, estimate.matrix))
        uniform = SketchConfig(accuracy=0.25, uniform_mix=0.999)
        near_uniform.append(
            _spectral_error(
                exact, LeverageScoreHessian(problem, uniform, np.random.default_rng(draw))(evaluation).matrix
            )
        )
    assert max(leverage) <= 0.3, leverage  # measured ≤ 0.194 for the default constant
    assert np.median(near_uniform) > 0.5, near_uniform  # negative control: same budget, no leverage


def test_approximate_leverage_scores_track_exact_ones() -> None:
    problem = _coherent(0, n=5000, d=6)
    weights = problem.evaluate(np.zeros(problem.d)).hessian_diagonal
    scaled = problem.A * np.sqrt(weights)[:, None]
    exact = np.sum(np.linalg.qr(scaled)[0] ** 2, axis=1)
    approx = approximate_leverage_scores(problem.A, weights, np.random.default_rng(0), embedding_rows=200)
    ratio = approx / exact
    assert exact.sum() == pytest.approx(problem.d)
    assert np.quantile(ratio, 0.01) > 0.1 and np.quantile(ratio, 0.99) < 4.0
    assert approx[:16].sum() > 0.3 * approx.sum()  # the heavy rows are found


def test_stopping_rules_and_history_records() -> None:
    problem, x_star = _small(2)
    x0 = np.zeros(problem.d)
    by_step = exact_newton(problem, x0, tol=0.0, eps=1e-6, x_star=x_star)
    assert by_step.converged and by_step.stop_reason == "step"
    assert by_step.history[-1].step_norm <= 1e-6 < by_step.history[-2].step_norm
    by_gradient = exact_newton(problem, x0, tol=1e-6, eps=0.0)
    assert by_gradient.stop_reason == "gradient" and by_gradient.history[-1].grad_norm <= 1e-6
    assert all(record.dist_to_opt is None for record in by_gradient.history)
    capped = exact_newton(problem, x0, tol=0.0, eps=0.0, max_iter=2)
    assert not capped.converged and capped.stop_reason == "max_iter" and capped.iterations == 2
    history = by_step.history
    assert [record.iteration for record in history] == list(range(len(history)))
    assert all(r.seconds >= 0 for r in history) and all(
        a.elapsed <= b.elapsed for a, b in zip(history, history[1:], strict=False)
    )
    assert all(record.step_size == 1.0 for record in history[1:])  # no damping unless asked
    assert len(by_step.iterates) == len(history)
    already = exact_newton(problem, x_star, tol=1e-6)
    assert already.iterations == 0 and already.stop_reason == "gradient"


def test_line_search_option_gives_monotone_descent_from_far_away() -> None:
    problem, x_star = _small(3)
    x0 = x_star + 25.0
    result = exact_newton(problem, x0, line_search=True, tol=1e-9, max_iter=100, x_star=x_star)
    losses = [record.loss for record in result.history]
    assert result.converged and result.history[-1].dist_to_opt < 1e-8
    assert all(b <= a + 1e-12 * abs(a) for a, b in zip(losses, losses[1:], strict=False))


def test_reference_solve_refuses_an_unbounded_loss() -> None:
    rng = np.random.default_rng(0)
    n = 10
    b = -np.abs(rng.standard_normal(n))  # −⟨b, log f⟩ → −∞ as any f_i → 0, and w = 0: no minimiser
    problem = SoftmaxRegressionProblem(rng.standard_normal((n, 2)), b, np.zeros(n))
    with pytest.raises(RuntimeError, match="did not converge"):
        solve_reference(problem, max_iter=30)


def test_theory_package_does_not_import_torch() -> None:
    code = "import sys, infoprompt.theory, infoprompt.theory.cli; print('torch' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "False"
