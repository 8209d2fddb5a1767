"""top-lora's training step with its texts padded in chunks against packed into rows, side by side in one process.

    python benchmarks/top_lora_packing.py --backbone mpnet --data-dir ../shared/data --threads 1 \\
        --tasks sst2:64 semeval-types:8

For each ``task:shots`` draw (drawn as a sweep cell draws it, seed ``--seed``; a many-class file by examples per
class, balanced), one top-lora trainer computes the lower blocks' states once, then runs ``--rounds`` rounds; in
each round every setting takes one real optimisation step (forward through the top blocks, backward, AdamW) on the
same batch: ``padded`` (chunks of 16 texts of similar length, each padded to its longest: the code before packing)
and ``packed N`` (rows of at most N tokens, each text attending to itself only). Prints the median step seconds,
the tokens a step computes (real and padded) and the ratio to ``padded``. The LoRA weights move with every step,
so the settings see slightly different weights; the work per step does not depend on them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

PADDED = 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--tasks", nargs="+", default=["sst2:64", "semeval-types:8"],
                        help="task:shots draws (a task of more than two classes: examples per class)")
    parser.add_argument("--budgets", type=int, nargs="+", default=[PADDED, 128, 256],
                        help="tokens per packed row; 0: padded chunks")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args(argv)


def step_tokens(lengths: list[int], budget: int, chunk: int) -> int:
    """Tokens the top blocks compute for texts of ``lengths``: padding included."""
    from infoprompt.kinds.top_lora.blocks import by_length, packed_rows

    if budget == PADDED:
        return sum(max(lengths[i] for i in rows) * len(rows) for rows in by_length(lengths, chunk))
    rows = packed_rows(lengths, budget)
    return max(sum(lengths[i] for i in row) for row in rows) * len(rows)


def measure(args: argparse.Namespace, backbone, task: str, shots: int) -> list[str]:
    from infoprompt.kinds.top_lora.fit import TopBlocksTrainer, epoch_batches
    from infoprompt.pipeline import RunSpec, build_classifier, draw_training_sample, read_run_data
    from infoprompt.tasks import get_task
    from infoprompt.training import encode_examples

    many = len(get_task(task).labels) > 2
    spec = RunSpec(task=task, method="top-lora", shots=shots * (len(get_task(task).labels) if many else 1),
                   seed=args.seed, backbone=args.backbone, data_dir=args.data_dir,
                   sampling="balanced" if many else "proportional", classifier={"max_length": args.max_length})
    sample = draw_training_sample(spec, read_run_data(spec))
    model = build_classifier(spec, backbone)
    encoded = encode_examples(model, sample)
    trainer = TopBlocksTrainer(model, model.settings, [p.prompted.input_ids for p in encoded.pairs],
                               torch.device("cpu"))
    labels = encoded.labels
    batches = epoch_batches(labels.tolist(), model.settings.batch_size, torch.Generator().manual_seed(args.seed))
    optimizer, schedule = trainer.optimizer(len(args.budgets) * (args.rounds + 1))
    times: dict[int, list[float]] = {budget: [] for budget in args.budgets}
    for round_index in range(args.rounds + 1):  # the first round warms up, untimed
        rows = batches[round_index % len(batches)]
        for budget in args.budgets:
            trainer.split.pack_tokens, trainer.split.packs = budget, None if budget else False
            started = time.perf_counter()
            trainer.step(rows, labels[rows], optimizer, schedule)
            if round_index:
                times[budget].append(time.perf_counter() - started)
    lengths = [trainer.states[i].shape[0] for i in batches[0]]
    base = statistics.median(times[args.budgets[0]])
    lines = []
    for budget in args.budgets:
        median = statistics.median(times[budget])
        name = "padded (chunks of 16)" if budget == PADDED else f"packed {budget}"
        lines.append(f"| {task} ({len(sample)} texts) | {name} | {sum(lengths)} | "
                     f"{step_tokens(lengths, budget, model.settings.encode_batch)} | {median:.3f} | "
                     f"{median / base:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    from infoprompt.backbones import load_backbone

    backbone = load_backbone(args.backbone)
    lines = [f"### top-lora step, padded against packed: {args.backbone}, seed {args.seed}, {args.threads} "
             f"thread(s), median of {args.rounds} interleaved rounds", "",
             f"| draw | texts as | real tokens (first batch) | tokens computed | step s | × {args.budgets[0] or 'padded'} |",
             "|---|---|---|---|---|---|"]
    for item in args.tasks:
        task, shots = item.rsplit(":", 1)
        lines += measure(args, backbone, task, int(shots))
        print(f"{task} done", file=sys.stderr)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
