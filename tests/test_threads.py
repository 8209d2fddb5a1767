"""The default torch thread count follows the CPUs a process may use (mocked here, never the machine's own)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from infoprompt import threads
from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.threads import choose_threads, thread_record, usable_cpus, use_threads


def machine(monkeypatch, *, cores: int, affinity: int, joblib_cpus: int) -> None:
    """A machine of ``cores`` CPUs on which this process may run on ``affinity`` of them and joblib counts
    ``joblib_cpus`` (its answer is the smallest of affinity, cgroup quota and LOKY_MAX_CPU_COUNT)."""
    import joblib

    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)), raising=False)
    monkeypatch.setattr(joblib, "cpu_count", lambda *args, **kwargs: joblib_cpus)
    monkeypatch.delenv("LOKY_MAX_CPU_COUNT", raising=False)


@pytest.fixture
def fresh(monkeypatch):
    """No thread count applied yet in this process, no OMP_NUM_THREADS; torch's count restored afterwards."""
    previous = torch.get_num_threads()
    monkeypatch.setattr(threads, "_applied", None)
    monkeypatch.setattr(threads, "_torch_start", None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    yield
    torch.set_num_threads(previous)


def test_a_cgroup_quota_below_the_core_count_sets_the_default(monkeypatch):
    machine(monkeypatch, cores=8, affinity=8, joblib_cpus=2)
    assert usable_cpus() == (2, "cgroup-quota")
    assert choose_threads(environ={}, ceiling=8) == threads.ThreadChoice(2, "cgroup-quota", 2)


def test_the_quota_is_read_by_joblib(monkeypatch):
    """joblib's own cgroup reader, stubbed to report a one-CPU quota, reaches the default."""
    context = pytest.importorskip("joblib.externals.loky.backend.context")
    if not hasattr(context, "_cpu_count_cgroup"):
        pytest.skip("this joblib reads the cgroup quota elsewhere")
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(context, "_cpu_count_cgroup", lambda os_cpu_count: 1)
    monkeypatch.delenv("LOKY_MAX_CPU_COUNT", raising=False)
    assert choose_threads(environ={}, ceiling=4) == threads.ThreadChoice(1, "cgroup-quota", 1)
    monkeypatch.setattr(context, "_cpu_count_cgroup", lambda os_cpu_count: os_cpu_count)  # no quota
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)  # taskset -c 3
    assert choose_threads(environ={}, ceiling=4) == threads.ThreadChoice(1, "affinity", 1)


def test_an_affinity_mask_sets_the_default(monkeypatch):
    machine(monkeypatch, cores=16, affinity=3, joblib_cpus=3)
    assert choose_threads(environ={}, ceiling=16) == threads.ThreadChoice(3, "affinity", 3)


def test_an_idle_machine_keeps_every_cpu(monkeypatch):
    machine(monkeypatch, cores=2, affinity=2, joblib_cpus=2)
    assert choose_threads(environ={}, ceiling=2) == threads.ThreadChoice(2, "cpu-count", 2)


def test_loky_max_cpu_count_is_named(monkeypatch):
    machine(monkeypatch, cores=8, affinity=8, joblib_cpus=3)
    monkeypatch.setenv("LOKY_MAX_CPU_COUNT", "3")
    assert usable_cpus() == (3, "LOKY_MAX_CPU_COUNT")


def test_torch_count_of_physical_cores_stays_the_ceiling(monkeypatch):
    """16 logical CPUs, torch picks its 8 physical cores: the default does not raise it."""
    machine(monkeypatch, cores=16, affinity=16, joblib_cpus=16)
    assert choose_threads(environ={}, ceiling=8) == threads.ThreadChoice(8, "torch", 16)


@pytest.mark.parametrize(("cpus", "workers", "expected"), [(4, 2, 2), (3, 2, 1), (8, 3, 2), (1, 4, 1), (2, 1, 2)])
def test_the_cpus_are_divided_among_the_workers(monkeypatch, cpus, workers, expected):
    machine(monkeypatch, cores=cpus, affinity=cpus, joblib_cpus=cpus)
    choice = choose_threads(workers=workers, environ={}, ceiling=cpus)
    assert choice.threads == expected
    assert choice.source == ("cpus/workers" if workers > 1 else "cpu-count")


def test_a_ray_cell_gets_its_cpu_request_within_the_cpus_it_may_use(monkeypatch):
    machine(monkeypatch, cores=8, affinity=8, joblib_cpus=2)
    assert choose_threads(cpus_per_worker=1, environ={}) == threads.ThreadChoice(1, "cpus/workers", 2)
    assert choose_threads(cpus_per_worker=4, environ={}) == threads.ThreadChoice(2, "cpus/workers", 2)


def test_a_cap_is_named_when_it_decides(monkeypatch):
    machine(monkeypatch, cores=32, affinity=32, joblib_cpus=32)
    assert choose_threads(at_most=4, environ={}, ceiling=32) == threads.ThreadChoice(4, "cap", 32)
    machine(monkeypatch, cores=32, affinity=32, joblib_cpus=2)
    assert choose_threads(at_most=4, environ={}, ceiling=32) == threads.ThreadChoice(2, "cgroup-quota", 2)


def test_the_flag_and_omp_num_threads_win(monkeypatch):
    machine(monkeypatch, cores=8, affinity=8, joblib_cpus=1)
    omp = {"OMP_NUM_THREADS": "3"}
    assert choose_threads(5, workers=4, cpus_per_worker=2, environ=omp) == threads.ThreadChoice(5, "--threads", 1)
    assert choose_threads(workers=4, environ=omp) == threads.ThreadChoice(3, "OMP_NUM_THREADS", 1)
    assert choose_threads(cpus_per_worker=2, environ={"OMP_NUM_THREADS": "6,2"}).threads == 6
    for unusable in ("", "0", "many", "-2"):  # torch warns about these itself; the default applies
        assert choose_threads(environ={"OMP_NUM_THREADS": unusable}, ceiling=8).source == "cgroup-quota"


def test_use_threads_sets_torch_and_the_record(monkeypatch, fresh):
    machine(monkeypatch, cores=8, affinity=8, joblib_cpus=1)
    choice = use_threads()
    assert choice == threads.ThreadChoice(1, "cgroup-quota", 1) and torch.get_num_threads() == 1
    assert thread_record() == {"threads": 1, "threads_from": "cgroup-quota", "cpus": 1}
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert use_threads().source == "OMP_NUM_THREADS" and torch.get_num_threads() == 2
    assert use_threads(1).source == "--threads" and torch.get_num_threads() == 1


def test_a_count_the_program_set_itself_is_kept(monkeypatch, fresh):
    machine(monkeypatch, cores=8, affinity=8, joblib_cpus=8)
    torch.set_num_threads(1)  # before infoprompt first looks: the default stays at or below it
    assert use_threads() == threads.ThreadChoice(1, "torch", 8)
    torch.set_num_threads(2)  # after: left alone, and the record says so
    assert use_threads() == threads.ThreadChoice(2, "torch", 8) and torch.get_num_threads() == 2
    assert thread_record()["threads_from"] == "torch"
    assert use_threads(1).threads == 1  # an explicit count still wins


def train_args(tiny_model_dirs, tmp_path, *extra: str) -> list[str]:
    rows = "".join(f"{'a fine film' if i % 2 else 'a dull film'} {i}\t{'pos' if i % 2 else 'neg'}\n" for i in range(12))
    data = tmp_path / "train.tsv"
    data.write_text("text\tlabel\n" + rows, encoding="utf-8")
    return ["train", "--train-file", str(data), "--backbone", str(tiny_model_dirs["bert"]), "--method", "linear-probe",
            "--max-length", "16", "--quiet", "--out", str(tmp_path / "run"), "--overwrite", *extra]


def recorded_threads(tmp_path) -> dict[str, object]:
    environment = json.loads((tmp_path / "run" / "metrics.json").read_text())["environment"]
    return {key: environment[key] for key in ("threads", "threads_from", "cpus")}


def test_train_records_the_count_and_its_source(monkeypatch, fresh, tiny_model_dirs, tmp_path):
    monkeypatch.setattr(threads, "usable_cpus", lambda: (1, "cgroup-quota"))
    monkeypatch.setattr(threads, "_torch_start", 2)  # torch counted the host's two cores
    assert main(train_args(tiny_model_dirs, tmp_path)) == 0
    assert recorded_threads(tmp_path) == {"threads": 1, "threads_from": "cgroup-quota", "cpus": 1}

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert main(train_args(tiny_model_dirs, tmp_path)) == 0
    assert recorded_threads(tmp_path) == {"threads": 2, "threads_from": "OMP_NUM_THREADS", "cpus": 1}

    assert main(train_args(tiny_model_dirs, tmp_path, "--threads", "1")) == 0
    assert recorded_threads(tmp_path) == {"threads": 1, "threads_from": "--threads", "cpus": 1}


def test_classifier_threads_option(fresh):
    from infoprompt.classifier import Classifier

    assert Classifier("linear-probe", threads=1).threads == 1
    with pytest.raises(UserError, match="threads must be a positive integer"):
        Classifier("linear-probe", threads=0)


def test_classifier_fit_and_predict_set_the_default(monkeypatch, fresh, bert_backbone):
    from infoprompt.classifier import Classifier

    monkeypatch.setattr(threads, "usable_cpus", lambda: (1, "cgroup-quota"))
    monkeypatch.setattr(threads, "_torch_start", 2)
    torch.set_num_threads(2)
    texts, labels = ["good", "fine", "bad", "awful"], ["pos", "pos", "neg", "neg"]
    classifier = Classifier("linear-probe", backbone=bert_backbone, max_length=16).fit(texts, labels)
    assert torch.get_num_threads() == 1 and thread_record()["threads_from"] == "cgroup-quota"
    Classifier("linear-probe", backbone=bert_backbone, max_length=16, threads=2).fit(texts, labels)
    assert torch.get_num_threads() == 2
    classifier.threads = 1
    classifier.predict(["nice"])
    assert torch.get_num_threads() == 1
