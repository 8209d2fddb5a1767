"""Checkable theory of InfoPrompt Appendix C–D: softmax-regression loss, Newton solvers, condition checks."""

from infoprompt.theory.conditions import (
    ConditionReport,
    check_conditions,
    random_instance,
    softmax_curvature_floor,
    sufficient_w2_bound,
)
from infoprompt.theory.newton import (
    ExactHessian,
    HessianEstimate,
    IterationRecord,
    LeverageScoreHessian,
    NewtonResult,
    SketchConfig,
    approximate_leverage_scores,
    exact_newton,
    newton_method,
    sketched_newton,
    solve_reference,
)
from infoprompt.theory.softmax_regression import (
    DiagonalPlusLowRank,
    PointEvaluation,
    SoftmaxRegressionProblem,
    scaled_gram,
)

__all__ = [
    "ConditionReport",
    "DiagonalPlusLowRank",
    "ExactHessian",
    "HessianEstimate",
    "IterationRecord",
    "LeverageScoreHessian",
    "NewtonResult",
    "PointEvaluation",
    "SketchConfig",
    "SoftmaxRegressionProblem",
    "approximate_leverage_scores",
    "check_conditions",
    "exact_newton",
    "newton_method",
    "random_instance",
    "scaled_gram",
    "sketched_newton",
    "softmax_curvature_floor",
    "solve_reference",
    "sufficient_w2_bound",
]
