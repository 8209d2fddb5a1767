"""Helpers of the bad-input tests: a tiny SST-2-shaped data directory and the CLI run in this process."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from infoprompt.cli import main

WORDS = ("great movie", "good film", "lovely story", "brilliant actor", "terrible movie", "bad film", "boring story",
         "awful actor")


def write_sst2(data_dir: Path, n_train: int = 24, n_dev: int = 8) -> Path:
    """An ``SST-2/{train,dev}.tsv`` pair in the real files' layout, with words the tiny tokenizer knows."""
    for name, n in (("train", n_train), ("dev", n_dev)):
        rows = ["sentence\tlabel"]
        rows += [f"{WORDS[i % len(WORDS)]} it was\t{int(i % len(WORDS) < 4)}" for i in range(n)]
        path = data_dir / "SST-2" / f"{name}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return data_dir


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def one_line_error(self) -> bool:
        """Exit 2 with exactly one line on stderr and no traceback."""
        return (self.code == 2 and self.err.count("\n") == 1 and self.err.startswith("infoprompt")
                and "Traceback" not in self.err)


def run_cli(*args: str | os.PathLike[str], stdin: bytes | None = None) -> Result:
    """``infoprompt ARGS`` in this process (a usage error's SystemExit included); stdin from ``stdin``."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exit_info:
                code = int(exit_info.code or 0)
    finally:
        sys.stdin = saved
    return Result(code, out.getvalue(), err.getvalue())


def listing(root: Path) -> set[str]:
    """Every path below ``root``, relative, for "nothing else was touched" checks."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


TRAIN_ARGS = ("--task", "sst2", "--method", "warp", "--shots", "8", "--epochs", "1", "--batch-size", "4",
              "--max-length", "32", "--eval-every-epochs", "0", "--quiet")
