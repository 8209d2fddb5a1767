"""Losses, gradients and closed-form Hessians of the softmax-regression loss against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from infoprompt.theory import (
    SoftmaxRegressionProblem,
    random_instance,
    softmax_curvature_floor,
    sufficient_w2_bound,
)

TERMS = ("exp", "cent", "reg")


def _instance(seed: int, n: int = 25, d: int = 4, signed_b: bool = False) -> SoftmaxRegressionProblem:
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, d))
    b = rng.standard_normal(n) if signed_b else rng.random(n)
    return SoftmaxRegressionProblem(A, b, rng.uniform(0.2, 1.5, size=n))


def _loss(problem: SoftmaxRegressionProblem, term: str):
    return problem.loss if term == "total" else getattr(problem, f"loss_{term}")


def _gradient(problem: SoftmaxRegressionProblem, term: str):
    return problem.gradient if term == "total" else getattr(problem, f"gradient_{term}")


def _hessian(problem: SoftmaxRegressionProblem, term: str):
    return problem.hessian if term == "total" else getattr(problem, f"hessian_{term}")


def _central_difference(fun, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    columns = [(np.asarray(fun(x + h * e)) - np.asarray(fun(x - h * e))) / (2 * h) for e in np.eye(x.size)]
    return np.array(columns)


@pytest.mark.parametrize("term", (*TERMS, "total"))
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("signed_b", (False, True))
def test_gradient_matches_finite_differences(term: str, seed: int, signed_b: bool) -> None:
    problem = _instance(seed, signed_b=signed_b)
    x = np.random.default_rng(100 + seed).standard_normal(problem.d) * 0.7
    numeric = _central_difference(_loss(problem, term), x)
    analytic = _gradient(problem, term)(x)
    assert np.linalg.norm(numeric - analytic) <= 1e-6 * max(1.0, np.linalg.norm(analytic))


@pytest.mark.parametrize("term", (*TERMS, "total"))
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("signed_b", (False, True))
def test_hessian_matches_finite_differences_of_gradient(term: str, seed: int, signed_b: bool) -> None:
    problem = _instance(seed, signed_b=signed_b)
    x = np.random.default_rng(200 + seed).standard_normal(problem.d) * 0.7
    numeric = _central_difference(_gradient(problem, term), x)
    analytic = _hessian(problem, term)(x)
    assert np.allclose(analytic, analytic.T, atol=1e-12 * max(1.0, np.abs(analytic).max()))
    assert np.linalg.norm(numeric - analytic) <= 1e-6 * max(1.0, np.linalg.norm(analytic))


def test_total_is_the_sum_of_the_three_terms() -> None:
    problem = _instance(7, signed_b=True)
    x = np.random.default_rng(7).standard_normal(problem.d)
    evaluation = problem.evaluate(x)
    assert evaluation.loss == pytest.approx(sum(_loss(problem, t)(x) for t in TERMS), rel=1e-12)
    assert np.allclose(
        evaluation.gradient, sum(_gradient(problem, t)(x) for t in TERMS), rtol=1e-10, atol=1e-12
    )
    assert np.allclose(evaluation.hessian(problem.A), sum(_hessian(problem, t)(x) for t in TERMS), atol=1e-10)


def test_cross_entropy_hessian_is_lemma_c14_entrywise() -> None:
    """Lemma C.14 Part 2: (−⟨f,A_i⟩⟨f,A_j⟩ + ⟨f, A_i∘A_j⟩)·⟨1,b⟩, written out coordinate by coordinate."""
    problem = _instance(3)
    x = np.random.default_rng(3).standard_normal(problem.d)
    f, A, beta = problem.softmax(x), problem.A, problem.b.sum()
    expected = np.array(
        [
            [(-(f @ A[:, i]) * (f @ A[:, j]) + f @ (A[:, i] * A[:, j])) * beta for j in range(problem.d)]
            for i in range(problem.d)
        ]
    )
    assert np.allclose(problem.hessian_cent(x), expected, atol=1e-12)
    assert np.allclose(problem.gradient_cent(x), A.T @ f * beta - A.T @ problem.b, atol=1e-12)  # Lemma C.10


def test_structured_b_matrices_equal_their_dense_definitions() -> None:
    problem = _instance(5, signed_b=True)
    x = np.random.default_rng(5).standard_normal(problem.d)
    f, b = problem.softmax(x), problem.b
    c = f - b
    S = np.diag(f) - np.outer(f, f)
    # Independent form of B_exp: Jacobian part S² plus Σ_j c_j ∇²f_j written as outer products.
    centred = np.eye(f.size) - f  # row j is e_j − f
    curvature = sum(c[j] * f[j] * np.outer(centred[j], centred[j]) for j in range(f.size))
    assert np.allclose(problem.b_matrix_exp(x).to_dense(), S @ S + curvature - (c @ f) * S, atol=1e-13)
    assert np.allclose(problem.b_matrix_cent(x).to_dense(), b.sum() * S, atol=1e-13)  # Definition C.13
    assert np.allclose(problem.b_matrix_reg().to_dense(), np.diag(problem.w**2))
    total = problem.b_matrix(x)
    assert np.allclose(total.sandwich(problem.A), problem.A.T @ total.to_dense() @ problem.A, atol=1e-11)
    v = np.random.default_rng(0).standard_normal(problem.n)
    assert np.allclose(total.matvec(v), total.to_dense() @ v, atol=1e-12)


def test_sparse_and_dense_A_agree() -> None:
    dense = _instance(11, n=60, d=5, signed_b=True)
    A = dense.A.copy()
    A[np.abs(A) < 0.8] = 0.0
    dense = SoftmaxRegressionProblem(A, dense.b, dense.w)
    sparse = SoftmaxRegressionProblem(sp.csr_matrix(A), dense.b, dense.w)
    x = np.random.default_rng(11).standard_normal(5)
    assert sparse.loss(x) == pytest.approx(dense.loss(x), rel=1e-12)
    assert np.allclose(sparse.gradient(x), dense.gradient(x), atol=1e-11)
    assert np.allclose(sparse.hessian(x), dense.hessian(x), atol=1e-10)
    assert np.allclose(sparse.hessian_exp(x), dense.hessian_exp(x), atol=1e-11)


def test_large_logits_stay_finite() -> None:
    problem = _instance(2)
    x = np.full(problem.d, 300.0)
    evaluation = problem.evaluate(x)
    assert np.isfinite(evaluation.loss) and np.all(np.isfinite(evaluation.gradient))
    assert np.all(np.isfinite(evaluation.hessian(problem.A)))
    assert problem.softmax(x).sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("A", "b", "w", "field"),
    [
        (np.ones((4, 2)), np.ones(3), np.ones(4), "b"),
        (np.ones((4, 2)), np.ones(4), np.ones((4, 1)), "w"),
        (np.ones(4), np.ones(4), np.ones(4), "A"),
        (np.ones((4, 2)), np.ones(4), np.array([1.0, np.nan, 1.0, 1.0]), "w"),
    ],
)
def test_invalid_arrays_name_the_field(A, b, w, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field} "):
        SoftmaxRegressionProblem(A, b, w)


def test_convex_parts_are_psd_and_exp_part_need_not_be() -> None:
    problem = _instance(0, n=20, d=3)  # b ≥ 0, so ⟨1,b⟩ ≥ 0
    rng = np.random.default_rng(0)
    lam_exp = []
    for _ in range(50):
        x = 2.0 * rng.standard_normal(problem.d)
        assert np.linalg.eigvalsh(problem.hessian_cent(x))[0] >= -1e-12
        assert np.linalg.eigvalsh(problem.hessian_reg(x))[0] >= -1e-12
        lam_exp.append(np.linalg.eigvalsh(problem.hessian_exp(x))[0])
    assert min(lam_exp) < 0  # why the regulariser is needed at all


def test_curvature_floor_bounds_the_softmax_part() -> None:
    """λ_min(B_exp + B_cent) ≥ −κ(b) (the bound docs/theory.md derives), on dense small instances."""
    rng = np.random.default_rng(1)
    for _ in range(100):
        n = int(rng.integers(2, 25))
        b = rng.standard_normal(n) * rng.choice([0.1, 1.0, 5.0])
        problem = SoftmaxRegressionProblem(rng.standard_normal((n, 3)), b, np.zeros(n))
        x = rng.standard_normal(3) * rng.choice([0.1, 1.0, 5.0])
        B = (problem.b_matrix_exp(x) + problem.b_matrix_cent(x)).to_dense()
        assert np.linalg.eigvalsh(B)[0] >= -softmax_curvature_floor(b) - 1e-12


@pytest.mark.parametrize("b_kind", ("one_hot", "signed"))
def test_hessian_becomes_pd_when_regulariser_meets_the_bound(b_kind: str) -> None:
    rng = np.random.default_rng(4)
    n, d, ell = 20, 3, 1.0
    A = rng.standard_normal((n, d))
    b = np.eye(n)[0] if b_kind == "one_hot" else rng.standard_normal(n) - 1.0
    points = [s * rng.standard_normal(d) for s in (0.1, 1.0, 3.0, 10.0) for _ in range(15)]
    unregularised = SoftmaxRegressionProblem(A, b, np.zeros(n))
    assert min(np.linalg.eigvalsh(unregularised.hessian(x))[0] for x in points) < 0
    bound = sufficient_w2_bound(unregularised, ell)
    w = np.sqrt(bound * rng.uniform(1.0, 1.5, size=n))
    regularised = SoftmaxRegressionProblem(A, b, w)
    assert min(np.linalg.eigvalsh(regularised.hessian(x))[0] for x in points) >= ell
    # The same bound keeps the diagonal that the sketched Newton method samples positive.
    assert min(regularised.evaluate(x).hessian_diagonal.min() for x in points) > 0


def test_random_instance_meets_its_bound_and_is_seeded() -> None:
    one = random_instance(50, 4, np.random.default_rng(9))
    two = random_instance(50, 4, np.random.default_rng(9))
    assert np.array_equal(one.A, two.A) and np.array_equal(one.b, two.b) and np.array_equal(one.w, two.w)
    assert np.min(one.w**2) >= sufficient_w2_bound(one, 1.0)
    x = np.random.default_rng(0).standard_normal(4) * 3
    assert np.linalg.eigvalsh(one.hessian(x))[0] >= 1.0
