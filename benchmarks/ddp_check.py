"""Check that training under ``accelerate launch`` with several CPU processes (gloo) matches one process.

    python benchmarks/ddp_check.py --backbone minilm --task sst2 --shots 64 --epochs 3

The methods are trained twice on the same cell: once in a plain process, once in ``--processes`` processes
started by ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N`` (torchrun underneath; on a
CPU-only machine the processes talk over gloo). Each launch trains every method in turn. Both runs write a run
directory per method (only the main process writes it), and every process also reports its metrics and a hash
of its trained parameters. The script checks that the launched run saw N processes, that every process ended
with the same parameters and metrics, and compares the logged per-step loss of the whole batch and the final
metrics with the single process. Methods without sampling noise or dropout (``warp``, ``infoprompt-ce``, ...; see
``DETERMINISTIC``) must follow the same loss curve up to float reduction order and reach the same metrics (``--metric-tolerance``);
noisy ones (``infoprompt``) must agree within ``--noisy-metric-tolerance``. Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# No sampling noise and no dropout: fine-tuning and peft train the encoder (or peft's copy) in train mode, so
# their dropout masks, drawn on each process for its share, differ from one process's.
DETERMINISTIC = {"warp", "infoprompt-ce", "idpg", "adapter", "infoprompt-plus-ce"}


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    import infoprompt.pipeline as pipeline
    from infoprompt.training.config import TrainConfig
    from infoprompt.training.runtime import process_state

    built = []
    build = pipeline.build_classifier

    def keep(*a, **k):  # keeps the model run_training builds, so each process can report what it ended with
        built.append(build(*a, **k))
        return built[-1]

    pipeline.build_classifier = keep
    state = process_state()
    for method in args.methods:
        spec = pipeline.RunSpec(
            task=args.task, method=method, shots=args.shots, n_prompts=args.n_prompts, seed=args.seed,
            backbone=args.backbone, data_dir=args.data_dir, classifier={"max_length": args.max_length},
            training=TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed, progress=False,
                                 # The launched processes are CPU ones; so is the reference, on a GPU machine too.
                                 device="cpu",
                                 eval_every_epochs=args.eval_every_epochs, feature_store=False),
        )
        out = Path(args.out) / method
        record = pipeline.run_training(spec, out, overwrite=True)
        digest = hashlib.sha256()
        for name, tensor in sorted(built[-1].trainable_state().items()):
            digest.update(name.encode() + tensor.detach().float().cpu().numpy().tobytes())
        report = {"metrics": record["metrics"], "world_size": record["world_size"], "parameters": digest.hexdigest()}
        Path(args.out).mkdir(parents=True, exist_ok=True)  # another rank may not have made it yet
        Path(args.out, f"{method}.rank{state.process_index}.json").write_text(json.dumps(report))


def launch(args: argparse.Namespace, processes: int, out: Path) -> dict[str, dict[str, object]]:
    """Train every method in one plain process or one launch of ``processes``; returns method -> record."""
    script = [str(Path(__file__).resolve()), "--worker", "--out", str(out), "--methods", *args.methods]
    for name in ("backbone", "task", "shots", "n_prompts", "seed", "epochs", "batch_size", "lr", "max_length", "threads",
                 "eval_every_epochs"):
        if getattr(args, name) is not None:
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
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout[-4000:] + completed.stderr[-4000:])
        raise SystemExit(f"{processes}-process run failed (exit {completed.returncode})")
    records = {}
    for method in args.methods:
        record = json.loads((out / method / "metrics.json").read_text())
        steps = [json.loads(line) for line in (out / method / "train_log.jsonl").read_text().splitlines()]
        record["loss_curve"] = [row["loss_total"] for row in steps if row["type"] == "step"]
        record["ranks"] = [json.loads((out / f"{method}.rank{rank}.json").read_text()) for rank in range(processes)]
        record["weights"] = load_file(out / method / "adapter_model.safetensors") if (out / method / "adapter_model.safetensors").is_file() else {}
        records[method] = record
    return records


def load_file(path: Path):
    from safetensors.torch import load_file as read

    return read(path)


def compare(args: argparse.Namespace, single: dict[str, object], multi: dict[str, object], method: str) -> tuple[dict, list[str]]:
    """One row of the table and the failed checks of ``method``."""
    metric = single["primary_metric"]
    # Noisy methods with epoch selection may pick another epoch count: compare the steps both took.
    curve = [abs(a - b) for a, b in zip(single["loss_curve"], multi["loss_curve"], strict=False)]
    metric_delta = max(abs(single["metrics"][k] - multi["metrics"][k]) for k in single["metrics"])
    weights = single["weights"]
    param_delta = max((float((weights[k] - multi["weights"][k]).abs().max()) for k in weights), default=0.0)
    row = {
        "method": method, "metric": metric, "single": single["metrics"][metric], "multi": multi["metrics"][metric],
        "world_size": multi["world_size"], "steps": multi["steps"], "single_steps": single["steps"],
        "max_loss_diff": max(curve, default=0.0), "first_loss_diff": curve[0] if curve else 0.0,
        "max_metric_diff": metric_delta, "max_param_diff": param_delta, "single_s": single["timings"]["train_s"],
        "multi_s": multi["timings"]["train_s"], "single_curve": single["loss_curve"], "multi_curve": multi["loss_curve"],
    }
    failures = []
    if multi["world_size"] != args.processes:
        failures.append(f"{method}: the launched run saw world_size={multi['world_size']}")
    if len({r["parameters"] for r in multi["ranks"]}) != 1 or any(r["metrics"] != multi["metrics"] for r in multi["ranks"]):
        failures.append(f"{method}: the processes ended with different parameters or metrics")
    deterministic = method in DETERMINISTIC
    if deterministic and single["steps"] != multi["steps"]:
        failures.append(f"{method}: {single['steps']} steps with one process, {multi['steps']} with {args.processes}")
    if metric_delta > (args.metric_tolerance if deterministic else args.noisy_metric_tolerance):
        failures.append(f"{method}: metrics differ by up to {metric_delta:.4f}")
    if deterministic and max(curve, default=0.0) > args.loss_tolerance:
        failures.append(f"{method}: loss curves differ by up to {max(curve):.2e}")
    if deterministic and param_delta > args.param_tolerance:
        failures.append(f"{method}: trained parameters differ by up to {param_delta:.2e}")
    return row, failures


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
    parser.add_argument("--lr", type=float, help="learning rate (default: the method's)")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--eval-every-epochs", type=int, default=0, help="periodic evaluations (sharded like the final one)")
    parser.add_argument("--data-dir", default=os.environ.get("INFOPROMPT_DATA_DIR"))
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--port", type=int, default=29531)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per launch")
    parser.add_argument("--metric-tolerance", type=float, default=1e-9, help="allowed |Δ metric|, noise-free methods")
    parser.add_argument("--noisy-metric-tolerance", type=float, default=0.02, help="allowed |Δ primary metric|, noisy methods")
    parser.add_argument("--loss-tolerance", type=float, default=2e-3, help="allowed |Δ loss| per step, noise-free methods")
    parser.add_argument("--param-tolerance", type=float, default=1e-4, help="allowed |Δ parameter|, noise-free methods")
    parser.add_argument("--json", help="also write the comparison here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    failures, rows = [], []
    with tempfile.TemporaryDirectory(prefix="ddp-check-") as scratch:
        single = launch(args, 1, Path(scratch) / "single")
        multi = launch(args, args.processes, Path(scratch) / "multi")
        for method in args.methods:
            row, failed = compare(args, single[method], multi[method], method)
            rows.append(row)
            failures += failed
    print(f"{args.backbone} {args.task} shots={args.shots} epochs={args.epochs} batch={args.batch_size} "
          f"processes=1 vs {args.processes} (gloo)")
    print("| method | metric | 1 process | N processes | steps | max |Δloss| | step-1 |Δloss| | max |Δmetric| | max |Δparameter| "
          "| train s (1 / N) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        steps = r["steps"] if r["steps"] == r["single_steps"] else f"{r['single_steps']} / {r['steps']}"
        print(f"| {r['method']} | {r['metric']} | {r['single']:.4f} | {r['multi']:.4f} | {steps} | "
              f"{r['max_loss_diff']:.2e} | {r['first_loss_diff']:.2e} | {r['max_metric_diff']:.2e} | {r['max_param_diff']:.2e} | "
              f"{r['single_s']:.1f} / {r['multi_s']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "failures": failures}, indent=2) + "\n")
    for failure in failures:
        print(f"FAIL {failure}")
    print("OK" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
