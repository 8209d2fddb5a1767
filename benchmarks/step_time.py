"""Benchmark: InfoPrompt vs WARP training-step time on the same batches, and one whole 64-shot SST-2 run.

Prints a table. Goals (issue: core): an InfoPrompt step ≤ 1.15× a WARP step; a whole 64-shot SST-2 InfoPrompt run
(30 epochs, n_p=4, evaluation included) under 60 s on a 2-core machine. Steps of the methods are interleaved so
that machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from infoprompt.backbones import load_backbone
from infoprompt.pipeline import RunSpec, build_classifier, run_training
from infoprompt.tasks import get_task, load_split, sample_few_shot
from infoprompt.training import TrainConfig, cache_features, encode_examples, features_for, prompted_batch


def step_times(backbone, rows, methods, steps, batch_size, seed=1):
    models, encoded, optimisers = {}, {}, {}
    for method in methods:
        model = build_classifier(RunSpec(task="sst2", method=method, seed=seed), backbone)
        enc = encode_examples(model, rows)
        cache_features(model, enc, 64)
        model.train()
        models[method], encoded[method] = model, enc
        optimisers[method] = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    times = {m: [] for m in methods}
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(rows), generator=generator).tolist()
    for step in range(steps):
        start = (step * batch_size) % (len(rows) - batch_size + 1)
        chunk = order[start : start + batch_size]
        for method in methods:
            model, enc, opt = models[method], encoded[method], optimisers[method]
            t0 = time.perf_counter()
            pooled, z_plain = features_for(model, enc, chunk)
            terms = model.losses(prompted_batch(model, enc, chunk), enc.labels[chunk], pooled, z_plain, generator)
            opt.zero_grad(set_to_none=True)
            terms.total.backward()
            opt.step()
            times[method].append(time.perf_counter() - t0)
    return {m: statistics.median(t[3:]) for m, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--whole-run", action="store_true", help="also time one full 64-shot SST-2 InfoPrompt run")
    args = parser.parse_args()
    backbone = load_backbone("minilm")
    task = get_task("sst2")
    rows = sample_few_shot(load_split(task, "train", args.data_dir), 64, seed=1)
    medians = step_times(backbone, rows, ["warp", "infoprompt", "infoprompt-ce", "idpg"], args.steps, 8)
    print(f"threads={torch.get_num_threads()}  steps={args.steps}  batch=8  task=sst2  backbone=minilm")
    print("| method | median step (ms) | ratio vs warp |")
    print("|---|---|---|")
    for method, value in medians.items():
        print(f"| {method} | {value * 1000:.1f} | {value / medians['warp']:.3f} |")
    if args.whole_run:
        t0 = time.perf_counter()
        record = run_training(RunSpec(task="sst2", method="infoprompt", shots=64, n_prompts=4, seed=1,
                                      data_dir=args.data_dir, training=TrainConfig(seed=1, progress=False)),
                              backbone=backbone)
        wall = time.perf_counter() - t0
        timings = record["timings"]
        print(f"\nwhole 64-shot run: {wall:.1f} s wall (train {timings['train_s']:.1f} s, feature cache "
              f"{timings['feature_cache_s']:.1f} s, periodic eval {timings['periodic_eval_s']:.1f} s, final eval "
              f"{timings['final_eval_s']:.1f} s), accuracy {record['metrics']['accuracy']:.4f}")


if __name__ == "__main__":
    main()
