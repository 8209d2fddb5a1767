"""Exact and sketched (approximate, Algorithm 1) Newton iterations for the softmax-regression loss."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from infoprompt.theory.softmax_regression import (
    Matrix,
    PointEvaluation,
    SoftmaxRegressionProblem,
    scaled_gram,
)


@dataclass(frozen=True)
class HessianEstimate:
    """A d×d (approximate) Hessian and how many rows of A went into it."""

    matrix: np.ndarray
    rows_used: int


HessianOperator = Callable[[PointEvaluation], HessianEstimate]


@dataclass(frozen=True)
class IterationRecord:
    """State after ``iteration`` steps (iteration 0 is the starting point).

    ``seconds`` is the wall time of this step (Hessian, solve, evaluation of the new point; for iteration 0
    the first evaluation), ``elapsed`` the running total, ``rows_used`` the rows of A behind the Hessian
    (n for the exact one), ``step_size`` the backtracking factor (1.0 without line search).
    """

    iteration: int
    loss: float
    grad_norm: float
    step_norm: float
    dist_to_opt: float | None
    seconds: float
    elapsed: float
    rows_used: int
    step_size: float


@dataclass(frozen=True, eq=False)
class NewtonResult:
    """Final point, per-iteration history and why the iteration stopped."""

    method: str
    x: np.ndarray
    history: list[IterationRecord]
    converged: bool
    stop_reason: str
    iterates: list[np.ndarray]

    @property
    def iterations(self) -> int:
        return self.history[-1].iteration

    @property
    def total_seconds(self) -> float:
        return self.history[-1].elapsed

    @property
    def seconds_per_iteration(self) -> float:
        steps = [record.seconds for record in self.history[1:]]
        return float(np.mean(steps)) if steps else 0.0


# ---- Hessian operators ------------------------------------------------------------------------------------


class ExactHessian:
    """``Aᵀ diag(δ) A`` plus the exact rank-2 part: O(nnz(A)·d) per call, no n×n matrix."""

    def __init__(self, problem: SoftmaxRegressionProblem) -> None:
        self.problem = problem

    def __call__(self, evaluation: PointEvaluation) -> HessianEstimate:
        return HessianEstimate(evaluation.hessian(self.problem.A), self.problem.n)


@dataclass(frozen=True)
class SketchConfig:
    """Knobs of the leverage-score row sample that replaces ``Aᵀ diag(δ) A``.

    The sample size follows the matrix-Chernoff form ``s = ⌈oversampling · d · ln(d/δ_fail) / accuracy²⌉``
    (constant 1 by default, which is empirical, not the worst-case constant). ``refresh_ratio`` bounds how
    much the diagonal may drift, as ``max(δ/δ_ref) / min(δ/δ_ref)``, before leverage scores are recomputed.
    """

    accuracy: float = 0.25
    failure_probability: float = 0.01
    oversampling: float = 1.0
    sample_size: int | None = None
    embedding_rows: int | None = None
    jl_dim: int = 8
    uniform_mix: float = 0.1
    refresh_ratio: float = 2.0

    def __post_init__(self) -> None:
        if not 0.0 < self.accuracy < 1.0:
            raise ValueError(f"accuracy must lie in (0, 1), got {self.accuracy}")
        if not 0.0 < self.failure_probability < 1.0:
            raise ValueError(f"failure_probability must lie in (0, 1), got {self.failure_probability}")
        if not 0.0 <= self.uniform_mix < 1.0:
            raise ValueError(f"uniform_mix must lie in [0, 1), got {self.uniform_mix}")
        if self.sample_size is not None and self.sample_size < 1:
            raise ValueError(f"sample_size must be positive, got {self.sample_size}")
        if self.jl_dim < 1 or self.refresh_ratio < 1.0 or self.oversampling <= 0.0:
            raise ValueError("jl_dim must be >= 1, refresh_ratio >= 1 and oversampling > 0")

    def base_sample_size(self, d: int) -> int:
        if self.sample_size is not None:
            return self.sample_size
        log_term = math.log(max(d, 2) / self.failure_probability)
        return math.ceil(self.oversampling * d * log_term / self.accuracy**2)


def approximate_leverage_scores(
    A: Matrix,
    weights: np.ndarray,
    rng: np.random.Generator,
    *,
    embedding_rows: int | None = None,
    jl_dim: int = 8,
) -> np.ndarray:
    """Leverage scores of ``diag(√|weights|) A`` up to a constant factor.

    A CountSketch of ``embedding_rows`` rows gives R with ``M R⁻¹`` near-orthonormal (one pass over A),
    and a Gaussian d×``jl_dim`` matrix G compresses the row norms of ``M R⁻¹`` (a second pass), so the
    cost is O(nnz(A)·jl_dim + m·d²) rather than the O(n·d²) of an exact QR of the n×d matrix.
    """
    n, d = A.shape
    root = np.sqrt(np.abs(weights))
    # The O(d²) rows a CountSketch needs to be a subspace embedding with small distortion are not needed for
    # constant-factor scores: 10·d rows already matched 5,000 rows at d = 50 (docs/theory.md), so 20·d.
    m = embedding_rows if embedding_rows is not None else 20 * d
    if m >= n:
        scaled = A.multiply(root[:, None]).toarray() if sp.issparse(A) else A * root[:, None]
        small = scaled
    else:
        buckets = rng.integers(0, m, size=n)
        signs = rng.choice(np.array([-1.0, 1.0]), size=n)
        # CSC: one entry per column, so S·A is a single scatter pass (measured ~2x faster than CSR here).
        sketch = sp.csc_matrix((signs * root, (buckets, np.arange(n))), shape=(m, n))
        small = sketch @ A
        small = small.toarray() if sp.issparse(small) else np.asarray(small)
    r = scipy.linalg.qr(small, mode="r", check_finite=False)[0][:d, :d]
    diag = np.abs(np.diag(r))
    # A rank-deficient sketch would make R singular; a relative floor keeps R⁻¹ finite (such rows then
    # simply get large scores, i.e. are over- rather than under-sampled).
    floor = 1e-12 * max(float(diag.max(initial=0.0)), 1e-300)
    r = r + np.diag(np.where(diag < floor, floor, 0.0))
    gaussian = rng.standard_normal((d, jl_dim)) / math.sqrt(jl_dim)
    compressed = scipy.linalg.solve_triangular(r, gaussian, check_finite=False)
    rows = np.asarray(A @ compressed) * root[:, None]
    return np.einsum("ij,ij->i", rows, rows)


class LeverageScoreHessian:
    """Approximate Hessian ``H̃ = Aᵀ D̃ A + (exact rank-2 part)`` from a leverage-score row sample.

    ``D̃`` is supported on ``s ≪ n`` sampled rows, reweighted by ``1/(s·p_i)`` so ``E[AᵀD̃A] = Aᵀdiag(δ)A``.
    Matrix-Chernoff bounds give ``(1 − ε)·Aᵀdiag(δ)A ⪯ AᵀD̃A ⪯ (1 + ε)·Aᵀdiag(δ)A`` with probability
    1 − δ_fail when δ ≥ 0, ``p_i`` is within a constant of the leverage scores of ``diag(√δ)A`` and
    ``s = C·d·ln(d/δ_fail)/ε²``; the constant C here (``SketchConfig.oversampling``) is set from
    measurements, not from the worst-case proof. δ > 0 holds under the regulariser bound (docs/theory.md),
    and the error, at most ε·Aᵀdiag(δ)A, is then small against the full Hessian because W² dominates both.
    Negative δ entries are still sampled (by |δ|) and keep the estimator unbiased, but then the spectral
    statement no longer applies.

    Leverage scores are computed once and reused while the diagonal stays within ``refresh_ratio`` of the
    one they were computed for: if ``δ = r∘δ_ref`` then ``r_i·τ_ref,i`` is within a factor
    ``max r / min r`` of the current score, and the sample size is multiplied by that factor.
    Per-iteration cost is then O(n) for probabilities plus O(s·d²), on top of the O(nnz(A)) gradient pass.
    """

    def __init__(
        self, problem: SoftmaxRegressionProblem, config: SketchConfig, rng: np.random.Generator
    ) -> None:
        self.problem = problem
        self.config = config
        self.rng = rng
        self._reference: np.ndarray | None = None
        self._scores: np.ndarray | None = None
        self.refreshes = 0

    def refresh_scores(self, magnitude: np.ndarray) -> None:
        """Recompute leverage scores for ``diag(magnitude)^{1/2} A`` and make it the reference diagonal."""
        self._reference = magnitude
        self._scores = approximate_leverage_scores(
            self.problem.A,
            magnitude,
            self.rng,
            embedding_rows=self.config.embedding_rows,
            jl_dim=self.config.jl_dim,
        )
        self.refreshes += 1

    def sample(self, diagonal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distinct sampled row indices and their weights in ``D̃`` (already multiplied by δ_i)."""
        n = diagonal.shape[0]
        magnitude = np.maximum(np.abs(diagonal), np.finfo(float).tiny)
        drift = 1.0
        if self._reference is not None:
            ratio = magnitude / self._reference
            drift = float(ratio.max() / ratio.min())
        if self._reference is None or drift > self.config.refresh_ratio:
            self.refresh_scores(magnitude)
            ratio, drift = np.ones(n), 1.0
        scores = np.maximum(self._scores * ratio, 0.0)
        total = scores.sum()
        importance = scores / total if total > 0 else np.full(n, 1.0 / n)
        mix = self.config.uniform_mix
        probabilities = (1.0 - mix) * importance + mix / n
        size = math.ceil(self.config.base_sample_size(self.problem.d) * drift)
        if size >= n:
            return np.arange(n), diagonal.copy()
        cdf = np.cumsum(probabilities)
        draws = np.searchsorted(cdf, self.rng.random(size) * cdf[-1], side="right")
        rows, counts = np.unique(np.minimum(draws, n - 1), return_counts=True)
        return rows, diagonal[rows] * counts / (size * probabilities[rows])

    def __call__(self, evaluation: PointEvaluation) -> HessianEstimate:
        rows, weights = self.sample(evaluation.hessian_diagonal)
        sub = self.problem.A[rows]
        matrix = scaled_gram(sub, weights) + evaluation.hessian_low_rank()
        return HessianEstimate(matrix, int(rows.shape[0]))


# ---- the iteration ----------------------------------------------------------------------------------------


def _solve(matrix: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """``H⁻¹ g``: Cholesky when H is PD (the theorem's regime), otherwise symmetric LU or least squares."""
    try:
        factor = scipy.linalg.cho_factor(matrix, check_finite=False)
        return scipy.linalg.cho_solve(factor, gradient, check_finite=False)
    except np.linalg.LinAlgError:
        pass
    try:
        return scipy.linalg.solve(matrix, gradient, assume_a="sym", check_finite=False)
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(matrix, gradient, rcond=None)[0]


def _backtrack(
    problem: SoftmaxRegressionProblem, current: PointEvaluation, direction: np.ndarray
) -> tuple[np.ndarray, float]:
    """Armijo backtracking on ``x − t·p``; falls back to ``p = g`` if p is not a descent direction."""
    slope = float(current.gradient @ direction)
    if not slope > 0.0:
        direction, slope = current.gradient, float(current.gradient @ current.gradient)
    # Near x* the decrease is below the loss's round-off, which would reject even a perfect Newton step.
    slack = 1e-14 * max(1.0, abs(current.loss))
    step = 1.0
    for _ in range(60):
        candidate = current.x - step * direction
        if problem.loss(candidate) <= current.loss - 1e-4 * step * slope + slack:
            return candidate, step
        step *= 0.5
    return current.x - step * direction, step


def newton_method(
    problem: SoftmaxRegressionProblem,
    x0: np.ndarray,
    hessian: HessianOperator,
    *,
    tol: float = 1e-10,
    eps: float = 1e-10,
    max_iter: int = 50,
    line_search: bool = False,
    x_star: np.ndarray | None = None,
    method: str = "newton",
) -> NewtonResult:
    """Iterate ``x ← x − H⁻¹ g`` with H from ``hessian``.

    Algorithm 1 in the paper writes ``x_{t+1} ← x_t + H̃⁻¹ g``; with ``g = ∇L`` that is an ascent step, so
    the "+" is a sign slip and the descent update ``x − H̃⁻¹ g`` is used. Stops when ``‖g‖ ≤ tol`` or
    ``‖x_t − x_{t−1}‖ ≤ eps``, or after ``max_iter`` steps (``converged=False``). With ``tol = eps = 0``
    it runs exactly ``max_iter`` steps, like the fixed-T loop of Algorithm 1. ``line_search`` (off by
    default, as in Algorithm 1) enables Armijo backtracking, which makes the method globally convergent on
    convex instances but is not part of the analysed algorithm. Time spent computing ``‖x − x*‖`` is not
    counted in ``seconds``.
    """
    if max_iter < 0:
        raise ValueError(f"max_iter must be non-negative, got {max_iter}")
    x_star = None if x_star is None else np.asarray(x_star, dtype=np.float64)

    def distance(x: np.ndarray) -> float | None:
        return None if x_star is None else float(np.linalg.norm(x - x_star))

    start = time.perf_counter()
    current = problem.evaluate(x0)
    seconds = time.perf_counter() - start
    elapsed = seconds
    grad_norm = float(np.linalg.norm(current.gradient))
    history = [
        IterationRecord(0, current.loss, grad_norm, 0.0, distance(current.x), seconds, elapsed, 0, 0.0)
    ]
    iterates = [current.x.copy()]
    if grad_norm <= tol:
        return NewtonResult(method, current.x.copy(), history, True, "gradient", iterates)

    stop_reason, converged = "max_iter", False
    for iteration in range(1, max_iter + 1):
        tick = time.perf_counter()
        estimate = hessian(current)
        direction = _solve(estimate.matrix, current.gradient)
        if line_search:
            x_next, step = _backtrack(problem, current, direction)
        else:
            x_next, step = current.x - direction, 1.0
        following = problem.evaluate(x_next)
        seconds = time.perf_counter() - tick
        elapsed += seconds
        step_norm = float(np.linalg.norm(following.x - current.x))
        grad_norm = float(np.linalg.norm(following.gradient))
        current = following
        history.append(
            IterationRecord(
                iteration,
                current.loss,
                grad_norm,
                step_norm,
                distance(current.x),
                seconds,
                elapsed,
                estimate.rows_used,
                step,
            )
        )
        iterates.append(current.x.copy())
        if not np.all(np.isfinite(current.x)) or not math.isfinite(current.loss):
            stop_reason = "diverged"
            break
        if grad_norm <= tol:
            stop_reason, converged = "gradient", True
            break
        if step_norm <= eps:
            stop_reason, converged = "step", True
            break
    return NewtonResult(method, current.x.copy(), history, converged, stop_reason, iterates)


def exact_newton(problem: SoftmaxRegressionProblem, x0: np.ndarray, **options: object) -> NewtonResult:
    """Newton's method with the exact Hessian, O(nnz(A)·d + d³) per iteration."""
    return newton_method(problem, x0, ExactHessian(problem), method="exact", **options)  # type: ignore[arg-type]


def sketched_newton(
    problem: SoftmaxRegressionProblem,
    x0: np.ndarray,
    *,
    rng: np.random.Generator,
    sketch: SketchConfig | None = None,
    **options: object,
) -> NewtonResult:
    """Algorithm 1: approximate Newton with ``H̃ = Aᵀ D̃ A`` from a leverage-score row sample seeded by rng."""
    operator = LeverageScoreHessian(problem, sketch or SketchConfig(), rng)
    return newton_method(problem, x0, operator, method="sketched", **options)  # type: ignore[arg-type]


def solve_reference(
    problem: SoftmaxRegressionProblem,
    x0: np.ndarray | None = None,
    *,
    tol: float = 1e-11,
    max_iter: int = 200,
) -> np.ndarray:
    """A high-accuracy minimiser x* (exact Newton with backtracking) to measure ``‖x − x*‖`` against.

    Accepted when ``‖g‖ ≤ tol`` or when the Newton direction ``H⁻¹g`` is shorter than ``1e-13·(1 + ‖x‖)``:
    the gradient of a large instance has a round-off floor above any fixed tol, and near x* round-off in
    the loss also defeats the Armijo test, so the size of the full Newton step is the reliable signal.
    A ``RuntimeError`` is raised when neither happens (e.g. an unbounded loss with w = 0).
    """
    x = np.zeros(problem.d) if x0 is None else np.asarray(x0, dtype=np.float64)
    grad_norm = math.inf
    for _ in range(max_iter):
        current = problem.evaluate(x)
        grad_norm = float(np.linalg.norm(current.gradient))
        direction = _solve(current.hessian(problem.A), current.gradient)
        if grad_norm <= tol or np.linalg.norm(direction) <= 1e-13 * (1.0 + np.linalg.norm(x)):
            return current.x - direction
        x = _backtrack(problem, current, direction)[0]
    raise RuntimeError(
        f"reference solve did not converge in {max_iter} Newton iterations (‖g‖ = {grad_norm:.3g})"
    )
