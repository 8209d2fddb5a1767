"""Compare recipes without touching any evaluation split: few-shot draws and their scoring rows both come
from the task's training split (disjoint), so design choices never see dev or test data.

    python benchmarks/design_check.py --task sst2 --seeds 11 12 --score-rows 400 \
        --variant plus=infoprompt-plus --variant probe=linear-probe \
        --variant 'plus-mask=infoprompt-plus:{"classifier": {"readout": "mask"}}'

Each variant is ``name=method`` or ``name=method:{json}`` with ``classifier`` / ``training`` overrides.
Prints one row per variant: the mean primary metric over seeds, each seed's value and the seconds per run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time

import torch

from infoprompt.backbones import load_backbone
from infoprompt.pipeline import RunSpec
from infoprompt.tasks import get_task, load_split, sample_few_shot
from infoprompt.training import TrainConfig


def parse_variant(text: str) -> tuple[str, str, dict]:
    name, _, rest = text.partition("=")
    method, _, overrides = rest.partition(":")
    return name, method, json.loads(overrides) if overrides else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--shots", type=int, default=64)
    parser.add_argument("--seeds", type=int, nargs="+", default=[11, 12])
    parser.add_argument("--score-rows", type=int, default=400)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--variant", action="append", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", help="append one JSON line per run here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    train_split = load_split(task, task.train_split, args.data_dir)
    backbone = load_backbone(args.backbone)
    rows: dict[str, list[tuple[float, float]]] = {}
    for seed in args.seeds:
        sample = sample_few_shot(train_split, args.shots, seed, labels=task.labels)
        taken = {id(e) for e in sample}
        rest = [e for e in train_split if id(e) not in taken]
        scoring = random.Random(seed).sample(rest, min(args.score_rows, len(rest)))
        for text in args.variant:
            name, method, overrides = parse_variant(text)
            training = TrainConfig(**{"seed": seed, "progress": False, "eval_every_epochs": 0, **overrides.get("training", {})})
            spec = RunSpec(task=args.task, method=method, shots=args.shots, seed=seed, backbone=args.backbone,
                           classifier=overrides.get("classifier", {}), training=training)
            t0 = time.perf_counter()
            record = run_training_on(spec, sample, scoring, backbone)
            seconds = time.perf_counter() - t0
            value = record["metrics"][task.primary_metric]
            rows.setdefault(name, []).append((value, seconds))
            extra = (record.get("selection") or {}).get("epochs")
            print(f"{name:28s} seed {seed}: {value:.4f} ({seconds:.0f} s){'' if extra is None else f' epochs={extra}'}",
                  flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"variant": name, "task": args.task, "backbone": args.backbone,
                                             "seed": seed, "value": value, "seconds": seconds,
                                             "information": record.get("information"),
                                             "selection": record.get("selection")}) + "\n")
    print(f"\n| variant | mean {task.primary_metric} | per seed | s/run |\n|---|---|---|---|")
    for name, values in rows.items():
        mean = sum(v for v, _ in values) / len(values)
        per = " ".join(f"{v:.3f}" for v, _ in values)
        print(f"| {name} | {mean:.4f} | {per} | {sum(s for _, s in values) / len(values):.0f} |")


def run_training_on(spec: RunSpec, sample, scoring, backbone) -> dict:
    """run_training with a given draw and scoring rows (both from the training split)."""
    from infoprompt.kinds import kind_of
    from infoprompt.pipeline import build_classifier

    model = build_classifier(spec, backbone)
    result = kind_of(spec.method).trainer()(model, sample, scoring, spec.training)
    return dataclasses.asdict(result)


if __name__ == "__main__":
    main()
