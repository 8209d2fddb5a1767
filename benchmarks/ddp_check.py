"""Check that training under ``accelerate launch`` with several CPU processes (gloo) matches one process.

    python benchmarks/ddp_check.py --backbone minilm --task sst2 --shots 64 --epochs 3

Each method is trained twice on the same cell: once as a plain process, once as ``--processes`` processes
started by ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N`` (torchrun underneath; on a
CPU-only machine the processes talk over gloo). Both runs write a run directory (only the DDP main process writes);
the script compares the final metrics and the logged per-step loss of the whole batch. Methods without
sampling noise or dropout (``warp``, ``infoprompt-ce``) must follow the same loss curve up to float
reduction order; noisy ones (``infoprompt``) must agree within noise. Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DETERMINISTIC = {"warp", "infoprompt-ce", "idpg", "adapter", "finetune"}


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    from infoprompt.pipeline import RunSpec, run_training
    from infoprompt.training import TrainConfig

    spec = RunSpec(
        task=args.task, method=args.method, shots=args.shots, n_prompts=args.n_prompts, seed=args.seed,
        backbone=args.backbone, data_dir=args.data_dir, classifier={"max_length": args.max_length},
        training=TrainConfig(epochs=args.epochs, batch_size=args.batch_size, seed=args.seed, eval_every_epochs=0,
                             progress=False),
    )
    run_training(spec, args.out, overwrite=True)


def launch(args: argparse.Namespace, method: str, processes: int, out: Path) -> dict[str, object]:
    script = [str(Path(__file__).resolve()), "--worker", "--method", method, "--out", str(out)]
    for name in ("backbone", "task", "shots", "n_prompts", "seed", "epochs", "batch_size", "max_length", "threads"):
        script += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if args.data_dir:
        script += ["--data-dir", args.data_dir]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    if processes == 1:
        command = [sys.executable, *script]
    else:
        # accelerate's --cpu flag starts one process unless given an MPI hostfile; its torchrun-based launcher
        # (--multi_gpu) starts N processes, and ACCELERATE_USE_CPU makes them use CPU tensors and gloo.
        env["ACCELERATE_USE_CPU"] = "true"
        command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_port", str(args.port), *script]
    completed = subprocess.run(command, env=env, capture_output=True, text=True)
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout[-4000:] + completed.stderr[-4000:])
        raise SystemExit(f"{processes}-process run of {method} failed (exit {completed.returncode})")
    record = json.loads((out / "metrics.json").read_text())
    steps = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    record["loss_curve"] = [row["loss_total"] for row in steps if row["type"] == "step"]
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=["warp", "infoprompt"])
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--shots", type=int, default=64)
    parser.add_argument("--n-prompts", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--data-dir", default=os.environ.get("INFOPROMPT_DATA_DIR"))
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--port", type=int, default=29531)
    parser.add_argument("--metric-tolerance", type=float, default=0.02, help="allowed |Δ primary metric| (noise)")
    parser.add_argument("--loss-tolerance", type=float, default=2e-3, help="allowed |Δ loss| per step, noise-free methods")
    parser.add_argument("--json", help="also write the comparison here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    failures, rows = [], []
    with tempfile.TemporaryDirectory(prefix="ddp-check-") as scratch:
        for method in args.methods:
            single = launch(args, method, 1, Path(scratch) / f"{method}-1")
            multi = launch(args, method, args.processes, Path(scratch) / f"{method}-{args.processes}")
            metric = single["primary_metric"]
            delta = abs(single["metrics"][metric] - multi["metrics"][metric])
            curve = [abs(a - b) for a, b in zip(single["loss_curve"], multi["loss_curve"], strict=True)]
            row = {
                "method": method, "metric": metric, "single": single["metrics"][metric], "multi": multi["metrics"][metric],
                "world_size": multi["world_size"], "steps": multi["steps"], "max_loss_diff": max(curve),
                "first_loss_diff": curve[0], "single_s": single["timings"]["train_s"], "multi_s": multi["timings"]["train_s"],
            }
            rows.append(row)
            if multi["world_size"] != args.processes:
                failures.append(f"{method}: the launched run saw world_size={multi['world_size']}")
            if delta > args.metric_tolerance:
                failures.append(f"{method}: {metric} differs by {delta:.4f}")
            if method in DETERMINISTIC and max(curve) > args.loss_tolerance:
                failures.append(f"{method}: loss curves differ by up to {max(curve):.2e}")
    print(f"{args.backbone} {args.task} shots={args.shots} epochs={args.epochs} batch={args.batch_size} "
          f"processes=1 vs {args.processes} (gloo)")
    print("| method | metric | 1 process | 2 processes | steps | max |Δloss| | step-1 |Δloss| | train s (1 / N) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['metric']} | {r['single']:.4f} | {r['multi']:.4f} | {r['steps']} | "
              f"{r['max_loss_diff']:.2e} | {r['first_loss_diff']:.2e} | {r['single_s']:.1f} / {r['multi_s']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "failures": failures}, indent=2) + "\n")
    for failure in failures:
        print(f"FAIL {failure}")
    print("OK" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
