"""The sweep's Ray backend: each unfinished cell runs as one Ray task, and its record lands in the results store."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from infoprompt.errors import UserError
from infoprompt.experiments.grid import Cell
from infoprompt.experiments.store import (
    is_finished,
    read_record,
    record_path,
    release_claim,
    try_claim,
    write_record,
)
from infoprompt.experiments.sweep import (
    BackboneCache,
    Runner,
    SweepSummary,
    _run_cell,
    cell_status,
    failure_record,
)
from infoprompt.pipeline import run_training
from infoprompt.progress import bar_disabled
from infoprompt.threads import use_threads
from infoprompt.validation import nonnegative_int

LOCAL_ADDRESS = "127.0.0.1"
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RayOptions:
    """How the cells go to Ray.

    Attributes:
        address: ``None`` starts a Ray instance on this machine for the sweep (on loopback, shut down at the
            end); ``auto`` joins the cluster this machine belongs to (``ray start``); ``HOST:PORT`` or
            ``ray://HOST:PORT`` joins that cluster's head. An already connected driver (``ray.init`` in the
            calling program) is used as it is.
        cpus_per_cell / gpus_per_cell: each cell's resource request; a cell runs with that many torch
            threads (at least one, at most the CPUs its worker may use; ``--threads`` overrides) and sees the
            GPUs Ray gives it.
        max_retries: how often a cell whose worker died (a preempted node, a killed process) is started again
            before it is recorded as failed.
    """

    address: str | None = None
    cpus_per_cell: float = 1.0
    gpus_per_cell: float = 0.0
    max_retries: int = 3

    def __post_init__(self) -> None:
        if not (self.cpus_per_cell > 0):
            raise UserError(f"--cpus-per-cell must be > 0, got {self.cpus_per_cell}")
        if not (self.gpus_per_cell >= 0):
            raise UserError(f"--gpus-per-cell must be >= 0, got {self.gpus_per_cell}")
        nonnegative_int(self.max_retries, "max_retries")


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError("--backend ray needs Ray: pip install 'infoprompt[ray]'") from None
    return ray


# One backbone cache per Ray worker process: a worker that runs several cells loads each backbone once.
_WORKER_BACKBONES: BackboneCache | None = None


def run_cell_task(cell: Cell, results_dir: str, runner: Runner, save_runs: bool, threads: int | None,
                  cpus_per_cell: float, cwd: str) -> dict[str, Any]:
    """The body of one Ray task: the local backend's per-cell code, in the driver's working directory (so
    that relative data and backbone paths mean what they mean there), writing the record to the store."""
    global _WORKER_BACKBONES
    if os.path.isdir(cwd):
        os.chdir(cwd)
    # Ray sets OMP_NUM_THREADS in its workers from the same CPU request, so the request is read directly and
    # the variable is not taken for a user's.
    use_threads(threads, cpus_per_worker=max(1, int(cpus_per_cell)), environ={})
    if _WORKER_BACKBONES is None:
        _WORKER_BACKBONES = BackboneCache()
    summary = SweepSummary()
    message, seconds = _run_cell(cell, Path(results_dir), runner, _WORKER_BACKBONES, save_runs, True, summary)
    return {"message": message, "seconds": seconds, "failed": summary.failed,
            "record": read_record(record_path(results_dir, cell))}


def connect(ray: Any, options: RayOptions, verbose: bool = False) -> bool:
    """Connect to Ray as ``options.address`` says; returns whether this call connected (and so must
    disconnect, which stops a Ray instance it started). Ray's own log lines (its C++ core's, its Python
    logger's below errors) stay out of the terminal unless ``verbose``; the cells' own output is shown."""
    if options.address not in (None, "auto"):
        _check_reachable(options.address)
    if ray.is_initialized():
        return False
    if not verbose:
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")  # the C++ core's stderr lines
    quiet = {"include_dashboard": False, "logging_level": logging.INFO if verbose else logging.ERROR,
             "log_to_driver": True}
    try:
        if options.address is None:
            ray.init(_node_ip_address=LOCAL_ADDRESS, **quiet)
        else:
            ray.init(address=options.address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as error:
        where = options.address or "a local instance"
        raise UserError(f"--address {where}: cannot connect to Ray ({str(error).strip().splitlines()[0]})") from None
    return True


def _check_reachable(address: str) -> None:
    """Fail at once on a head that does not answer, or on a service there that is no Ray head: Ray itself
    retries a dead address for minutes, and prints its C++ log lines while it tries another service."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--address {address}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S) as connection:
            speaks_grpc = _answers_http2(connection)
    except OSError as error:
        raise UserError(f"--address {address}: no Ray head answers there ({error.strerror or error})") from None
    if not speaks_grpc:
        raise UserError(f"--address {address}: the service there is no Ray head (it does not answer in gRPC's "
                        f"HTTP/2, as Ray's GCS and client server do)")


# What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4  # the frame type an HTTP/2 server must answer the preface with


def _answers_http2(connection: socket.socket) -> bool:
    """Whether the server on ``connection`` answers an HTTP/2 preface with a SETTINGS frame (its 9-byte header:
    3 bytes of length, then the type): what every gRPC server does, and no HTTP/1 or other service."""
    connection.sendall(HTTP2_PREFACE)
    header = b""
    while len(header) < 9:
        try:
            chunk = connection.recv(9 - len(header))
        except TimeoutError:
            return False
        if not chunk:
            return False
        header += chunk
    return header[3] == HTTP2_SETTINGS


def fits_check(nodes: Sequence[dict[str, Any]], options: RayOptions, *, can_grow: bool) -> str | None:
    """Whether one cell's request fits on some live node: ``None`` if it does; if not, an error for a Ray
    instance that cannot grow (tasks would wait for ever), else a warning (an autoscaler may add a node)."""
    for flag, resource, wanted in (("--cpus-per-cell", "CPU", options.cpus_per_cell),
                                   ("--gpus-per-cell", "GPU", options.gpus_per_cell)):
        largest = max((node.get("Resources", {}).get(resource, 0.0) for node in nodes if node.get("Alive")), default=0.0)
        if wanted > largest:
            message = f"{flag} {wanted:g}: the largest Ray node has {largest:g} {resource}(s)"
            if not can_grow:
                raise UserError(message)
            return f"warning: {message}; the cells wait until the cluster has a node that big"
    return None


def _claim_free(results_dir: Path, cells: Sequence[Cell]) -> tuple[list[Cell], int]:
    """Claim the cells no other worker holds or has finished meanwhile (the driver holds the claims while its
    tasks run, so local sweeps on the same directory leave those cells alone)."""
    claimed, elsewhere = [], 0
    for cell in cells:
        if not try_claim(results_dir, cell):
            elsewhere += 1
        elif is_finished(read_record(record_path(results_dir, cell))):
            release_claim(results_dir, cell)
            elsewhere += 1
        else:
            claimed.append(cell)
    return claimed, elsewhere


def run_sweep_ray(
    cells: Sequence[Cell],
    results_dir: str | Path,
    *,
    options: RayOptions,
    save_runs: bool = False,
    runner: Runner = run_training,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
    threads: int | None = None,
    verbose: bool = False,
) -> SweepSummary:
    """Run every unfinished cell of ``cells`` as a Ray task and store one record per cell, as
    :func:`~infoprompt.experiments.sweep.run_sweep` does: finished cells are skipped, a cell that raises is
    recorded as failed, a cell whose worker died is retried ``options.max_retries`` times and then recorded
    as failed, and a backbone that cannot be loaded stops the sweep with the loader's error. Each cell runs
    with ``threads`` torch threads, by default with as many as it asks CPUs of Ray.

    Workers write the records and ``--save-runs`` directories into ``results_dir``, so on a cluster it must
    be a directory every node sees at the same path; the driver writes each record again where it differs
    from what it reads there.
    """
    ray = _import_ray()
    results_dir = Path(results_dir).resolve()
    echo = echo or tqdm.write
    started = time.perf_counter()
    status = cell_status(results_dir, cells)
    todo = [cell for cell in cells if status[cell.id] != "done"]
    summary = SweepSummary(cells=len(cells), skipped=len(cells) - len(todo))
    if not todo:  # nothing to run: no Ray to start
        summary.seconds = time.perf_counter() - started
        return summary
    connected = connect(ray, options, verbose)  # before anything is written: an unreachable cluster leaves no trace
    try:
        warning = fits_check(ray.nodes(), options, can_grow=options.address is not None)
        if warning:
            echo(warning)
        try:
            results_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(f"cannot create the results directory {results_dir}: {error.strerror}") from None
        claimed, summary.claimed_elsewhere = _claim_free(results_dir, todo)
        try:
            _run_tasks(ray, claimed, results_dir, options, threads, save_runs, runner, progress, echo, summary)
        finally:
            for cell in claimed:
                release_claim(results_dir, cell)
    finally:
        if connected:
            ray.shutdown()
    summary.seconds = time.perf_counter() - started
    return summary


def _run_tasks(ray: Any, cells: list[Cell], results_dir: Path, options: RayOptions, threads: int | None,
               save_runs: bool, runner: Runner, progress: bool, echo: Callable[[str], None],
               summary: SweepSummary) -> None:
    """Submit one task per cell and record each as it ends; on an error that stops the sweep, or Ctrl-C,
    the tasks still queued or running are cancelled."""
    task = ray.remote(run_cell_task).options(
        num_cpus=options.cpus_per_cell, num_gpus=options.gpus_per_cell, max_retries=options.max_retries,
        retry_exceptions=False,
    )
    cwd = os.getcwd()
    submitted = {task.remote(cell, str(results_dir), runner, save_runs, threads, options.cpus_per_cell, cwd):
                 (cell, time.perf_counter()) for cell in cells}
    bar = tqdm(total=len(cells), desc="sweep (ray)", unit="cell", disable=bar_disabled(progress))
    try:
        for number in range(1, len(cells) + 1):
            [ref], _ = ray.wait(list(submitted), num_returns=1)
            cell, submitted_at = submitted.pop(ref)
            message, seconds = _collect(ray, ref, cell, results_dir, submitted_at, summary)
            release_claim(results_dir, cell)
            bar.update(1)
            echo(f"[{number}/{len(cells)}] {cell.id}: {message} ({seconds:.1f} s)")
    finally:
        for ref in submitted:
            ray.cancel(ref, force=True)
        bar.close()


def _collect(ray: Any, ref: Any, cell: Cell, results_dir: Path, submitted_at: float,
             summary: SweepSummary) -> tuple[str, float]:
    """Take one finished task's outcome into the summary and the store; returns the log message and seconds."""
    try:
        outcome = ray.get(ref)
    except ray.exceptions.RayTaskError as error:
        # The cell's own failures are recorded inside the task; what escapes it is the machine's (a backbone
        # that cannot be loaded), which stops the sweep as it does locally.
        cause = getattr(error, "cause", None)
        raise (cause if isinstance(cause, BaseException) else error) from None
    except ray.exceptions.RayError as error:  # the worker died on every try: recorded like a failed cell
        record = failure_record(cell, error, time.perf_counter() - submitted_at)
        write_record(results_dir, cell, record)
        summary.failed.append((cell.id, record["error"]))
        return f"FAILED {record['error']}", time.perf_counter() - submitted_at
    record = outcome["record"]
    if record is not None and read_record(record_path(results_dir, cell)) != record:
        write_record(results_dir, cell, record)  # the worker's disk is not this one's
    summary.failed.extend(tuple(item) for item in outcome["failed"])
    if not outcome["failed"]:
        summary.finished += 1
    return outcome["message"], outcome["seconds"]
