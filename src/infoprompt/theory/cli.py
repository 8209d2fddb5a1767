"""The ``theory`` command group: ``theory newton`` times exact vs sketched Newton on an instance."""

from __future__ import annotations

import argparse
import json
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from infoprompt.errors import UserError

if TYPE_CHECKING:  # NumPy and SciPy load when the command runs, not when `infoprompt --help` builds the parser
    from infoprompt.theory.newton import NewtonResult
    from infoprompt.theory.softmax_regression import SoftmaxRegressionProblem

REQUIRED_ARRAYS = ("A", "b", "w")


def add_theory_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``theory`` (with its ``newton`` sub-command) on the main CLI's sub-parsers."""
    theory = subparsers.add_parser("theory", help="numerical checks of the paper's optimisation theory")
    commands = theory.add_subparsers(dest="theory_command", metavar="COMMAND", required=True)
    add_newton_command(commands)


def add_newton_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "newton",
        help="exact vs sketched (Algorithm 1) Newton on a softmax-regression instance",
        description="Generate (or load with --input) an instance of L = L_reg + L_cent + L_exp, compute x*, "
        "run Newton from x0 = 0 and print loss, ||g||, ||x - x*|| and time per iteration.",
    )
    parser.add_argument("--n", type=int, help="rows of A (generated instance)")
    parser.add_argument("--d", type=int, help="columns of A (generated instance)")
    parser.add_argument(
        "--input", help=".npz with arrays A (n x d), b (n), w (n) instead of a generated instance"
    )
    parser.add_argument(
        "--sketch", action="store_true", help="also run the sketched Newton method and compare"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated instance and the sketch")
    parser.add_argument(
        "--eps", type=float, default=1e-8, help="stop when ||x_t - x_{t-1}|| <= eps (default 1e-8)"
    )
    parser.add_argument("--max-iter", type=int, default=50, help="iteration cap per method (default 50)")
    parser.add_argument("--l", type=float, default=1.0, help="target Hessian lower bound l (default 1)")
    parser.add_argument(
        "--w-margin",
        type=float,
        default=1.0,
        help="generated w^2 as a multiple of the sufficient PD bound (default 1)",
    )
    parser.add_argument(
        "--sketch-accuracy",
        type=float,
        default=0.25,
        help="spectral accuracy the row sample aims for (default 0.25)",
    )
    parser.add_argument(
        "--sample-size", type=int, help="rows sampled per iteration (default: from the accuracy)"
    )
    parser.add_argument(
        "--line-search", action="store_true", help="Armijo backtracking (off by default, as in Algorithm 1)"
    )
    parser.add_argument("--json", help="also write the histories, timings and condition report here")
    parser.set_defaults(handler=run_newton)
    return parser


NPZ_MAGIC = b"PK\x03\x04"  # an .npz is a zip archive
NPY_MAGIC = b"\x93NUM"  # a single array (numpy.save)


def _no_pickle_hint(error: BaseException) -> str:
    """numpy's message, unless it is the one that suggests loading pickles (which could run code)."""
    text = str(error)
    return "it holds pickled Python objects, which are never loaded: they could run code" if "pickle" in text else text


def load_instance(path: str) -> SoftmaxRegressionProblem:
    """Read arrays A, b, w from an .npz; failures are one-line ``UserError``s naming the file and field."""
    import numpy as np

    from infoprompt.theory.softmax_regression import SoftmaxRegressionProblem

    file = Path(path)
    if not file.is_file():
        raise UserError(f"{path}: no such file")
    try:
        with file.open("rb") as handle:
            magic = handle.read(len(NPZ_MAGIC))
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    if magic == NPY_MAGIC:
        raise UserError(f"{path}: expected an .npz archive with arrays {', '.join(REQUIRED_ARRAYS)}, got one array")
    if magic != NPZ_MAGIC:
        # numpy would read any other file as a pickle and suggest allowing pickles: never the remedy here.
        raise UserError(f"{path}: not a readable .npz archive (a zip file of .npy arrays, as numpy.savez writes; "
                        f"this one starts with {magic!r})")
    try:
        archive = np.load(file, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise UserError(f"{path}: not a readable .npz archive ({_no_pickle_hint(error)})") from None
    with archive:
        missing = [name for name in REQUIRED_ARRAYS if name not in archive.files]
        if missing:
            raise UserError(f"{path}: missing array(s) {', '.join(missing)} (need A, b, w)")
        arrays = {}
        for name in REQUIRED_ARRAYS:
            try:
                arrays[name] = np.asarray(archive[name], dtype=np.float64)
            except (TypeError, ValueError, OSError, zipfile.BadZipFile) as error:
                raise UserError(f"{path}: field '{name}' is not numeric ({_no_pickle_hint(error)})") from None
    A, b, w = arrays["A"], arrays["b"], arrays["w"]
    if A.ndim != 2 or 0 in A.shape:
        raise UserError(f"{path}: field 'A' must be a non-empty n x d matrix, got shape {A.shape}")
    n, d = A.shape
    for name, vector in (("b", b), ("w", w)):
        if vector.shape != (n,):
            raise UserError(f"{path}: field '{name}' has shape {vector.shape}, expected ({n},) to match A")
    for name, array in arrays.items():
        if not np.all(np.isfinite(array)):
            raise UserError(f"{path}: field '{name}' contains NaN or infinite values")
    if n < d:
        raise UserError(
            f"{path}: field 'A' has n={n} rows < d={d} columns; the theorem needs sigma_min(A) > 0"
        )
    return SoftmaxRegressionProblem(A, b, w)


def _instance(args: argparse.Namespace) -> tuple[SoftmaxRegressionProblem, str]:
    import numpy as np

    from infoprompt.theory.conditions import random_instance

    if args.input is not None:
        problem = load_instance(args.input)
        for flag, value, actual in (("--n", args.n, problem.n), ("--d", args.d, problem.d)):
            if value is not None and value != actual:
                raise UserError(f"{flag} {value} contradicts {args.input} (which has {flag[2:]}={actual})")
        return problem, args.input
    if args.n is None or args.d is None:
        raise UserError("give --n and --d for a generated instance, or --input instance.npz")
    if args.n < 1 or args.d < 1:
        raise UserError(f"--n and --d must be positive, got --n {args.n} --d {args.d}")
    if args.n < args.d:
        raise UserError(f"--n {args.n} < --d {args.d}: the theorem needs n >= d so that sigma_min(A) > 0")
    if args.w_margin <= 0:
        raise UserError(f"--w-margin must be positive, got {args.w_margin}")
    rng = np.random.default_rng(args.seed)
    return random_instance(args.n, args.d, rng, ell=args.l, margin=args.w_margin), f"random(seed={args.seed})"


def _check_options(args: argparse.Namespace) -> None:
    if not args.eps > 0:
        raise UserError(f"--eps must be positive, got {args.eps}")
    if args.max_iter < 1:
        raise UserError(f"--max-iter must be at least 1, got {args.max_iter}")
    if not args.l > 0:
        raise UserError(f"--l must be positive, got {args.l}")
    if not 0 < args.sketch_accuracy < 1:
        raise UserError(f"--sketch-accuracy must lie in (0, 1), got {args.sketch_accuracy}")
    if args.sample_size is not None and args.sample_size < 1:
        raise UserError(f"--sample-size must be positive, got {args.sample_size}")


def format_history(result: NewtonResult) -> list[str]:
    lines = [f"{'iter':>4}  {'loss':>22}  {'|g|':>10}  {'|x-x*|':>10}  {'step':>10}  {'rows':>8}  {'ms':>9}"]
    for record in result.history:
        dist = "-" if record.dist_to_opt is None else f"{record.dist_to_opt:.3e}"
        lines.append(
            f"{record.iteration:>4}  {record.loss:>22.15e}  {record.grad_norm:>10.3e}  {dist:>10}  "
            f"{record.step_norm:>10.3e}  {record.rows_used:>8}  {1000 * record.seconds:>9.2f}"
        )
    return lines


def _summary(result: NewtonResult) -> str:
    final = result.history[-1].dist_to_opt
    return (
        f"{result.method}: {result.iterations} iterations, stop: {result.stop_reason}, "
        f"total {result.total_seconds:.4f} s, {result.seconds_per_iteration:.4f} s/iteration, "
        f"final ||x - x*|| = {final:.3e}"
    )


def _result_json(result: NewtonResult) -> dict[str, object]:
    return {
        "iterations": result.iterations,
        "converged": result.converged,
        "stop_reason": result.stop_reason,
        "total_seconds": result.total_seconds,
        "seconds_per_iteration": result.seconds_per_iteration,
        "history": [asdict(record) for record in result.history],
    }


def run_newton(args: argparse.Namespace) -> int:
    """Handler of ``theory newton``; returns 0 when every method met its stopping rule, 1 otherwise."""
    import numpy as np

    from infoprompt.io_utils import finite_json
    from infoprompt.theory.conditions import check_conditions
    from infoprompt.theory.newton import SketchConfig, exact_newton, sketched_newton, solve_reference

    _check_options(args)
    problem, source = _instance(args)
    x0 = np.zeros(problem.d)
    try:
        x_star = solve_reference(problem, x0)
    except RuntimeError as error:
        raise UserError(f"{source}: no minimiser found for the reference solution x* ({error})") from None
    print(
        f"instance {source}: n={problem.n}, d={problem.d}, min w^2 = {float(np.min(problem.w**2)):.4g}, "
        f"||x*|| = {np.linalg.norm(x_star):.4g}, ||x0 - x*|| = {np.linalg.norm(x0 - x_star):.4g}"
    )
    options = {
        "tol": 0.0,
        "eps": args.eps,
        "max_iter": args.max_iter,
        "line_search": args.line_search,
        "x_star": x_star,
    }
    results = [exact_newton(problem, x0, **options)]
    if args.sketch:
        config = SketchConfig(accuracy=args.sketch_accuracy, sample_size=args.sample_size)
        sketch_rng = np.random.default_rng([args.seed, 1])
        results.append(sketched_newton(problem, x0, rng=sketch_rng, sketch=config, **options))
    for result in results:
        print()
        print(f"{result.method} Newton")
        print("\n".join(format_history(result)))
    print()
    for result in results:
        print(_summary(result))
    ratios: dict[str, float] = {}
    if len(results) == 2:
        exact, sketched = results
        ratios = {
            "total_exact_over_sketched": exact.total_seconds / max(sketched.total_seconds, 1e-12),
            "per_iteration_exact_over_sketched": exact.seconds_per_iteration
            / max(sketched.seconds_per_iteration, 1e-12),
        }
        print(
            f"time ratio exact/sketched: total {ratios['total_exact_over_sketched']:.2f}x, "
            f"per iteration {ratios['per_iteration_exact_over_sketched']:.2f}x"
        )
    points = [x_star] + [x for result in results for x in result.iterates]
    report = check_conditions(problem, points, ell=args.l, x_star=x_star, x0=x0)
    print()
    print("conditions (docs/theory.md):")
    for line in report.lines():
        print(f"  {line}")
    if args.json is not None:
        payload = {
            "instance": {"source": source, "n": problem.n, "d": problem.d, "seed": args.seed},
            "x_star": x_star.tolist(),
            "runs": {result.method: _result_json(result) for result in results},
            "ratios": ratios,
            "conditions": asdict(report),
        }
        try:
            Path(args.json).write_text(json.dumps(finite_json(payload), indent=2, allow_nan=False) + "\n")
        except OSError as error:
            raise UserError(f"{args.json}: cannot write the JSON report ({error.strerror})") from None
    failed = [result.method for result in results if not result.converged]
    if failed:
        print(f"not converged within --max-iter {args.max_iter}: {', '.join(failed)}")
        return 1
    return 0
