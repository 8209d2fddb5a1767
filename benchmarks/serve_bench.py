"""Serving benchmark: N adapters on one shared encoder against N separate models, over loopback HTTP.

    python benchmarks/serve_bench.py --adapter runs/sst2-probe --data-dir ../shared/data --counts 1 10 100

For each N in ``--counts`` the adapter is copied N times under an adapter root and ``infoprompt serve`` is
started on a free loopback port with all N, in two modes: ``shared`` (the server as it is: one copy of the
encoder; probe adapters share one encoder pass per input) and ``separate`` (``--separate-backbones``: a private
encoder copy per adapter, the memory and batching of one model per task, as a SetFit user serves them) for the
N in ``--separate-counts``. An N too large for a separate run is extrapolated in memory only, from the cost of
one more encoder copy measured between the two largest separate runs; its rows say so.

Per server: its resident memory after loading (VmRSS) and its peak (VmHWM), the seconds until ``/healthz``
answered, then ``--requests`` requests (``--inputs`` SST-2 dev sentences each, round-robin over the adapters)
from ``--concurrency`` concurrent clients in this process (``--fan-out``: the same sentences to every adapter
in turn, where the probes' shared encoder pass encodes a sentence once for all of them): requests/s, examples/s, and the p50/p99 latency of a
request. The shared and separate servers of one N run side by side and take turns in ``--rounds`` rounds (order
alternating), so that what other programs do to the machine falls on both alike; no round starts after
``--time-limit`` seconds. The client runs on the same machine as the servers and shares its cores. Loopback
only; nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

SRC = Path(__file__).resolve().parents[1] / "src"


@dataclass
class Run:
    mode: str
    adapters: int
    rss_mb: float
    peak_mb: float
    startup_s: float
    requests: int = 0
    failed: int = 0
    seconds: float = 0.0
    requests_per_s: float = 0.0
    examples_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    inputs_per_batch: float = 0.0
    batch_seconds: float = 0.0
    note: str = ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def read_sentences(data_dir: Path, count: int) -> list[str]:
    lines = (data_dir / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[0].strip() for line in lines[:count]]


def start_server(root: Path, names: list[str], args: argparse.Namespace, separate: bool) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    command = [sys.executable, "-m", "infoprompt.cli", "serve", "--port", str(port), "--adapter-root", str(root),
               "--threads", str(args.threads), "--max-batch", str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms),
               "--max-queue", "100000", *[a for n in names for a in ("--adapter", f"{n}={root / n}")]]
    if separate:
        command.append("--separate-backbones")
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": str(args.threads)}
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    while True:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}: {process.stderr.read()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return process, url, time.perf_counter() - started
        except httpx.TransportError:
            pass
        if time.perf_counter() - started > args.startup_limit:
            process.kill()
            raise SystemExit(f"the server was not ready after {args.startup_limit} s")
        time.sleep(0.25)


async def warm_up(url: str, names: list[str], sentences: list[str]) -> None:
    """One request per adapter (not timed): the first pass of each lane pays for lazy set-up."""
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        for start in range(0, len(names), 32):
            await asyncio.gather(*(http.post(f"/v1/adapters/{n}/predict", json={"inputs": sentences[:1]})
                                   for n in names[start : start + 32]))


async def load_round(url: str, names: list[str], sentences: list[str], first: int, count: int,
                     args: argparse.Namespace) -> tuple[list[float], int, float]:
    """``count`` requests (numbered from ``first``) from ``--concurrency`` clients: latencies, failures, seconds."""
    latencies: list[float] = []
    failed = 0
    numbers = iter(range(first, first + count))

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal failed
        for i in numbers:
            # --fan-out: N consecutive requests (one per adapter) carry the same sentences, as when every
            # classifier of a service reads each text; otherwise every request has sentences of its own.
            text_number = i // len(names) if args.fan_out else i
            texts = [sentences[(text_number * args.inputs + k) % len(sentences)] for k in range(args.inputs)]
            sent = time.perf_counter()
            answer = await http.post(f"/v1/adapters/{names[i % len(names)]}/predict", json={"inputs": texts})
            latencies.append(time.perf_counter() - sent)
            failed += answer.status_code != 200

    limits = httpx.Limits(max_connections=args.concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(args.concurrency)))
        return latencies, failed, time.perf_counter() - started


def interleaved_load(servers: dict[str, tuple[str, Run]], names: list[str], sentences: list[str],
                     args: argparse.Namespace) -> None:
    """``--rounds`` rounds; in each, every server gets its share of ``--requests`` in turn (the order
    alternating), so that the load other programs put on the machine falls on all of them alike."""
    per_round = max(1, args.requests // args.rounds)
    latencies = {mode: [] for mode in servers}
    deadline = time.perf_counter() + args.time_limit
    for round_number in range(args.rounds):
        order = list(servers) if round_number % 2 == 0 else list(reversed(servers))
        for mode in order:
            url, run = servers[mode]
            got, failed, seconds = asyncio.run(load_round(url, names, sentences, round_number * per_round, per_round, args))
            latencies[mode] += got
            run.failed += failed
            run.seconds += seconds
        if time.perf_counter() > deadline:
            break
    for mode, (_, run) in servers.items():
        ordered = sorted(latencies[mode])
        run.requests = len(ordered)
        run.requests_per_s = run.requests / run.seconds
        run.examples_per_s = run.requests * args.inputs / run.seconds
        run.p50_ms = 1000 * statistics.median(ordered)
        run.p99_ms = 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def batch_metrics(url: str, run: Run) -> None:
    """Mean inputs per micro-batch and the summed seconds of its batches, from the server's /metrics (a batch's
    time runs from its submission to its result, so with several lanes it includes waiting for the inference
    thread; with one lane it is compute time)."""
    totals: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        for name in ("infoprompt_batch_inputs_sum", "infoprompt_batch_inputs_count", "infoprompt_batch_seconds_sum"):
            if line.startswith(name + "{"):
                totals[name] = totals.get(name, 0.0) + float(line.split()[-1])
    run.inputs_per_batch = round(totals.get("infoprompt_batch_inputs_sum", 0) / max(1, totals.get("infoprompt_batch_inputs_count", 0)), 1)
    run.batch_seconds = round(totals.get("infoprompt_batch_seconds_sum", 0.0), 1)


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()


def measure(adapter: Path, count: int, modes: list[str], sentences: list[str], args: argparse.Namespace) -> list[Run]:
    """Start a server per mode with ``count`` copies of the adapter, then load them in interleaved rounds."""
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as scratch:
        root = Path(scratch)
        names = [f"a{i:03d}" for i in range(count)]
        for name in names:
            shutil.copytree(adapter, root / name)
        processes, servers = [], {}
        try:
            for mode in modes:
                process, url, startup = start_server(root, names, args, mode == "separate")
                processes.append(process)
                servers[mode] = (url, Run(mode, count, round(memory_mb(process.pid)[0]), 0, round(startup, 1)))
            for url, _ in servers.values():
                asyncio.run(warm_up(url, names, sentences))
            interleaved_load(servers, names, sentences, args)
            for process, (url, run) in zip(processes, servers.values(), strict=True):
                run.peak_mb = round(memory_mb(process.pid)[1])
                batch_metrics(url, run)
        finally:
            for process in processes:
                stop(process)
    for _, run in servers.values():
        print(f"  {run}", file=sys.stderr, flush=True)
    return [run for _, run in servers.values()]


def extrapolated(runs: list[Run], count: int) -> Run | None:
    """A separate run of ``count`` adapters in memory only, from the two largest measured separate runs."""
    separate = sorted((r for r in runs if r.mode == "separate"), key=lambda r: r.adapters)
    if len(separate) < 2:
        return None
    low, high = separate[-2], separate[-1]
    per_copy = (high.rss_mb - low.rss_mb) / (high.adapters - low.adapters)
    return Run("separate", count, round(high.rss_mb + per_copy * (count - high.adapters)), 0, 0.0,
               note=f"extrapolated: {per_copy:.0f} MiB per encoder copy (N={low.adapters} to {high.adapters}); not run")


def table(runs: list[Run], args: argparse.Namespace) -> str:
    lines = ["| adapters | server | RSS MiB | peak MiB | startup s | requests/s | examples/s | p50 ms | p99 ms "
             "| inputs/batch | batch s | note |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r.adapters, r.mode)):
        if r.requests:
            cells = [f"{r.requests_per_s:.1f}", f"{r.examples_per_s:.1f}", f"{r.p50_ms:.0f}", f"{r.p99_ms:.0f}",
                     f"{r.inputs_per_batch:.1f}", f"{r.batch_seconds:.1f}"]
            note = r.note or (f"{r.requests} requests, {r.failed} failed" if r.failed else f"{r.requests} requests")
        else:
            cells, note = ["–"] * 6, r.note
        lines.append(f"| {r.adapters} | {r.mode} | {r.rss_mb:.0f} | {r.peak_mb or '–'} | {r.startup_s or '–'} | "
                     + " | ".join(cells) + f" | {note} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", type=Path, required=True, help="a saved SST-2 adapter to copy N times")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("INFOPROMPT_DATA_DIR", "../shared/data")))
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--separate-counts", type=int, nargs="*", default=[1, 10],
                        help="N run with a private encoder per adapter (larger N in --counts are extrapolated)")
    parser.add_argument("--requests", type=int, default=400, help="requests per server, over all rounds")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--inputs", type=int, default=4, help="sentences per request")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--fan-out", action="store_true",
                        help="send the same sentences to every adapter in turn (one request per adapter)")
    parser.add_argument("--time-limit", type=float, default=240,
                        help="no new round starts after this many seconds of load per N")
    parser.add_argument("--startup-limit", type=float, default=900)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--json", type=Path, help="also write the runs here")
    args = parser.parse_args(argv)
    sentences = read_sentences(args.data_dir, 512)
    runs = []
    for count in args.counts:
        separate = count in args.separate_counts
        runs += measure(args.adapter, count, ["shared", "separate"] if separate else ["shared"], sentences, args)
        if not separate and (guess := extrapolated(runs, count)) is not None:
            runs.append(guess)
    config = json.loads((args.adapter / "adapter_config.json").read_text())
    print(f"adapter: {config['method']} on {config['backbone']}; {args.requests} requests of {args.inputs} inputs "
          f"per server in {args.rounds} interleaved rounds{', fanned out to every adapter' if args.fan_out else ''}, "
          f"{args.concurrency} concurrent clients; server --threads {args.threads} --max-batch {args.max_batch} "
          f"--max-wait-ms {args.max_wait_ms}; {os.cpu_count()} CPUs\n")
    print(table(runs, args))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
