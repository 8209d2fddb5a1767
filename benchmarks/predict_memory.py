"""Memory benchmark of ``infoprompt predict``: peak RSS on 1e4, 1e5 and 1e6 rows and on one 30 MB line.

    python benchmarks/predict_memory.py                      # all four cases, tiny model
    python benchmarks/predict_memory.py --rows 10000 100000  # a subset
    python benchmarks/predict_memory.py --src /path/to/other/src --rows 10000   # another checkout's code

Each case is one ``infoprompt predict --input -`` process fed through a pipe by a writer thread (the input is
generated as it is written, never held whole); a reader thread counts the records it writes to stdout as they
come. The process's peak resident set size comes from ``wait4``, and every 5 s a sample of (records written,
RSS, peak RSS) from ``/proc`` shows how memory follows the input; ``--json`` keeps the samples. The model is a tiny random BERT
(2 layers, hidden size 32, from ``tests/tiny_models.py``) with a WARP adapter trained for one epoch on a made-up
SST-2 sample: the point is how memory grows with the input, not the encoder's own footprint, which a real
backbone adds once (a flat line is the goal). Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

WORDS = ("great movie", "good film", "lovely story", "terrible movie", "bad film", "boring story")


def make_adapter(work: Path, src: Path) -> Path:
    """A tiny backbone, a made-up SST-2 directory and a WARP adapter trained on them for one epoch."""
    from tiny_models import build_tiny_model

    backbone = build_tiny_model("bert", work / "tiny-bert")
    for split, n in (("train", 32), ("dev", 8)):
        path = work / "data" / "SST-2" / f"{split}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [f"{WORDS[i % len(WORDS)]} it was\t{int(i % len(WORDS) < 3)}" for i in range(n)]
        path.write_text("sentence\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    out = work / "adapter"
    command = ["train", "--task", "sst2", "--method", "warp", "--shots", "16", "--epochs", "1", "--max-length", "32",
               "--eval-every-epochs", "0", "--quiet", "--backbone", str(backbone), "--data-dir", str(work / "data"),
               "--out", str(out)]
    subprocess.run([sys.executable, "-m", "infoprompt.cli", *command], check=True, env=environment(src))
    return out


def environment(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def short_rows(count: int):
    for i in range(count):
        yield json.dumps({"sentence": f"{WORDS[i % len(WORDS)]} number {i}"}).encode() + b"\n"


def one_long_line(megabytes: int):
    text = "good film " * (megabytes * 100_000)
    yield json.dumps({"sentence": text}).encode() + b"\n"


def measure(adapter: Path, src: Path, rows, batch_size: int, time_limit: float) -> dict[str, object]:
    """Run one predict process on the rows ``rows`` yields, counting the records it writes as they come.

    Returns its peak RSS (MB, from ``wait4``), seconds, exit status, records written, and samples of
    (records written, RSS so far) every few seconds: a flat line means memory does not grow with the input. A
    case still running after ``time_limit`` seconds gets SIGTERM; its samples still show the trend.
    """
    command = [sys.executable, "-m", "infoprompt.cli", "predict", "--adapter", str(adapter), "--input", "-",
               "--batch-size", str(batch_size), "--quiet"]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=environment(src))
    written = [0]
    threading.Thread(target=feed, args=(process, rows), daemon=True).start()
    threading.Thread(target=count_lines, args=(process, written), daemon=True).start()
    errors: list[bytes] = []
    threading.Thread(target=lambda: errors.append(process.stderr.read()), daemon=True).start()
    samples, stopped, status, usage = sample(process, written, started, time_limit)
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    time.sleep(0.5)  # the counting thread reads the last records
    return {"peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "seconds": round(seconds, 1), "exit": process.returncode,
            "records": written[0], "stopped_at_time_limit": stopped, "samples": samples,
            "stderr": b"".join(errors).decode(errors="replace")[-300:]}


def feed(process: subprocess.Popen, rows) -> None:
    try:
        buffer = []
        for row in rows:
            buffer.append(row)
            if len(buffer) >= 1000:
                process.stdin.write(b"".join(buffer))
                buffer.clear()
        process.stdin.write(b"".join(buffer))
        process.stdin.close()
    except (BrokenPipeError, ValueError):
        pass  # the process ended (or was stopped) first


def count_lines(process: subprocess.Popen, written: list[int]) -> None:
    for _ in process.stdout:
        written[0] += 1


def sample(process: subprocess.Popen, written: list[int], started: float, time_limit: float):
    """(seconds, records written, current and peak RSS in MB) every 5 s until the process ends; then the
    samples, whether it was stopped, and its exit status and resource usage (``wait4``)."""
    samples, stopped, last = [], False, 0.0
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            return samples, stopped, status, usage
        now = time.perf_counter() - started
        if now - last >= 5:
            last = now
            rss, peak = rss_mb(process.pid)
            samples.append({"s": round(now), "records": written[0], "rss_mb": rss, "peak_mb": peak})
        if now > time_limit and not stopped:
            process.send_signal(signal.SIGTERM)
            stopped = True
        time.sleep(0.2)


def rss_mb(pid: int) -> tuple[float, float]:
    values = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = round(int(rest.split()[0]) / 1024, 1)
    except (OSError, ValueError):
        pass
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--long-line-mb", type=int, default=30, help="size of the one-line case (0: skip it)")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the infoprompt source tree to measure")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--time-limit", type=float, default=3600, help="seconds per case before it is stopped")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as work:
        adapter = make_adapter(Path(work), args.src.resolve())
        cases = [(f"{n:,} rows", short_rows(n)) for n in args.rows]
        if args.long_line_mb:
            cases.append((f"one {args.long_line_mb} MB line", one_long_line(args.long_line_mb)))
        print("| input | records written | peak RSS (MB) | seconds | exit |\n|---|---:|---:|---:|---:|", flush=True)
        for name, rows in cases:
            result = measure(adapter, args.src.resolve(), rows, args.batch_size, args.time_limit)
            results.append({"input": name, **result})
            note = " (stopped at the time limit)" if result["stopped_at_time_limit"] else ""
            print(f"| {name}{note} | {result['records']:,} | {result['peak_rss_mb']:.0f} | {result['seconds']:.1f} | "
                  f"{result['exit']} |", flush=True)
            if result["exit"] != 0 and not result["stopped_at_time_limit"]:
                print(f"  stderr: {result['stderr']}", flush=True)
            if args.json:
                args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
