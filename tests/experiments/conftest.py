"""Fixtures for the experiment-runner tests: a tiny registered toy task with its own data files."""

from __future__ import annotations

from pathlib import Path

import pytest

from infoprompt.tasks import TASKS, TaskSpec, register_task
from infoprompt.tasks.glue import SINGLE_TEMPLATE, read_tsv

TOY_TASK = "toy-sentiment"
GOOD = ("great movie", "good film", "lovely story", "brilliant actor", "funny plot", "good scene", "great story")
BAD = ("terrible movie", "bad film", "boring story", "awful actor", "dull plot", "bad scene", "awful story")


def _read(path: Path):
    return read_tsv(path, columns={"sentence": 0}, label_column=1, n_columns=2, header=True,
                    label_names={"0": "negative", "1": "positive"})


def _write(path: Path, n: int, offset: int) -> None:
    rows = ["sentence\tlabel"]
    for i in range(n):
        pool, label = (GOOD, "1") if i % 2 == 0 else (BAD, "0")
        rows.append(f"{pool[(i // 2 + offset) % len(pool)]} {'very ' * (i % 3)}it was\t{label}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


@pytest.fixture(scope="session")
def toy_task(tmp_path_factory) -> tuple[str, Path]:
    """A two-class task named ``toy-sentiment`` (40 train / 12 dev rows); returns (name, data_dir)."""
    data_dir = tmp_path_factory.mktemp("toy-data")
    _write(data_dir / "toy" / "train.tsv", 40, 0)
    _write(data_dir / "toy" / "dev.tsv", 12, 3)
    register_task(TaskSpec(
        name=TOY_TASK, fields=("sentence",), labels=("negative", "positive"),
        label_words={"negative": ("bad",), "positive": ("great",)}, metrics=("accuracy", "f1"),
        template=SINGLE_TEMPLATE, splits={"train": "toy/train.tsv", "dev": "toy/dev.tsv"}, reader=_read,
        positive_label="positive", description="toy sentiment task of the experiment tests",
    ))
    yield TOY_TASK, data_dir
    TASKS.pop(TOY_TASK, None)


@pytest.fixture(scope="session")
def tiny_bert_dir(tiny_model_dirs) -> Path:
    return tiny_model_dirs["bert"]
