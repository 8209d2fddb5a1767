"""How the recommended method's training time grows with the texts a user labels: one table, one process.

    python benchmarks/default_scaling.py --backbone mpnet --data-dir ../shared/data --threads 1 \\
        --json results/speed/default-scaling-mpnet.json

Each row is one real training run of ``--method`` (default: the recommended one) on a draw of the task's training
split, drawn as a sweep cell draws it (seed ``--seed``): ``--per-class`` examples of every class of
``--classes-task`` (balanced sampling, as a user labels a many-class file) and ``--shots`` texts of
``--shots-task``. Nothing is evaluated: the time is the fit's own (``train_s``: the lower blocks' states, the
steps, the head), beside its steps, seconds per text and the growth against the row above on the same task.
SetFit's schedule for the same texts (2 · 20 · n pairs in steps of 16: its body steps grow as n) is printed beside
it for scale, not timed. Rows run one after another in this process, so their ratios are measured side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

SETFIT_PAIR_ITERATIONS, SETFIT_BATCH = 20, 16


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from infoprompt.recommended import RECOMMENDED_METHOD

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default=RECOMMENDED_METHOD)
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--classes-task", default="semeval-types", help="the many-class file (balanced draws)")
    parser.add_argument("--per-class", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--shots-task", default="sst2", help="the task of the --shots draws ('' for none)")
    parser.add_argument("--shots", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="also write the rows here")
    return parser.parse_args(argv)


def timed_fit(args: argparse.Namespace, backbone: Any, task: str, shots: int, sampling: str) -> dict[str, Any]:
    """One fit of ``args.method`` on the draw of ``shots`` texts of ``task``: its texts, steps and seconds."""
    from infoprompt.kinds import train
    from infoprompt.pipeline import RunSpec, build_classifier, draw_training_sample, read_run_data
    from infoprompt.training import TrainConfig

    spec = RunSpec(task=task, method=args.method, shots=shots, seed=args.seed, backbone=args.backbone,
                   data_dir=args.data_dir, sampling=sampling, classifier={"max_length": args.max_length})
    data = read_run_data(spec)
    sample = draw_training_sample(spec, data)
    model = build_classifier(spec, backbone)
    started = time.perf_counter()
    result = train(model, sample, None, TrainConfig(seed=args.seed, progress=False, feature_store=False))
    wall = time.perf_counter() - started
    classes = len(data.task.labels)
    return {"task": task, "classes": classes, "texts": len(sample), "per_class": len(sample) / classes,
            "steps": result.steps, "train_s": result.timings["train_s"], "wall_s": wall,
            "s_per_text": result.timings["train_s"] / len(sample),
            "setfit_steps": 2 * SETFIT_PAIR_ITERATIONS * len(sample) // SETFIT_BATCH}


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"### {args.method} training time against the texts: {args.backbone}, seed {args.seed}, "
             f"{args.threads} thread(s)", "",
             "| task (classes) | texts | per class | steps | train s | s / text | × the row above (texts ×) | "
             "SetFit body steps |", "|---|---|---|---|---|---|---|---|"]
    for before, row in zip([None, *rows], rows, strict=False):
        growth = "—"
        if before is not None and before["task"] == row["task"]:
            growth = f"{row['train_s'] / before['train_s']:.2f} ({row['texts'] / before['texts']:.1f})"
        lines.append(f"| {row['task']} ({row['classes']}) | {row['texts']} | {row['per_class']:.1f} | {row['steps']} "
                     f"| {row['train_s']:.1f} | {row['s_per_text']:.3f} | {growth} | {row['setfit_steps']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    from infoprompt.backbones import load_backbone
    from infoprompt.pipeline import environment

    backbone = load_backbone(args.backbone)
    plan = [(args.classes_task, n, "balanced", True) for n in args.per_class]
    if args.shots_task:
        plan += [(args.shots_task, n, "proportional", False) for n in args.shots]
    rows = []
    for task, size, sampling, per_class in plan:
        shots = size * len(load_labels(args, task)) if per_class else size
        rows.append(timed_fit(args, backbone, task, shots, sampling))
        print(f"{task} {shots} texts: {rows[-1]['train_s']:.1f} s", file=sys.stderr)
    text = table(rows, args)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "environment": environment(), "rows": rows},
                                              indent=2) + "\n", encoding="utf-8")
    return 0


def load_labels(args: argparse.Namespace, task: str) -> tuple[str, ...]:
    from infoprompt.tasks import get_task

    return get_task(task).labels


if __name__ == "__main__":
    sys.exit(main())
