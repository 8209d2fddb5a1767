"""Progress, the same for the training of every kind: a bar on a terminal, plain periodic lines in a file or a CI
log (never a carriage return), nothing when off, and never a word of it on stdout, which carries results."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest
from test_feature_store import ROWS, write_split
from tqdm.auto import tqdm

from infoprompt.backbones import load_backbone
from infoprompt.cli import main
from infoprompt.kinds import KINDS, make_classifier, train
from infoprompt.progress import ProgressLines, bar_disabled, duration, step_progress
from infoprompt.training import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")

LINE = re.compile(r"(train|select) \S+: step \d+/\d+ \(\d+%\), (\S+ elapsed, ETA \S+|done in \S+)(, loss=\S+)?")
# A couple of steps of every kind's own fit (SetFit's and top-lora's capped by max_steps).
FEW_STEPS = dict(epochs=1, batch_size=4, max_steps=2, select="none", eval_every_epochs=0, device="cpu",
                 feature_store=False)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    """A clock that a test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drawn(stream: io.StringIO, enabled: bool) -> str:
    for _ in tqdm(range(50), file=stream, disable=bar_disabled(enabled), mininterval=0):
        pass
    return stream.getvalue()


def test_a_bar_written_to_a_file_prints_nothing():
    assert drawn(io.StringIO(), enabled=True) == ""


def test_a_terminal_gets_the_bar_unless_quiet():
    assert "50/50" in drawn(Terminal(), enabled=True)
    assert drawn(Terminal(), enabled=False) == ""


def test_durations_read_as_a_person_would_say_them():
    assert [duration(s) for s in (0, 45.4, 70, 210, 3900)] == ["0s", "45s", "1m10s", "3m30s", "1h05m"]


def test_a_file_gets_a_plain_line_at_each_tenth_with_the_eta():
    stream, clock = io.StringIO(), Clock()
    progress = ProgressLines(160, "train demo", stream, clock=clock)
    for step in range(160):
        clock.now += 1.0
        progress.set_postfix(loss=f"{1 - step / 1000:.3f}", refresh=False)
        progress.update(1)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10 and "\r" not in stream.getvalue()
    assert lines[0] == "train demo: step 16/160 (10%), 16s elapsed, ETA 2m24s, loss=0.985"
    assert lines[-1] == "train demo: step 160/160 (100%), done in 2m40s, loss=0.841"


def test_a_slow_run_gets_a_line_every_heartbeat_and_an_early_stop_says_where_it_ended():
    stream, clock = io.StringIO(), Clock()
    progress = ProgressLines(100, "train demo", stream, heartbeat_s=60, clock=clock)
    for _ in range(7):
        clock.now += 25.0  # a tenth of the run (10 steps) would take 250 s: the heartbeat speaks first
        progress.update(1)
    progress.close()
    assert stream.getvalue().splitlines() == [
        "train demo: step 3/100 (3%), 1m15s elapsed, ETA 40m25s",
        "train demo: step 6/100 (6%), 2m30s elapsed, ETA 39m10s",
        "train demo: step 7/100 (7%), done in 2m55s",
    ]


def test_step_progress_draws_a_bar_on_a_terminal_lines_in_a_file_and_nothing_when_off():
    def run(stream: io.StringIO, enabled: bool) -> str:
        progress = step_progress(4, "train demo", enabled, stream=stream)
        for _ in range(4):
            progress.set_postfix(loss="0.5", refresh=False)
            progress.update(1)
        progress.close()
        return stream.getvalue()

    bar = run(Terminal(), enabled=True)
    assert "\r" in bar and "train demo: 100%" in bar and "4/4" in bar and "loss=0.5" in bar
    lines = run(io.StringIO(), enabled=True)
    assert "\r" not in lines and lines.splitlines()[-1].startswith("train demo: step 4/4 (100%), done in")
    assert run(Terminal(), enabled=False) == run(io.StringIO(), enabled=False) == ""


@pytest.fixture
def examples(toy_examples):
    return toy_examples[:8]  # the first 8 of the toy set, both classes alternating


@pytest.mark.parametrize("mode", ["file", "terminal", "off"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_trains_with_one_bar_on_stderr_and_nothing_on_stdout(kind, mode, tiny_model_dirs, examples,
                                                                         capfd, monkeypatch):
    """A file gets plain lines ending at the last step, a terminal the bar, ``progress=False`` (``--quiet``)
    nothing; stdout stays empty throughout (SetFit's trainer printed a dict per step there)."""
    if KINDS[kind].require is not None:
        pytest.importorskip("setfit")
    method = KINDS[kind].methods[0].name
    # A backbone of its own: some kinds adapt the encoder they are given.
    model = make_classifier(load_backbone(str(tiny_model_dirs["bert"])), "sst2", method, n_prompts=2, max_length=32)
    if mode == "terminal":
        monkeypatch.setattr(sys, "stderr", Terminal())
    capfd.readouterr()  # what loading the encoder drew is not training's
    train(model, examples, None, TrainConfig(progress=mode != "off", **FEW_STEPS))
    out, err = capfd.readouterr()
    assert out == ""
    if mode == "file":
        lines = err.splitlines()
        assert "\r" not in err and lines and all(LINE.fullmatch(line) for line in lines), err
        assert re.fullmatch(rf"train {method}: step (\d+)/\1 \(100%\), done in .*", lines[-1]), err
    elif mode == "terminal":
        assert err == "" and f"train {method}: 100%" in sys.stderr.getvalue()
    else:
        assert err == ""


def cli_train(method: str, backbone: str, data: str, out: str, *more: str) -> list[str]:
    return ["train", "--task", "sst2", "--method", method, "--shots", "8", "--backbone", backbone, "--max-length",
            "32", "--data-dir", data, "--max-steps", "2", "--out", out, *more]


# Both runs in one process, as the command line's entry point runs them: importing torch and transformers twice
# would double the test's time.
TWO_RUNS = """
import json, sys
from infoprompt.cli import main
sys.exit(max(main(args) for args in json.loads(sys.argv[1])))
"""


def test_the_cli_writes_the_result_on_stdout_and_plain_lines_to_a_log_file(tiny_model_dirs, tmp_path):
    """End to end, as a CI job runs it, for a prompt kind and a SetFit kind: stderr a file, so plain progress lines
    (and no library bar: "Loading weights" drew carriage returns there too), and the result lines alone on
    stdout."""
    pytest.importorskip("setfit")
    write_split(tmp_path / "data", ROWS)
    methods = ["infoprompt", "setfit-lora"]
    runs = [cli_train(method, str(tiny_model_dirs["bert"]), str(tmp_path / "data"), str(tmp_path / method))
            for method in methods]
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        done = subprocess.run([sys.executable, "-c", TWO_RUNS, json.dumps(runs)], stdout=subprocess.PIPE,
                              stderr=stderr, text=True, timeout=600)
    err = log.read_text()
    assert done.returncode == 0, err[-3000:]
    results = done.stdout.splitlines()
    assert len(results) == 2, done.stdout
    for method, result in zip(methods, results, strict=True):
        assert re.fullmatch(rf"sst2 {method} seed=1 shots=8: accuracy=\S+ \(\S+ s\) -> \S+", result), result
    lines = err.splitlines()
    assert "\r" not in err and all(LINE.fullmatch(line) for line in lines), err
    for method in methods:
        assert f"train {method}: step 2/2 (100%), done in" in err, err


@pytest.mark.parametrize("method", ["infoprompt", "setfit-lora"])
def test_quiet_keeps_the_result_line_and_errors_only(method, tiny_model_dirs, tmp_path, capfd):
    if method.startswith("setfit"):
        pytest.importorskip("setfit")
    write_split(tmp_path / "data", ROWS)
    args = cli_train(method, str(tiny_model_dirs["bert"]), str(tmp_path / "data"), str(tmp_path / "run"), "--quiet")
    capfd.readouterr()
    assert main(args) == 0
    out, err = capfd.readouterr()
    assert err == "" and len(out.splitlines()) == 1 and out.startswith(f"sst2 {method} seed=1")
    assert main(args) == 2  # the run directory exists: an error still says so
    out, err = capfd.readouterr()
    assert out == "" and err.startswith("infoprompt: error:") and len(err.splitlines()) == 1


# -- Classifier: a bar where a person sees it, by default -----------------------------------------------------
FIT_AND_PREDICT = """
import sys
from infoprompt import Classifier
clf = Classifier("linear-probe", backbone=sys.argv[1], max_length=32).fit(["good", "bad", "fine", "awful"] * 2,
                                                                          ["pos", "neg", "pos", "neg"] * 2)
print(len(clf.predict(["good"] * 1000)))
"""


def on_a_terminal(argv: list[str], timeout: float = 300) -> tuple[str, str]:
    """Run ``argv`` with stderr on a pseudo-terminal of 100 columns (a terminal tqdm can draw in; a bare pty has
    0 columns) and stdout on a pipe: what each received."""
    fcntl, pty, termios = (pytest.importorskip(name) for name in ("fcntl", "pty", "termios"))
    import os
    import select
    import struct

    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=secondary) as child:
        os.close(secondary)
        screen = b""
        while select.select([primary], [], [], timeout)[0]:
            try:
                data = os.read(primary, 4096)
            except OSError:  # the child closed the terminal (Linux says EIO)
                break
            if not data:
                break
            screen += data
        os.close(primary)
        out = child.stdout.read().decode()
        assert child.wait(timeout) == 0, screen.decode(errors="replace")[-3000:]
    return out, screen.decode(errors="replace")


def test_classifier_draws_its_bars_on_a_terminal_by_default(tiny_model_dirs):
    """A program run from a terminal (a real pty, not a stand-in object): fit's bar, and predict's on 1,000
    texts, with no option given."""
    out, screen = on_a_terminal([sys.executable, "-c", FIT_AND_PREDICT, str(tiny_model_dirs["bert"])])
    assert out == "1000\n"
    assert "train linear-probe: 100%" in screen and "predict:" in screen, screen


def test_classifier_is_silent_where_no_one_watches_and_when_told(tiny_model_dirs, capfd, monkeypatch):
    """stderr a file or a pipe: nothing at all, not even the encoder's "Loading weights"; a terminal with
    ``progress=False``: nothing either; a small predict draws no bar on a terminal."""
    from infoprompt import Classifier

    texts, labels = ["good", "bad", "fine", "awful"] * 2, ["pos", "neg", "pos", "neg"] * 2
    capfd.readouterr()
    clf = Classifier("linear-probe", backbone=str(tiny_model_dirs["bert"]), max_length=32).fit(texts, labels)
    clf.predict(["good"] * 1000)
    assert capfd.readouterr() == ("", "")
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    quiet = Classifier("linear-probe", backbone=str(tiny_model_dirs["bert"]), max_length=32, progress=False)
    quiet.fit(texts, labels).predict(["good"] * 1000)
    assert terminal.getvalue() == ""
    clf.predict(["good"] * 10)
    assert terminal.getvalue() == "" and capfd.readouterr() == ("", "")
    clf.fit(texts, labels)
    assert "train linear-probe: 100%" in terminal.getvalue()
