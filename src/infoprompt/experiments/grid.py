"""Sweep grids: tasks × methods × shots × n_prompts × seeds with shared settings, from YAML/TOML files or flags."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.gate import MAX_CONFIG_BYTES, parse_toml, parse_yaml
from infoprompt.io_utils import read_lines
from infoprompt.kinds.config import SET_BY_CALLER, ClassifierConfig
from infoprompt.kinds.registry import KINDS, METHODS, get_method, kind_of
from infoprompt.pipeline import RunSpec
from infoprompt.tasks import FileColumns, check_eval_labels, get_task, read_labelled_file, task_from_file
from infoprompt.tasks.sampling import ALLOCATIONS
from infoprompt.train_flags import flag_name
from infoprompt.training.config import TrainConfig

AXES = ("tasks", "methods", "shots", "n_prompts", "seeds")
# A block on the user's own file names it (and an evaluation file, the task's name, the columns) with the keys
# of `train --config`; its task is the file's, so it lists no tasks.
FILE_KEYS = ("train_file", "eval_file", "task_name", "text_column", "text_pair_column", "label_column", "multi_label")
SETTINGS = ("backbone", "training", "classifier", "source", "sampling", "data_dir", "cache_dir", *FILE_KEYS)
DEFAULT_BLOCK: dict[str, Any] = {
    "methods": ["infoprompt"], "shots": [64], "n_prompts": [4], "seeds": [1, 2, 3],
    "backbone": "minilm", "training": {}, "classifier": {}, "source": "files", "sampling": "proportional",
    "data_dir": None, "cache_dir": None,
    "train_file": None, "eval_file": None, "task_name": None, "text_column": "text", "text_pair_column": None,
    "label_column": "label", "multi_label": False,
}
FILE_TASK_HINT = ("a block with train_file takes its task from that file (named by task_name, else by the file's "
                  "stem), so it lists no tasks")
# Fields of TrainConfig a grid may set; the seed comes from the cell and progress bars are the sweep's business.
TRAINING_KEYS = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name not in ("seed", "progress"))


def classifier_keys() -> tuple[str, ...]:
    """The keys a grid's ``classifier`` mapping may hold: the shared config fields a run sets and every option of
    a registered kind (each method of a block then checks that its kind has them)."""
    shared = [f.name for f in dataclasses.fields(ClassifierConfig) if f.name not in SET_BY_CALLER]
    options = [name for kind in KINDS.values() for name in kind.own_options() if name != "n_prompts"]
    return tuple(dict.fromkeys([*shared, *options]))


def shots_label(shots: int | None) -> str:
    return "full" if shots is None else str(shots)


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a data file's bytes: what a sweep's records keep, to refuse mixing two versions of it."""
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError as error:
        raise UserError(f"{path}: cannot read ({error.strerror or error})") from None


@dataclass(frozen=True)
class DataFiles:
    """The user's own data of a sweep cell: the training file, the optional evaluation file, the columns read
    from them, and each file's SHA-256 when the grid was loaded.

    The hashes, not the paths, are part of the cell's settings: a file moved elsewhere resumes its sweep, and a
    file whose content changed is refused (:meth:`changed`, :func:`~infoprompt.experiments.sweep.cell_status`)
    rather than mixed with records of its earlier version.
    """

    train_file: str
    columns: FileColumns
    train_sha256: str
    eval_file: str | None = None
    eval_sha256: str | None = None

    def settings(self) -> dict[str, Any]:
        columns = {name: getattr(self.columns, name)
                   for name in ("text_column", "text_pair_column", "label_column", "multi_label")}
        data: dict[str, Any] = {"train_sha256": self.train_sha256, "columns": columns}
        if self.eval_sha256 is not None:
            data["eval_sha256"] = self.eval_sha256
        return data

    def files(self) -> list[tuple[str, str, str]]:
        """``(role, path, sha256)`` of each file: role ``train`` or ``eval``, as the settings' keys name them."""
        files = [("train", self.train_file, self.train_sha256)]
        if self.eval_file is not None and self.eval_sha256 is not None:
            files.append(("eval", self.eval_file, self.eval_sha256))
        return files

    def changed(self) -> list[tuple[str, str, str]]:
        """``(path, sha256 then, sha256 now)`` of each file whose content is no longer what the grid loaded."""
        return [(path, then, now) for _, path, then in self.files() if (now := file_sha256(path)) != then]


@dataclass(frozen=True)
class Cell:
    """One run of a sweep; methods without prompts always carry ``n_prompts=0`` (one run whatever the grid's n_p).

    Attributes:
        task / method / shots / n_prompts / seed: the axes (``shots=None`` is the full training split).
        backbone: backbone name or path (a setting: cells differing only in it share an id and conflict).
        training: :class:`~infoprompt.training.TrainConfig` overrides (JSON-able).
        classifier: :class:`~infoprompt.kinds.config.ClassifierConfig` overrides (JSON-able).
        source: ``files`` or ``hub``.
        sampling: how the few-shot draw shares the shots over classes (see :class:`~infoprompt.pipeline.RunSpec`).
        data_dir / cache_dir: where data and packaged backbones come from (not part of the settings hash).
        files: for a cell on the user's own file (``task`` is then the file's task name), the files, columns
            and hashes (see :class:`DataFiles`; the hashes and columns are part of the settings).
    """

    task: str
    method: str
    shots: int | None
    n_prompts: int
    seed: int
    backbone: str = field(default="minilm", compare=False)
    training: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    classifier: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    source: str = field(default="files", compare=False)
    sampling: str = field(default="proportional", compare=False)
    data_dir: str | None = field(default=None, compare=False)
    cache_dir: str | None = field(default=None, compare=False)
    files: DataFiles | None = field(default=None, compare=False)

    @property
    def id(self) -> str:
        """Stable, readable identifier, also the record's path below the results directory."""
        return f"task={self.task}/method={self.method}/shots={shots_label(self.shots)}/np={self.n_prompts}/seed={self.seed}"

    def settings(self) -> dict[str, Any]:
        """Everything besides the id that changes the result; a finished record must carry the same hash."""
        settings = {"backbone": self.backbone, "training": self.training, "classifier": self.classifier, "source": self.source}
        if self.sampling != "proportional":
            settings["sampling"] = self.sampling  # only when set, so records made before this setting stay valid
        if self.files is not None:
            settings["data"] = self.files.settings()  # likewise only on a user's file
        return settings

    @property
    def settings_hash(self) -> str:
        text = json.dumps(self.settings(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]

    def sort_key(self) -> tuple[Any, ...]:
        return (self.task, self.method, -1 if self.shots is None else self.shots, self.n_prompts, self.seed)

    def run_spec(self) -> RunSpec:
        # The grid's training values that this cell's kind reads, split as `infoprompt train` splits its flags
        # (top-lora's epochs are its own option); the others belong to the grid's other methods.
        kind = kind_of(self.method)
        options, read = kind.split(self.method, {k: v for k, v in self.training.items() if kind.reads(k)})
        training = TrainConfig(**{**read, "seed": self.seed, "progress": False})
        data: dict[str, Any] = {"task": self.task}
        if self.files is not None:
            columns = self.files.columns
            data = {"task": None, "task_name": self.task, "train_file": self.files.train_file,
                    "eval_file": self.files.eval_file, "text_column": columns.text_column,
                    "text_pair_column": columns.text_pair_column, "label_column": columns.label_column,
                    "multi_label": columns.multi_label}
        return RunSpec(
            method=self.method, shots=self.shots, n_prompts=self.n_prompts, seed=self.seed,
            backbone=self.backbone, data_dir=self.data_dir, source=self.source,
            classifier={**options, **self.classifier}, training=training, cache_dir=self.cache_dir, sampling=self.sampling, **data,
        )


def _fail(where: str, message: str) -> UserError:
    return UserError(f"{where}: {message}")


def _as_list(value: Any, where: str) -> list[Any]:
    if isinstance(value, list | tuple):
        if not value:
            raise _fail(where, "empty list")
        return list(value)
    return [value]


def _parse_shots(value: Any, where: str) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "full"):
        return None
    if isinstance(value, bool):
        raise _fail(where, f"expected a positive number of examples or 'full', got {value!r}")
    try:
        shots = int(value)
    except (TypeError, ValueError):
        raise _fail(where, f"expected a positive number of examples or 'full', got {value!r}") from None
    if shots <= 0 or str(shots) != str(value).strip():
        raise _fail(where, f"expected a positive number of examples or 'full', got {value!r}")
    return shots


def _parse_int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _fail(where, f"expected an integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise _fail(where, f"expected an integer, got {value!r}") from None
    if number < minimum:
        raise _fail(where, f"expected an integer >= {minimum}, got {number}")
    return number


def _unknown(keys: Iterable[Any], allowed: Sequence[str]) -> list[str]:
    """The keys not in ``allowed``, as text (YAML keys may be numbers or null)."""
    return sorted(repr(key) if not isinstance(key, str) else key for key in keys if key not in allowed)


def _check_mapping(value: Any, allowed: Sequence[str], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"expected a mapping of {', '.join(allowed)}")
    unknown = _unknown(value, allowed)
    if unknown:
        raise _fail(where, f"unknown key(s) {', '.join(unknown)}; known: {', '.join(allowed)}")
    return dict(value)


def _data_files(block: dict[str, Any], where: str) -> tuple[str, DataFiles] | None:
    """The task name and files of a block on the user's own file (``None`` for a block of built-in tasks), the
    files read and checked as a run reads them, so that a bad column or label fails before any cell runs."""
    if block["train_file"] is None:
        given = [key for key in FILE_KEYS[1:] if block[key] != DEFAULT_BLOCK[key]]
        if given:
            raise _fail(f"{where}.{given[0]}", "goes with train_file (--train-file); a built-in task has its own "
                                               "data and columns")
        return None
    for key in FILE_KEYS[:-1]:
        value = block[key]
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise _fail(f"{where}.{key}", f"expected a {'path' if key.endswith('_file') else 'name'}, got {value!r}")
    if not isinstance(block["multi_label"], bool):
        raise _fail(f"{where}.multi_label", f"expected true or false, got {block['multi_label']!r}")
    train_file, eval_file = block["train_file"], block["eval_file"]
    try:
        columns = FileColumns(text_column=block["text_column"], text_pair_column=block["text_pair_column"],
                              label_column=block["label_column"], multi_label=block["multi_label"])
        task, _ = task_from_file(train_file, columns, name=block["task_name"])
        if eval_file is not None:
            check_eval_labels(task.labels, read_labelled_file(eval_file, columns), multi_label=columns.multi_label)
        # What the cells train on is this content: each cell checks it again just before it reads the files.
        hashes = file_sha256(train_file), None if eval_file is None else file_sha256(eval_file)
    except UserError as error:
        raise _fail(where, str(error)) from None
    return task.name, DataFiles(train_file=str(train_file), columns=columns, train_sha256=hashes[0],
                                eval_file=None if eval_file is None else str(eval_file), eval_sha256=hashes[1])


def expand_block(block: dict[str, Any], where: str) -> list[Cell]:
    """The cells of one fully specified block (axes plus settings), validated."""
    own = _data_files(block, where)
    files = None
    if own is not None:
        tasks, files = [own[0]], own[1]
    else:
        tasks = _axis_values("tasks", block["tasks"], f"{where}.tasks")
        for name in tasks:
            try:
                get_task(name)
            except UserError as error:
                raise _fail(f"{where}.tasks", str(error)) from None
    methods = _axis_values("methods", block["methods"], f"{where}.methods")
    presets = {}
    for name in methods:
        try:
            presets[name] = get_method(name)
        except UserError as error:
            raise _fail(f"{where}.methods", str(error)) from None
    shots = _axis_values("shots", block["shots"], f"{where}.shots")
    n_prompts = _axis_values("n_prompts", block["n_prompts"], f"{where}.n_prompts")
    seeds = _axis_values("seeds", block["seeds"], f"{where}.seeds")
    training = _check_mapping(block["training"], TRAINING_KEYS, f"{where}.training")
    classifier = _check_mapping(block["classifier"], classifier_keys(), f"{where}.classifier")
    # Values are checked here, before any cell runs, not by the first cell that uses them.
    try:
        TrainConfig(**training)
    except (TypeError, UserError) as error:
        raise _fail(f"{where}.training", str(error)) from None
    for method in methods:  # every method's kind must have every option the block sets
        try:
            ClassifierConfig.create(task=tasks[0], method=method, backbone=str(block["backbone"]), **classifier)
        except (TypeError, UserError) as error:
            raise _fail(f"{where}.classifier", str(error)) from None
    if not isinstance(block["backbone"], str) or not block["backbone"]:
        raise _fail(f"{where}.backbone", f"expected a backbone name or path, got {block['backbone']!r}")
    for name in ("data_dir", "cache_dir"):
        if block[name] is not None and not isinstance(block[name], str):
            raise _fail(f"{where}.{name}", f"expected a directory path, got {block[name]!r}")
    if not isinstance(block["source"], str) or block["source"] not in ("files", "hub"):
        raise _fail(f"{where}.source", f"expected 'files' or 'hub', got {block['source']!r}")
    if not isinstance(block["sampling"], str) or block["sampling"] not in ALLOCATIONS:
        raise _fail(f"{where}.sampling", f"expected one of {', '.join(ALLOCATIONS)}, got {block['sampling']!r}")
    cells = []
    for task in tasks:
        for method in methods:
            counts = n_prompts if presets[method].uses_prompts else [0]
            for shot in shots:
                for count in counts:
                    for seed in seeds:
                        cells.append(Cell(
                            task=task, method=method, shots=shot, n_prompts=count, seed=seed,
                            backbone=block["backbone"], training=training, classifier=classifier,
                            source=block["source"], sampling=block["sampling"],
                            data_dir=block["data_dir"], cache_dir=block["cache_dir"], files=files,
                        ))
    return cells


def merge_block(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``: axis lists and scalars replace, setting mappings merge key by key."""
    merged = dict(base)
    for key, value in override.items():
        if key in ("training", "classifier") and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _axis_values(axis: str, values: Any, where: str) -> list[Any]:
    """An axis list in the form cells carry it (shots as int or None, counts as int), to compare values."""
    items = _as_list(values, where)
    if axis == "shots":
        return [_parse_shots(v, where) for v in items]
    if axis in ("n_prompts", "seeds"):
        return [_parse_int(v, where, 1 if axis == "n_prompts" else 0) for v in items]
    return [str(v) for v in items]


def _flag(axis: str) -> str:
    return f"--{axis.replace('_', '-')}"


def narrow_block(block: dict[str, Any], axes: dict[str, list[Any]], where: str) -> dict[str, Any] | None:
    """``block`` with each of its own axis lists cut to the values ``axes`` (parsed flags) name; ``None`` when a
    list is left empty, i.e. the flags select nothing of this block. Axes the block does not list are left to the
    top level, where the flags replace them."""
    narrowed = dict(block)
    for axis, wanted in axes.items():
        if axis in block:
            kept = [v for v in _axis_values(axis, block[axis], f"{where}.{axis}") if v in wanted]
            if not kept:
                return None
            narrowed[axis] = kept
    return narrowed


def _unmatched_flags(cells: Sequence[Cell], axes: dict[str, list[Any]]) -> list[str]:
    """Flag values that no cell of the grid carries, as ``--flag value`` (n_p counts only for prompt methods)."""
    attribute = {"tasks": "task", "methods": "method", "shots": "shots", "n_prompts": "n_prompts", "seeds": "seed"}
    missing = []
    for axis, wanted in axes.items():
        present = {getattr(c, attribute[axis]) for c in cells}
        if axis == "n_prompts" and present <= {0}:
            continue  # only methods without prompts were selected: they ignore n_p
        for value in wanted:
            if value not in present:
                missing.append(f"{_flag(axis)} {shots_label(value) if axis == 'shots' else value}")
    return missing


def cells_from_config(config: dict[str, Any], where: str, overrides: dict[str, Any] | None = None) -> list[Cell]:
    """Cells of a parsed grid file: top-level defaults plus optional ``grids:`` blocks, then ``overrides``
    (flags). An axis flag replaces the top-level list, and cuts a block's own list to the values it names, so
    that ``--methods setfit`` on a grid of several blocks runs that grid's setfit cells and no others; setting
    flags (``training``, ``backbone``, ...) win over every block."""
    if not isinstance(config, dict):
        raise _fail(where, "expected a mapping at the top level")
    allowed = (*AXES, *SETTINGS, "grids")
    unknown = _unknown(config, allowed)
    if unknown:
        raise _fail(where, f"unknown key(s) {', '.join(unknown)}; known: {', '.join(allowed)}")
    overrides = overrides or {}
    axis_flags = {k: v for k, v in overrides.items() if k in AXES}
    wanted = {k: _axis_values(k, v, f"{where}: flag {_flag(k)}") for k, v in axis_flags.items()}
    setting_flags = {k: v for k, v in overrides.items() if k not in AXES}
    top = merge_block(DEFAULT_BLOCK, {k: v for k, v in config.items() if k != "grids"})
    top = merge_block(top, axis_flags)
    blocks = config.get("grids")
    if blocks is None:
        blocks = [{}]
    elif not isinstance(blocks, list) or not blocks:
        raise _fail(f"{where}.grids", "expected a non-empty list of grid blocks")
    cells: dict[Cell, Cell] = {}
    for index, block in enumerate(blocks):
        block_where = f"{where}.grids[{index}]" if config.get("grids") is not None else where
        if not isinstance(block, dict):
            raise _fail(block_where, "expected a mapping")
        unknown = _unknown(block, (*AXES, *SETTINGS))
        if unknown:
            raise _fail(block_where, f"unknown key(s) {', '.join(unknown)}; known: {', '.join((*AXES, *SETTINGS))}")
        narrowed = narrow_block(block, wanted, block_where)
        if narrowed is None:
            continue
        merged = merge_block(merge_block(top, narrowed), setting_flags)
        on_file = merged.get("train_file") is not None
        if on_file:
            if "tasks" in block:
                raise _fail(f"{block_where}.tasks", FILE_TASK_HINT)
            if "tasks" in config:
                raise _fail(f"{where}.tasks", f"{FILE_TASK_HINT}: list tasks in the blocks of built-in tasks only")
            merged.pop("tasks", None)  # what is left there is --tasks, which picks the file's task by its name
        elif "tasks" not in merged:
            raise _fail(block_where, "no tasks given (a 'tasks' list or --tasks, or a train_file or --train-file)")
        block_cells = expand_block(merged, block_where)
        if on_file and "tasks" in wanted:
            block_cells = [cell for cell in block_cells if cell.task in wanted["tasks"]]
        for cell in block_cells:
            # Two blocks naming the same cell with different settings would make its record ambiguous.
            previous = cells.setdefault(cell, cell)
            if previous.settings_hash != cell.settings_hash:
                inherited = [_flag(axis) for axis in wanted
                             if any(axis not in earlier for earlier in blocks[:index + 1])]
                hint = (f" ({', '.join(inherited)} replaced the top-level list that a block without its own list "
                        f"inherits: give each block its own list)") if inherited else ""
                raise _fail(block_where, f"cell {cell.id} is also defined by an earlier block with other settings"
                                         f"{hint}")
    named = [m for block in (config, *(b for b in blocks if isinstance(b, dict))) for m in block.get("methods") or []
             if isinstance(m, str) and m in METHODS]
    _refuse_unread_training(list(cells), where, setting_flags.get("training", {}), named)
    unmatched = _unmatched_flags(list(cells), wanted)
    if not cells:
        raise _fail(where, f"the flags select no cell of this grid ({' '.join(unmatched)})")
    if unmatched:
        raise _fail(where, f"no cell of this grid has {', '.join(unmatched)} among those the other flags select")
    return sorted(cells, key=Cell.sort_key)


def _refuse_unread_training(cells: Sequence[Cell], where: str, flagged: Iterable[str],
                            grid_methods: Sequence[str]) -> None:
    """A training value applies to every cell whose method reads it. One that no selected cell reads is refused
    when a flag gave it (``--epochs`` on SetFit cells only), as ``infoprompt train`` refuses it. One from the
    grid file that no method the file names reads is a warning (grids written before this check name such
    values, and their records' settings hashes keep them); the methods the flags leave out count, so that
    ``--methods`` on a grid never warns about the values meant for its other methods."""
    flagged = set(flagged)
    readers = {*grid_methods, *(cell.method for cell in cells)}
    for name in sorted({name for cell in cells for name in cell.training}):
        setting = [cell for cell in cells if name in cell.training]
        if name not in flagged and not grid_methods:
            continue  # a grid file that names no method sets values for whichever methods the flags pick
        methods = [cell.method for cell in setting] if name in flagged else sorted(readers)
        if any(kind_of(method).reads(name) for method in methods):
            continue
        if name not in flagged:
            print(f"infoprompt: warning: {where}: training.{name} is read by none of the grid's methods "
                  f"({', '.join(sorted(readers))}); it changes nothing", file=sys.stderr)
            continue
        method = setting[0].method
        try:  # the kind's one-line refusal, as `infoprompt train` words it
            kind_of(method).split(method, {name: setting[0].training[name]}, shown=flag_name)
        except UserError as error:
            raise _fail(where, str(error)) from None


def read_grid_file(path: str | Path) -> dict[str, Any]:
    """Parse a ``.yaml``/``.yml`` or ``.toml`` grid file, reporting syntax errors with their line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"grid file {path} not found")
    # Read no further than 4 bytes a character of the gate's limit (which counts characters).
    text = "\n".join(line for _, line in read_lines(path, limit=4 * MAX_CONFIG_BYTES))
    if path.suffix in (".yaml", ".yml"):
        data = parse_yaml(text, str(path), "grid files")
    elif path.suffix == ".toml":
        data = parse_toml(text, str(path))
    else:
        raise UserError(f"grid file {path}: unknown format (use .yaml, .yml or .toml)")
    if data is None:
        raise UserError(f"grid file {path} is empty")
    return data


def load_cells(path: str | Path | None, overrides: dict[str, Any] | None = None) -> list[Cell]:
    """Cells of a grid file (or of ``overrides`` alone when ``path`` is None)."""
    if path is None:
        return cells_from_config({}, "command line", overrides)
    return cells_from_config(read_grid_file(path), str(path), overrides)


def shard(cells: Iterable[Cell], index: int, count: int) -> list[Cell]:
    """Shard ``index`` of ``count`` (1-based): every ``count``-th cell of the sorted list, starting at ``index``.

    Interleaving keeps shards balanced across tasks and methods (cheap and expensive cells mix), and the
    split depends only on the grid, so every array job computes the same partition.
    """
    if count < 1 or not 1 <= index <= count:
        raise UserError(f"--shard {index}/{count}: expected i/n with 1 <= i <= n")
    ordered = sorted(cells, key=Cell.sort_key)
    return ordered[index - 1 :: count]


def parse_shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise UserError(f"--shard {text!r}: expected i/n, e.g. 2/8") from None
    shard([], index, count)  # validates the range
    return index, count
