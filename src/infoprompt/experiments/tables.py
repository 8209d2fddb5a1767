"""Paper-style tables from result records: mean ± std over seeds per method × (task, n_p or shots)."""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from infoprompt.experiments.paired import SampleSummary
from infoprompt.experiments.protocol import CellRuns, Run, paper_differences
from infoprompt.experiments.store import STATUS_OK
from infoprompt.kinds.registry import table_order
from infoprompt.tasks import TASKS
from infoprompt.tasks.entity import ENTITY_TASKS
from infoprompt.tasks.glue import GLUE_TASKS
from infoprompt.tasks.relation import RELATION_TASKS

# File-name stems of the table layouts; build_report writes each as .csv and .md, and removes stale ones.
NP_TABLE = "table-np-shots="
SHOTS_TABLE = "table-shots-np="
FULL_TABLE = "table-full-"
TABLE_STEMS = (NP_TABLE, SHOTS_TABLE, FULL_TABLE)
# Task families of the full-data tables: (file-name part, title, tasks, the paper's table it follows). Tasks of
# no family (registered or user tasks) share one more table.
TASK_FAMILIES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("glue", "GLUE", tuple(task.name for task in GLUE_TASKS), "paper Table 1 layout"),
    ("relations", "relation classification and entity typing",
     tuple(task.name for task in (*RELATION_TASKS, *ENTITY_TASKS)), "paper Table 2 layout"),
)
OTHER_FAMILY = ("other", "other tasks", "one column per task")


@dataclass(frozen=True)
class Stat(SampleSummary):
    """One cell over its seeds: the values (mean, sample std and count from :class:`SampleSummary`) and seeds,
    with the mean size on disk of the saved adapters and the mean training seconds of the cell's records
    (``None`` where no record has them), and how each seed's run was trained and where (in seed order);
    ``top_share``: the largest share of its evaluation that one class took on any seed, beside the evaluation
    split's ``majority_share`` (records that say, ``prediction_shares``; ``None`` otherwise)."""

    values: tuple[float, ...]
    seeds: tuple[int, ...]
    adapter_bytes: float | None = None
    train_s: float | None = None
    runs: tuple[Run, ...] = ()
    top_share: float | None = None
    majority_share: float | None = None


@dataclass
class Table:
    """One table: ``rows[method][i]`` is the stat under ``columns[i]`` (``None``: not run); ``header``: Markdown
    lines shown between the title and the table (what the cells did otherwise than the paper)."""

    name: str
    title: str
    columns: list[str]
    rows: dict[str, list[Stat | None]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    header: list[str] = field(default_factory=list)

    def average(self, method: str) -> float | None:
        """Mean of the row's column means, as the paper's Average column; only for complete rows."""
        stats = self.rows[method]
        if not stats or any(s is None for s in stats):
            return None
        return statistics.fmean(s.mean for s in stats)

    def best(self) -> tuple[list[set[str]], set[str]]:
        """Methods with the highest mean per column (ties share it) and with the highest average."""
        per_column = []
        for i in range(len(self.columns)):
            means = {m: round(s[i].mean, 10) for m, s in self.rows.items() if s[i] is not None}
            top = max(means.values(), default=None)
            per_column.append({m for m, v in means.items() if v == top})
        averages = {m: round(a, 10) for m in self.rows if (a := self.average(m)) is not None}
        top = max(averages.values(), default=None)
        return per_column, {m for m, v in averages.items() if v == top}

    def adapter_sizes(self, method: str) -> list[float]:
        """The mean adapter size of each of the row's cells that has one."""
        return [s.adapter_bytes for s in self.rows[method] if s is not None and s.adapter_bytes is not None]

    def mean_train_s(self, method: str) -> float | None:
        """Mean over the row's cells of their mean training seconds (one cell's cost, not the row's total)."""
        seconds = [s.train_s for s in self.rows[method] if s is not None and s.train_s is not None]
        return statistics.fmean(seconds) if seconds else None


def _prune(table: Table) -> Table:
    """Drop the columns no method has a result for (a grid need not cover every task × shots × n_p)."""
    keep = [i for i in range(len(table.columns)) if any(row[i] is not None for row in table.rows.values())]
    table.columns = [table.columns[i] for i in keep]
    table.rows = {m: [row[i] for i in keep] for m, row in table.rows.items()}
    return table


def order_names(names: set[str], preferred: Sequence[str]) -> list[str]:
    """``preferred`` order first; a variant ``name[k=v]`` right after its base ``name``; the rest sorted."""
    def key(name: str) -> tuple[int, str]:
        base = name.split("[", 1)[0]
        return (preferred.index(base) if base in preferred else len(preferred), name)

    return sorted(names, key=key)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def train_seconds(record: dict[str, Any]) -> float | None:
    """What a record's cell spent on fitting: ``timings.total_s`` less its evaluations (``final_eval_s``,
    ``periodic_eval_s``), i.e. encoding and feature caching, held-out selection and training; ``timings.train_s``
    for a record without ``total_s``."""
    timings = record.get("timings")
    if not isinstance(timings, dict):
        return None
    if _number(timings.get("total_s")):
        evaluations = sum(float(timings[name]) for name in ("final_eval_s", "periodic_eval_s")
                          if _number(timings.get(name)))
        return float(timings["total_s"]) - evaluations
    return float(timings["train_s"]) if _number(timings.get("train_s")) else None


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def collect(records: Sequence[dict[str, Any]], metric: str | None = None) -> dict[tuple, Stat]:
    """Group finished records by (backbone, method, task, shots, n_prompts) into stats of the metric.

    ``metric=None`` takes each record's primary metric; records lacking the metric are skipped.
    """
    values: dict[tuple, list[tuple[int, float, Run]]] = defaultdict(list)
    sizes: dict[tuple, list[float]] = defaultdict(list)
    seconds: dict[tuple, list[float]] = defaultdict(list)
    shares: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for record in records:
        if record.get("status", STATUS_OK) != STATUS_OK:
            continue
        name = metric or record.get("primary_metric")
        value = record.get("metrics", {}).get(name)
        if not isinstance(value, int | float):
            continue
        key = (record["backbone"], record["method"], record["task"], record["shots"], int(record["n_prompts"]))
        values[key].append((int(record["seed"]), float(value), Run.of(record)))
        if _number(record.get("adapter_bytes")) and record["adapter_bytes"] >= 0:
            sizes[key].append(float(record["adapter_bytes"]))
        if (spent := train_seconds(record)) is not None:
            seconds[key].append(spent)
        predicted = record.get("prediction_shares")
        if isinstance(predicted, dict) and _number(predicted.get("top_share")) and _number(predicted.get("majority_share")):
            shares[key].append((float(predicted["top_share"]), float(predicted["majority_share"])))
    stats = {}
    for key, seeded in values.items():
        seeded.sort(key=lambda item: item[:2])
        stats[key] = Stat(values=tuple(v for _, v, _ in seeded), seeds=tuple(s for s, _, _ in seeded),
                          adapter_bytes=_mean(sizes[key]), train_s=_mean(seconds[key]),
                          runs=tuple(run for _, _, run in seeded),
                          top_share=max((t for t, _ in shares[key]), default=None),
                          majority_share=max((m for _, m in shares[key]), default=None))
    return stats


def shots_key(shots: Any) -> tuple[int, int]:
    return (1, 0) if shots == "full" else (0, int(shots))


def _lookup(stats: dict[tuple, Stat], backbone: str, method: str, task: str, shots: Any, n_prompts: int) -> Stat | None:
    found = stats.get((backbone, method, task, shots, n_prompts))
    if found is None:
        # Methods without prompts ran once per (task, shots) with n_prompts=0; they fill every n_p column.
        found = stats.get((backbone, method, task, shots, 0))
    return found


def _naming(stats: dict[tuple, Stat], backbone: str) -> tuple[str, str]:
    """Title prefix and file-name prefix of a backbone's tables (empty when the report has one backbone)."""
    if len({k[0] for k in stats}) == 1:
        return "", ""
    return f"{backbone}: ", re.sub(r"[^A-Za-z0-9_.-]+", "_", backbone).strip("_") + "-"


def _task_order(present: set[str], tasks: Sequence[str] | None) -> list[str]:
    return [t for t in (tasks or order_names(present, list(TASKS))) if t in present]


def build_tables(stats: dict[tuple, Stat], tasks: Sequence[str] | None = None) -> list[Table]:
    """Table 1-style (columns task × n_p, one per shots value) and Table 3-style (task × shots, one per n_p),
    then, where full-data cells exist, one table per task family (see :func:`build_full_tables`)."""
    tables = []
    for backbone in sorted({k[0] for k in stats}):
        keys = [k for k in stats if k[0] == backbone]
        methods = table_order({k[1] for k in keys})
        task_order = _task_order({k[2] for k in keys}, tasks)
        shots_values = sorted({k[3] for k in keys}, key=shots_key)
        prompt_counts = sorted({k[4] for k in keys if k[4] > 0}) or [0]
        prefix, slug = _naming(stats, backbone)
        note = "methods without prompts (n_p=0) ran once per task and shots; their value fills every n_p column"
        if len(prompt_counts) > 1 or len(shots_values) == 1:
            for shots in shots_values:
                table = Table(
                    name=f"{slug}{NP_TABLE}{shots}",
                    title=f"{prefix}shots={shots}: columns task × n_p (paper Table 1 layout)",
                    columns=[f"{t} (n_p={p})" for t in task_order for p in prompt_counts],
                    notes=[note] if any(k[4] == 0 for k in keys) and prompt_counts != [0] else [],
                )
                for method in methods:
                    row = [_lookup(stats, backbone, method, t, shots, p) for t in task_order for p in prompt_counts]
                    if any(s is not None for s in row):
                        table.rows[method] = row
                tables.append(_prune(table))
        if len(shots_values) > 1:
            for count in prompt_counts:
                table = Table(
                    name=f"{slug}{SHOTS_TABLE}{count}",
                    title=f"{prefix}n_p={count}: columns task × shots (paper Table 3 layout)",
                    columns=[f"{t} ({s})" for t in task_order for s in shots_values],
                    notes=["methods without prompts (n_p=0) are shown with their single run"] if count else [],
                )
                for method in methods:
                    row = [_lookup(stats, backbone, method, t, s, count) for t in task_order for s in shots_values]
                    if any(s is not None for s in row):
                        table.rows[method] = row
                tables.append(_prune(table))
        tables += build_full_tables(stats, backbone, tasks)
    return tables


def _with_prompts(method: str, n_prompts: int) -> str:
    """``method`` named with its n_p as a variant (``warp[n_p=1]``, ``infoprompt[pooling=cls,n_p=1]``)."""
    if method.endswith("]"):
        return f"{method[:-1]},n_p={n_prompts}]"
    return f"{method}[n_p={n_prompts}]"


def build_full_tables(stats: dict[tuple, Stat], backbone: str, tasks: Sequence[str] | None = None) -> list[Table]:
    """The full-training-split cells of ``backbone`` as the paper's Tables 1 (GLUE) and 2 (relation
    classification, entity typing): one column per task of the family, one row per method, mean ± std over
    seeds. A method run at full data with several n_p gets a row per n_p (``warp[n_p=1]``). Each table of a
    family the paper has is headed by what its cells did otherwise than the paper
    (:func:`~infoprompt.experiments.protocol.paper_differences`); the other tasks' table (a user's file) is not."""
    keys = [k for k in stats if k[0] == backbone and k[3] == "full"]
    if not keys:
        return []
    prefix, slug = _naming(stats, backbone)
    present = {k[2] for k in keys}
    known = {task for _, _, members, _ in TASK_FAMILIES for task in members}
    families = [*TASK_FAMILIES, (OTHER_FAMILY[0], OTHER_FAMILY[1], tuple(sorted(present - known)), OTHER_FAMILY[2])]
    tables = []
    for part, title, members, layout in families:
        columns = _task_order(present & set(members), tasks)
        if not columns:
            continue
        counts: dict[str, set[int]] = defaultdict(set)
        for _, method, task, _, n_prompts in keys:
            if task in columns:
                counts[method].add(n_prompts)
        table = Table(name=f"{slug}{FULL_TABLE}{part}",
                      title=f"{prefix}full training split, {title}: columns task ({layout})", columns=columns)
        shown = {}
        for method in table_order(set(counts)):
            for n_prompts in sorted(counts[method]):
                row_name = method if len(counts[method]) == 1 else _with_prompts(method, n_prompts)
                table.rows[row_name] = [stats.get((backbone, method, t, "full", n_prompts)) for t in columns]
                shown[row_name] = n_prompts
        if len(set(shown.values()) - {0}) > 1:
            table.notes.append("prompt tokens per row: " + ", ".join(
                f"{name} n_p={count}" for name, count in shown.items() if count))
        if part == OTHER_FAMILY[0]:  # no paper table has these tasks (a user's file): nothing to set against
            tables.append(table)
            continue
        table.header = paper_differences(backbone, [
            CellRuns(row_name, task, stat.seeds, stat.runs)
            for row_name, row in table.rows.items() for task, stat in zip(columns, row, strict=True) if stat is not None
        ], columns)
        tables.append(table)
    return tables
