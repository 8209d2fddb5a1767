"""Memory benchmark of one huge line: peak RSS of ``infoprompt predict`` on a ``.txt`` input of a single line of
1 MB, 100 MB and 1 GB, against a one-line input of a few words (the target: within 10 % of it).

    python benchmarks/input_memory.py --json results/speed/input-memory.json
    python benchmarks/input_memory.py --sizes-mb 1 100        # a subset
    python benchmarks/input_memory.py --src /path/to/other/src # another checkout's code

Each input is written into a temporary directory under /tmp as it is generated (never held whole, never
committed) and deleted when its case ends. Each case is one ``infoprompt predict`` process; its peak resident
set size comes from ``wait4``. The adapter is a linear probe on a tiny random BERT (``tests/tiny_models.py``),
trained on a made-up file: the point is what one line costs, not the encoder's own footprint, which a real
backbone adds once. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

WORDS = ("great movie", "good film", "lovely story", "terrible movie", "bad film", "boring story")


def environment(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def make_adapter(work: Path, src: Path) -> Path:
    """A tiny backbone and a linear probe trained on a made-up file of two classes."""
    from tiny_models import build_tiny_model

    backbone = build_tiny_model("bert", work / "tiny-bert")
    train = work / "train.jsonl"
    train.write_text("".join(json.dumps({"text": f"{WORDS[i % 6]} it was", "label": "pos" if i % 6 < 3 else "neg"})
                             + "\n" for i in range(24)), encoding="utf-8")
    out = work / "adapter"
    command = ["train", "--train-file", str(train), "--method", "linear-probe", "--max-length", "32", "--quiet",
               "--backbone", str(backbone), "--out", str(out)]
    subprocess.run([sys.executable, "-m", "infoprompt.cli", *command], check=True, env=environment(src))
    return out


def write_line(path: Path, megabytes: float) -> int:
    """One line of ``megabytes`` MB of words, written 1 MB at a time; returns its size in bytes."""
    piece = ("good film " * 100_000).encode()  # 1 MB
    whole, rest = divmod(int(megabytes * len(piece)), len(piece))
    with path.open("wb") as handle:
        for _ in range(whole):
            handle.write(piece)
        handle.write(piece[:rest] + b"\n")
    return path.stat().st_size


def peak_rss(adapter: Path, src: Path, path: Path) -> dict[str, object]:
    """Peak RSS (MB, from ``wait4``), seconds and exit status of one ``predict`` on ``path``."""
    command = [sys.executable, "-m", "infoprompt.cli", "predict", "--adapter", str(adapter), "--input", str(path),
               "--quiet", "--output", os.devnull]
    started = time.perf_counter()
    pid = os.posix_spawn(command[0], command, environment(src))
    _, status, usage = os.wait4(pid, 0)
    return {"peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "seconds": round(time.perf_counter() - started, 1),
            "exit": os.waitstatus_to_exitcode(status)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", type=float, nargs="*", default=[1, 100, 1000])
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the infoprompt source tree to measure")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    src = args.src.resolve()
    results: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="infoprompt-input-memory-", dir="/tmp") as work:
        adapter = make_adapter(Path(work), src)
        cases = [("one line of a few words", None), *((f"one {size:g} MB line", size) for size in args.sizes_mb)]
        print("| input | bytes | peak RSS (MB) | vs one short line | seconds | exit |\n|---|---:|---:|---:|---:|---:|",
              flush=True)
        baseline = None
        for name, size in cases:
            path = Path(work, "in.txt")
            if size is None:
                path.write_text("a great film\n", encoding="utf-8")
                length = path.stat().st_size
            else:
                length = write_line(path, size)
            try:
                result = peak_rss(adapter, src, path)
            finally:
                path.unlink()
            baseline = baseline or result["peak_rss_mb"]
            ratio = result["peak_rss_mb"] / baseline
            results.append({"input": name, "bytes": length, **result, "vs_short_line": round(ratio, 3)})
            print(f"| {name} | {length:,} | {result['peak_rss_mb']:.0f} | {ratio:.3f} | {result['seconds']:.1f} | "
                  f"{result['exit']} |", flush=True)
    if args.json:
        record = {"benchmark": "benchmarks/input_memory.py", "machine": platform.machine(),
                  "python": platform.python_version(), "cpus": os.cpu_count(), "cases": results}
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
