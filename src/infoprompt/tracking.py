"""Experiment tracking: once a run has finished, send its settings, loss history, metrics and adapter to MLflow
(the adapter as an MLflow model, see :mod:`infoprompt.mlflow_model`)."""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from infoprompt.errors import UserError
from infoprompt.gate import parse_json
from infoprompt.io_utils import atomic_write_json, read_json_object, scoped_environment
from infoprompt.version import __version__

if TYPE_CHECKING:
    from infoprompt.pipeline import RunSpec

# The run directory's files (as infoprompt.pipeline names them); kept here so that building the command-line
# parser does not import torch.
METRICS_NAME = "metrics.json"
LOG_NAME = "train_log.jsonl"

TRACKERS = ("mlflow",)
DEFAULT_TRACKING_URI = "./mlruns"
DEFAULT_EXPERIMENT = "infoprompt"
# The run's own files (metrics.json, train_log.jsonl) go under this artifact path; the adapter is the run's model.
ARTIFACT_PATH = "run"
RECORD_FIELD = "tracking"
# MLflow refuses longer values and bigger batches; records stay far below, but a long template must not fail a run.
MAX_PARAM_CHARS = 6000
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
# MLflow's own bounds on its HTTP requests, unless the user set them: MLflow's defaults retry a dead server for
# about 7 minutes (7 retries, exponential backoff, 120 s timeouts) after a run has finished.
HTTP_BOUNDS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
# The check before a run: one try, answered within this many seconds, or the run does not start.
CHECK_TIMEOUT_S = 10
# Keys of the training log's step records that are bookkeeping, not values worth a curve.
STEP_BOOKKEEPING = frozenset({"type", "phase", "step", "epoch"})


class Tracker(Protocol):
    """Where finished runs are logged. ``check`` fails before any training; ``log_run`` returns what the run
    record keeps to find the tracked run again."""

    def check(self) -> None: ...

    def log_run(self, run_dir: Path, *, run_name: str, tags: Mapping[str, str]) -> dict[str, str]: ...


def add_tracking_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tracking")
    group.add_argument("--track", choices=TRACKERS,
                       help="also log each finished run (settings, loss curves, metrics, adapter) to this tracker")
    group.add_argument("--tracking-uri",
                       help=f"MLflow tracking URI or a directory (default {DEFAULT_TRACKING_URI}: a local store, "
                            "no server)")
    group.add_argument("--tracking-experiment", help=f"MLflow experiment name (default {DEFAULT_EXPERIMENT})")
    group.add_argument("--register-model", metavar="NAME",
                       help="also register each run's model (the adapter, as an MLflow pyfunc model) in the MLflow "
                            "model registry under NAME, a new version per run")


def check_tracking_flags(kind: str | None, tracking_uri: str | None = None, experiment: str | None = None,
                         register_model: str | None = None) -> None:
    """The tracking flags' usage errors, which need no data and no package: a command checks them first."""
    if kind is None:
        if tracking_uri is not None or experiment is not None:
            raise UserError("--tracking-uri and --tracking-experiment need --track mlflow")
        if register_model is not None:
            raise UserError("--register-model needs --track mlflow")
        return
    if kind != "mlflow":
        raise UserError(f"unknown tracker {kind!r}; valid trackers: {', '.join(TRACKERS)}")
    if register_model is not None and not register_model.strip():
        raise UserError("--register-model: expected a model name, got an empty one")


def make_tracker(kind: str | None, tracking_uri: str | None = None, experiment: str | None = None,
                 register_model: str | None = None) -> Tracker | None:
    """The tracker ``--track KIND`` names (``None``: no tracking), checked so that a missing package fails
    before a run starts."""
    check_tracking_flags(kind, tracking_uri, experiment, register_model)
    if kind is None:
        return None
    uri = resolve_tracking_uri(tracking_uri or DEFAULT_TRACKING_URI)
    tracker = MlflowTracker(uri, experiment or DEFAULT_EXPERIMENT, register_model)
    tracker.check()
    return tracker


def resolve_tracking_uri(uri: str) -> str:
    """A plain path becomes an absolute ``file:`` URI, so that workers started elsewhere (Ray) log to the same
    store; URIs with a scheme (``http:``, ``sqlite:``, ``databricks``) pass unchanged."""
    scheme = urlparse(uri).scheme
    if scheme and len(scheme) > 1:  # a one-letter scheme is a Windows drive
        return uri
    if uri == "databricks":
        return uri
    return Path(uri).expanduser().resolve().as_uri()


def _import_mlflow() -> Any:
    try:
        import mlflow
    except ImportError:
        raise UserError("--track mlflow needs MLflow: pip install 'infoprompt[mlflow]'") from None
    return mlflow


@dataclass(frozen=True)
class MlflowTracker:
    """Logs a finished run directory to an MLflow tracking store.

    Attributes:
        tracking_uri: an MLflow tracking URI; ``file:`` URIs are a local store needing no server.
        experiment: the MLflow experiment the runs go to (created on first use).
        register_model: also register each run's model under this name in the store's model registry.
    """

    tracking_uri: str
    experiment: str = DEFAULT_EXPERIMENT
    register_model: str | None = None

    def client(self) -> Any:
        mlflow = _import_mlflow()
        if self.tracking_uri.startswith("file:"):
            # MLflow 3 asks for an opt-in to its file store; a local store with no server is the point here.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            return mlflow.MlflowClient(tracking_uri=self.tracking_uri)
        except mlflow.exceptions.MlflowException as error:
            raise UserError(f"--tracking-uri {self.tracking_uri}: {_first_line(error)}") from None

    def check(self) -> None:
        """Before any run: the package is there, a local store's path can be a directory, and a server answers
        as an MLflow server, within :data:`CHECK_TIMEOUT_S` (as a Ray address is checked). Nothing is written:
        opening a file store would create it."""
        _import_mlflow()
        try:
            import pandas  # noqa: F401 - MLflow's pyfunc models, which the adapter is logged as, need it
        except ImportError:
            raise UserError("--track mlflow logs the adapter as an MLflow model, which needs pandas: "
                            "pip install 'infoprompt[mlflow]'") from None
        scheme = urlparse(self.tracking_uri).scheme
        if scheme == "file":
            _check_store_directory(self.tracking_uri)
        elif scheme in ("http", "https"):
            self._check_server()

    def _check_server(self) -> None:
        from mlflow.exceptions import MlflowException

        where = urlparse(self.tracking_uri)
        try:
            socket.create_connection((where.hostname or "localhost", where.port or (443 if where.scheme == "https"
                                                                                     else 80)),
                                     timeout=CHECK_TIMEOUT_S).close()
        except (OSError, ValueError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise UserError(f"--tracking-uri {self.tracking_uri}: no MLflow server answers there ({reason})") from None
        once = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(CHECK_TIMEOUT_S)}
        with scoped_environment(once):
            try:
                self.client().search_experiments(max_results=1)
            except (MlflowException, OSError) as error:
                raise UserError(f"--tracking-uri {self.tracking_uri}: the server there does not answer as an "
                                f"MLflow tracking server ({_first_line(error)[:300]})") from None

    def experiment_id(self, client: Any) -> str:
        """The experiment's id, creating it; two workers creating it at once both end with the one id."""
        from mlflow.exceptions import MlflowException

        try:
            found = client.get_experiment_by_name(self.experiment)
            if found is not None:
                return found.experiment_id
            return client.create_experiment(self.experiment)
        except MlflowException as error:
            found = client.get_experiment_by_name(self.experiment)
            if found is None:
                raise UserError(f"--tracking-uri {self.tracking_uri}: {_first_line(error)}") from None
            return found.experiment_id

    def log_run(self, run_dir: Path, *, run_name: str, tags: Mapping[str, str]) -> dict[str, str]:
        from mlflow.exceptions import MlflowException

        try:
            with scoped_environment({name: value for name, value in HTTP_BOUNDS.items() if name not in os.environ}):
                return self._log(run_dir, run_name, tags)
        except (MlflowException, OSError) as error:  # requests' errors (a server gone) are OSErrors
            raise UserError(f"{run_dir}: the run finished, but logging it to {self.tracking_uri} failed: "
                            f"{_first_line(error)}") from None

    def _log(self, run_dir: Path, run_name: str, tags: Mapping[str, str]) -> dict[str, str]:
        from mlflow.entities import Metric, Param, RunStatus

        client = self.client()
        experiment_id = self.experiment_id(client)
        record = read_json_object(run_dir / METRICS_NAME)
        run = client.create_run(experiment_id, run_name=run_name,
                                tags={"infoprompt.version": __version__, **tags})
        run_id = run.info.run_id
        try:
            now = int(time.time() * 1000)
            params = [Param(key, value) for key, value in run_params(record).items()]
            metrics = [Metric(key, value, now, step) for key, value, step in run_metrics(record, run_dir / LOG_NAME)]
            for chunk in _chunks(params, PARAMS_PER_BATCH):
                client.log_batch(run_id, params=chunk)
            for chunk in _chunks(metrics, METRICS_PER_BATCH):
                client.log_batch(run_id, metrics=chunk)
            for name in (METRICS_NAME, LOG_NAME):
                if (run_dir / name).is_file():
                    client.log_artifact(run_id, str(run_dir / name), artifact_path=ARTIFACT_PATH)
            model = self._log_model(run_id, run_dir)
        except BaseException:
            client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
            raise
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
        return {"backend": "mlflow", "run_id": run_id, "experiment_id": experiment_id,
                "tracking_uri": self.tracking_uri, "artifact_path": ARTIFACT_PATH, **model}

    def _log_model(self, run_id: str, run_dir: Path) -> dict[str, str]:
        """The adapter as the run's pyfunc model (see :mod:`infoprompt.mlflow_model`), registered where MLflow's
        registry URI says (by default this tracking store). MLflow logs models to the active run of its global
        tracking store, so the store is this tracker's for the call (:func:`global_tracking_uri`)."""
        import mlflow

        from infoprompt.mlflow_model import log_adapter_model

        with global_tracking_uri(self.tracking_uri), \
                mlflow.start_run(run_id=run_id, nested=mlflow.active_run() is not None):
            return log_adapter_model(run_dir, self.register_model)


@contextmanager
def global_tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's global tracking URI set to ``uri`` for the block, and afterwards exactly as it was: unset if it
    was (so that it follows ``MLFLOW_TRACKING_URI`` and the registry follows it again), and the environment
    variable, which MLflow sets and unsets with it, as the caller had it."""
    import mlflow

    try:  # the one global MLflow keeps for it; unset (None) is a state that no public getter tells apart
        from mlflow.tracking._tracking_service import utils as state

        previous = getattr(state, "_tracking_uri", None)
    except ImportError:
        previous = mlflow.get_tracking_uri()
    variable = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)
        if variable is not None:
            os.environ["MLFLOW_TRACKING_URI"] = variable
        else:
            os.environ.pop("MLFLOW_TRACKING_URI", None)


def _check_store_directory(uri: str) -> None:
    """A ``file:`` store must be a directory, or a path where one can be made (no file on the way)."""
    from urllib.request import url2pathname

    path = Path(url2pathname(urlparse(uri).path))
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        what = "is a file" if ancestor == path else f"lies under {ancestor}, which is a file"
        raise UserError(f"--tracking-uri {uri}: the MLflow store must be a directory, but {path} {what}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _flatten(prefix: str, value: Any, into: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, into)
        return
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    into[prefix] = text[:MAX_PARAM_CHARS]


# What a run's parameters hold besides its axes (task, method, shots, seed, backbone) and its kind's options:
# the data it read (a built-in task's source and draw, or the user's files and columns), the training settings
# that say where it ran, and the classifier fields every kind reads. Everything else of the record (paths of
# caches, the task's own JSON, the backbone's fingerprint, settings the kind's fit never reads) stays out.
TASK_DATA = ("source", "sampling")
FILE_DATA = ("train_file", "eval_file", "text_column", "text_pair_column", "label_column", "multi_label")
RUN_PLACE = ("device", "precision")
SHARED_CLASSIFIER = ("max_length", "truncate", "long_text", "template", "threshold")
# Training fields no parameter repeats: the seed and the learning rate are top-level parameters (the rate as the
# run used it), and these others change neither the adapter nor its metrics.
NOT_PARAMS = frozenset({"seed", "lr", "progress", "eval_batch_size", "feature_store", "feature_store_dir"})


def _record_kind(record: Mapping[str, Any]) -> Any:
    """The registered kind the record's classifier names (``None``: unknown here, e.g. a record of a newer
    version, whose training settings are then all logged)."""
    classifier = record.get("classifier")
    name = classifier.get("kind") if isinstance(classifier, Mapping) else None
    from infoprompt.kinds import KINDS  # the model code: loaded already once a run has trained

    return KINDS.get(name) if isinstance(name, str) else None


def run_params(record: Mapping[str, Any]) -> dict[str, str]:
    """The run's settings as flat MLflow parameters, only those of the run's kind: the axes (``task``,
    ``method``, ``kind``, ``shots``, ``seed``, ``backbone``; ``n_prompts`` for kinds with prompts), the learning
    rate the run used where its kind's fit reads one, the training settings its fit reads
    (``spec.training.epochs``), where it ran, the data it read, the shared classifier fields
    (``classifier.max_length``) and the kind's own options as resolved (``classifier.options.beta``)."""
    kind = _record_kind(record)
    read = None if kind is None else set(kind.training_options)
    options = None if kind is None else set(kind.options.names())
    params: dict[str, str] = {}
    for name in ("task", "method", "shots", "seed", "backbone", "n_train", "steps"):
        if name in record:
            _flatten(name, record[name], params)
    classifier = _mapping(record.get("classifier"))
    if isinstance(classifier.get("kind"), str):
        params["kind"] = classifier["kind"]
    if "n_prompts" in record and (options is None or "n_prompts" in options):
        _flatten("n_prompts", record["n_prompts"], params)
    if record.get("lr") is not None and (read is None or "lr" in read):
        _flatten("lr", record["lr"], params)
    spec = _mapping(record.get("spec"))
    for name, value in _mapping(spec.get("training")).items():
        if value is not None and name not in NOT_PARAMS and (name in RUN_PLACE or read is None or name in read):
            _flatten(f"spec.training.{name}", value, params)
    for name in FILE_DATA if spec.get("train_file") is not None else TASK_DATA:
        if spec.get(name) is not None:
            _flatten(f"spec.{name}", spec[name], params)
    for name in SHARED_CLASSIFIER:
        if classifier.get(name) is not None:
            _flatten(f"classifier.{name}", classifier[name], params)
    for name, value in _mapping(classifier.get("options")).items():
        if options is None or name in options:
            _flatten(f"classifier.options.{name}", value, params)
    return params


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def run_metrics(record: Mapping[str, Any], log_path: Path) -> list[tuple[str, float, int]]:
    """``(key, value, step)`` for every loss and information-term value of every training step (a phase other
    than ``train`` is prefixed: ``warm.loss_total``), every periodic evaluation (``eval.accuracy``), and the
    final metrics at the last step."""
    rows: list[tuple[str, float, int]] = []
    for entry in _log_entries(log_path):
        step = entry.get("step")
        if not isinstance(step, int):
            continue
        if entry.get("type") == "step":
            phase = entry.get("phase", "train")
            prefix = "" if phase == "train" else f"{phase}."
            rows += [(f"{prefix}{key}", float(value), step) for key, value in entry.items()
                     if key not in STEP_BOOKKEEPING and _number(value)]
        elif entry.get("type") == "eval":
            rows += [(f"eval.{key}", float(value), step) for key, value in entry.items()
                     if key not in STEP_BOOKKEEPING and key != "n_eval" and _number(value)]
    final_step = record.get("steps") if isinstance(record.get("steps"), int) else 0
    rows += [(key, float(value), final_step) for key, value in record.get("metrics", {}).items() if _number(value)]
    for term, summary in record.get("information", {}).items():
        if isinstance(summary, Mapping) and _number(summary.get("last_epoch_bound")):
            rows.append((f"{term}_last_epoch_bound", float(summary["last_epoch_bound"]), final_step))
    total = record.get("timings", {}).get("total_s")
    if _number(total):
        rows.append(("seconds", float(total), final_step))
    return rows


def _log_entries(path: Path) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        return
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            entry = parse_json(line, f"{path}:{number}")
            if isinstance(entry, dict):
                yield entry


def cell_run_name(spec: RunSpec) -> str:
    """A sweep cell's name, as its record path spells it (a cell on the user's file: that file's task name)."""
    task = spec.task
    if task is None:
        from infoprompt.tasks.user_task import file_task_name

        task = spec.task_name or file_task_name(str(spec.train_file))
    shots = "full" if spec.shots is None else spec.shots
    return f"task={task}/method={spec.method}/shots={shots}/np={spec.n_prompts}/seed={spec.seed}"


def track_run(tracker: Tracker, run_dir: str | os.PathLike[str], record: dict[str, Any], *, run_name: str,
              tags: Mapping[str, str] | None = None, rewrite: bool = True) -> dict[str, Any]:
    """Log the finished run in ``run_dir`` and return its record with the tracker's reference under
    ``tracking``; with ``rewrite``, the run's ``metrics.json`` gets the reference too (atomically)."""
    reference = tracker.log_run(Path(run_dir), run_name=run_name, tags=dict(tags or {}))
    tracked = {**record, RECORD_FIELD: reference}
    if rewrite:
        atomic_write_json(Path(run_dir) / METRICS_NAME, tracked)
    return tracked


Runner = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class TrackedRunner:
    """A sweep runner that logs each finished cell: the run goes to its ``--save-runs`` directory, or else to
    a scratch directory removed once logged. Picklable, so Ray workers can run it."""

    runner: Runner
    tracker: Tracker

    def __call__(self, spec: RunSpec, out: str | os.PathLike[str] | None, *, overwrite: bool,
                 backbone: Any) -> dict[str, Any]:
        from infoprompt.training.runtime import process_state

        if not process_state().is_main_process:  # under accelerate launch the main process runs and logs the cell
            return self.runner(spec, out, overwrite=overwrite, backbone=backbone)
        name = cell_run_name(spec)
        tags = {"infoprompt.cell": name}
        if out is not None:
            record = self.runner(spec, out, overwrite=overwrite, backbone=backbone)
            return track_run(self.tracker, out, record, run_name=name, tags=tags)
        with tempfile.TemporaryDirectory(prefix="infoprompt-tracked-") as scratch:
            run_dir = Path(scratch) / "run"
            record = self.runner(spec, run_dir, overwrite=False, backbone=backbone)
            return track_run(self.tracker, run_dir, record, run_name=name, tags=tags, rewrite=False)
