"""The methods' frontier: task-averaged accuracy against training time per cell, with each adapter's size.

Reads the ``cells.csv`` that ``infoprompt report`` writes (one row per method × task × shots × n_p, with the mean
over seeds, the adapter's bytes and the training seconds of a cell) and draws one point per method that has every
asked task at the asked shot count. Regenerate the README's figure with::

    python -m infoprompt.analysis.frontier results/top-lora-mpnet/report/cells.csv \\
        --backbone mpnet --shots 64 --out docs/figures/frontier-mpnet.png
"""

from __future__ import annotations

import argparse
import csv
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from infoprompt.errors import UserError

GLUE_FOUR = ("sst2", "mrpc", "rte", "cola")


@dataclass(frozen=True)
class FrontierPoint:
    method: str
    average: float  # mean over the tasks of each task's mean over seeds
    train_s: float  # mean training seconds of one cell
    adapter_bytes: int  # the largest of the method's cells


def read_points(paths: Sequence[Path], backbone: str, shots: str, tasks: Sequence[str]) -> list[FrontierPoint]:
    """One point per method with a cell for every task; a method in several files is read from the first."""
    cells: dict[str, dict[str, dict[str, str]]] = {}
    for path in paths:
        if not path.is_file():
            raise UserError(f"{path}: no such file (run `infoprompt report ... --out DIR` first: it writes DIR/cells.csv)")
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = {"backbone", "method", "task", "shots", "mean", "adapter_bytes", "train_s"} - set(reader.fieldnames or ())
            if missing:
                raise UserError(f"{path}: not a report's cells.csv (missing column(s) {', '.join(sorted(missing))})")
            seen_here: dict[str, dict[str, dict[str, str]]] = {}
            for row in reader:
                if row["backbone"] == backbone and row["shots"] == shots and row["task"] in tasks:
                    seen_here.setdefault(row["method"], {})[row["task"]] = row
            for method, by_task in seen_here.items():
                cells.setdefault(method, by_task)
    points = []
    for method, by_task in cells.items():
        if set(tasks) <= set(by_task):
            rows = [by_task[task] for task in tasks]
            points.append(FrontierPoint(
                method=method,
                average=sum(float(row["mean"]) for row in rows) / len(rows),
                train_s=sum(float(row["train_s"]) for row in rows) / len(rows),
                adapter_bytes=max(int(float(row["adapter_bytes"])) for row in rows),
            ))
    if not points:
        raise UserError(f"no method has a {backbone} cell at {shots} shots for every one of {', '.join(tasks)}")
    return sorted(points, key=lambda point: point.train_s)


def pareto(points: Sequence[FrontierPoint]) -> list[FrontierPoint]:
    """The points no other point beats on both time (less) and average (more), fastest first."""
    front, best = [], -math.inf
    for point in sorted(points, key=lambda p: (p.train_s, -p.average)):
        if point.average > best:
            front.append(point)
            best = point.average
    return front


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def draw(points: Sequence[FrontierPoint], title: str, note: str, out: Path) -> None:
    from infoprompt.analysis.plotting import PALETTE
    from infoprompt.figures import footer, new_figure, save_png

    figure = new_figure(7.5, 4.8)
    axes = figure.add_subplot()
    front = {point.method for point in pareto(points)}
    crowded = sorted((point for point in points if point.method not in front and any(
        other is not point and other.method not in front and abs(math.log10(point.train_s / other.train_s)) < 0.3
        and abs(point.average - other.average) < 0.012 for other in points)), key=lambda p: -p.average)
    fastest = min(point.train_s for point in points) / 60
    for point in points:
        # Marker area grows with the log of the adapter's size: 4 kB and 439 MB stay on one readable scale.
        area = 12 * max(1.0, math.log10(max(point.adapter_bytes, 10)) - 2) ** 2
        color = PALETTE[0] if point.method in front else PALETTE[-1]
        x = point.train_s / 60
        axes.scatter(x, point.average, s=area, color=color, alpha=0.8, edgecolors="black", linewidths=0.5)
        label = f"{point.method} ({human_bytes(point.adapter_bytes)})"
        if point in crowded:
            # Points that sit on top of each other get their labels in a column to the left, with a leader line.
            rank = crowded.index(point)
            middle = sum(p.average for p in crowded) / len(crowded)
            axes.annotate(label, (x, point.average), xytext=(fastest * 1.6, middle - 0.012 + 0.008 * ((len(crowded) - 1) / 2 - rank)),
                          textcoords="data", fontsize=7.5, va="center",
                          arrowprops={"arrowstyle": "-", "color": "#999999", "linewidth": 0.6})
        else:
            axes.annotate(label, (x, point.average), textcoords="offset points", xytext=(6, 3), fontsize=7.5)
    line = pareto(points)
    axes.plot([p.train_s / 60 for p in line], [p.average for p in line], color=PALETTE[0], linewidth=1, zorder=0)
    axes.set_xscale("log")
    axes.set_xlabel("training time of one cell, minutes (log scale)")
    axes.set_ylabel("average of the tasks' primary metric")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    footer(figure, note)
    save_png(figure, out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infoprompt.analysis.frontier", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("cells", nargs="+", type=Path, help="cells.csv files written by `infoprompt report --out`")
    parser.add_argument("--backbone", default="mpnet")
    parser.add_argument("--shots", default="64")
    parser.add_argument("--tasks", default=",".join(GLUE_FOUR), help="comma-separated (default: %(default)s)")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write; its .json twin holds the points")
    args = parser.parse_args(argv)
    tasks = tuple(task.strip() for task in args.tasks.split(",") if task.strip())
    try:
        points = read_points(args.cells, args.backbone, args.shots, tasks)
    except UserError as error:
        parser.exit(2, f"error: {error}\n")
    from infoprompt.io_utils import atomic_write_json

    note = (f"{args.backbone}, {args.shots} shots, mean over seeds of {', '.join(tasks)} (dev split; MCC for CoLA); "
            f"time: a grid cell's training on one CPU thread; marker size and label: the saved adapter; "
            f"line: methods nothing beats on both axes. Source: {', '.join(str(p) for p in args.cells)}")
    draw(points, f"Accuracy, training time and adapter size ({args.backbone}, {args.shots} shots)", note, args.out)
    atomic_write_json(args.out.with_suffix(".json"), {"note": note, "points": [asdict(p) for p in points]})
    for point in points:
        print(f"{point.method:28s} {point.average:.4f}  {point.train_s / 60:7.1f} min  {human_bytes(point.adapter_bytes)}")
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
