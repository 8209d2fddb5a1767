"""Shared fixtures: tiny random encoders per architecture, the data directory, a small labelled set."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import build_tiny_model  # noqa: E402

from infoprompt.backbones import load_backbone  # noqa: E402
from infoprompt.tasks import Example  # noqa: E402

ARCHITECTURES = ("bert", "roberta", "mpnet")

# Property-based tests: a few derandomised examples in every run; `--hypothesis-profile=fuzz` (or
# HYPOTHESIS_PROFILE=fuzz) explores many more.
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=16, deadline=None, derandomize=True, suppress_health_check=_SLOW_OK)
settings.register_profile("fuzz", max_examples=400, deadline=None, suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# -- what a run left out: skipped tests give their reasons (-rs); deselected ones are named here -------------
_DESELECTED: list[pytest.Item] = []


def pytest_deselected(items: list[pytest.Item]) -> None:
    _DESELECTED.extend(items)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Name every test the run deselected (``-m 'not heavy'`` by default), with its markers, so that a CI log
    says what it did not run."""
    if not _DESELECTED:
        return
    terminalreporter.section(f"deselected: {len(_DESELECTED)} test(s) not run (-m {config.option.markexpr!r})")
    for item in _DESELECTED:
        marks = sorted({mark.name for mark in item.iter_markers()} & {"heavy", "slow"})
        terminalreporter.line(f"{item.nodeid} [{', '.join(marks) or 'by -k or -m'}]")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {arch: build_tiny_model(arch, root / arch) for arch in ARCHITECTURES}


@pytest.fixture(scope="session", params=ARCHITECTURES)
def tiny_backbone(request, tiny_model_dirs):
    return load_backbone(str(tiny_model_dirs[request.param]))


@pytest.fixture(scope="session")
def bert_backbone(tiny_model_dirs):
    return load_backbone(str(tiny_model_dirs["bert"]))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared data directory: $INFOPROMPT_DATA_DIR, else ../shared/data beside the checkout."""
    candidates = [os.environ.get("INFOPROMPT_DATA_DIR"), Path(__file__).resolve().parents[2] / "shared" / "data"]
    for candidate in candidates:
        if candidate and Path(candidate, "SST-2", "train.tsv").is_file():
            return Path(candidate)
    pytest.skip("shared data directory not found (set INFOPROMPT_DATA_DIR)")


@pytest.fixture(scope="session")
def minilm():
    return load_backbone("minilm")


def toy_sentiment(n: int = 16) -> list[Example]:
    good = ["a great movie", "this film was brilliant", "lovely story and good actor", "funny and great"]
    bad = ["a terrible movie", "this film was awful", "boring dull plot", "bad scene and bad story"]
    examples = []
    for i in range(n):
        pool, label = (good, "positive") if i % 2 == 0 else (bad, "negative")
        examples.append(Example(fields={"sentence": pool[(i // 2) % len(pool)]}, label=label, source=f"toy:{i + 1}"))
    return examples


@pytest.fixture
def toy_examples() -> list[Example]:
    return toy_sentiment()


@pytest.fixture
def one_thread():
    """One intra-op thread for the test, restored after it: small tensors only lose to a second thread."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
