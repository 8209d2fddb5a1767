"""Checks of the hypotheses of Lemma C.15, Lemma C.16 and Theorem D.1 on a concrete instance."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infoprompt.theory.softmax_regression import SoftmaxRegressionProblem, scaled_gram


def singular_value_range(problem: SoftmaxRegressionProblem) -> tuple[float, float]:
    """(σ_min(A), σ_max(A)) from the d×d Gram matrix, O(nnz(A)·d + d³); σ_min = 0 when n < d."""
    eigenvalues = np.linalg.eigvalsh(scaled_gram(problem.A, np.ones(problem.n)))
    smallest = 0.0 if problem.n < problem.d else math.sqrt(max(float(eigenvalues[0]), 0.0))
    return smallest, math.sqrt(max(float(eigenvalues[-1]), 0.0))


def softmax_curvature_floor(b: np.ndarray) -> float:
    """A constant ``κ(b)`` with ``λ_min(B_exp(x) + B_cent(x)) ≥ −κ(b)`` for every x.

    ``B_exp = S² + Σ_j c_j f_j (e_j − f)(e_j − f)ᵀ − ⟨c, f⟩ S`` with ``S = diag f − ffᵀ``, ``c = f − b``;
    ``0 ⪯ S ⪯ I`` and ``Σ_j f_j (e_j − f)(e_j − f)ᵀ = S`` give ``B_exp ⪰ −2‖c‖_∞ S ⪰ −2(1 + ‖b‖_∞) I``,
    and ``B_cent = ⟨1,b⟩ S ⪰ −max(0, −⟨1,b⟩) I``.
    """
    return 2.0 * (1.0 + float(np.max(np.abs(b)))) + max(0.0, -float(np.sum(b)))


def sufficient_w2_bound(
    problem: SoftmaxRegressionProblem, ell: float, sigma_min: float | None = None
) -> float:
    """``l/σ_min(A)² + κ(b)``: if ``min w_i²`` reaches it, ``∇²L(x) ⪰ l·I`` at every x (docs/theory.md)."""
    sigma = singular_value_range(problem)[0] if sigma_min is None else sigma_min
    if sigma <= 0.0:
        return math.inf
    return ell / sigma**2 + softmax_curvature_floor(problem.b)


def _log_sum_exp2(a: float, b: float) -> float:
    high, low = max(a, b), min(a, b)
    return high + math.log1p(math.exp(low - high)) if math.isfinite(low) else high


@dataclass(frozen=True)
class ConditionReport:
    """What held on this instance; ``ell`` is the paper's l, the target lower bound on the Hessian.

    ``M`` is evaluated as ``exp(c·(R² + ln n))`` with c = ``big_o_constant``, because the paper only gives
    ``M = exp(O(R² + log n))``; the constant-free check is ``meets_sufficient``.
    """

    ell: float
    n: int
    d: int
    points: int
    hessian_min_eigenvalue: float
    hessian_max_eigenvalue: float
    hessian_at_least_l: bool
    lipschitz_empirical: float | None
    lipschitz_pairs: int
    lipschitz_local: float | None
    lipschitz_local_pairs: int
    min_w2: float
    sigma_min_A: float
    norm_A: float
    norm_b: float
    norm_x_star: float | None
    R: float
    big_o_constant: float
    log_M: float
    paper_w2_bound_log: float
    meets_paper_bound: bool
    sufficient_w2_bound: float
    meets_sufficient: bool
    paper_lipschitz_bound_log: float
    initial_point_condition: bool | None

    def lines(self) -> list[str]:
        """Human-readable summary, one check per line."""

        def mark(ok: bool | None) -> str:
            return "n/a" if ok is None else ("yes" if ok else "NO")

        lip = "n/a" if self.lipschitz_empirical is None else f"{self.lipschitz_empirical:.4g}"
        lip_local = "n/a" if self.lipschitz_local is None else f"{self.lipschitz_local:.4g}"
        return [
            f"lambda_min(H) over {self.points} points = {self.hessian_min_eigenvalue:.6g} "
            f"(>= l = {self.ell:g}: {mark(self.hessian_at_least_l)})",
            f"empirical Hessian Lipschitz constant = {lip} over {self.lipschitz_pairs} pairs; "
            f"{lip_local} over {self.lipschitz_local_pairs} pairs with ||A(x-y)||_inf < 0.01 (Lemma C.16); "
            f"paper bound n^4 M has ln = {self.paper_lipschitz_bound_log:.4g}",
            f"min w_i^2 = {self.min_w2:.6g}; sufficient bound l/sigma_min(A)^2 + 2(1+||b||_inf) "
            f"+ max(0,-<1,b>) = {self.sufficient_w2_bound:.6g}: {mark(self.meets_sufficient)}",
            f"Theorem D.1 bound 100M + l/sigma_min(A)^2 with M = exp({self.big_o_constant:g}(R^2 + ln n)), "
            f"R = {self.R:.4g}: ln(bound) = {self.paper_w2_bound_log:.4g} vs ln(min w^2) = "
            f"{math.log(self.min_w2) if self.min_w2 > 0 else -math.inf:.4g}: {mark(self.meets_paper_bound)}",
            f"initial point M||x0 - x*|| <= 0.1 l: {mark(self.initial_point_condition)}",
        ]


def _pairwise_lipschitz(
    problem: SoftmaxRegressionProblem,
    points: Sequence[np.ndarray],
    hessians: Sequence[np.ndarray],
    min_separation: float,
) -> tuple[float | None, int, float | None, int]:
    best: float | None = None
    best_local: float | None = None
    pairs = local_pairs = 0
    for i in range(len(points)):
        for j in range(i + 1, len(points)):
            gap = points[i] - points[j]
            distance = float(np.linalg.norm(gap))
            # Below this separation the Hessian difference is round-off, and the ratio would be noise.
            if distance <= min_separation * (1.0 + float(np.linalg.norm(points[i]))):
                continue
            ratio = float(np.linalg.norm(hessians[i] - hessians[j], 2)) / distance
            pairs += 1
            best = ratio if best is None else max(best, ratio)
            if float(np.max(np.abs(np.asarray(problem.A @ gap)))) < 0.01:
                local_pairs += 1
                best_local = ratio if best_local is None else max(best_local, ratio)
    return best, pairs, best_local, local_pairs


def check_conditions(
    problem: SoftmaxRegressionProblem,
    points: Sequence[np.ndarray],
    *,
    ell: float,
    x_star: np.ndarray | None = None,
    x0: np.ndarray | None = None,
    big_o_constant: float = 1.0,
    min_separation: float = 1e-6,
) -> ConditionReport:
    """Evaluate the theorem's hypotheses on ``problem`` at ``points`` (e.g. Newton iterates).

    * PD: ``λ_min(∇²L(x)) ≥ l`` at every point (Lemma C.15 Part 1's conclusion).
    * Lipschitz: ``max ‖H(x_i) − H(x_j)‖₂ / ‖x_i − x_j‖`` over pairs, also restricted to pairs meeting
      Lemma C.16's hypothesis ``‖A(x − y)‖_∞ < 0.01``.
    * Regulariser: Theorem D.1's ``min w_i² ≥ 100M + l/σ_min(A)²`` and the constant-free sufficient bound
      ``min w_i² ≥ l/σ_min(A)² + 2(1 + ‖b‖_∞) + max(0, −⟨1,b⟩)``.
    * Start: Theorem D.1's ``M‖x0 − x*‖₂ ≤ 0.1·l`` (when both x0 and x* are given).

    ``R = max(4, ‖x*‖₂, ‖A‖, ‖b‖₂)`` is the smallest R meeting Theorem D.1's norm conditions.
    """
    if not points:
        raise ValueError("need at least one point to check the Hessian at")
    if ell <= 0:
        raise ValueError(f"ell (the paper's l) must be positive, got {ell}")
    pts = [np.asarray(p, dtype=np.float64) for p in points]
    hessians = [problem.hessian(p) for p in pts]
    eigen = [np.linalg.eigvalsh(h) for h in hessians]
    lam_min = min(float(e[0]) for e in eigen)
    lam_max = max(float(e[-1]) for e in eigen)
    lip, pairs, lip_local, local_pairs = _pairwise_lipschitz(problem, pts, hessians, min_separation)

    sigma_min, norm_a = singular_value_range(problem)
    norm_b = float(np.linalg.norm(problem.b))
    norm_x_star = None if x_star is None else float(np.linalg.norm(x_star))
    radius = max(4.0, norm_a, norm_b, norm_x_star or 0.0)
    n = problem.n
    log_m = big_o_constant * (radius**2 + math.log(n))
    min_w2 = float(np.min(problem.w**2))
    ratio_term = math.inf if sigma_min <= 0 else ell / sigma_min**2
    log_paper = _log_sum_exp2(math.log(100.0) + log_m, math.log(ratio_term) if ratio_term > 0 else -math.inf)
    meets_paper = min_w2 > 0 and math.log(min_w2) >= log_paper
    sufficient = sufficient_w2_bound(problem, ell, sigma_min)
    start_ok: bool | None = None
    if x0 is not None and x_star is not None:
        gap = float(np.linalg.norm(np.asarray(x0) - np.asarray(x_star)))
        start_ok = gap == 0.0 or log_m + math.log(gap) <= math.log(0.1 * ell)
    return ConditionReport(
        ell=ell,
        n=n,
        d=problem.d,
        points=len(pts),
        hessian_min_eigenvalue=lam_min,
        hessian_max_eigenvalue=lam_max,
        hessian_at_least_l=lam_min >= ell,
        lipschitz_empirical=lip,
        lipschitz_pairs=pairs,
        lipschitz_local=lip_local,
        lipschitz_local_pairs=local_pairs,
        min_w2=min_w2,
        sigma_min_A=sigma_min,
        norm_A=norm_a,
        norm_b=norm_b,
        norm_x_star=norm_x_star,
        R=radius,
        big_o_constant=big_o_constant,
        log_M=log_m,
        paper_w2_bound_log=log_paper,
        meets_paper_bound=meets_paper,
        sufficient_w2_bound=sufficient,
        meets_sufficient=min_w2 >= sufficient,
        paper_lipschitz_bound_log=4.0 * math.log(n) + log_m,
        initial_point_condition=start_ok,
    )


def random_instance(
    n: int,
    d: int,
    rng: np.random.Generator,
    *,
    ell: float = 1.0,
    margin: float = 1.0,
    logit_scale: float = 0.5,
    b_scale: float | None = None,
) -> SoftmaxRegressionProblem:
    """A Gaussian instance whose regulariser is ``margin`` × the sufficient bound (so margin ≥ 1 ⇒ H ⪰ l·I).

    ``A`` has N(0, 1/d) entries, ``b = b_scale · softmax(A x_true)`` with ``x_true ~ N(0, logit_scale²·I)``
    (logits of std ≈ logit_scale) and ``b_scale = n`` by default, so that b has O(1) entries and the
    cross-entropy term matters at any n.
    ``w_i² = margin · bound · u_i`` with ``u_i ~ U[1, 2]`` makes W non-scalar, so leverage scores differ.
    """
    if n < 1 or d < 1:
        raise ValueError(f"n and d must be positive, got n={n}, d={d}")
    A = rng.standard_normal((n, d)) / math.sqrt(d)
    x_true = logit_scale * rng.standard_normal(d)
    logits = A @ x_true
    target = np.exp(logits - logits.max())
    b = (float(n) if b_scale is None else b_scale) * target / target.sum()
    placeholder = SoftmaxRegressionProblem(A, b, np.ones(n))
    bound = sufficient_w2_bound(placeholder, ell)
    if not math.isfinite(bound):
        raise ValueError(f"A has rank < d (n={n}, d={d}); the Hessian cannot be positive definite")
    w2 = margin * bound * rng.uniform(1.0, 2.0, size=n)
    return SoftmaxRegressionProblem(A, b, np.sqrt(w2))
