"""Compare recipes without touching any evaluation split: few-shot draws and their scoring rows both come
from the task's training split (disjoint), so design choices never see dev or test data.

    python benchmarks/design_check.py --task sst2 --seeds 11 12 --score-rows 400 \
        --variant plus=infoprompt-plus --variant probe=linear-probe \
        --variant 'plus-mask=infoprompt-plus:{"classifier": {"readout": "mask"}}'

Each variant is ``name=method`` or ``name=method:{json}`` with ``classifier`` / ``training`` overrides, and for
kinds whose model takes settings (setfit, setfit-lora, top-lora) ``settings`` overrides of those, e.g.
``'k2=top-lora:{"settings": {"top_layers": 2}}'``; a kind's options go under ``classifier`` (the same run:
``{"classifier": {"top_layers": 2}}``; LoRA's rank is the setting ``rank`` and the option ``lora_rank``).
Prints one row per variant: the mean primary metric over seeds, each seed's value and the seconds per run.

``--refit-head-c 1 10`` also scores SetFit-kind variants (setfit, setfit-lora) with their trained body and the
head refitted on the draw at each given C (rows ``name@C=1``, ...): head choices compared on one body, one
training run, since the body's training does not depend on the head.
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


def training_split_draw(train_split, shots: int, seed: int, labels, score_rows: int) -> tuple[list, list]:
    """The few-shot draw of ``seed`` from the training split (as a sweep cell draws it) and ``score_rows`` other
    rows of the same split to score it on: no dev or test row is read."""
    sample = sample_few_shot(train_split, shots, seed, labels=labels)
    taken = {id(e) for e in sample}
    rest = [e for e in train_split if id(e) not in taken]
    return sample, random.Random(seed).sample(rest, min(score_rows, len(rest)))


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
    parser.add_argument("--refit-head-c", type=float, nargs="*", default=[],
                        help="also score SetFit-kind variants with the head refitted at each of these C")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    train_split = load_split(task, task.train_split, args.data_dir)
    backbone = load_backbone(args.backbone)
    rows: dict[str, list[tuple[float, float]]] = {}
    for seed in args.seeds:
        sample, scoring = training_split_draw(train_split, args.shots, seed, task.labels, args.score_rows)
        for text in args.variant:
            name, method, overrides = parse_variant(text)
            training = TrainConfig(**{"seed": seed, "progress": False, "eval_every_epochs": 0, **overrides.get("training", {})})
            spec = RunSpec(task=args.task, method=method, shots=args.shots, seed=seed, backbone=args.backbone,
                           classifier=overrides.get("classifier", {}), training=training)
            t0 = time.perf_counter()
            model, record = run_training_on(spec, sample, scoring, backbone, overrides.get("settings"))
            seconds = time.perf_counter() - t0
            scored = [(name, record["metrics"][task.primary_metric], record)]
            if args.refit_head_c and hasattr(model, "setfit"):
                scored += [(f"{name}@C={c:g}", refit_head(model, sample, scoring, c, spec.training)[task.primary_metric],
                            None) for c in args.refit_head_c]
            for label, value, result in scored:
                rows.setdefault(label, []).append((value, seconds))
                extra = (result or {}).get("selection") or {}
                print(f"{label:28s} seed {seed}: {value:.4f} ({seconds:.0f} s)"
                      f"{''.join(f' {k}={v}' for k, v in extra.items() if k in ('epochs', 'head_c'))}", flush=True)
                if args.out:
                    with open(args.out, "a", encoding="utf-8") as handle:
                        handle.write(json.dumps({"variant": label, "task": args.task, "backbone": args.backbone,
                                                 "seed": seed, "value": value, "seconds": seconds,
                                                 "information": (result or {}).get("information"),
                                                 "selection": extra or None}) + "\n")
    print(f"\n| variant | mean {task.primary_metric} | per seed | s/run |\n|---|---|---|---|")
    for name, values in rows.items():
        mean = sum(v for v, _ in values) / len(values)
        per = " ".join(f"{v:.3f}" for v, _ in values)
        print(f"| {name} | {mean:.4f} | {per} | {sum(s for _, s in values) / len(values):.0f} |")


def run_training_on(spec: RunSpec, sample, scoring, backbone, settings: dict | None = None) -> tuple[object, dict]:
    """run_training with a given draw and scoring rows (both from the training split): the trained model and its
    result record. ``settings``: overrides of the model's own settings (kinds that have them)."""
    from infoprompt.kinds import kind_of
    from infoprompt.pipeline import build_classifier

    model = build_classifier(spec, backbone)
    if settings:
        model = type(model)(backbone, model.config, dataclasses.replace(model.settings, **settings))
    result = kind_of(spec.method).trainer()(model, sample, scoring, spec.training)
    return model, dataclasses.asdict(result)


def refit_head(model, sample, scoring, c: float, training: TrainConfig) -> dict[str, float]:
    """The metrics on ``scoring`` of a trained SetFit-kind model whose head is refitted on the draw at C = ``c``."""
    from sklearn.linear_model import LogisticRegression

    from infoprompt.training.data import encode_examples
    from infoprompt.training.inference import evaluate_encoded

    labels = encode_examples(model, sample).labels.tolist()
    head = LogisticRegression(C=c, max_iter=model.settings.head_max_iter, random_state=model.config.init_seed)
    model.set_head(head.fit(model.head_features(model.texts(sample)), labels))
    return evaluate_encoded(model, encode_examples(model, scoring), training.eval_batch_size, False,
                            precision=training.precision)


if __name__ == "__main__":
    main()
