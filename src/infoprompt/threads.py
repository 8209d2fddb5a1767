"""How many torch CPU threads a process runs with: the CPUs it may use, shared among its sibling workers."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

# Where a thread count came from, as run records name it.
FROM_FLAG = "--threads"
FROM_OMP = "OMP_NUM_THREADS"
FROM_QUOTA = "cgroup-quota"
FROM_AFFINITY = "affinity"
FROM_LOKY = "LOKY_MAX_CPU_COUNT"
FROM_CPU_COUNT = "cpu-count"
FROM_WORKERS = "cpus/workers"
FROM_CAP = "cap"  # a command's own upper bound (serve's 4)
FROM_TORCH = "torch"  # torch's own count (physical cores), or one the calling program set with torch.set_num_threads


@dataclass(frozen=True)
class ThreadChoice:
    """A thread count, where it came from (one of the ``FROM_*`` names) and the CPUs this process may use."""

    threads: int
    source: str
    cpus: int
    asked: int | None = field(default=None, compare=False)  # a count over the machine's CPUs, cut to them

    def record(self) -> dict[str, object]:
        """The fields a run record carries."""
        return {"threads": self.threads, "threads_from": self.source, "cpus": self.cpus}


def usable_cpus() -> tuple[int, str]:
    """The CPUs this process may use and what limits them to that many.

    ``joblib.cpu_count()`` reads the affinity mask, the cgroup CPU quota (v2 ``cpu.max`` or v1
    ``cpu.cfs_quota_us``, rounded up to whole CPUs) and ``LOKY_MAX_CPU_COUNT``, and gives the smallest. It reads
    the quota at the root of the cgroup file system, which is the container's own cgroup in Docker or Kubernetes,
    but not a sub-group such as a ``systemd-run -p CPUQuota=`` scope on a host.
    """
    import joblib

    cpus = joblib.cpu_count()
    machine = os.cpu_count() or 1
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity masks on this platform (macOS, Windows)
        affinity = machine
    if cpus < min(affinity, machine):
        return cpus, FROM_LOKY if os.environ.get(FROM_LOKY) == str(cpus) else FROM_QUOTA
    if affinity < machine:
        return cpus, FROM_AFFINITY
    return cpus, FROM_CPU_COUNT


# The variables that size a thread pool of a library torch or NumPy load (OpenMP, MKL, OpenBLAS, Accelerate,
# numexpr): infoprompt reads them itself before torch starts (:func:`check_thread_environment`).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "NUMEXPR_MAX_THREADS")


def machine_cpus() -> int:
    """The most threads any count may ask for: the CPUs of the machine (more never run at once)."""
    return max(os.cpu_count() or 1, usable_cpus()[0])


# Notes of check_thread_environment not yet said: importing infoprompt checks the variables before torch can start
# (libgomp reads them once, as it loads), and the first of the CLI's start or use_threads says what was changed.
_pending_notes: list[str] = []


def say_thread_notes() -> None:
    """Print, once, a ``infoprompt: warning:`` line per thread variable changed before torch started."""
    while _pending_notes:
        print(f"infoprompt: warning: {_pending_notes.pop(0)}", file=sys.stderr)


def check_environment_before_torch() -> None:
    """:func:`check_thread_environment` on ``os.environ`` if torch has not started yet; its notes wait for
    :func:`say_thread_notes`."""
    if "torch" not in sys.modules:
        _pending_notes.extend(check_thread_environment())


def check_thread_environment(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Check the thread variables (:data:`THREAD_VARIABLES`) in ``environ`` (default ``os.environ``) before
    torch starts, and fix them there: a value that is not a positive whole number (``abc``, ``0``, ``-2``,
    empty) is removed, which libgomp would otherwise warn about in three lines and then ignore; one over the
    machine's CPUs (:func:`machine_cpus`) is cut to them, where it would otherwise allocate a pool per thread
    and run out of memory. Returns one line per variable changed, saying what and why."""
    environ = os.environ if environ is None else environ
    notes = []
    for name in THREAD_VARIABLES:
        if name not in environ:
            continue
        value = environ[name]
        levels = [level.strip() for level in value.split(",")] if name == FROM_OMP else [value.strip()]
        if not all(level.isdigit() and int(level) > 0 for level in levels):
            del environ[name]
            notes.append(f"{name}={value!r} is not a positive whole number; ignored (the default count applies)")
            continue
        if all(int(level) <= (os.cpu_count() or 1) for level in levels):
            continue  # the common case, answered without joblib (this runs as every command starts)
        cpus = machine_cpus()
        if any(int(level) > cpus for level in levels):
            environ[name] = ",".join(str(min(int(level), cpus)) for level in levels)
            notes.append(f"{name}={value} is more than the {cpus} CPUs of this machine; using {environ[name]}")
    return notes


def omp_threads(environ: Mapping[str, str]) -> int | None:
    """The thread count ``OMP_NUM_THREADS`` asks for (its first level, ``"4,2"`` -> 4); ``None`` when it is unset
    or not a positive integer (torch warns about such a value itself)."""
    first = environ.get(FROM_OMP, "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def choose_threads(threads: int | None = None, *, workers: int = 1, cpus_per_worker: int | None = None,
                   at_most: int | None = None, ceiling: int | None = None,
                   environ: Mapping[str, str] | None = None) -> ThreadChoice:
    """The torch thread count for this process.

    In order: ``threads`` (the user's ``--threads``); ``OMP_NUM_THREADS`` from ``environ`` (default
    ``os.environ``); ``cpus_per_worker`` (a Ray cell's CPU request), at most the CPUs this process may use;
    else those CPUs (:func:`usable_cpus`) divided among ``workers`` processes sharing them, at most ``at_most``
    and at most ``ceiling`` (torch's own count: on a machine with SMT it counts physical cores, which suit
    matrix products better than all logical ones).
    """
    cpus, limit = usable_cpus()
    if threads is not None:
        return _at_most_the_machine(threads, FROM_FLAG, cpus)
    from_environment = omp_threads(os.environ if environ is None else environ)
    if from_environment is not None:
        return _at_most_the_machine(from_environment, FROM_OMP, cpus)
    if cpus_per_worker is not None:
        return ThreadChoice(max(1, min(cpus, cpus_per_worker)), FROM_WORKERS, cpus)
    share = max(1, cpus // max(1, workers))
    if ceiling is not None and ceiling < share:
        share, limit = ceiling, FROM_TORCH
    elif workers > 1:
        limit = FROM_WORKERS
    if at_most is not None and at_most < share:
        return ThreadChoice(at_most, FROM_CAP, cpus)
    return ThreadChoice(share, limit, cpus)


def _at_most_the_machine(threads: int, source: str, cpus: int) -> ThreadChoice:
    most = machine_cpus()
    return ThreadChoice(threads, source, cpus) if threads <= most else ThreadChoice(most, source, cpus, threads)


# torch's count before infoprompt first set one (its own default, or what the calling program chose), and the
# choice infoprompt last applied: torch's count is one per process, so these are too.
_torch_start: int | None = None
_applied: ThreadChoice | None = None


def use_threads(threads: int | None = None, *, workers: int = 1, cpus_per_worker: int | None = None,
                at_most: int | None = None, environ: Mapping[str, str] | None = None) -> ThreadChoice:
    """Set torch's thread counts as :func:`choose_threads` says, before any heavy work, and return the choice.

    Without ``threads``, a program that set torch's count itself keeps it: the default never exceeds the count
    torch had when this was first called, and a count changed since the last call is left as it is. The
    inter-op pool gets the same count where torch still allows it (once per process, before parallel work).
    """
    say_thread_notes()
    import torch

    global _torch_start, _applied
    current = torch.get_num_threads()
    if _torch_start is None:
        _torch_start = current
    if threads is None and _applied is not None and current != _applied.threads:
        choice = ThreadChoice(current, FROM_TORCH, usable_cpus()[0])
    else:
        choice = choose_threads(threads, workers=workers, cpus_per_worker=cpus_per_worker, at_most=at_most,
                                ceiling=_torch_start, environ=environ)
    if choice.asked is not None:
        print(f"infoprompt: warning: {choice.asked} threads ({choice.source}) are more than the {choice.threads} "
              f"CPUs of this machine; using {choice.threads}", file=sys.stderr)
    torch.set_num_threads(choice.threads)
    with contextlib.suppress(RuntimeError):  # set once already, or inter-op work has started: the pool stays
        torch.set_num_interop_threads(choice.threads)
    _applied = choice
    return choice


def thread_record() -> dict[str, object]:
    """``threads``, ``threads_from`` and ``cpus`` of this process now, for a run record."""
    import torch

    current = torch.get_num_threads()
    if _applied is not None and _applied.threads == current:
        return _applied.record()
    return ThreadChoice(current, FROM_TORCH, usable_cpus()[0]).record()
