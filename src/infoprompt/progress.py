"""Progress, the same for the training of every kind: a tqdm bar with ETA when stderr is a terminal, plain periodic
lines when it is a file, a CI log or a pipe (where tqdm would write a carriage-return update per refresh), nothing
when progress is off. Progress goes to stderr only: stdout carries results."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Protocol

# File mode writes a line at each tenth of the steps, and at least once a minute in between, so that a slow run
# still shows it is alive and a fast one writes about ten lines.
LINES_PER_RUN = 10
HEARTBEAT_S = 60.0


def bar_disabled(enabled: bool) -> bool | None:
    """tqdm's ``disable`` for a bar the caller wants when ``enabled``: ``None`` lets tqdm switch itself off
    where stderr is not a terminal, so a run written to a file does not fill it with carriage-return updates."""
    return None if enabled else True


class StepProgress(Protocol):
    """What a training loop calls: the subset of tqdm's interface that :class:`ProgressLines` shares."""

    def update(self, n: int = 1) -> object: ...

    def set_postfix(self, ordered_dict: object = None, refresh: bool = True, **values: object) -> None: ...

    def close(self) -> None: ...


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` redraws a bar in place: a terminal, or a Jupyter kernel's stream (tqdm.auto draws a widget
    there; its stream says it is no terminal)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) or type(stream).__module__.startswith("ipykernel")


@contextlib.contextmanager
def library_bars(shown: bool) -> Iterator[None]:
    """transformers' and the Hub's own bars ("Loading weights", downloads) on or off for the duration of the
    block, and as they were after it: a library call leaves its caller's settings alone."""
    if shown:
        yield
        return
    import huggingface_hub.utils
    from transformers.utils import logging

    transformers_on, hub_on = logging.is_progress_bar_enabled(), not huggingface_hub.utils.are_progress_bars_disabled()
    logging.disable_progress_bar()
    huggingface_hub.utils.disable_progress_bars()
    try:
        yield
    finally:
        if transformers_on:
            logging.enable_progress_bar()
        if hub_on:
            huggingface_hub.utils.enable_progress_bars()


def step_progress(total: int, desc: str, enabled: bool, stream: IO[str] | None = None) -> StepProgress:
    """The progress of ``total`` training steps named ``desc`` (``"train infoprompt"``): a bar on a terminal,
    :class:`ProgressLines` elsewhere, a disabled bar when not ``enabled``. ``stream`` defaults to the
    ``sys.stderr`` of the moment, so a redirected or captured stderr is the one judged."""
    from tqdm.auto import tqdm  # here, so that the command line's start does not load it

    stream = stream if stream is not None else sys.stderr
    if enabled and not is_terminal(stream):
        return ProgressLines(total, desc, stream)
    return tqdm(total=total, desc=desc, unit="step", file=stream, disable=not enabled, dynamic_ncols=True)


def duration(seconds: float) -> str:
    """``"45s"``, ``"3m30s"``, ``"1h05m"``."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class ProgressLines:
    """Training progress as plain lines for a file or a log: one at each tenth of ``total`` steps, one at least
    every ``heartbeat_s`` seconds in between, and one on :meth:`close` for the last step when none said it
    (a run stopped early)::

        train infoprompt: step 40/160 (25%), 1m10s elapsed, ETA 3m30s, loss=0.512
        train infoprompt: step 160/160 (100%), done in 4m40s, loss=0.498

    It reads only the clock: it draws no random number, so a run's numbers do not depend on it.
    """

    def __init__(self, total: int, desc: str, stream: IO[str], heartbeat_s: float = HEARTBEAT_S,
                 clock: Callable[[], float] = time.monotonic):
        self.total, self.desc, self.stream = max(0, total), desc, stream
        self.heartbeat_s, self.clock = heartbeat_s, clock
        self.started = self.last_line = clock()
        self.n = self.written = 0
        self.postfix = ""

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        tenth = self.n * LINES_PER_RUN // self.total if self.total else 0
        if tenth > self.written * LINES_PER_RUN // max(1, self.total) or now - self.last_line >= self.heartbeat_s:
            self.write(now)

    def set_postfix(self, ordered_dict: object = None, refresh: bool = True, **values: object) -> None:
        self.postfix = ", ".join(f"{key}={value}" for key, value in {**dict(ordered_dict or {}), **values}.items())

    def close(self) -> None:
        if self.n != self.written:
            self.write(self.clock(), done=True)

    def write(self, now: float, done: bool = False) -> None:
        elapsed = now - self.started
        share = f" ({100 * self.n // self.total}%)" if self.total else ""
        if done or self.n >= self.total:
            timing = f"done in {duration(elapsed)}"
        else:
            eta = duration(elapsed / self.n * (self.total - self.n)) if self.n else "?"
            timing = f"{duration(elapsed)} elapsed, ETA {eta}"
        postfix = f", {self.postfix}" if self.postfix else ""
        self.stream.write(f"{self.desc}: step {self.n}/{self.total}{share}, {timing}{postfix}\n")
        self.stream.flush()
        self.written, self.last_line = self.n, now

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
