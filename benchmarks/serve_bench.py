"""Serving benchmark: N adapters on one shared encoder against N separate models or N one-adapter lanes, over
loopback HTTP.

    python benchmarks/serve_bench.py --adapter runs/sst2-probe --data-dir ../shared/data --counts 1 10 100
    python benchmarks/serve_bench.py --adapter runs/top-lora runs/setfit-lora-all --modes shared per-adapter \
        --separate-counts --traffic different fan-out --lora-json results/speed/serve-lora.json

For each adapter in ``--adapter`` and each N in ``--counts`` the adapter is copied N times under an adapter root
and ``infoprompt serve`` is started on a free loopback port with all N, once per mode of ``--modes``: ``shared``
(the server as it is: one copy of the encoder; probe adapters share one encoder pass per input, LoRA adapters
share mixed batches), ``separate`` (``--separate-backbones``: a private encoder copy per adapter, the memory and
batching of one model per task, as a SetFit user serves them; only for the N in ``--separate-counts``) and
``per-adapter`` (``--per-adapter-lanes``: one encoder, but every LoRA adapter in a batch of its own, as the
server ran them before mixed lanes). An N too large for a separate run is extrapolated in memory only, from the
cost of one more encoder copy measured between the two largest separate runs; its rows say so.

Per server: its resident memory after loading (VmRSS) and its peak (VmHWM), the seconds until ``/healthz``
answered, then, for each traffic of ``--traffic``, ``--requests`` requests (``--inputs`` SST-2 dev sentences
each, round-robin over the adapters) from ``--concurrency`` concurrent clients in this process: ``different``
sentences in every request, or ``fan-out``, the same sentences to every adapter in turn (what a service that
runs all its classifiers on each text sends); requests/s, examples/s, the p50/p99 latency of a request and the
inputs per micro-batch. The servers of one N (``--side-by-side``: of every N) run side by side and take turns
in ``--rounds`` rounds (order alternating), so that what other programs do to the machine falls on all alike; no round starts after
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
sys.path.insert(0, str(SRC))  # this checkout's infoprompt, as the servers it starts run it


MODE_FLAGS = {"shared": [], "separate": ["--separate-backbones"], "per-adapter": ["--per-adapter-lanes"]}
TRAFFIC = ("different", "fan-out")


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
    traffic: str = "different"
    method: str = ""
    kind: str = ""


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


def adapter_config(directory: Path) -> dict[str, str]:
    """The adapter's method, kind and backbone, read by the library's own reader (under whichever file name the
    adapter's format version uses)."""
    from infoprompt.kinds.config import read_adapter_config

    config = read_adapter_config(directory)
    return {"method": config.method, "kind": config.kind.name, "backbone": config.backbone}


def adapter_bytes(directory: Path) -> int:
    """The bytes of the adapter's weight files (LoRA, head, arrays)."""
    return sum(path.stat().st_size for path in directory.rglob("*.safetensors"))


def start_server(root: Path, names: list[str], args: argparse.Namespace, mode: str) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    command = [sys.executable, "-m", "infoprompt.cli", "serve", "--port", str(port), "--adapter-root", str(root),
               "--threads", str(args.threads), "--max-batch", str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms),
               "--max-queue", "100000", *[a for n in names for a in ("--adapter", f"{n}={root / n}")],
               *MODE_FLAGS[mode], *[a for d in args.allow_backbone_dir for a in ("--allow-backbone-dir", str(d))]]
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
                     args: argparse.Namespace, traffic: str) -> tuple[list[float], int, float]:
    """``count`` requests (numbered from ``first``) from ``--concurrency`` clients: latencies, failures, seconds."""
    latencies: list[float] = []
    failed = 0
    numbers = iter(range(first, first + count))

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal failed
        for i in numbers:
            # fan-out: N consecutive requests (one per adapter) carry the same sentences, as when every
            # classifier of a service reads each text; otherwise every request has sentences of its own.
            text_number = i // len(names) if traffic == "fan-out" else i
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


def interleaved_load(servers: dict[tuple[int, str], tuple[str, Run]], sentences: list[str],
                     args: argparse.Namespace, traffic: str) -> None:
    """``--rounds`` rounds; in each, every server (by adapter count and mode) gets its share of ``--requests`` in
    turn (the order alternating), so that the load other programs put on the machine falls on all of them alike."""
    per_round = max(1, args.requests // args.rounds)
    latencies: dict[tuple[int, str], list[float]] = {key: [] for key in servers}
    deadline = time.perf_counter() + args.time_limit
    for round_number in range(args.rounds):
        order = list(servers) if round_number % 2 == 0 else list(reversed(servers))
        for key in order:
            url, run = servers[key]
            got, failed, seconds = asyncio.run(load_round(url, adapter_names(key[0]), sentences,
                                                          round_number * per_round, per_round, args, traffic))
            latencies[key] += got
            run.failed += failed
            run.seconds += seconds
        if time.perf_counter() > deadline:
            break
    for key, (_, run) in servers.items():
        ordered = sorted(latencies[key])
        run.requests = len(ordered)
        run.requests_per_s = run.requests / run.seconds
        run.examples_per_s = run.requests * args.inputs / run.seconds
        run.p50_ms = 1000 * statistics.median(ordered)
        run.p99_ms = 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def adapter_names(count: int) -> list[str]:
    return [f"a{i:03d}" for i in range(count)]


BATCH_SERIES = ("infoprompt_batch_inputs_sum", "infoprompt_batch_inputs_count", "infoprompt_batch_seconds_sum")


def batch_totals(url: str) -> dict[str, float]:
    """The server's batch counters so far, from its /metrics, summed over lanes."""
    totals = dict.fromkeys(BATCH_SERIES, 0.0)
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        for name in BATCH_SERIES:
            if line.startswith(name + "{"):
                totals[name] += float(line.split()[-1])
    return totals


def batch_metrics(before: dict[str, float], after: dict[str, float], run: Run) -> None:
    """Mean inputs per micro-batch and the summed seconds of the batches between two :func:`batch_totals` (a
    batch's time runs from its submission to its result, so with several lanes it includes waiting for the
    inference thread; with one lane it is compute time)."""
    inputs, batches, seconds = (after[name] - before[name] for name in BATCH_SERIES)
    run.inputs_per_batch = round(inputs / max(1.0, batches), 1)
    run.batch_seconds = round(seconds, 1)


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()


def measure(adapter: Path, plan: list[tuple[int, str]], sentences: list[str], args: argparse.Namespace) -> list[Run]:
    """Start a server per (adapter count, mode) of ``plan``, each with that many copies of the adapter, then load
    all of them side by side in interleaved rounds, once per traffic of ``--traffic``."""
    config = adapter_config(adapter)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as scratch:
        processes, loaded = {}, {}
        try:
            for count, mode in plan:
                root = Path(scratch) / str(count)
                if not root.exists():
                    for name in adapter_names(count):
                        shutil.copytree(adapter, root / name)
                process, url, startup = start_server(root, adapter_names(count), args, mode)
                processes[count, mode] = process
                loaded[count, mode] = (url, round(memory_mb(process.pid)[0]), round(startup, 1))
            for (count, _), (url, _, _) in loaded.items():
                asyncio.run(warm_up(url, adapter_names(count), sentences))
            for traffic in args.traffic:
                servers = {key: (url, Run(key[1], key[0], rss, 0, startup, traffic=traffic, method=config["method"],
                                          kind=config["kind"]))
                           for key, (url, rss, startup) in loaded.items()}
                before = {key: batch_totals(url) for key, (url, _) in servers.items()}
                interleaved_load(servers, sentences, args, traffic)
                for key, (url, run) in servers.items():
                    run.peak_mb = round(memory_mb(processes[key].pid)[1])
                    batch_metrics(before[key], batch_totals(url), run)
                    print(f"  {run}", file=sys.stderr, flush=True)
                    runs.append(run)
        finally:
            for process in processes.values():
                stop(process)
    return runs


def extrapolated(runs: list[Run], count: int) -> Run | None:
    """A separate run of ``count`` adapters in memory only, from the two largest measured separate runs."""
    last = runs[-1]
    separate = sorted((r for r in runs if r.mode == "separate" and (r.traffic, r.method) == (last.traffic, last.method)),
                      key=lambda r: r.adapters)
    if len(separate) < 2 or separate[-2].adapters == separate[-1].adapters:
        return None
    low, high = separate[-2], separate[-1]
    per_copy = (high.rss_mb - low.rss_mb) / (high.adapters - low.adapters)
    return Run("separate", count, round(high.rss_mb + per_copy * (count - high.adapters)), 0, 0.0,
               traffic=high.traffic, method=high.method, kind=high.kind, note=f"extrapolated: {per_copy:.0f} MiB per encoder copy (N={low.adapters} to {high.adapters}); not run")


def table(runs: list[Run]) -> str:
    lines = ["| adapter | traffic | adapters | server | RSS MiB | peak MiB | startup s | requests/s | examples/s | p50 ms "
             "| p99 ms | inputs/batch | batch s | note |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r.method, r.traffic, r.adapters, r.mode)):
        if r.requests:
            cells = [f"{r.requests_per_s:.1f}", f"{r.examples_per_s:.1f}", f"{r.p50_ms:.0f}", f"{r.p99_ms:.0f}",
                     f"{r.inputs_per_batch:.1f}", f"{r.batch_seconds:.1f}"]
            note = r.note or (f"{r.requests} requests, {r.failed} failed" if r.failed else f"{r.requests} requests")
        else:
            cells, note = ["–"] * 6, r.note
        lines.append(f"| {r.method} | {r.traffic} | {r.adapters} | {r.mode} | {r.rss_mb:.0f} | {r.peak_mb or '–'} | "
                     f"{r.startup_s or '–'} | " + " | ".join(cells) + f" | {note} |")
    return "\n".join(lines)


def lora_runs(runs: list[Run]) -> dict[str, list[dict[str, object]]]:
    """The runs in the schema of results/speed/serve-lora.json (the shared server's LoRA lanes are "mixed")."""
    names = {"shared": "mixed", "per-adapter": "per-adapter", "separate": "separate"}
    return {"runs": [{"kind": r.kind, "method": r.method, "adapters": r.adapters, "server": names[r.mode],
                      "traffic": r.traffic, "examples_per_s": round(r.examples_per_s, 1), "p50_ms": round(r.p50_ms),
                      "p99_ms": round(r.p99_ms), "rss_mib": r.rss_mb, "inputs_per_batch": r.inputs_per_batch}
                     for r in runs if r.requests]}


def memory_check(runs: list[Run], sizes: dict[str, int]) -> list[str]:
    """Per adapter: the shared server's RSS with its most copies against one encoder and the fixed overhead (the
    RSS with one copy) plus twice the copies' bytes."""
    lines = []
    for method, size in sizes.items():
        shared = sorted((r for r in runs if r.method == method and r.mode == "shared"), key=lambda r: r.adapters)
        if len(shared) < 2 or shared[0].adapters != 1:
            continue
        one, most = shared[0], shared[-1]
        bound = one.rss_mb + 2 * (most.adapters - 1) * size / 2**20
        lines.append(f"{method}: {most.adapters} adapters {most.rss_mb:.0f} MiB; bound {bound:.0f} MiB = one adapter's "
                     f"server {one.rss_mb:.0f} MiB + 2 x {most.adapters - 1} x {size / 2**20:.2f} MiB "
                     f"({'met' if most.rss_mb <= bound else 'NOT met'})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", type=Path, nargs="+", required=True, help="saved SST-2 adapters, each copied N times")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("INFOPROMPT_DATA_DIR", "../shared/data")))
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--modes", nargs="+", choices=sorted(MODE_FLAGS), default=["shared", "separate"])
    parser.add_argument("--separate-counts", type=int, nargs="*", default=[1, 10],
                        help="N run with a private encoder per adapter (larger N in --counts are extrapolated)")
    parser.add_argument("--traffic", nargs="+", choices=TRAFFIC, default=["different"])
    parser.add_argument("--requests", type=int, default=400, help="requests per server and traffic, over all rounds")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--inputs", type=int, default=4, help="sentences per request")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--fan-out", action="store_true", help="the same as --traffic fan-out")
    parser.add_argument("--side-by-side", action="store_true",
                        help="start the servers of every N at once and load them in the same interleaved rounds "
                             "(compare across N; default: the servers of one N at a time)")
    parser.add_argument("--time-limit", type=float, default=240,
                        help="no new round starts after this many seconds of load per N and traffic")
    parser.add_argument("--startup-limit", type=float, default=900)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--allow-backbone-dir", type=Path, action="append", default=[],
                        help="passed to the servers (adapters whose backbone is a local directory)")
    parser.add_argument("--json", type=Path, help="also write the runs here")
    parser.add_argument("--lora-json", type=Path, help="also write the runs as results/speed/serve-lora.json has them")
    args = parser.parse_args(argv)
    if args.fan_out:
        args.traffic = ["fan-out"]
    sentences = read_sentences(args.data_dir, 512)
    runs: list[Run] = []
    for adapter in args.adapter:
        plan = [(count, mode) for count in args.counts for mode in args.modes
                if mode != "separate" or count in args.separate_counts]
        if args.side_by_side:
            runs += measure(adapter, plan, sentences, args)
        else:
            for count in args.counts:
                runs += measure(adapter, [(n, mode) for n, mode in plan if n == count], sentences, args)
        for count in args.counts:
            if "separate" in args.modes and count not in args.separate_counts:
                runs += [guess for traffic in args.traffic
                         if (guess := extrapolated([r for r in runs if r.traffic == traffic], count)) is not None]
    described = ", ".join(f"{adapter_config(a)['method']} on {adapter_config(a)['backbone']}" for a in args.adapter)
    print(f"adapters: {described}; {args.requests} requests of {args.inputs} inputs per server and traffic in "
          f"{args.rounds} interleaved rounds, {args.concurrency} concurrent clients; server --threads {args.threads} "
          f"--max-batch {args.max_batch} --max-wait-ms {args.max_wait_ms}; {os.cpu_count()} CPUs\n")
    print(table(runs))
    for line in memory_check(runs, {adapter_config(a)["method"]: adapter_bytes(a) for a in args.adapter}):
        print(line)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=1) + "\n")
    if args.lora_json:
        args.lora_json.parent.mkdir(parents=True, exist_ok=True)
        args.lora_json.write_text(json.dumps(lora_runs(runs), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
