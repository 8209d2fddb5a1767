"""Checkable theory of InfoPrompt Appendix C–D: softmax-regression loss, Newton solvers, condition checks."""

from __future__ import annotations

from typing import Any

# The public names of each module, imported on first use: `infoprompt --help` registers the `theory` command from
# infoprompt.theory.cli without loading SciPy.
_CONDITIONS = (
    "ConditionReport",
    "check_conditions",
    "random_instance",
    "softmax_curvature_floor",
    "sufficient_w2_bound",
)
_NEWTON = (
    "ExactHessian",
    "HessianEstimate",
    "IterationRecord",
    "LeverageScoreHessian",
    "NewtonResult",
    "SketchConfig",
    "approximate_leverage_scores",
    "exact_newton",
    "newton_method",
    "sketched_newton",
    "solve_reference",
)
_SOFTMAX_REGRESSION = (
    "DiagonalPlusLowRank",
    "PointEvaluation",
    "SoftmaxRegressionProblem",
    "scaled_gram",
)
__all__ = sorted([*_CONDITIONS, *_NEWTON, *_SOFTMAX_REGRESSION])


def __getattr__(name: str) -> Any:
    # Plain import statements, not imports by string, so that the package's import-cycle check sees them.
    if name in _CONDITIONS:
        import infoprompt.theory.conditions as module
    elif name in _NEWTON:
        import infoprompt.theory.newton as module
    elif name in _SOFTMAX_REGRESSION:
        import infoprompt.theory.softmax_regression as module
    else:
        raise AttributeError(f"module 'infoprompt.theory' has no attribute {name!r}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
