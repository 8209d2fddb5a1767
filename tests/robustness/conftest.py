"""Fixtures of the bad-input tests: fake SST-2 data, the tiny BERT encoder, a trained tiny adapter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from robust_helpers import TRAIN_ARGS, run_cli, write_sst2


@pytest.fixture(scope="module", autouse=True)
def offline_and_frugal():
    """A mutated backbone name must not wait for the network; tiny models run best on one thread."""
    import torch

    saved, threads = os.environ.get("HF_HUB_OFFLINE"), torch.get_num_threads()
    os.environ["HF_HUB_OFFLINE"] = "1"
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    if saved is None:
        os.environ.pop("HF_HUB_OFFLINE", None)
    else:
        os.environ["HF_HUB_OFFLINE"] = saved


@pytest.fixture(scope="session")
def sst2_dir(tmp_path_factory) -> Path:
    return write_sst2(tmp_path_factory.mktemp("sst2-data"))


@pytest.fixture(scope="session")
def tiny_bert(tiny_model_dirs) -> Path:
    return tiny_model_dirs["bert"]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, sst2_dir, tiny_bert) -> Path:
    """A finished run directory: a tiny WARP adapter on the fake SST-2 data."""
    out = tmp_path_factory.mktemp("tiny-run") / "run"
    result = run_cli("train", *TRAIN_ARGS, "--backbone", tiny_bert, "--data-dir", sst2_dir, "--out", out)
    assert result.code == 0, result.err
    return out
