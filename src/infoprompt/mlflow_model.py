"""A saved adapter as an MLflow model (the ``pyfunc`` flavour), logged with its tracked run.

What the model holds is the adapter directory as ``save_pretrained`` wrote it (safetensors and JSON, under the
model's ``artifacts/adapter``) and a reference to this code: MLflow loads it *from code*
(:data:`MODEL_CODE`, which names :class:`AdapterModel`), so nothing is pickled, and
:meth:`AdapterModel.load_context` reads the adapter with :func:`infoprompt.kinds.load_adapter` in the process
that loads the model. Its ``predict`` takes a DataFrame of texts (a column per field of the task: the column
names of the file it was trained on, or the field names ``text``/``text_pair``, ``sentence``, ...) and returns
one row per input: ``label`` (``labels`` for a multi-label task) and ``probabilities`` (label -> probability), as
``infoprompt predict`` writes them.

This module imports MLflow and pandas: only tracking (after a run) and MLflow's loader import it.
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd

from infoprompt.errors import UserError
from infoprompt.io_utils import scoped_environment
from infoprompt.version import __version__

ADAPTER_ARTIFACT = "adapter"
MODEL_NAME = "model"
# The file MLflow copies into the model and runs to build it (models from code).
MODEL_CODE = Path(__file__).with_name("mlflow_model_code.py")
# What a run directory holds that is no part of the adapter: the run's log and metrics, and the parameters only
# training uses (--keep-training-state).
NOT_ADAPTER = ("metrics.json", "train_log.jsonl", "training_state.safetensors")
# MLflow's progress bar while it copies the model, off unless the user set it.
QUIET = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}


class AdapterModel(mlflow.pyfunc.PythonModel):
    """An infoprompt adapter behind MLflow's pyfunc interface; it holds nothing until :meth:`load_context`.

    ``model_config`` (``mlflow.pyfunc.load_model(uri, model_config={...})``) may set ``device`` (``auto``, the
    default, ``cpu``, ``cuda``, ``cuda:N``), ``batch_size`` (64) and ``cache_dir`` (where a packaged backbone is
    extracted).
    """

    def load_context(self, context: Any) -> None:
        from infoprompt.kinds import load_adapter
        from infoprompt.kinds.config import config_task, read_adapter_config
        from infoprompt.training.runtime import resolve_device

        settings = dict(getattr(context, "model_config", None) or {})
        directory = Path(context.artifacts[ADAPTER_ARTIFACT])
        config = read_adapter_config(directory)
        self.task = config_task(config)
        device = resolve_device(str(settings.get("device", "auto")))
        self.model = load_adapter(directory, cache_dir=settings.get("cache_dir"), config=config).to(device)
        self.batch_size = int(settings.get("batch_size", 64))

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        from infoprompt.tasks import is_multi_label
        from infoprompt.training.inference import predict

        records = predict(self.model, input_rows(model_input, self.task), self.batch_size)
        chosen = "labels" if is_multi_label(self.task) else "label"
        return pd.DataFrame({chosen: [record[chosen] for record in records],
                             "probabilities": [record["probabilities"] for record in records]})


def input_rows(frame: Any, task: Any) -> list[dict[str, str]]:
    """The task's field texts of each row of ``frame``: each field from the first of its names (see
    :func:`infoprompt.inputs.column_names`) that is a column; other columns (a label column) are ignored. A list
    of texts (or of text pairs) is taken as a frame of the fields in order."""
    from infoprompt.gate import check_texts
    from infoprompt.inputs import column_names

    if not isinstance(frame, pd.DataFrame):
        frame = pd.DataFrame(list(frame), columns=list(task.fields)) if len(task.fields) > 1 else \
            pd.DataFrame({task.fields[0]: list(frame)})
    chosen = {}
    for field, names in column_names(task).items():
        column = next((name for name in names if name in frame.columns), None)
        if column is None:
            present = f"; columns present: {', '.join(map(repr, frame.columns))}" if len(frame.columns) else ""
            raise UserError(f"model input: no column {' or '.join(map(repr, names))} for the task's field "
                            f"{field}{present}")
        chosen[field] = column
    return [check_texts({field: _text(values[column]) for field, column in chosen.items()}, f"model input row {index}")
            for index, values in enumerate(frame.to_dict("records"))]


def _text(value: Any) -> Any:
    """A cell as the text check takes it: pandas' missing values (NaN, None, NA) as ``None``, i.e. empty."""
    return None if value is not None and not isinstance(value, str) and pd.api.types.is_scalar(value) and \
        pd.isna(value) else value


def input_signature(task: Any) -> Any:
    """The model's input schema: a string column for each name a field may come under (the training file's
    column and the field's own name), none of them required, since either name serves."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ColSpec, Schema

    from infoprompt.inputs import column_names

    names = dict.fromkeys(name for names in column_names(task).values() for name in names)
    return ModelSignature(inputs=Schema([ColSpec("string", name, required=False) for name in names]))


def requirements() -> list[str]:
    """What the model's environment needs: this library (which brings torch and transformers) and MLflow."""
    return [f"infoprompt=={__version__}", f"mlflow-skinny=={mlflow.__version__}", "pandas"]


def adapter_copy(run_dir: Path, target: Path) -> Path:
    """``target``: the adapter files of ``run_dir`` (hard links where the file system allows, else copies), less
    the run's own files (:data:`NOT_ADAPTER`)."""

    def link(source: str, destination: str) -> None:
        try:
            os.link(source, destination)
        except OSError:  # another file system, or one without hard links
            shutil.copy2(source, destination)

    def run_files(directory: str, names: list[str]) -> list[str]:
        return [name for name in names if Path(directory) == run_dir and name in NOT_ADAPTER]

    shutil.copytree(run_dir, target, copy_function=link, ignore=run_files)
    return target


def log_adapter_model(run_dir: Path, register_as: str | None = None) -> dict[str, str]:
    """Log the adapter in ``run_dir`` as the active MLflow run's pyfunc model :data:`MODEL_NAME`, registered as
    ``register_as`` when given; returns what a run record keeps of it (``model_uri``, and the registered name and
    version)."""
    from infoprompt.kinds.config import config_task, read_adapter_config

    task = config_task(read_adapter_config(run_dir))
    # MLflow 3 names the model with `name`; MLflow 2 with `artifact_path`.
    where = "name" if "name" in inspect.signature(mlflow.pyfunc.log_model).parameters else "artifact_path"
    with tempfile.TemporaryDirectory(prefix="infoprompt-model-") as scratch, warnings.catch_warnings(), \
            scoped_environment({name: value for name, value in QUIET.items() if name not in os.environ}):
        # An input example would make MLflow load the backbone and predict once more for every logged run; the
        # signature says what the input is.
        warnings.filterwarnings("ignore", message=".*input example was not provided.*")
        adapter = adapter_copy(run_dir, Path(scratch) / ADAPTER_ARTIFACT)
        info = mlflow.pyfunc.log_model(
            python_model=str(MODEL_CODE), artifacts={ADAPTER_ARTIFACT: str(adapter)},
            signature=input_signature(task), pip_requirements=requirements(), registered_model_name=register_as,
            **{where: MODEL_NAME},
        )
    reference = {"model_uri": info.model_uri}
    if register_as is not None:
        reference["registered_model"] = register_as
        version = getattr(info, "registered_model_version", None)
        if version is not None:
            reference["registered_model_version"] = str(version)
    return reference
