"""A newcomer's first hour, verbatim: the README's install lines in a fresh virtual environment, its own-data
lines, then its serve, curl and export lines, in order, each run by the shell as written (after activating the
environment the first line made), in a copy of the checkout. Heavy: it installs every dependency (minutes)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_readme import README, ROOT, logical_lines, marked_block, readme_port, write_own_data

pytestmark = [pytest.mark.heavy, pytest.mark.slow]
STEP_TIMEOUT_S = 3600


def checkout_copy(where: Path) -> Path:
    """The files a clone of this checkout has (tracked, and new ones git does not ignore), copied to ``where``."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, where / name)
    return where


def shell_env() -> dict[str, str]:
    """This environment less what points Python at this checkout or this test's virtual environment."""
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(part for part in env["PATH"].split(os.pathsep)
                                  if not Path(part, "activate").is_file())
    return {**env, "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")}


class Steps:
    """Runs README lines in ``repo`` and keeps how long each took."""

    def __init__(self, repo: Path):
        self.repo, self.env, self.times = repo, shell_env(), []

    def command(self, line: str) -> list[str]:
        activated = line if "bin/activate" in line else f". .venv/bin/activate && {line}"
        return ["bash", "-c", activated]

    def run(self, line: str) -> str:
        started = time.monotonic()
        done = subprocess.run(self.command(line), cwd=self.repo, env=self.env, capture_output=True, text=True,
                              timeout=STEP_TIMEOUT_S)
        self.times.append((line, time.monotonic() - started))
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return done.stdout

    def report(self) -> str:
        return "\n".join(f"{seconds:8.1f} s  {line[:100]}" for line, seconds in self.times)


def test_the_readme_lines_run_as_written_in_a_fresh_environment(data_dir, tmp_path):
    repo = checkout_copy(tmp_path / "infoprompt")
    write_own_data(data_dir, repo)
    steps = Steps(repo)
    try:
        for line in logical_lines(marked_block(README, "readme-install", "bash")):
            steps.run(line)
        for line in logical_lines(marked_block(README, "readme-cli-example", "bash")):
            steps.run(line)
        pip, serve, curl, train, export = logical_lines(marked_block(README, "readme-serve-export", "bash"))
        steps.run(pip)
        port = readme_port([serve, curl])
        serve, curl = (line.replace("8080", str(port)) for line in (serve, curl))
        log = tmp_path / "serve.log"
        started = time.monotonic()
        with log.open("w") as stderr:
            server = subprocess.Popen(steps.command(f"exec {serve}"), cwd=repo, env=steps.env,
                                      stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            from test_readme import wait_until_serving

            wait_until_serving(server, port, log)
            steps.times.append((f"{serve} (until it answers)", time.monotonic() - started))
            reply = json.loads(steps.run(curl))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
        assert reply["adapter"] == "tickets" and len(reply["predictions"]) == 1, reply
        steps.run(train)
        steps.run(export)
        assert (repo / "runs" / "tickets-onnx").is_dir()
    finally:
        print("\nthe README's lines, as run:\n" + steps.report())
