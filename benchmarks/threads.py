"""Wall time of the README's main job alone, beside a busy neighbour and under a one-core limit, with torch's own
thread count (the old default), infoprompt's default (``infoprompt.threads``), one thread, and passive OpenMP waits.

    python benchmarks/threads.py --data-dir ../shared/data             # the table (16 runs of the main job)
    python benchmarks/threads.py --data-dir ../shared/data --quick     # a smoke run: 16 shots, 1 epoch

The job is ``infoprompt train --task sst2 --method infoprompt --shots 64 --n-prompts 4 --seed 1 --backbone
minilm``, each run a fresh process timed from launch to exit (start-up, backbone load and final evaluation
included: what a user waits for). Scenarios:

* ``alone``: nothing else started.
* ``busy``: beside one single-thread torch process multiplying matrices for the whole scenario.
* ``affinity``: the job pinned to one CPU (``os.sched_setaffinity``, as ``taskset -c`` does).
* ``quota``: the job in a cgroup of its own limited to one CPU's time (CFS quota = period), seen the way a
  container sees its limit: in its own cgroup namespace with the cgroup file system mounted again, so that the
  quota sits at the root where ``joblib.cpu_count()`` reads it. Needs root, ``unshare`` and a writable cgroup
  (v1 ``cpu`` hierarchy or v2 with the ``cpu`` controller); where that is missing the row is left out and the
  reason printed.

Variants, each with ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``OMP_WAIT_POLICY`` removed from the
environment unless the variant sets them:

* ``old``: ``--threads N`` with N the count torch picks by itself in a process started the same way (probed
  first): what a run did before infoprompt chose its own count.
* ``new``: no ``--threads``: the default of ``infoprompt.threads``; the table names its count and source, as
  the run's ``metrics.json`` records them.
* ``one``: ``--threads 1``.
* ``passive``: torch's own count, as ``old``, with ``OMP_WAIT_POLICY=PASSIVE`` (idle OpenMP threads sleep
  instead of spinning).

Cells hold the median wall seconds over ``--repeats`` and their ratio to ``alone``/``old``; the last two
columns compare ``new`` with ``old`` and with ``one`` in the same scenario. Variants run interleaved, their order
rotated between repeats. Prints Markdown; ``--json`` also writes the numbers. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("alone", "busy", "affinity", "quota")
VARIANTS = ("old", "new", "one", "passive")
VARIANT_NAMES = {"old": "torch's count (old default)", "new": "new default", "one": "--threads 1",
                 "passive": "torch's count, passive wait"}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "LOKY_MAX_CPU_COUNT")
NEIGHBOUR = "import torch\ntorch.set_num_threads(1)\na = torch.randn(384, 384)\nwhile True:\n    a @ a\n"
PROBE = "import torch, joblib; print(torch.get_num_threads(), joblib.cpu_count())"


def clean_environment() -> dict[str, str]:
    """This environment without thread settings, with this checkout's sources first on the path."""
    environment = {key: value for key, value in os.environ.items() if key not in THREAD_VARIABLES}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT / "src"), os.environ.get("PYTHONPATH"))))
    return environment


def job_command(args: argparse.Namespace, out: Path) -> list[str]:
    shots, extra = ("16", ["--epochs", "1", "--eval-every-epochs", "0"]) if args.quick else ("64", [])
    return [sys.executable, "-m", "infoprompt.cli", "train", "--task", "sst2", "--method", "infoprompt", "--shots",
            shots, "--n-prompts", "4", "--seed", "1", "--backbone", args.backbone, "--data-dir", args.data_dir,
            "--out", str(out), "--overwrite", "--quiet", *extra,
            *(["--max-length", str(args.max_length)] if args.max_length else [])]


# -- where a process runs: one CPU by affinity, or a one-CPU cgroup quota seen from inside ------------------------

@dataclass
class Launcher:
    """How a scenario starts a process: a command prefix and a function run in the child before it starts."""

    prefix: list[str] = field(default_factory=list)
    before: Callable[[], None] | None = None

    def popen(self, command: list[str], environment: dict[str, str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen([*self.prefix, *command], env=environment, preexec_fn=self.before, **kwargs)


def one_cpu_affinity() -> Launcher:
    cpu = max(os.sched_getaffinity(0))
    return Launcher(before=lambda: os.sched_setaffinity(0, {cpu}))


def _cgroup_mounts() -> list[tuple[str, str, list[str]]]:
    """(mount point, type, options) of every cgroup file system mounted here."""
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, kind, options, *_ = line.split()
        if kind in ("cgroup", "cgroup2"):
            mounts.append((point.replace("\\040", " "), kind, options.split(",")))
    return mounts


@contextlib.contextmanager
def one_cpu_quota() -> Iterator[Launcher]:
    """A cgroup with a quota of one CPU, removed afterwards, and the launcher that starts a process in it with
    that cgroup as the root of its view (raises OSError with the reason where this machine does not allow it)."""
    if os.geteuid() != 0:
        raise OSError("needs root to create a cgroup")
    if shutil.which("unshare") is None:
        raise OSError("needs unshare (util-linux)")
    mounts = _cgroup_mounts()
    v1 = [(point, options) for point, kind, options in mounts if kind == "cgroup" and "cpu" in options]
    v2 = [point for point, kind, _ in mounts if kind == "cgroup2"]
    name = f"infoprompt-threads-bench-{os.getpid()}"
    if v1:
        point, options = v1[0]
        controllers = ",".join(o for o in options if o in ("cpu", "cpuacct"))
        group = Path(point) / name
        group.mkdir()
        period = (group / "cpu.cfs_period_us").read_text().strip()
        writes = [(group / "cpu.cfs_quota_us", period)]
        remount = f"umount {point} && mount -t cgroup -o {controllers} cgroup {point}"
    elif v2 and "cpu" in Path(v2[0], "cgroup.controllers").read_text().split():
        point = v2[0]
        if "cpu" not in Path(point, "cgroup.subtree_control").read_text().split():
            raise OSError(f"the cpu controller is not enabled for sub-groups of {point}")
        group = Path(point) / name
        group.mkdir()
        writes = [(group / "cpu.max", "100000 100000")]
        remount = f"umount {point} && mount -t cgroup2 cgroup2 {point}"
    else:
        raise OSError("no cgroup file system with the cpu controller is mounted")
    try:
        for path, value in writes:
            path.write_text(value)
        procs = group / "cgroup.procs"

        def join() -> None:
            procs.write_text(str(os.getpid()))

        shell = f'{remount} && exec "$@"'
        yield Launcher(["unshare", "--cgroup", "--mount", "--propagation", "private", "sh", "-c", shell, "sh"], join)
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()


@contextlib.contextmanager
def busy_neighbour() -> Iterator[None]:
    environment = {**clean_environment(), "OMP_NUM_THREADS": "1"}
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], env=environment)
    try:
        time.sleep(2.0)  # torch imported, spinning
        yield
    finally:
        neighbour.terminate()
        neighbour.wait()


@contextlib.contextmanager
def scenario(name: str) -> Iterator[Launcher]:
    if name == "alone":
        yield Launcher()
    elif name == "busy":
        with busy_neighbour():
            yield Launcher()
    elif name == "affinity":
        yield one_cpu_affinity()
    elif name == "quota":
        with one_cpu_quota() as launcher:
            yield launcher
    else:
        raise SystemExit(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")


# -- runs -----------------------------------------------------------------------------------------------------------

def probe(launcher: Launcher) -> tuple[int, int]:
    """torch's own thread count and joblib's CPU count in a process started as the scenario starts the job."""
    process = launcher.popen([sys.executable, "-c", PROBE], clean_environment(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    out, err = process.communicate()
    if process.returncode != 0:
        raise OSError(f"probe failed: {err.strip().splitlines()[-1:] or process.returncode}")
    torch_threads, cpus = out.split()
    return int(torch_threads), int(cpus)


def run_job(args: argparse.Namespace, launcher: Launcher, variant: str, torch_threads: int, out: Path) -> dict:
    environment = clean_environment()
    command = job_command(args, out)
    if variant in ("old", "passive"):
        command += ["--threads", str(torch_threads)]
    elif variant == "one":
        command += ["--threads", "1"]
    if variant == "passive":
        environment["OMP_WAIT_POLICY"] = "PASSIVE"
    started = time.perf_counter()
    process = launcher.popen(command, environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = process.communicate()
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"{variant}: the job failed ({process.returncode}): "
                         f"{err.decode(errors='replace').strip().splitlines()[-1:]}")
    environment_record = json.loads((out / "metrics.json").read_text())["environment"]
    return {"wall_s": wall, "threads": environment_record.get("threads"),
            "threads_from": environment_record.get("threads_from")}


def run_scenario(args: argparse.Namespace, name: str, variants: list[str], work: Path) -> dict:
    with scenario(name) as launcher:
        torch_threads, cpus = probe(launcher)
        runs: dict[str, list[dict]] = {variant: [] for variant in variants}
        for repeat in range(args.repeats):
            order = variants[repeat % len(variants):] + variants[:repeat % len(variants)]
            for variant in order:
                run = run_job(args, launcher, variant, torch_threads, work / f"{name}-{variant}")
                runs[variant].append(run)
                print(f"  {name:8s} {variant:8s} {run['wall_s']:7.1f} s  ({run['threads']} thread(s), "
                      f"{run['threads_from']})", file=sys.stderr, flush=True)
    return {"scenario": name, "torch_threads": torch_threads, "cpus": cpus,
            "walls_s": {variant: [run["wall_s"] for run in runs[variant]] for variant in variants},
            "wall_s": {variant: statistics.median(run["wall_s"] for run in runs[variant]) for variant in variants},
            "new_threads": [(run["threads"], run["threads_from"]) for run in runs.get("new", [])][:1]}


# -- the table ------------------------------------------------------------------------------------------------------

def markdown(rows: list[dict], variants: list[str]) -> str:
    base = next((row["wall_s"]["old"] for row in rows if row["scenario"] == "alone" and "old" in row["wall_s"]), None)
    header = ["scenario", "torch's count / CPUs", *(VARIANT_NAMES[v] for v in variants)]
    compare = [("new", "old"), ("new", "one")]
    compare = [(a, b) for a, b in compare if a in variants and b in variants]
    header += [f"{a} / {b}" for a, b in compare]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["scenario"], f"{row['torch_threads']} / {row['cpus']}"]
        for variant in variants:
            wall = row["wall_s"][variant]
            ratio = f" ({wall / base:.2f}×)" if base else ""
            chosen = ""
            if variant == "new" and row["new_threads"]:
                threads, source = row["new_threads"][0]
                chosen = f", {threads} thr. ({source})"
            cells.append(f"{wall:.1f}{ratio}{chosen}")
        cells += [f"{row['wall_s'][a] / row['wall_s'][b]:.2f}" for a, b in compare]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goals(rows: list[dict]) -> list[str]:
    """The issue's bar: under a one-core limit the new default within 1.1× of --threads 1; alone no slower."""
    lines = []
    for row in rows:
        walls = row["wall_s"]
        if row["scenario"] in ("affinity", "quota") and {"new", "one"} <= set(walls):
            ratio = walls["new"] / walls["one"]
            lines.append(f"- {row['scenario']}: new default {ratio:.2f}× --threads 1 (goal ≤ 1.10: "
                         f"{'met' if ratio <= 1.10 else 'MISSED'})")
        if row["scenario"] == "alone" and {"new", "old"} <= set(walls):
            ratio = walls["new"] / walls["old"]
            lines.append(f"- alone: new default {ratio:.2f}× torch's count (goal: no slower; one run each moves "
                         f"a few per cent)")
    return lines


def machine_line(args: argparse.Namespace) -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    job = "16 shots, 1 epoch (--quick)" if args.quick else "64 shots, 30 epochs"
    return (f"infoprompt train sst2 infoprompt {args.backbone}, {job}; {os.cpu_count()} CPU(s): {cpu}; "
            f"torch {torch.__version__}; median of {args.repeats} run(s); wall seconds (× alone, torch's count)")


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=os.environ.get("INFOPROMPT_DATA_DIR", str(ROOT.parent / "shared" / "data")))
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--max-length", type=int, help="the job's token budget (default: the method's; tiny test models: 32)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, from {', '.join(SCENARIOS)}")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {', '.join(VARIANTS)}")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each variant per scenario (the median counts)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 16 shots, 1 epoch, no periodic evaluation")
    parser.add_argument("--work-dir", help="where the run directories go (default: a temporary directory)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    # A SIGTERM (kill, a job's time limit) unwinds like Ctrl-C, so the busy neighbour's `finally` stops it: without
    # this the neighbour outlived the benchmark and loaded a core until killed by hand.
    signal.signal(signal.SIGTERM, interrupt)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="threads-bench-"))
    rows, skipped = [], []
    for name in (s.strip() for s in args.scenarios.split(",") if s.strip()):
        try:
            rows.append(run_scenario(args, name, variants, work))
        except OSError as error:
            skipped.append(f"- {name}: left out, {error}")
    print(machine_line(args))
    print()
    print(markdown(rows, variants))
    print()
    print("\n".join(goals(rows) + skipped))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "skipped": skipped}, indent=2) + "\n")
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
