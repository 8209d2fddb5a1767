"""The regularised softmax-regression loss of InfoPrompt Appendix C: values, gradients and Hessians."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

# A dense ndarray or any scipy.sparse matrix/array; sparse inputs are stored as CSR.
Matrix = np.ndarray | sp.spmatrix | sp.sparray


# Rows per block in the dense Gram product: a block of ~1024 scaled rows stays in cache, which measured
# about 3x faster than scaling all n rows first (one extra n×d temporary) for n = 200,000, d = 50.
_GRAM_BLOCK = 1024


def scaled_gram(A: Matrix, weights: np.ndarray) -> np.ndarray:
    """``Aᵀ diag(weights) A`` as a dense symmetric d×d array, in O(nnz(A)·d) time, never forming n×n."""
    if sp.issparse(A):
        gram = (A.T @ sp.csr_matrix(A.multiply(weights[:, None]))).toarray()
        return 0.5 * (gram + gram.T)
    d = A.shape[1]
    gram = np.zeros((d, d))
    nonnegative = bool(np.all(weights >= 0))
    roots = np.sqrt(weights) if nonnegative else None
    for start in range(0, A.shape[0], _GRAM_BLOCK):
        block = A[start : start + _GRAM_BLOCK]
        if roots is not None:
            # MᵀM with M = diag(√w)·block lets BLAS use the symmetric rank-k update (half the flops).
            scaled = block * roots[start : start + _GRAM_BLOCK, None]
            gram += scaled.T @ scaled
        else:
            gram += (block.T * weights[start : start + _GRAM_BLOCK]) @ block
    # Round-off makes the general product slightly asymmetric; Cholesky/eigvalsh want a symmetric matrix.
    return 0.5 * (gram + gram.T)


def _project_rows(A: Matrix, rows: np.ndarray) -> np.ndarray:
    """``V A`` for a k×n block V (C-contiguous), returned as a dense k×d array."""
    if sp.issparse(A):
        return np.asarray(A.T @ rows.T).T
    # V·A reads the row-major A in its natural order; measured ~1.7x faster than Aᵀ·Vᵀ for k = 3.
    return rows @ A


def _project(A: Matrix, vectors: np.ndarray) -> np.ndarray:
    """``Aᵀ V`` for a length-n vector or an n×k block V, as a dense array."""
    if vectors.ndim == 1:
        return _project_rows(A, vectors[None, :])[0]
    return _project_rows(A, np.ascontiguousarray(vectors.T)).T


@dataclass(frozen=True, eq=False)
class DiagonalPlusLowRank:
    """An n×n symmetric matrix ``diag(diagonal) + U C Uᵀ`` kept in factored form (U is n×k, C is k×k).

    The Hessians of L_exp, L_cent and L_reg are all ``Aᵀ B A`` with B of this shape, so ``AᵀBA`` costs
    O(nnz(A)·d + nnz(A)·k + k·d²) instead of the O(n²) of a dense B.
    """

    diagonal: np.ndarray
    factors: np.ndarray
    core: np.ndarray

    @property
    def size(self) -> int:
        return int(self.diagonal.shape[0])

    def sandwich(self, A: Matrix) -> np.ndarray:
        """``Aᵀ B A`` (d×d)."""
        result = scaled_gram(A, self.diagonal)
        if self.factors.shape[1]:
            projected = _project(A, self.factors)  # d×k
            result = result + projected @ self.core @ projected.T
        return 0.5 * (result + result.T)

    def matvec(self, v: np.ndarray) -> np.ndarray:
        return self.diagonal * v + self.factors @ (self.core @ (self.factors.T @ v))

    def to_dense(self) -> np.ndarray:
        """The n×n matrix itself; only for checks on small n."""
        return np.diag(self.diagonal) + self.factors @ self.core @ self.factors.T

    def __add__(self, other: DiagonalPlusLowRank) -> DiagonalPlusLowRank:
        k1, k2 = self.core.shape[0], other.core.shape[0]
        core = np.zeros((k1 + k2, k1 + k2))
        core[:k1, :k1] = self.core
        core[k1:, k1:] = other.core
        return DiagonalPlusLowRank(
            self.diagonal + other.diagonal, np.hstack([self.factors, other.factors]), core
        )


@dataclass(frozen=True, eq=False)
class PointEvaluation:
    """Everything one Newton step needs at a point x, from a single pass over A.

    The full Hessian is ``Aᵀ diag(hessian_diagonal) A + low_rank_coefficient·μμᵀ − μνᵀ − νμᵀ`` with
    ``μ = Aᵀf`` and ``ν = Aᵀ((2f − b)∘f)``; the diagonal part is what the sketched Newton method samples.
    """

    x: np.ndarray
    logits: np.ndarray
    f: np.ndarray
    loss_exp: float
    loss_cent: float
    loss_reg: float
    gradient: np.ndarray
    hessian_diagonal: np.ndarray
    mu: np.ndarray
    nu: np.ndarray
    low_rank_coefficient: float

    @property
    def loss(self) -> float:
        return self.loss_exp + self.loss_cent + self.loss_reg

    def hessian_low_rank(self) -> np.ndarray:
        """The d×d rank-≤2 part of the Hessian (exact, O(d²))."""
        mu, nu = self.mu, self.nu
        part = self.low_rank_coefficient * np.outer(mu, mu) - np.outer(mu, nu) - np.outer(nu, mu)
        return part

    def hessian(self, A: Matrix) -> np.ndarray:
        """The exact Hessian at x: O(nnz(A)·d) for the diagonal part plus O(d²)."""
        return scaled_gram(A, self.hessian_diagonal) + self.hessian_low_rank()


def _as_matrix(A: object) -> Matrix:
    if sp.issparse(A):
        return sp.csr_matrix(A, dtype=np.float64)
    return np.ascontiguousarray(np.asarray(A, dtype=np.float64))


@dataclass(frozen=True, eq=False)
class SoftmaxRegressionProblem:
    """``L(x) = L_reg + L_cent + L_exp`` with ``f(x) = softmax(Ax)`` (Definitions C.4, C.6–C.8).

    * ``L_exp(x)  = ½‖f(x) − b‖²``
    * ``L_cent(x) = −⟨b, log f(x)⟩``
    * ``L_reg(x)  = ½‖W A x‖²``, ``W = diag(w)``

    ``A`` is n×d (dense or scipy.sparse), ``b`` and ``w`` have length n. Arrays are validated and converted
    to float64 on construction; a ``ValueError`` names the offending field.
    """

    A: Matrix
    b: np.ndarray
    w: np.ndarray
    _w2: np.ndarray = field(init=False, repr=False)
    _beta: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not sp.issparse(self.A) and np.ndim(self.A) != 2:
            raise ValueError(f"A must be a 2-D matrix, got {np.ndim(self.A)} dimension(s)")
        A = _as_matrix(self.A)
        n, d = A.shape
        if n == 0 or d == 0:
            raise ValueError(f"A must be non-empty, got shape {A.shape}")
        values = A.data if sp.issparse(A) else A
        if not np.all(np.isfinite(values)):
            raise ValueError("A contains non-finite values")
        b = np.asarray(self.b, dtype=np.float64)
        w = np.asarray(self.w, dtype=np.float64)
        for name, vector in (("b", b), ("w", w)):
            if vector.shape != (n,):
                raise ValueError(f"{name} must have shape ({n},) to match A's {n} rows, got {vector.shape}")
            if not np.all(np.isfinite(vector)):
                raise ValueError(f"{name} contains non-finite values")
        object.__setattr__(self, "A", A)
        object.__setattr__(self, "b", b)
        object.__setattr__(self, "w", w)
        object.__setattr__(self, "_w2", w * w)
        object.__setattr__(self, "_beta", float(b.sum()))

    @property
    def n(self) -> int:
        return int(self.A.shape[0])

    @property
    def d(self) -> int:
        return int(self.A.shape[1])

    @property
    def beta(self) -> float:
        """``⟨1, b⟩``, the scale of the cross-entropy Hessian (Definition C.13)."""
        return self._beta

    def _point(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self.d,):
            raise ValueError(f"x must have shape ({self.d},), got {x.shape}")
        return x

    def _softmax(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(Ax, f, log f), stable for large logits."""
        z = np.asarray(self.A @ self._point(x)).ravel()
        shift = z.max()
        e = np.exp(z - shift)
        total = e.sum()
        return z, e / total, z - (shift + np.log(total))

    def softmax(self, x: np.ndarray) -> np.ndarray:
        return self._softmax(x)[1]

    # ---- values -------------------------------------------------------------------------------------------
    def loss_exp(self, x: np.ndarray) -> float:
        r = self.softmax(x) - self.b
        return 0.5 * float(r @ r)

    def loss_cent(self, x: np.ndarray) -> float:
        # Uses log f = Ax − logsumexp(Ax) so that tiny probabilities never produce log(0).
        return -float(self.b @ self._softmax(x)[2])

    def loss_reg(self, x: np.ndarray) -> float:
        z = np.asarray(self.A @ self._point(x)).ravel()
        return 0.5 * float(z @ (self._w2 * z))

    def loss(self, x: np.ndarray) -> float:
        return self.evaluate(x).loss

    # ---- gradients ----------------------------------------------------------------------------------------
    def gradient_exp(self, x: np.ndarray) -> np.ndarray:
        """``Aᵀ (diag f − ffᵀ)(f − b)``."""
        f = self.softmax(x)
        c = f - self.b
        return _project(self.A, f * c - (f @ c) * f)

    def gradient_cent(self, x: np.ndarray) -> np.ndarray:
        """``Aᵀ (⟨1,b⟩ f − b)`` (Lemma C.10 Part 3)."""
        f = self.softmax(x)
        return _project(self.A, self.beta * f - self.b)

    def gradient_reg(self, x: np.ndarray) -> np.ndarray:
        """``Aᵀ W² A x``."""
        z = np.asarray(self.A @ self._point(x)).ravel()
        return _project(self.A, self._w2 * z)

    def gradient(self, x: np.ndarray) -> np.ndarray:
        return self.evaluate(x).gradient

    # ---- Hessians in the form AᵀBA ------------------------------------------------------------------------
    def b_matrix_exp(self, x: np.ndarray) -> DiagonalPlusLowRank:
        """B of L_exp: ``diag(q − ⟨c,f⟩f) + γ ffᵀ − q fᵀ − f qᵀ`` with ``c = f − b``, ``q = (2f − b)∘f``,
        ``γ = ⟨3f − 2b, f⟩`` (derivation in docs/theory.md; same quantity as Deng, Li, Song 2023, Sec. 5)."""
        f = self.softmax(x)
        b = self.b
        q = (2.0 * f - b) * f
        fc = float(f @ (f - b))
        gamma = float(f @ (3.0 * f - 2.0 * b))
        core = np.array([[gamma, -1.0], [-1.0, 0.0]])
        return DiagonalPlusLowRank(q - fc * f, np.column_stack([f, q]), core)

    def b_matrix_cent(self, x: np.ndarray) -> DiagonalPlusLowRank:
        """B of L_cent: ``⟨1,b⟩(diag f − ffᵀ)`` (Definition C.13)."""
        f = self.softmax(x)
        return DiagonalPlusLowRank(self.beta * f, f[:, None], np.array([[-self.beta]]))

    def b_matrix_reg(self, x: np.ndarray | None = None) -> DiagonalPlusLowRank:
        """B of L_reg: ``W²`` (constant in x)."""
        return DiagonalPlusLowRank(self._w2.copy(), np.zeros((self.n, 0)), np.zeros((0, 0)))

    def b_matrix(self, x: np.ndarray) -> DiagonalPlusLowRank:
        """B of the whole loss, so that ``∇²L(x) = Aᵀ B(x) A``."""
        return self.b_matrix_exp(x) + self.b_matrix_cent(x) + self.b_matrix_reg(x)

    def hessian_exp(self, x: np.ndarray) -> np.ndarray:
        return self.b_matrix_exp(x).sandwich(self.A)

    def hessian_cent(self, x: np.ndarray) -> np.ndarray:
        """``Aᵀ B(x) A`` with B from Definition C.13 (Lemma C.14 Part 3)."""
        return self.b_matrix_cent(x).sandwich(self.A)

    def hessian_reg(self, x: np.ndarray | None = None) -> np.ndarray:
        """``Aᵀ W² A``."""
        return scaled_gram(self.A, self._w2)

    def hessian(self, x: np.ndarray) -> np.ndarray:
        return self.evaluate(x).hessian(self.A)

    # ---- one fused pass for the solvers -------------------------------------------------------------------
    def evaluate(self, x: np.ndarray) -> PointEvaluation:
        """Loss, gradient and the Hessian's factored parts with one product by A and one by Aᵀ.

        For n ≫ d these two passes are the whole cost of a sketched iteration, so the O(n) vector work is
        folded into few temporaries: with ``t = c + (⟨1,b⟩ − ⟨f,c⟩)``, the gradient is ``Aᵀ(f∘t − b + W²z)``
        and the Hessian diagonal is ``f∘(t + f) + w²``.
        """
        x = self._point(x)
        z = np.asarray(self.A @ x).ravel()
        shift = float(z.max())
        f = np.exp(z - shift)
        total = float(f.sum())
        f /= total
        log_normaliser = shift + math.log(total)
        b, w2, beta = self.b, self._w2, self.beta
        c = f - b
        fc = float(f @ c)
        w2z = w2 * z
        t = c + (beta - fc)
        rows = np.empty((3, self.n))
        np.multiply(f, t, out=rows[0])
        rows[0] -= b
        rows[0] += w2z
        rows[1] = f
        np.add(f, c, out=rows[2])
        rows[2] *= f  # q = (2f − b)∘f
        t += f
        t *= f
        t += w2
        # Gradient, μ and ν share the single Aᵀ pass.
        projected = _project_rows(self.A, rows)
        return PointEvaluation(
            x=x,
            logits=z,
            f=f,
            loss_exp=0.5 * float(c @ c),
            loss_cent=beta * log_normaliser - float(b @ z),
            loss_reg=0.5 * float(z @ w2z),
            gradient=projected[0],
            hessian_diagonal=t,
            mu=projected[1],
            nu=projected[2],
            low_rank_coefficient=float(f @ f) + 2.0 * fc - beta,
        )
