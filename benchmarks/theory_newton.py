"""Benchmark: exact vs sketched (Algorithm 1) Newton on a tall softmax-regression instance (n ≫ d).

Run ``python benchmarks/theory_newton.py`` (defaults n = 200,000, d = 50). BLAS is pinned to one thread
unless OPENBLAS_NUM_THREADS/OMP_NUM_THREADS are already set: on a shared machine multi-threaded BLAS
timings are dominated by contention, and one thread compares the two methods' work on equal terms.
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402

from infoprompt.theory import (  # noqa: E402
    ExactHessian,
    LeverageScoreHessian,
    NewtonResult,
    SketchConfig,
    exact_newton,
    random_instance,
    sketched_newton,
    solve_reference,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--d", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--eps", type=float, nargs="+", default=[1e-4, 1e-8], help="target ||x - x*|| values (step tolerance)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions; the fastest is reported")
    parser.add_argument(
        "--accuracy", type=float, default=0.25, help="sketch accuracy (SketchConfig.accuracy)"
    )
    args = parser.parse_args()

    start = time.perf_counter()
    problem = random_instance(args.n, args.d, np.random.default_rng(args.seed))
    x0 = np.zeros(problem.d)
    x_star = solve_reference(problem, x0)
    setup = time.perf_counter() - start
    config = SketchConfig(accuracy=args.accuracy)
    print(
        f"n = {problem.n}, d = {problem.d}, seed = {args.seed}, "
        f"||x0 - x*|| = {np.linalg.norm(x0 - x_star):.3e}, "
        f"sketch rows/iteration target = {config.base_sample_size(problem.d)}, "
        f"BLAS threads = {os.environ['OPENBLAS_NUM_THREADS']}, repeats = {args.repeats}, "
        f"setup (instance + x*) {setup:.1f} s"
    )
    header = (
        f"{'eps':>7} {'method':<9} {'iters':>5} {'final |x-x*|':>13} {'rows/iter':>10} {'1st iter s':>11} "
        f"{'later iter s':>13} {'mean iter s':>12} {'total s':>8} {'median total s':>15}"
    )
    print(header)
    print("-" * len(header))
    summaries = []
    for eps in args.eps:
        options = {"tol": 0.0, "eps": eps, "max_iter": 100, "x_star": x_star}
        runs: dict[str, list[NewtonResult]] = {"exact": [], "sketched": []}
        for _ in range(args.repeats):
            runs["exact"].append(exact_newton(problem, x0, **options))
            # The same seed each repeat, so every repeat performs identical arithmetic.
            rng = np.random.default_rng([args.seed, 1])
            runs["sketched"].append(sketched_newton(problem, x0, rng=rng, sketch=config, **options))
        best: dict[str, NewtonResult] = {}
        for method, results in runs.items():
            fastest = min(results, key=lambda result: result.total_seconds)
            best[method] = fastest
            steps = fastest.history[1:]
            rows = statistics.mean(record.rows_used for record in steps)
            later = statistics.median(record.seconds for record in steps[1:]) if len(steps) > 1 else math.nan
            median_total = statistics.median(result.total_seconds for result in results)
            print(
                f"{eps:>7.0e} {method:<9} {fastest.iterations:>5} {fastest.history[-1].dist_to_opt:>13.3e} "
                f"{rows:>10.0f} {steps[0].seconds:>11.4f} {later:>13.4f} "
                f"{fastest.seconds_per_iteration:>12.4f} {fastest.total_seconds:>8.4f} {median_total:>15.4f}"
            )
        exact, sketched = best["exact"], best["sketched"]
        reached = all(result.history[-1].dist_to_opt <= eps for result in best.values())
        per_iteration = exact.seconds_per_iteration / sketched.seconds_per_iteration
        summaries.append(
            f"eps {eps:.0e}: exact/sketched time per iteration {per_iteration:.2f}x "
            f"(later iterations {_later(exact) / _later(sketched):.2f}x), "
            f"total {exact.total_seconds / sketched.total_seconds:.2f}x; "
            f"both reached ||x - x*|| <= eps: {'yes' if reached else 'NO'}"
        )
    print("\n".join(summaries))
    print(_components(problem, x_star, config, args.seed, args.repeats))


def _median_seconds(action, repeats: int) -> float:
    times = []
    for _ in range(max(repeats, 5)):
        tick = time.perf_counter()
        action()
        times.append(time.perf_counter() - tick)
    return statistics.median(times)


def _components(problem, x_star: np.ndarray, config: SketchConfig, seed: int, repeats: int) -> str:
    """Where an iteration's time goes at x*: the shared gradient pass vs the two ways to build the Hessian."""
    evaluation = problem.evaluate(x_star)
    exact = ExactHessian(problem)
    sketch = LeverageScoreHessian(problem, config, np.random.default_rng([seed, 2]))
    hessian, gradient = exact(evaluation).matrix, evaluation.gradient
    refresh = _median_seconds(lambda: sketch.refresh_scores(np.abs(evaluation.hessian_diagonal)), repeats)
    timings = {
        "gradient pass (evaluate)": _median_seconds(lambda: problem.evaluate(x_star), repeats),
        "exact Hessian A^T B A": _median_seconds(lambda: exact(evaluation), repeats),
        "sketched Hessian (scores reused)": _median_seconds(lambda: sketch(evaluation), repeats),
        "leverage scores (once / on drift)": refresh,
        "d x d Cholesky solve": _median_seconds(
            lambda: scipy.linalg.cho_solve(scipy.linalg.cho_factor(hessian), gradient), repeats
        ),
    }
    lines = ["component timings at x* (median):"]
    lines += [f"  {name:<36} {seconds:>9.4f} s" for name, seconds in timings.items()]
    ratio = timings["exact Hessian A^T B A"] / timings["sketched Hessian (scores reused)"]
    lines.append(f"  Hessian build exact/sketched: {ratio:.1f}x")
    return "\n".join(lines)


def _later(result: NewtonResult) -> float:
    """Median time of iterations 2.. (the sketch computes its leverage scores in iteration 1)."""
    steps = result.history[2:]
    return statistics.median(record.seconds for record in steps) if steps else result.history[-1].seconds


if __name__ == "__main__":
    main()
