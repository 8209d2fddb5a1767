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
from infoprompt.training import TrainConfig, batch_losses, cache_features, encode_examples


def step_times(backbone, rows, variants, steps, batch_size, seed=1):
    """Median step time per variant (``method`` or ``method@bf16``), steps interleaved on the same batches."""
    models, encoded, optimisers = {}, {}, {}
    for variant in variants:
        method = variant.split("@")[0]
        model = build_classifier(RunSpec(task="sst2", method=method, seed=seed), backbone)
        enc = encode_examples(model, rows)
        cache_features(model, enc, 64)
        model.train()
        models[variant], encoded[variant] = model, enc
        optimisers[variant] = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    times = {v: [] for v in variants}
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(rows), generator=generator).tolist()
    for step in range(steps):
        start = (step * batch_size) % (len(rows) - batch_size + 1)
        chunk = order[start : start + batch_size]
        for variant in variants:
            model, enc, opt = models[variant], encoded[variant], optimisers[variant]
            precision = variant.split("@")[1] if "@" in variant else "fp32"
            t0 = time.perf_counter()
            terms = batch_losses(model, enc, chunk, generator, precision)
            opt.zero_grad(set_to_none=True)
            terms.total.backward()
            opt.step()
            times[variant].append(time.perf_counter() - t0)
    return {m: statistics.median(t[3:]) for m, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--whole-run", action="store_true", help="also time one full 64-shot SST-2 InfoPrompt run")
    parser.add_argument("--bf16", action="store_true", help="also time bf16-autocast steps (and a bf16 whole run)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    backbone = load_backbone("minilm")
    task = get_task("sst2")
    rows = sample_few_shot(load_split(task, "train", args.data_dir), 64, seed=1)
    variants = ["warp", "infoprompt", "infoprompt-ce", "idpg"]
    if args.bf16:
        variants += ["warp@bf16", "infoprompt@bf16"]
    medians = step_times(backbone, rows, variants, args.steps, 8)
    print(f"threads={torch.get_num_threads()}  steps={args.steps}  batch=8  task=sst2  backbone=minilm")
    print("| method | median step (ms) | ratio vs warp (fp32) |")
    print("|---|---|---|")
    for variant, value in medians.items():
        print(f"| {variant} | {value * 1000:.1f} | {value / medians['warp']:.3f} |")
    if args.whole_run:
        for precision in ("fp32", "bf16") if args.bf16 else ("fp32",):
            for periodic in (5, 0):
                t0 = time.perf_counter()
                config = TrainConfig(seed=1, progress=False, precision=precision, eval_every_epochs=periodic)
                record = run_training(RunSpec(task="sst2", method="infoprompt", shots=64, n_prompts=4, seed=1,
                                              data_dir=args.data_dir, training=config), backbone=backbone)
                wall = time.perf_counter() - t0
                timings = record["timings"]
                print(f"whole 64-shot run, {precision}, eval every {periodic or '-'} epochs: {wall:.1f} s wall "
                      f"(train {timings['train_s']:.1f} s, feature cache {timings['feature_cache_s']:.1f} s, periodic "
                      f"eval {timings['periodic_eval_s']:.1f} s, final eval {timings['final_eval_s']:.1f} s), "
                      f"accuracy {record['metrics']['accuracy']:.4f}")


if __name__ == "__main__":
    main()
