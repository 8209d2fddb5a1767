"""Sweep wall time on the Ray backend (1 and 2 local workers) against the local backend with two workers.

    python benchmarks/ray_sweep.py --data-dir ../shared/data                      # the whole MiniLM 64-shot grid
    python benchmarks/ray_sweep.py --data-dir ../shared/data --tasks sst2 \\
        --methods linear-probe,infoprompt --seeds 1,2 --epochs 5                  # a bounded version

Every configuration runs the same cells (``--grid``, default ``configs/glue-64.yaml``, cut by the axis flags as
``infoprompt sweep`` cuts it) into a fresh results directory, one torch thread per cell:

* ``local x2``: two ``infoprompt sweep`` processes started together on one results directory; their claims
  split the cells between them.
* ``ray x1`` / ``ray x2``: one driver process starting a Ray instance on loopback with 1 or 2 CPUs, then
  ``infoprompt sweep --backend ray --cpus-per-cell 1`` (so 1 or 2 cells at a time).

wall s is from launching the processes to the last one's exit (interpreter start-up, Ray start-up and backbone
loads included: what a user waits for); cell s sums the cells' own ``timings.total_s``, so that contention
between concurrent cells shows apart from the backends' overheads. "same metrics" says whether every cell's
metrics equal those of the first configuration. The configurations run one after another, so machine load
can differ between them; on a shared machine repeat them (``--repeats``) and read the medians.
Prints a Markdown table; ``--json`` also writes the numbers. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGURATIONS = ("local-2", "ray-1", "ray-2")
RAY_DRIVER = """
import logging, sys
import ray
from infoprompt.cli import main
ray.init(num_cpus=int(sys.argv[1]), include_dashboard=False, _node_ip_address="127.0.0.1",
         logging_level=logging.WARNING, log_to_driver=False)
sys.exit(main(sys.argv[2:]))
"""


def sweep_args(args: argparse.Namespace, results: Path) -> list[str]:
    """The ``infoprompt sweep`` arguments every configuration shares."""
    command = ["sweep", "--grid", args.grid, "--results", str(results), "--quiet"]
    for flag in ("tasks", "methods", "seeds", "shots", "epochs", "max_steps", "backbone", "data_dir"):
        value = getattr(args, flag)
        if value is not None:
            command += [f"--{flag.replace('_', '-')}", str(value)]
    return command


def run_configuration(name: str, args: argparse.Namespace, results: Path) -> float:
    """Run one configuration to completion; returns its wall seconds."""
    python = [sys.executable]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    common = sweep_args(args, results)
    if name.startswith("local-"):
        commands = [python + ["-m", "infoprompt.cli", *common, "--threads", "1"]] * int(name.split("-")[1])
    else:
        workers = name.split("-")[1]
        commands = [python + ["-c", RAY_DRIVER, workers, *common, "--backend", "ray", "--cpus-per-cell", "1"]]
    started = time.perf_counter()
    processes = [subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for command in commands]
    failures = []
    for process in processes:
        _, stderr = process.communicate()
        if process.returncode not in (0, 1):  # 1: a cell failed, which is recorded and counted below
            failures.append(stderr.decode(errors="replace").strip().splitlines()[-1:])
    wall = time.perf_counter() - started
    if failures:
        raise SystemExit(f"{name}: sweep failed: {failures}")
    return wall


def read_results(results: Path) -> dict[str, dict]:
    from infoprompt.experiments.store import load_records

    return {record["cell"]: record for record in load_records(results)}


def summarise(name: str, walls: list[float], records: dict[str, dict], reference: dict[str, dict] | None) -> dict:
    finished = [r for r in records.values() if r.get("status") == "ok"]
    same = None if reference is None else all(
        records[cell].get("metrics") == reference[cell].get("metrics") for cell in reference if cell in records
    ) and records.keys() == reference.keys()
    return {
        "configuration": name,
        "workers": int(name.split("-")[1]),
        "cells": len(records),
        "failed": len(records) - len(finished),
        "wall_s": statistics.median(walls),
        "walls_s": walls,
        "cell_s": sum(r.get("timings", {}).get("total_s", 0.0) for r in finished),
        "same_metrics": same,
    }


def markdown(rows: list[dict]) -> str:
    base = rows[0]["wall_s"]
    lines = ["| configuration | workers | cells (failed) | wall s | cell s | speed-up vs first | same metrics |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        same = "—" if row["same_metrics"] is None else ("yes" if row["same_metrics"] else "NO")
        lines.append(f"| {row['configuration']} | {row['workers']} | {row['cells']} ({row['failed']}) | "
                     f"{row['wall_s']:.1f} | {row['cell_s']:.1f} | {base / row['wall_s']:.2f}× | {same} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", default=str(Path(__file__).resolve().parents[1] / "configs" / "glue-64.yaml"))
    parser.add_argument("--tasks", help="comma-separated, cuts the grid (as infoprompt sweep --tasks)")
    parser.add_argument("--methods", help="comma-separated, cuts the grid")
    parser.add_argument("--seeds", help="comma-separated, cuts the grid")
    parser.add_argument("--shots", help="comma-separated, cuts the grid")
    parser.add_argument("--epochs", type=int, help="shorter cells than the grid's")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--backbone")
    parser.add_argument("--data-dir")
    parser.add_argument("--configurations", default=",".join(CONFIGURATIONS),
                        help=f"comma-separated, from {', '.join(CONFIGURATIONS)} (also local-1)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each configuration (fresh results each)")
    parser.add_argument("--work-dir", help="where the results directories go (default: a temporary directory)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="ray-sweep-bench-"))
    names = [name.strip() for name in args.configurations.split(",") if name.strip()]
    walls: dict[str, list[float]] = {name: [] for name in names}
    records: dict[str, dict[str, dict]] = {}
    for repeat in range(args.repeats):
        for name in names:  # interleaved over repeats, so slow phases of the machine hit every configuration
            results = work / f"{name}-{repeat + 1}"
            walls[name].append(run_configuration(name, args, results))
            records[name] = read_results(results)
            print(f"{name} run {repeat + 1}: {walls[name][-1]:.1f} s, {len(records[name])} cell(s)", file=sys.stderr)
    reference = records[names[0]]
    rows = [summarise(name, walls[name], records[name], None if i == 0 else reference) for i, name in enumerate(names)]
    print(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(f"results under {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
