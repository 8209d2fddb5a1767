"""Micro-batching: concurrent requests of one lane (an adapter, a group of adapters that share one encoder
pass, or the LoRA adapters of one backbone) are gathered for up to ``max_wait`` seconds or ``max_batch`` inputs and run as one batch off the event loop."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field

from infoprompt.errors import UserError
from infoprompt.serving import adapters
from infoprompt.serving.registry import LoadedAdapter

log = logging.getLogger("infoprompt.serve")


class Busy(Exception):
    """A lane's queue is full (HTTP 503): the server is behind and the client should retry later."""


@dataclass
class Job:
    """One request's inputs for one adapter; ``future`` receives its records or its error."""

    adapter: LoadedAdapter
    rows: list[dict[str, str]]
    sources: list[str]
    future: asyncio.Future = field(repr=False)


@dataclass(frozen=True)
class BatchReport:
    """What a finished batch tells the metrics."""

    lane_kind: str
    jobs: int
    inputs: int
    encoded: int
    seconds: float


Outcome = list[dict[str, object]] | UserError


def run_jobs(jobs: Sequence[Job]) -> tuple[list[Outcome], int]:
    """Each job's records (or its :class:`UserError`), computed in as few encoder passes as the lane allows,
    and the number of inputs the encoder read.

    A batch whose inputs fail as a whole (one input too long for an adapter that does not truncate) is run again
    job by job, so that only the request that sent the bad input gets the error.
    """
    try:
        return _run_together(jobs)
    except UserError as error:
        if len(jobs) == 1:
            return [error], 0
    outcomes = [_run_alone(job) for job in jobs]
    return [outcome for outcome, _ in outcomes], sum(encoded for _, encoded in outcomes)


def _run_alone(job: Job) -> tuple[Outcome, int]:
    try:
        results, encoded = _run_together([job])
        return results[0], encoded
    except UserError as error:
        return error, 0


def _run_together(jobs: Sequence[Job]) -> tuple[list[list[dict[str, object]]], int]:
    if jobs[0].adapter.shares_features:
        # Equal inputs sent to different adapters of the group are encoded once.
        unique: dict[tuple[tuple[str, str], ...], int] = {}
        rows: list[dict[str, str]] = []
        sources: list[str] = []
        for job in jobs:
            for row, source in zip(job.rows, job.sources, strict=True):
                key = tuple(sorted(row.items()))
                if key not in unique:
                    unique[key] = len(rows)
                    rows.append(row)
                    sources.append(source)
        features = adapters.plain_features(jobs[0].adapter.model, rows, sources)
        results = []
        for job in jobs:
            picked = [unique[tuple(sorted(row.items()))] for row in job.rows]
            results.append(adapters.head_records(job.adapter.model, features[picked]))
        return results, len(rows)
    if jobs[0].adapter.mixes_lora:  # LoRA adapters of one backbone: each row through its own adapter
        return adapters.predict_mixed([(job.adapter.model, job.rows, job.sources) for job in jobs])
    model = jobs[0].adapter.model  # a per-adapter lane: every job is for this model
    rows = [row for job in jobs for row in job.rows]
    sources = [source for job in jobs for source in job.sources]
    records = adapters.predict(model, rows, sources)
    results, start = [], 0
    for job in jobs:
        results.append(records[start : start + len(job.rows)])
        start += len(job.rows)
    return results, len(rows)


class Lane:
    """The queue of one lane and the task that drains it, one batch at a time."""

    def __init__(self, key: Hashable, batcher: Batcher):
        self.key = key
        self.batcher = batcher
        self.pending: collections.deque[Job | None] = collections.deque()  # None: stop after what came before
        self.arrived = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._drain(), name=f"infoprompt-lane-{key!r}")

    def put(self, job: Job | None) -> None:
        self.pending.append(job)
        self.arrived.set()

    async def _next(self, deadline: float | None) -> Job | None | bool:
        """The next queued item; ``False`` when the deadline passed first (``None`` deadline: wait forever)."""
        loop = asyncio.get_running_loop()
        while not self.pending:
            self.arrived.clear()
            if deadline is None:
                await self.arrived.wait()
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self.arrived.wait(), remaining)
            except TimeoutError:
                return False
        return self.pending.popleft()

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        held: Job | None = None
        while True:
            first = held or await self._next(None)
            held = None
            if first is None:
                return
            jobs, size = [first], len(first.rows)
            deadline = loop.time() + self.batcher.max_wait
            stop = False
            while size < self.batcher.max_batch:
                item = await self._next(deadline)
                if item is False:
                    break
                if item is None:
                    stop = True
                    break
                if size + len(item.rows) > self.batcher.max_batch:
                    held = item  # it opens the next batch; a batch never splits a request
                    break
                jobs.append(item)
                size += len(item.rows)
            await self._execute([job for job in jobs if not job.future.done()])
            if stop:
                if held is not None:
                    await self._execute([held])
                return

    async def _execute(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        try:
            results, encoded = await loop.run_in_executor(self.batcher.executor, run_jobs, jobs)
        except Exception as error:  # a fault of the server, not of the input: every waiting request learns it
            log.exception("a batch of %d request(s) failed", len(jobs))
            results, encoded = [error] * len(jobs), 0
        for job, result in zip(jobs, results, strict=True):
            if job.future.done():  # the client went away
                continue
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                job.future.set_result(result)
        first = jobs[0].adapter
        kind = "shared" if first.shares_features else "lora" if first.mixes_lora else "adapter"
        self.batcher.report(BatchReport(kind, len(jobs), sum(len(j.rows) for j in jobs), encoded,
                                        time.perf_counter() - started))


class Batcher:
    """The lanes of a server: created on a lane's first request, retired when its last adapter goes."""

    def __init__(self, executor: Executor, max_batch: int, max_wait: float, max_queue: int,
                 report: Callable[[BatchReport], None] = lambda report: None):
        self.executor = executor
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.report = report
        self.lanes: dict[Hashable, Lane] = {}

    async def submit(self, adapter: LoadedAdapter, rows: list[dict[str, str]], sources: list[str]) -> list[dict[str, object]]:
        lane = self.lanes.get(adapter.lane)
        if lane is None:
            lane = self.lanes[adapter.lane] = Lane(adapter.lane, self)
        if len(lane.pending) >= self.max_queue:
            raise Busy(f"{len(lane.pending)} requests are waiting for adapter {adapter.name!r}; retry later")
        job = Job(adapter, rows, sources, asyncio.get_running_loop().create_future())
        lane.put(job)
        return await job.future

    def retire(self, lane_key: Hashable) -> None:
        """Close a lane once what is queued on it is done; a later request opens a new one."""
        lane = self.lanes.pop(lane_key, None)
        if lane is not None:
            lane.put(None)

    async def close(self) -> None:
        """Finish every queued request, then stop the lanes."""
        lanes = list(self.lanes.values())
        self.lanes.clear()
        for lane in lanes:
            lane.put(None)
        await asyncio.gather(*(lane.task for lane in lanes), return_exceptions=True)
