"""Runners the Ray-backend tests send to Ray workers (importable there: the tests put this folder on PYTHONPATH)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from infoprompt.pipeline import run_training
from infoprompt.tracking import cell_run_name


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # what a preempted node or the OOM killer does to a worker


@dataclass(frozen=True)
class KillOnce:
    """Trains each cell for real and notes it in ``ledger`` once it finished; the first try of the cell
    ``victim`` (method, seed) kills its own worker process instead."""

    victim: tuple[str, int]
    marker: str
    ledger: str

    def __call__(self, spec, out, *, overwrite, backbone):
        if (spec.method, spec.seed) == self.victim and not Path(self.marker).exists():
            Path(self.marker).write_text(str(os.getpid()))
            _die()
        record = run_training(spec, out, overwrite=overwrite, backbone=backbone)
        with open(self.ledger, "a", encoding="utf-8") as handle:
            handle.write(cell_run_name(spec) + "\n")
        return record


@dataclass(frozen=True)
class AlwaysDie:
    """Kills its worker on every try, counting the tries in ``tries``."""

    tries: str

    def __call__(self, spec, out, *, overwrite, backbone):
        with open(self.tries, "a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n")
        _die()
