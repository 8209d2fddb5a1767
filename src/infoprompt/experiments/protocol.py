"""How full-training-split cells were trained against the protocol of the paper's Tables 1–2 (RoBERTa-large, 30
epochs of batch 8, five seeds): what each record says (training length, step budget, device), and the lines that
head the full-data tables and the full-vs-few test."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PAPER_BACKBONE = "RoBERTa-large"
PAPER_EPOCHS = 30
PAPER_BATCH_SIZE = 8
PAPER_SEEDS = 5
UNRECORDED = "not recorded"
# What a training line says of the methods whose count of steps is not epochs × batches (a probe's solver
# iterations, SetFit's pairs, held-out selection).
OWN_SCHEDULE = "own schedule, not counted in epochs"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Training:
    """How long one cell trained: ``epochs`` passes in batches of ``batch_size`` over its ``n_train`` examples,
    unless ``max_steps`` optimisation steps came first; ``steps`` is the count its record gives (``None``:
    unknown)."""

    epochs: int | None = None
    batch_size: int | None = None
    max_steps: int | None = None
    n_train: int | None = None
    steps: int | None = None

    @classmethod
    def of(cls, record: dict[str, Any]) -> Training:
        """From the record's resolved training config (``spec.training``), else the grid's settings for it."""
        resolved = _mapping(_mapping(record.get("spec")).get("training"))
        given = _mapping(_mapping(record.get("settings")).get("training"))

        def setting(name: str) -> int | None:
            return _count(resolved[name]) if name in resolved else _count(given.get(name))

        return cls(epochs=setting("epochs"), batch_size=setting("batch_size"), max_steps=setting("max_steps"),
                   n_train=_count(record.get("n_train")), steps=_count(record.get("steps")))

    @property
    def epoch_steps(self) -> int | None:
        """Steps of all ``epochs`` (the last batch of an epoch may be short)."""
        if self.epochs is None or self.batch_size is None or self.n_train is None:
            return None
        return -(-self.n_train // self.batch_size) * self.epochs

    @property
    def capped(self) -> bool:
        """Whether the step budget stopped training before its epochs (and the record ran exactly the budget)."""
        full = self.epoch_steps
        return (self.max_steps is not None and full is not None and self.max_steps < full
                and self.steps in (None, self.max_steps))

    @property
    def epochs_run(self) -> float | None:
        """Passes over the training examples: the budget's share of them where it stopped training."""
        if self.capped:
            return self.max_steps * self.batch_size / self.n_train  # type: ignore[operator]
        return None if self.epochs is None else float(self.epochs)

    def schedule(self) -> tuple[Any, ...]:
        """What a table line groups by: ``("budget", max_steps, batch)``, ``("epochs", epochs, batch)``,
        ``("own",)`` (steps that are not epochs × batches) or ``("unknown",)``."""
        if self.capped:
            return ("budget", self.max_steps, self.batch_size)
        full = self.epoch_steps
        if full is None:
            return ("unknown",)
        if self.steps is not None and self.steps != full:
            return ("own",)
        return ("epochs", self.epochs, self.batch_size)

    def phrase(self) -> str:
        """A few words: ``1,400 steps of 8 (3.05 epochs)``, ``30 epochs of 8``."""
        kind, *values = self.schedule()
        if kind == "budget":
            return f"{values[0]:,} steps of {values[1]} ({self.epochs_run:.2f} epochs)"
        if kind == "epochs":
            return f"{values[0]} epochs of {values[1]}"
        return OWN_SCHEDULE if kind == "own" else UNRECORDED


@dataclass(frozen=True)
class Run:
    """What a record says of how its cell ran: its training length and device."""

    training: Training
    device: str

    @classmethod
    def of(cls, record: dict[str, Any]) -> Run:
        return cls(Training.of(record), device_of(record))


def device_of(record: dict[str, Any]) -> str:
    """``cpu (<CPU model>)``, the GPU's name, or :data:`UNRECORDED` (records from before the field)."""
    environment = _mapping(record.get("environment"))
    device = environment.get("device")
    if not isinstance(device, str) or not device:
        return UNRECORDED
    cpu = environment.get("cpu")
    return f"cpu ({cpu})" if device == "cpu" and isinstance(cpu, str) and cpu else device


def trainings_phrase(trainings: Sequence[Training]) -> str:
    """The distinct schedules of some cells' runs in a few words; a budget's epochs as a range over tasks."""
    groups: dict[tuple[Any, ...], list[Training]] = {}
    for training in trainings:
        groups.setdefault(training.schedule(), []).append(training)
    phrases = []
    for (kind, *values), members in groups.items():
        if kind != "budget":
            phrases.append(members[0].phrase())
            continue
        shares = sorted({round(t.epochs_run, 2) for t in members if t.epochs_run is not None})
        span = f"{shares[0]:.2f}" if len(shares) == 1 else f"{shares[0]:.2f}–{shares[-1]:.2f}"
        phrases.append(f"{values[0]:,} steps of {values[1]} ({span} epochs)")
    return "; ".join(phrases) if phrases else UNRECORDED


@dataclass(frozen=True)
class CellRuns:
    """One cell of a full-data table: its row, its column (task), and the runs of its seeds."""

    method: str
    task: str
    seeds: tuple[int, ...]
    runs: tuple[Run, ...]


def _names(items: Sequence[str]) -> str:
    return ", ".join(dict.fromkeys(items))


def _training_line(cells: Sequence[CellRuns], tasks: Sequence[str]) -> str:
    groups: dict[tuple[Any, ...], list[tuple[str, str, Training]]] = {}
    for cell in cells:
        for run in cell.runs:
            groups.setdefault(run.training.schedule(), []).append((cell.method, cell.task, run.training))
    parts = []
    for (kind, *values), members in groups.items():
        methods = _names([method for method, _, _ in members])
        covered = [task for task in tasks if any(t == task for _, t, _ in members)]
        where = "" if len(covered) == len(tasks) else f" on {', '.join(covered)}"
        if kind == "budget":
            shares = {}
            for _, task, training in members:
                shares.setdefault(task, f"{training.epochs_run:.2f} epochs of {task} ({training.n_train:,} "
                                        f"training examples)")
            parts.append(f"{methods}: a budget of {values[0]:,} steps of batch {values[1]} instead of "
                         f"{PAPER_EPOCHS} epochs, i.e. {', '.join(shares[task] for task in covered)}")
        elif kind == "epochs":
            same = (values[0], values[1]) == (PAPER_EPOCHS, PAPER_BATCH_SIZE)
            parts.append(f"{methods}: {values[0]} epochs of batch {values[1]}{where}" + (", as the paper" if same else ""))
        else:
            parts.append(f"{methods}: {OWN_SCHEDULE if kind == 'own' else UNRECORDED}{where}")
    return "; ".join(parts)


def _seeds_line(cells: Sequence[CellRuns]) -> str:
    counts = sorted({len(cell.seeds) for cell in cells})
    text = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    seed_sets = {cell.seeds for cell in cells}
    if len(seed_sets) == 1:
        seeds = next(iter(seed_sets))
        text += f" per cell ({'seed' if len(seeds) == 1 else 'seeds'} {', '.join(map(str, seeds))})"
    else:
        text += " per cell"
    return f"{text}, not {PAPER_SEEDS}"


def paper_differences(backbone: str, cells: Sequence[CellRuns], tasks: Sequence[str]) -> list[str]:
    """Markdown lines naming what the full-split cells of one table did otherwise than the paper's Tables 1–2:
    the backbone, the training length (a step budget, with the share of an epoch it is for each task's
    training split), the seeds per cell and the device. ``cells`` come in row order, ``tasks`` in column order."""
    devices = sorted({run.device for cell in cells for run in cell.runs})
    return [
        f"Set-up against the paper's Tables 1–2 ({PAPER_BACKBONE}, {PAPER_EPOCHS} epochs of batch "
        f"{PAPER_BATCH_SIZE}, mean over {PAPER_SEEDS} seeds):",
        "",
        f"- backbone: {backbone}",
        f"- training: {_training_line(cells, tasks)}",
        f"- seeds: {_seeds_line(cells)}",
        f"- device: {'; '.join(devices) if devices else UNRECORDED}",
    ]
