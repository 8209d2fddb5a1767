"""Tiny adapters side by side: adapter size, step time, whole few-shot run, inference and accuracy of each method.

    python benchmarks/tiny_adapters.py --backbone mpnet --task sst2 --data-dir ../shared/data --threads 1

Smoke run (MiniLM, a few minutes on a busy 2-core machine):

    python benchmarks/tiny_adapters.py --backbone minilm --task sst2 --data-dir ../shared/data --threads 1 \\
        --shots 16 --setfit-steps 2 --run-epochs 2 --infer 32 --steps 2

Every method (``--methods``; default ``linear-probe setfit setfit-lora infoprompt-contrastive infoprompt-plus``)
sees the same ``--shots`` draw (seed ``--seed``, drawn as a sweep cell draws it) and the same eval examples (the
first ``--infer`` rows of the task's eval split). The columns:

* adapter on disk: the total size of every file ``save_pretrained`` writes for the trained adapter (all files,
  recursively). SetFit writes a whole copy of its fine-tuned encoder; that is its adapter.
* trainable params: ``model.parameter_counts()["trainable"]``.
* one step is / step ms: the median time of one optimisation step over ``--steps`` interleaved rounds (one step
  of every method per round, after ``--warmup`` untimed rounds). The prompt kinds (``infoprompt-plus``,
  ``infoprompt-contrastive``) step through the engine of ``infoprompt.training`` (``batch_losses``, backward,
  clip, AdamW; ``benchmarks/speed.py``'s ``one_step``) on the same batches of ``--batch-size`` examples.
  ``setfit`` and ``setfit-lora`` step through the ``setfit`` library: ``fit_setfit`` runs in a thread of its own
  and a callback holds its loop at the start of every body step until the round reaches it; a step is one batch
  of 16 sentence pairs (forward, backward, clip, AdamW, learning-rate schedule; the batch's collation is not
  counted), drawn with the same seed for both. The probe has no step (—).
* whole run s / × setfit run: one real training run through the library (``infoprompt.kinds.train``, or
  ``fit_setfit`` for the setfit kinds), final evaluation on the eval examples included; the ratio is to
  setfit's. Prompt kinds: ``--run-epochs`` epochs (30, as a grid cell) with the method's own held-out epoch
  selection and refit; the probe: its fit. SetFit's schedule is fixed (2 · 20 · shots pairs, 16 per step: 160
  body steps at 64 shots), so its run is capped at ``--setfit-steps`` body steps and the body training (timed
  by a callback from the loop's start to its end) scaled to the whole schedule: those rows say "scaled".
  The evaluation split's no-prompt pass is computed, never read from the feature store.
* the second table splits each whole run: what ran; measured s (the real run, unscaled); selection s (the
  held-out epoch selection of the prompt kinds); training s (the final training: the prompt kinds' refit, the
  probe's fit, setfit's capped body loop); final eval s (on the eval examples).
* infer ex/s: ``predict_encoded`` of the trained adapter on the eval examples as new inputs (no cached
  features), batch 64; median of ``--infer-repeats`` interleaved rounds after a warm-up.
* accuracy (the task's primary metric): of each whole run, on those n eval examples only, not the dev split's
  score. This is a speed benchmark: nothing is selected on it.

The machine (cpu model, torch threads) heads the tables. Prints Markdown; ``--json`` / ``--markdown`` also write
the numbers and the tables. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from speed import (  # benchmarks/speed.py
    Variant,
    benchmark_parser,
    build_variant,
    infer_rate,
    one_step,
    ratio,
    setfit_schedule,
)
from transformers import TrainerCallback

DEFAULT_METHODS = ("linear-probe", "setfit", "setfit-lora", "infoprompt-contrastive", "infoprompt-plus")
REFERENCE = "setfit"

Step = Callable[[list[int]], float | None]


@dataclass
class Row:
    """One method's numbers."""

    method: str
    step_is: str = "—"
    step_times: list[float] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    model: Any = None
    adapter_bytes: int = 0
    adapter_files: int = 0
    trainable: int = 0
    infer_rates: list[float] = field(default_factory=list)


class StepGate(TrainerCallback):
    """Holds setfit's training loop at the start of every body step until released; times each step."""

    def __init__(self) -> None:
        self.arrived = threading.Semaphore(0)
        self.go = threading.Semaphore(0)
        self.started = 0.0
        self.times: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        self.arrived.release()
        self.go.acquire()
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        self.times.append(time.perf_counter() - self.started)


class BodyTimer(TrainerCallback):
    """Seconds of setfit's body training: from its loop's start to its end (no setup, no head fit)."""

    def __init__(self) -> None:
        self.started = 0.0
        self.seconds = 0.0

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self.started = time.perf_counter()

    def on_train_end(self, args, state, control, **kwargs) -> None:
        self.seconds = time.perf_counter() - self.started


class SetFitSteps:
    """A setfit-kind model trained by ``fit_setfit`` (capped at ``steps`` body steps) in a thread of its own that
    runs one body step per :meth:`step` call and is otherwise held, so that it never runs beside another method."""

    def __init__(self, model: Any, sample: Sequence[Any], steps: int, seed: int, threads: int) -> None:
        from infoprompt.training import TrainConfig

        self.gate = StepGate()
        self.error: BaseException | None = None
        config = TrainConfig(max_steps=steps, seed=seed, progress=False)
        self.thread = threading.Thread(target=self._fit, args=(model, sample, config, threads), daemon=True)
        self.thread.start()
        self._wait()  # its setup (pairs, trainer) runs alone, up to the first step

    def _fit(self, model: Any, sample: Sequence[Any], config: Any, threads: int) -> None:
        from infoprompt.kinds.setfit import fit_setfit

        try:
            torch.set_num_threads(threads)  # the setting is per thread
            fit_setfit(model, sample, None, config, callbacks=[self.gate])
        except BaseException as error:  # re-raised in the main thread
            self.error = error

    def _wait(self) -> None:
        """Until the loop is held at its next step, or the run is over (head fit included)."""
        while not self.gate.arrived.acquire(timeout=0.2):
            if not self.thread.is_alive():
                break
        if self.error is not None:
            raise RuntimeError(f"setfit's capped run failed: {self.error}") from self.error

    def step(self) -> float | None:
        """Seconds of one body step (``None`` when the run had no step left)."""
        done = len(self.gate.times)
        self.gate.go.release()
        self._wait()
        return self.gate.times[-1] if len(self.gate.times) > done else None


def step_kind(method: str) -> str:
    from infoprompt.kinds import kind_of
    from infoprompt.kinds.setfit import fit_setfit
    from infoprompt.kinds.top_lora import fit_top_lora

    kind = kind_of(method)
    if kind.fit is fit_setfit:
        return "pairs"  # trained by the setfit library, a step being a batch of sentence pairs
    if kind.fit is fit_top_lora:
        return "cached"  # a step: one in-batch contrastive batch through the top blocks, from cached states
    return "engine" if "epochs" in kind.training_options else "none"  # a fit without epochs: fitted in one go


def cached_stepper(model: Any, sample: Sequence[Any], seed: int, rounds: int) -> tuple[str, Step]:
    """top-lora's own step: its draw's lower-block states computed first (untimed, as its fit does once), then
    one batch of its ``batch_size`` texts (classes dealt evenly) per call through the top blocks."""
    from infoprompt.kinds.top_lora.fit import TopBlocksTrainer, epoch_batches
    from infoprompt.training import encode_examples

    encoded = encode_examples(model, sample)
    trainer = TopBlocksTrainer(model, model.settings, [p.prompted.input_ids for p in encoded.pairs],
                               torch.device("cpu"))
    labels = encoded.labels
    batches = epoch_batches(labels.tolist(), model.settings.batch_size, torch.Generator().manual_seed(seed))
    optimizer, schedule = trainer.optimizer(rounds)
    calls = iter(range(rounds))

    def step(chunk: list[int]) -> float:
        rows = batches[next(calls) % len(batches)]
        started = time.perf_counter()
        trainer.step(rows, labels[rows], optimizer, schedule)
        return time.perf_counter() - started

    settings = model.settings
    return (f"{settings.batch_size} texts, every pair scored (top {settings.top_layers} blocks, "
            f"{settings.loss})"), step


def run_spec(args: argparse.Namespace, method: str) -> Any:
    """The sweep cell of ``method``: its draw, its classifier options."""
    from infoprompt.pipeline import RunSpec

    return RunSpec(task=args.task, method=method, shots=args.shots, n_prompts=args.n_prompts, seed=args.seed,
                   backbone=args.backbone, data_dir=args.data_dir, classifier={"max_length": args.max_length})


def make_stepper(method: str, args: argparse.Namespace, backbone: Any, sample: Sequence[Any]) -> tuple[str, Step | None]:
    """What one step of ``method`` is, and a function that runs one (``None`` for a method without steps)."""
    from infoprompt.pipeline import build_classifier

    kind = step_kind(method)
    if kind == "none":
        return "— (no gradient step)", None
    if kind == "cached":
        return cached_stepper(build_classifier(run_spec(args, method), backbone), sample, args.seed,
                              args.warmup + args.steps)
    if kind == "pairs":
        model = build_classifier(run_spec(args, method), backbone)
        pairs = model.settings.batch_size
        steps = SetFitSteps(model, sample, args.warmup + args.steps, args.seed, args.threads)
        return f"{pairs} sentence pairs (setfit library)", lambda chunk: steps.step()
    variant = Variant(method, method)
    build_variant(variant, args, backbone, sample, args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    return f"{args.batch_size} examples (engine)", lambda chunk: one_step(variant, chunk, generator)


def time_steps(rows: list[Row], args: argparse.Namespace, backbone: Any, sample: Sequence[Any]) -> None:
    """Interleaved rounds, one step of every method per round; the prompt kinds share each round's batch."""
    from infoprompt.training import batches

    steppers: dict[str, Step] = {}
    for row in rows:
        row.step_is, stepper = make_stepper(row.method, args, backbone, sample)
        if stepper is not None:
            steppers[row.method] = stepper
    order = torch.randperm(len(sample), generator=torch.Generator().manual_seed(args.seed)).tolist()
    chunks = batches(order, args.batch_size)
    for round_index in range(args.warmup + args.steps):
        chunk = chunks[round_index % len(chunks)]
        for row in rows:
            if row.method in steppers:
                elapsed = steppers[row.method](chunk)
                if round_index >= args.warmup and elapsed is not None:
                    row.step_times.append(elapsed)
        print(f"step round {round_index + 1}/{args.warmup + args.steps} done", file=sys.stderr)
    steppers.clear()
    gc.collect()  # the step models (a whole encoder copy for setfit) go before the whole runs


def whole_run(method: str, args: argparse.Namespace, backbone: Any, sample: Sequence[Any],
              eval_examples: Sequence[Any]) -> tuple[Any, dict[str, Any]]:
    """One real training run of ``method`` (see the module docstring); returns the trained model and its numbers."""
    from infoprompt.kinds import train
    from infoprompt.kinds.setfit import fit_setfit
    from infoprompt.pipeline import build_classifier
    from infoprompt.training import TrainConfig

    pairs = step_kind(method) == "pairs"
    config = TrainConfig(epochs=args.run_epochs, batch_size=args.batch_size, seed=args.seed, eval_every_epochs=0,
                         progress=False, feature_store=False, max_steps=args.setfit_steps if pairs else None)
    model = build_classifier(run_spec(args, method), backbone)
    timer = BodyTimer()
    started = time.perf_counter()
    if pairs:
        result = fit_setfit(model, sample, eval_examples, config, callbacks=[timer])
    else:
        result = train(model, sample, eval_examples, config)
    measured = time.perf_counter() - started
    run = {"measured_s": measured, "seconds": measured, "scaled": False, "steps": result.steps,
           "selection_s": result.timings.get("selection_s") if result.selection is not None else None,
           "train_s": result.timings["train_s"], "final_eval_s": result.timings["final_eval_s"],
           "metrics": result.metrics, "n_eval": result.n_eval,
           "what": run_description(method, args, result, model)}
    if pairs:
        schedule = setfit_schedule(model.settings, len(sample))
        body = timer.seconds
        run.update(seconds=measured - body + body * schedule / max(result.steps, 1), scaled=True, train_s=body,
                   schedule_steps=schedule,
                   what=f"{result.steps} of {schedule} body steps run, body training scaled ×{schedule / max(result.steps, 1):.0f}")
    return model, run


def run_description(method: str, args: argparse.Namespace, result: Any, model: Any) -> str:
    if step_kind(method) == "none":
        return "logistic regression on frozen features"
    if step_kind(method) == "cached":
        picked = f", {result.selection['epochs']} picked on held-out shots, refit" if result.selection else ""
        settings = model.settings
        return (f"≤ {settings.epochs} epochs{picked}, top {settings.top_layers} blocks from cached states "
                f"({result.steps} steps, not scaled)")
    if result.selection is not None:
        return f"≤ {args.run_epochs} epochs, {result.selection['epochs']} picked on held-out shots, refit ({result.steps} steps)"
    return f"{args.run_epochs} epochs ({result.steps} steps)"


def adapter_size(model: Any) -> tuple[int, int]:
    """Bytes and files of everything ``save_pretrained`` writes for ``model``."""
    with tempfile.TemporaryDirectory(prefix="tiny-adapters-") as scratch:
        model.save_pretrained(scratch)
        files = [path for path in Path(scratch).rglob("*") if path.is_file()]
        return sum(path.stat().st_size for path in files), len(files)


def time_inference(rows: list[Row], examples: Sequence[Any], repeats: int) -> None:
    """Throughput of each trained adapter on ``examples`` as new inputs, in interleaved rounds after a warm-up."""
    from infoprompt.training import encode_examples

    variants = {row.method: Variant(row.method, row.method, model=row.model) for row in rows}
    encoded = {method: encode_examples(variant.model, examples) for method, variant in variants.items()}
    for variant in variants.values():  # untimed: first calls pay for allocations
        infer_rate(variant, encode_examples(variant.model, examples[:16]))
    for _ in range(repeats):
        for row in rows:
            row.infer_rates.append(infer_rate(variants[row.method], encoded[row.method]))


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def human_bytes(count: int) -> str:
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def rate_text(rate: float | None) -> str:
    return "—" if rate is None else f"{rate:.0f}" if rate >= 10 else f"{rate:.2f}"


def tables(rows: list[Row], args: argparse.Namespace, metric: str, eval_split: str, n_eval: int) -> list[str]:
    from infoprompt.pipeline import cpu_model

    reference = next((row.run["seconds"] for row in rows if row.method == REFERENCE), None)
    lines = [
        f"### Tiny adapters: {args.backbone}, {args.task}, {args.shots}-shot draw (seed {args.seed}), "
        f"{n_eval} {eval_split} examples; torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"cpu: {cpu_model()}",
        "",
        f"| method | adapter on disk | trainable params | one step is | step ms (median of {args.steps}) | "
        f"whole run s | × {REFERENCE} run | infer ex/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        step = median(row.step_times)
        seconds = row.run["seconds"]
        lines.append(
            f"| {row.method} | {human_bytes(row.adapter_bytes)} ({row.adapter_files} files) | {row.trainable:,} | "
            f"{row.step_is} | {'—' if step is None else f'{step * 1000:.0f}'} | "
            f"{seconds:.1f}{' (scaled)' if row.run['scaled'] else ''} | {ratio(seconds, reference)} | "
            f"{rate_text(median(row.infer_rates))} |")
    lines += [
        "",
        f"| whole run of | what ran | measured s | selection s | training s | final eval s | {metric} "
        f"({n_eval} eval examples, not the dev split's score) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        run = row.run
        value = run["metrics"].get(metric)
        selection = run["selection_s"]
        lines.append(f"| {row.method} | {run['what']} | {run['measured_s']:.1f} | "
                     f"{'—' if selection is None else f'{selection:.1f}'} | {run['train_s']:.1f} | "
                     f"{run['final_eval_s']:.1f} | {'—' if value is None else f'{value:.3f}'} |")
    return lines


def write_outputs(text: str, rows: list[Row], args: argparse.Namespace) -> None:
    from infoprompt.pipeline import environment

    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    if args.json:
        data = {"args": vars(args), "environment": environment(), "methods": {row.method: {
            "adapter_bytes": row.adapter_bytes, "adapter_files": row.adapter_files, "trainable": row.trainable,
            "step_is": row.step_is, "step_s": median(row.step_times), "step_times": row.step_times,
            "whole_run": row.run, "infer_ex_per_s": median(row.infer_rates), "infer_rates": row.infer_rates,
        } for row in rows}}
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = benchmark_parser(__doc__, DEFAULT_METHODS)
    parser.add_argument("--run-epochs", type=int, default=30, help="epochs of the prompt kinds' whole runs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    from infoprompt.backbones import load_backbone
    from infoprompt.pipeline import draw_training_sample, read_run_data

    started = time.perf_counter()
    spec = run_spec(args, args.methods[0])
    data = read_run_data(spec)
    sample = draw_training_sample(spec, data)
    eval_examples = data.eval[: args.infer]
    backbone = load_backbone(args.backbone)
    rows = [Row(method) for method in args.methods]
    time_steps(rows, args, backbone, sample)
    for row in rows:
        row.model, row.run = whole_run(row.method, args, backbone, sample, eval_examples)
        row.adapter_bytes, row.adapter_files = adapter_size(row.model)
        row.trainable = row.model.parameter_counts()["trainable"]
        print(f"whole run {row.method} done ({row.run['measured_s']:.0f} s)", file=sys.stderr)
    time_inference(rows, eval_examples, args.infer_repeats)
    lines = tables(rows, args, data.task.primary_metric, data.eval_split, len(eval_examples))
    lines.append(f"\n({time.perf_counter() - started:.0f} s in all)")
    text = "\n".join(lines) + "\n"
    print(text)
    write_outputs(text, rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
