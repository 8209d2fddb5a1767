"""Atomic outputs: a staged run directory replaces the old one only on success and leaves nothing on failure."""

from __future__ import annotations

import pytest

from infoprompt.errors import UserError
from infoprompt.io_utils import atomic_write_json, staged_directory


def _old_run(final):
    final.mkdir()
    for name in ("infoprompt_adapter.json", "metrics.json", "old.txt"):
        (final / name).write_text("old")


def test_success_replaces_the_old_directory(tmp_path):
    final = tmp_path / "run"
    _old_run(final)
    with staged_directory(final, overwrite=True) as staging:
        (staging / "new.txt").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert [p.name for p in final.iterdir()] == ["new.txt"]


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_failure_keeps_the_old_directory_and_leaves_no_scratch(tmp_path, error):
    final = tmp_path / "run"
    _old_run(final)
    with pytest.raises(type(error)), staged_directory(final, overwrite=True) as staging:
        (staging / "half.txt").write_text("half")
        raise error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert (final / "old.txt").read_text() == "old"


def test_existing_directory_is_refused_without_overwrite(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(UserError, match="already exists"), staged_directory(tmp_path / "run"):
        pass


def test_atomic_json_leaves_no_temporary_file(tmp_path):
    atomic_write_json(tmp_path / "a.json", {"x": 1})
    atomic_write_json(tmp_path / "a.json", {"x": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    assert (tmp_path / "a.json").read_text(encoding="utf-8").strip().startswith("{")
