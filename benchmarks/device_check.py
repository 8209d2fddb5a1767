"""Check that every method trains on a GPU, draws what it draws on the CPU, and lands near the CPU's numbers.

    python benchmarks/device_check.py --backbone minilm --task sst2 --shots 32 --epochs 2 --data-dir ../shared/data

Each method is trained once per setting in ``--settings`` (``device:precision``; the first is the reference, by
default ``cpu:fp32``), same seed and cell, one after the other in this process. Every random draw comes from
CPU generators, so the few-shot draw (its label counts), the step count and, for the methods without sampling
noise or dropout, the loss curve must match the reference: the first step's loss within ``--loss-tolerance``
(relative) in fp32; bf16 autocast and noisy methods are reported, not checked. A run that fails on a setting
fails the check. ``setfit``'s body trains where the transformers trainer puts it (the GPU when there is one),
whatever the setting says, so its rows show only that it runs. Prints one table row per method and setting (metric, first and last logged loss, train seconds)
and exits 1 when a check fails; ``--json`` also writes the rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from pathlib import Path

# No sampling noise and no dropout, as in ddp_check.py: their loss curves must not depend on the device.
DETERMINISTIC = {"warp", "infoprompt-ce", "idpg", "adapter", "infoprompt-plus-ce", "linear-probe"}


def train(args: argparse.Namespace, method: str, setting: str, out: Path) -> dict[str, object]:
    """Train ``method`` under ``setting`` (``device:precision``); the record plus its logged step losses."""
    from infoprompt.pipeline import RunSpec, run_training
    from infoprompt.training.config import TrainConfig

    device, precision = setting.rsplit(":", 1)
    spec = RunSpec(task=args.task, method=method, shots=args.shots, seed=args.seed, backbone=args.backbone,
                   data_dir=args.data_dir, classifier={"max_length": args.max_length} if args.max_length else {},
                   training=TrainConfig(epochs=args.epochs, batch_size=args.batch_size, seed=args.seed, progress=False,
                                        device=device, precision=precision))
    record = run_training(spec, out, overwrite=True)
    log = out / "train_log.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    record["loss_curve"] = [row["loss_total"] for row in rows if row.get("type") == "step"]
    return record


def row_for(method: str, setting: str, record: dict[str, object] | None, error: str | None) -> dict[str, object]:
    if record is None:
        return {"method": method, "setting": setting, "error": error}
    metric = record["primary_metric"]
    curve = record["loss_curve"]
    return {"method": method, "setting": setting, "metric": metric, "value": record["metrics"][metric],
            "steps": record["steps"], "labels": record["train_label_counts"], "first_loss": curve[0] if curve else None,
            "last_loss": curve[-1] if curve else None, "train_s": record["timings"]["train_s"], "error": None}


def describe(row: dict[str, object]) -> str:
    if row["error"]:
        return "FAILED " + row["error"]
    loss = "no logged loss" if row["first_loss"] is None else f"loss {row['first_loss']:.6f} -> {row['last_loss']:.6f}"
    return f"{row['metric']} {row['value']:.4f}  steps {row['steps']}  {loss}  {row['train_s']:.1f} s"


def failures_of(args: argparse.Namespace, reference: dict[str, object], row: dict[str, object]) -> list[str]:
    name = f"{row['method']} on {row['setting']}"
    if row["error"]:
        return [f"{name}: {row['error']}"]
    if reference["error"]:
        return []
    found = []
    if row["labels"] != reference["labels"]:
        found.append(f"{name}: drew {row['labels']}, the reference drew {reference['labels']}")
    deterministic = row["method"] in DETERMINISTIC
    if deterministic and row["steps"] != reference["steps"]:
        found.append(f"{name}: {row['steps']} steps, the reference {reference['steps']}")
    fp32 = row["setting"].endswith(":fp32")
    if deterministic and fp32 and row["first_loss"] is not None and reference["first_loss"] is not None:
        gap = abs(row["first_loss"] - reference["first_loss"]) / max(abs(reference["first_loss"]), 1e-12)
        if gap > args.loss_tolerance:
            found.append(f"{name}: first loss {row['first_loss']:.6g}, the reference {reference['first_loss']:.6g}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=None, help="default: every method on the registry")
    parser.add_argument("--settings", nargs="+", default=["cpu:fp32", "cuda:fp32", "cuda:bf16"])
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--shots", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=None, help="default: the method's (tiny test models need less)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--loss-tolerance", type=float, default=1e-3)
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)

    from infoprompt.kinds.registry import METHODS

    methods = args.methods or list(METHODS)
    rows, failures = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for method in methods:
            reference = None
            for setting in args.settings:
                try:
                    record, error = train(args, method, setting, Path(scratch, method, setting.replace(":", "-"))), None
                except Exception as exc:  # noqa: BLE001 -- a failure on one setting is a finding, not the end
                    record, error = None, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                    traceback.print_exc(file=sys.stderr)
                row = row_for(method, setting, record, error)
                rows.append(row)
                if reference is None:
                    reference = row
                else:
                    failures += failures_of(args, reference, row)
                print(f"{method:26s} {setting:10s} {describe(row)}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n{len(rows)} runs, {len(failures)} failed checks")
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
