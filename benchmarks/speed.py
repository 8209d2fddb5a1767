"""Speed benchmark: training-step time, step memory and inference throughput of every method, side by side.

    python benchmarks/speed.py --backbone minilm --task sst2 --data-dir ../shared/data

All methods see the same examples in the same batches (a ``--shots`` sample of one task, batch size 8) and
are timed in interleaved rounds (one step of each method per round), so machine load affects them alike;
the table reports medians. Ratios are against ``warp`` and ``peft-prompt-tuning`` from the same run.

* step ms: one optimiser step (features, forward, losses, backward, clip, AdamW), median over ``--steps``.
* step MB: tensors saved for backward in one step (activations, without the frozen weights they alias) plus
  gradients and AdamW state of the trainable parameters; on CUDA the true peak would be
  ``torch.cuda.max_memory_allocated``, but the training code runs on CPU tensors.
* infer ex/s: ``predict_encoded`` on ``--infer`` eval examples, new inputs (no cached features), batch 64;
  median over ``--infer-repeats`` interleaved rounds (one pass of every method per round) after a warm-up.
* feature cache: InfoPrompt with the no-prompt pass cached once per example vs recomputed every step.
* whole run (InfoPrompt vs peft): the paper's ``--full-epochs`` (30) over the sample plus the final evaluation
  on the whole eval split, estimated from the parts measured above (feature cache + steps × median step +
  eval rows / throughput). ``--run-epochs N`` also times real ``train()`` runs of N epochs
  (``--run-repeats`` interleaved rounds, medians) and scales them; with N = 30 nothing is scaled. The
  recommended ``infoprompt-plus`` is timed as whole real runs, selection and refit included.
* setfit (when listed): it has no prompt step, so it gets no step row. Its schedule is fixed
  (2 · num_iterations · shots pairs, batch 16), so a real run capped at ``--setfit-steps`` body steps is timed
  and its body training scaled to the full schedule; inference ex/s is its final evaluation on the whole eval split.

Prints Markdown tables; ``--json`` / ``--markdown`` also write them. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

GOAL_STEP = 1.15  # InfoPrompt step <= 1.15 x warp step
GOAL_INFER = 0.9  # InfoPrompt inference >= 0.9 x peft-prompt-tuning
ONE_PASS = "infoprompt (pooling=embeddings)"
DEFAULT_METHODS = ("infoprompt", "warp", "peft-prompt-tuning", "idpg", "infoprompt-ce", "adapter", "finetune",
                   "linear-probe", "infoprompt-plus")
# Methods whose run length is not a fixed number of epochs (held-out selection, SetFit's own schedule): their
# whole runs are timed for real, never scaled from shorter ones.
UNSCALED = ("infoprompt-plus",)
SCHEDULED = "setfit"  # a fixed number of body steps: timed on a capped run, scaled to the whole schedule


@dataclass
class Variant:
    """One timed configuration: a method with classifier overrides, a precision, the feature cache on or off."""

    label: str
    method: str
    feature_cache: bool = True
    classifier: dict = field(default_factory=dict)
    precision: str = "fp32"
    model: object = None
    encoded: object = None
    optimizer: object = None
    parameters: list = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    infer_rates: list[float] = field(default_factory=list)
    cache_s: float = 0.0
    step_mb: float | None = None


def build_variant(variant: Variant, args, backbone, sample, seed: int) -> None:
    from infoprompt.pipeline import RunSpec, build_classifier
    from infoprompt.training import cache_features, encode_examples

    spec = RunSpec(task=args.task, method=variant.method, shots=args.shots, n_prompts=args.n_prompts, seed=seed,
                   backbone=args.backbone, classifier={"max_length": args.max_length, **variant.classifier})
    model = build_classifier(spec, backbone)
    variant.model = model
    variant.encoded = encode_examples(model, sample)
    if variant.feature_cache and model.needs_features:
        t0 = time.perf_counter()
        cache_features(model, variant.encoded, 64, precision=variant.precision)
        variant.cache_s = time.perf_counter() - t0
    variant.parameters = [p for p in model.parameters() if p.requires_grad]
    if "epochs" in model.config.kind.training_options:  # a kind trained by gradient steps (not fitted in one go)
        lr = model.preset.lr
        variant.optimizer = torch.optim.AdamW(variant.parameters, lr=lr, weight_decay=0.01)
    model.train()


def one_step(variant: Variant, chunk: list[int], generator: torch.Generator) -> float:
    from infoprompt.training import batch_losses

    model, encoded = variant.model, variant.encoded
    t0 = time.perf_counter()
    terms = batch_losses(model, encoded, chunk, generator, variant.precision)
    variant.optimizer.zero_grad(set_to_none=True)
    terms.total.backward()
    torch.nn.utils.clip_grad_norm_(variant.parameters, 1.0)
    variant.optimizer.step()
    return time.perf_counter() - t0


def step_memory_mb(variant: Variant, chunk: list[int], generator: torch.Generator) -> float:
    """Bytes saved for backward in one step (minus aliases of weights) plus grads and AdamW moments."""
    weights = {p.untyped_storage().data_ptr() for p in variant.model.parameters()}
    weights |= {p.untyped_storage().data_ptr() for p in variant.model.backbone.model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        one_step(variant, chunk, generator)
    trainable = sum(p.numel() * p.element_size() for p in variant.parameters)
    return (sum(seen.values()) + 3 * trainable) / 2**20


def infer_rate(variant: Variant, eval_encoded) -> float:
    from infoprompt.training import predict_encoded

    t0 = time.perf_counter()
    predict_encoded(variant.model, eval_encoded, 64, precision=variant.precision)
    return len(eval_encoded) / (time.perf_counter() - t0)


def setfit_schedule(settings, n_train: int) -> int:
    """Body steps of a whole SetFit run: epochs · ⌈2 · num_iterations · n_train pairs / pairs per step⌉."""
    return settings.epochs * math.ceil(2 * settings.num_iterations * n_train / settings.batch_size)


def whole_run(variant: Variant, args, backbone, sample, eval_examples, seed: int) -> dict[str, float]:
    from infoprompt.kinds import kind_of
    from infoprompt.pipeline import RunSpec, build_classifier
    from infoprompt.training import TrainConfig

    spec = RunSpec(task=args.task, method=variant.method, shots=args.shots, n_prompts=args.n_prompts, seed=seed,
                   backbone=args.backbone, classifier={"max_length": args.max_length, **variant.classifier})
    model = build_classifier(spec, backbone)
    unscaled = variant.method in UNSCALED
    scheduled = variant.method == SCHEDULED
    epochs = args.full_epochs if unscaled else args.run_epochs
    config = TrainConfig(epochs=max(epochs, 1), batch_size=args.batch_size, seed=seed, eval_every_epochs=0,
                         progress=False, precision=variant.precision, feature_store=False,
                         max_steps=args.setfit_steps if scheduled else None)
    t0 = time.perf_counter()
    result = kind_of(variant.method).trainer()(model, sample, eval_examples, config)
    total = time.perf_counter() - t0
    train_s = result.timings["train_s"]
    if scheduled:
        schedule = setfit_schedule(model.settings, len(sample))
        full = total - train_s + train_s * schedule / max(result.steps, 1)
    else:
        full = total if unscaled else total - train_s + train_s * args.full_epochs / args.run_epochs
    return {"measured_s": total, "train_s": train_s, "steps": result.steps, "extrapolated_s": full,
            "final_eval_s": result.timings["final_eval_s"], "n_eval": len(eval_examples),
            "metric": next(iter(result.metrics.values()))}


def ratio(value: float | None, reference: float | None) -> str:
    if value is None or reference is None or reference == 0:
        return "—"
    return f"{value / reference:.2f}"


def benchmark_parser(doc: str | None, methods: Sequence[str]) -> argparse.ArgumentParser:
    """The options every side-by-side benchmark here shares (draw, methods, timing rounds, outputs)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir")
    parser.add_argument("--methods", nargs="+", default=list(methods))
    parser.add_argument("--shots", type=int, default=64)
    parser.add_argument("--n-prompts", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8, help="examples per step of the prompt kinds")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per method")
    parser.add_argument("--warmup", type=int, default=1, help="untimed step rounds first")
    parser.add_argument("--infer", type=int, default=256, help="eval examples for the throughput measurement")
    parser.add_argument("--infer-repeats", type=int, default=5)
    parser.add_argument("--setfit-steps", type=int, default=10, help="body steps of the capped setfit run")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write all numbers here")
    parser.add_argument("--markdown", help="write the tables here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__, DEFAULT_METHODS)
    parser.add_argument("--run-epochs", type=int, default=0, help="also time real whole runs of N epochs (0: skip)")
    parser.add_argument("--full-epochs", type=int, default=30, help="whole-run length the measurement is scaled to")
    parser.add_argument("--run-repeats", type=int, default=1, help="interleaved rounds of whole runs (medians)")
    parser.add_argument("--bf16", action="store_true", help="also time infoprompt and warp under bf16 autocast")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    from infoprompt.backbones import load_backbone
    from infoprompt.pipeline import read_split
    from infoprompt.tasks import get_task, sample_few_shot
    from infoprompt.training import batches, encode_examples

    started = time.perf_counter()
    task = get_task(args.task)
    sample = sample_few_shot(read_split(task, task.train_split, args.data_dir, "files"), args.shots, args.seed)
    eval_examples = read_split(task, task.eval_split, args.data_dir, "files")
    backbone = load_backbone(args.backbone)

    variants = [Variant(m, m) for m in args.methods if m != SCHEDULED]
    if "infoprompt" in args.methods:
        variants.append(Variant("infoprompt (no feature cache)", "infoprompt", feature_cache=False))
        variants.append(Variant(ONE_PASS, "infoprompt", classifier={"pooling": "embeddings"}))
        if args.bf16:
            variants.append(Variant("infoprompt (bf16)", "infoprompt", precision="bf16"))
    if args.bf16 and "warp" in args.methods:
        variants.append(Variant("warp (bf16)", "warp", precision="bf16"))
    for variant in variants:
        build_variant(variant, args, backbone, sample, args.seed)
    order = torch.randperm(len(sample), generator=torch.Generator().manual_seed(args.seed)).tolist()
    chunks = batches(order, args.batch_size)
    trained = [v for v in variants if v.optimizer is not None]
    generators = {v.label: torch.Generator().manual_seed(args.seed) for v in trained}
    for round_index in range(args.warmup + args.steps):
        chunk = chunks[round_index % len(chunks)]
        for variant in trained:  # interleaved: one step of every method per round
            elapsed = one_step(variant, chunk, generators[variant.label])
            if round_index >= args.warmup:
                variant.step_times.append(elapsed)
        print(f"round {round_index + 1}/{args.warmup + args.steps} done", file=sys.stderr)
    for variant in trained:
        variant.step_mb = step_memory_mb(variant, chunks[0], generators[variant.label])

    infer_examples = eval_examples[: args.infer]
    eval_sets = {v.label: encode_examples(v.model, infer_examples) for v in variants if v.feature_cache}
    for variant in variants:  # untimed warm-up: first calls pay for allocations and kernel selection
        if variant.feature_cache:
            infer_rate(variant, encode_examples(variant.model, infer_examples[:16]))
    for _ in range(args.infer_repeats):
        for variant in variants:
            if variant.feature_cache:  # the no-cache twin infers exactly like the cached model
                variant.infer_rates.append(infer_rate(variant, eval_sets[variant.label]))
    print("inference done", file=sys.stderr)

    by_label = {v.label: v for v in variants}
    runs = {}
    if SCHEDULED in args.methods:
        by_label[SCHEDULED] = Variant(SCHEDULED, SCHEDULED)
    if args.run_epochs or SCHEDULED in by_label:
        timed: dict[str, list[dict[str, float]]] = {}
        labels = (*(("infoprompt", ONE_PASS, "peft-prompt-tuning", *UNSCALED) if args.run_epochs else ()), SCHEDULED)
        whole_run_labels = [label for label in labels if label in by_label]
        for round_index in range(args.run_repeats):  # interleaved, like the steps
            for label in whole_run_labels:
                timed.setdefault(label, []).append(whole_run(by_label[label], args, backbone, sample, eval_examples, args.seed))
                print(f"whole run {label} ({round_index + 1}/{args.run_repeats}) done", file=sys.stderr)
        runs = {label: {key: statistics.median(run[key] for run in repeats) for key in repeats[0]}
                for label, repeats in timed.items()}

    step = {v.label: statistics.median(v.step_times) if v.step_times else None for v in variants}
    rate = {v.label: statistics.median(v.infer_rates) if v.infer_rates else None for v in variants}
    params = {v.label: sum(p.numel() for p in v.parameters) for v in variants}
    lines = [
        f"### Speed: {args.backbone}, {args.task}, {args.shots} shots, batch {args.batch_size}, n_p={args.n_prompts}, "
        f"{args.threads} thread(s), {args.steps} timed steps (median), torch {torch.__version__}",
        "",
        "| method | trainable params | step ms | × warp | × peft | step MB | infer ex/s | × warp | × peft |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        s, r = step[v.label], rate[v.label]
        lines.append(
            f"| {v.label} | {params[v.label]:,} | {'—' if s is None else f'{s * 1000:.0f}'} | "
            f"{ratio(s, step.get('warp'))} | {ratio(s, step.get('peft-prompt-tuning'))} | "
            f"{'—' if v.step_mb is None else f'{v.step_mb:.1f}'} | {'—' if r is None else (f'{r:.0f}' if r >= 10 else f'{r:.2f}')} | "
            f"{ratio(r, rate.get('warp'))} | {ratio(r, rate.get('peft-prompt-tuning'))} |"
        )
    lines.append("")
    goals = []
    if "infoprompt" in by_label:
        cached, fresh = step["infoprompt"], step.get("infoprompt (no feature cache)")
        lines += [
            "| InfoPrompt feature cache | step ms | cache build s (once per run) |",
            "|---|---|---|",
            f"| on | {cached * 1000:.0f} | {by_label['infoprompt'].cache_s:.2f} for {len(sample)} examples |",
            f"| off | {fresh * 1000:.0f} ({fresh / cached:.2f}× on) | — |",
            "",
        ]
        if "warp" in step:
            value = cached / step["warp"]
            goals.append(f"InfoPrompt step / warp step = {value:.2f} (goal ≤ {GOAL_STEP}): "
                         f"{'PASS' if value <= GOAL_STEP else 'FAIL'}")
            if step.get("infoprompt-plus"):
                goals.append(f"infoprompt-plus step / warp step = {step['infoprompt-plus'] / step['warp']:.2f}")
        if rate.get("peft-prompt-tuning"):
            for label in ("infoprompt", ONE_PASS):
                value = rate[label] / rate["peft-prompt-tuning"]
                goals.append(f"{label} inference / peft inference = {value:.2f} (goal ≥ {GOAL_INFER}): "
                             f"{'PASS' if value >= GOAL_INFER else 'FAIL'}")
    pair = ("infoprompt", "peft-prompt-tuning")
    if all(m in by_label for m in pair):
        steps_per_run = args.full_epochs * len(chunks)
        estimate = {m: by_label[m].cache_s + steps_per_run * step[m] + len(eval_examples) / rate[m] for m in pair}
        lines += [
            f"| whole run estimate ({args.full_epochs} epochs × {len(chunks)} steps + eval on all "
            f"{len(eval_examples)} {task.eval_split} rows) | feature cache s | train s | final eval s | total s |",
            "|---|---|---|---|---|",
        ]
        # Every stepped method gets the same estimate, so the per-method table covers them all; the pair's
        # ratio below is the goal.
        for v in variants:
            if step[v.label] is None or rate.get(v.label) is None:
                continue
            total = v.cache_s + steps_per_run * step[v.label] + len(eval_examples) / rate[v.label]
            lines.append(f"| {v.label} | {v.cache_s:.1f} | {steps_per_run * step[v.label]:.0f} | "
                         f"{len(eval_examples) / rate[v.label]:.0f} | {total:.0f} |")
        if SCHEDULED in runs:
            run = runs[SCHEDULED]
            lines.append(f"| {SCHEDULED} (capped run of {run['steps']:.0f} body steps, scaled to its schedule) | — | "
                         f"{run['extrapolated_s'] - run['measured_s'] + run['train_s']:.0f} | "
                         f"{run['final_eval_s']:.0f} ({run['n_eval'] / run['final_eval_s']:.1f} ex/s) | "
                         f"{run['extrapolated_s']:.0f} |")
            goals.append(f"whole setfit run / whole peft run (estimates) = "
                         f"{run['extrapolated_s'] / estimate['peft-prompt-tuning']:.2f}")
        value = estimate["infoprompt"] / estimate["peft-prompt-tuning"]
        train_only = {m: by_label[m].cache_s + steps_per_run * step[m] for m in pair}
        train_ratio = train_only["infoprompt"] / train_only["peft-prompt-tuning"]
        eval_ratio = rate["peft-prompt-tuning"] / rate["infoprompt"]
        lines += [f"| ratio | | {train_ratio:.2f} (with cache) | {eval_ratio:.2f} | {value:.2f} |", ""]
        goals.append(f"whole {args.full_epochs}-epoch InfoPrompt run / peft run (estimate) = {value:.2f} (goal ≤ 1.00): "
                     f"{'PASS' if value <= 1.0 else 'FAIL'}")
    if "peft-prompt-tuning" in runs and len(runs) > 1:  # timed whole runs (--run-epochs)
        pp = runs["peft-prompt-tuning"]
        lines += [
            f"| whole run ({args.shots}-shot {args.task}, eval on all {len(eval_examples)} {task.eval_split} rows) | "
            f"measured s ({args.run_epochs} epochs, median of {args.run_repeats}) | final eval s | extrapolated s ({args.full_epochs} epochs) "
            "| × peft |",
            "|---|---|---|---|---|",
        ]
        for label, run in runs.items():
            lines.append(f"| {label} | {run['measured_s']:.1f} | {run['final_eval_s']:.1f} | "
                         f"{run['extrapolated_s']:.1f} | {run['extrapolated_s'] / pp['extrapolated_s']:.2f} |")
        lines.append("")
        for label in (name for name in runs if name != "peft-prompt-tuning"):
            value = runs[label]["extrapolated_s"] / pp["extrapolated_s"]
            if label in (*UNSCALED, SCHEDULED):  # their own schedules: a ratio, no goal
                goals.append(f"whole {label} run / whole {args.full_epochs}-epoch peft run = {value:.2f}")
                continue
            goals.append(f"whole {args.full_epochs}-epoch {label} run / peft run (timed {args.run_epochs}-epoch runs, "
                         f"scaled) = {value:.2f} (goal ≤ 1.00): {'PASS' if value <= 1.0 else 'FAIL'}")
    lines += [f"- {g}" for g in goals]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines.append(f"\n({time.perf_counter() - started:.0f} s in all; process peak RSS {peak_mb:.0f} MB)")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    if args.json:
        data = {"args": vars(args), "step_s": step, "step_times": {v.label: v.step_times for v in variants},
                "step_mb": {v.label: v.step_mb for v in variants}, "infer_ex_per_s": rate, "trainable": params,
                "cache_s": {v.label: v.cache_s for v in variants}, "whole_runs": runs, "goals": goals}
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
