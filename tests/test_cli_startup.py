"""A CLI that answers at once: help and usage errors load no torch, yet list and check every kind's flags; no
abbreviated options; "did you mean" for a mistyped method or task; the recommended method as the default."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import infoprompt.train_flags as train_flags
from infoprompt.cli import build_parser, main
from infoprompt.errors import UserError
from infoprompt.kinds import get_method
from infoprompt.recommended import RECOMMENDED_METHOD
from infoprompt.tasks import get_task

# What `--help` and a usage error must not load: each costs seconds on a busy machine (torch alone 5-20 s).
HEAVY = ("torch", "transformers", "sklearn", "peft", "setfit", "numpy", "scipy", "matplotlib", "pandas", "safetensors",
         "accelerate", "infoprompt.kinds", "infoprompt.training")

# Runs the CLI as `infoprompt ARGS` would, then reports the exit status, the output and the heavy modules loaded.
PROBE = """
import contextlib, io, json, sys
from infoprompt.cli import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = main(sys.argv[1:])
heavy = sorted({name for name in sys.modules for root in HEAVY if name == root or name.startswith(root + ".")})
print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue(), "heavy": heavy}))
"""


def cli_in_fresh_process(*args: str) -> dict:
    code = f"HEAVY = {HEAVY!r}\n{PROBE}"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"], ["eval", "--help"], ["predict", "--help"],
                                  ["sweep", "--help"], ["theory", "newton", "--help"], ["--version"]])
def test_help_loads_no_heavy_module(args):
    result = cli_in_fresh_process(*args)
    assert result["code"] == 0 and result["heavy"] == [], result["heavy"]
    assert result["out"].startswith("usage: infoprompt" if "--help" in args else "infoprompt ")


def test_train_help_lists_every_kinds_options_without_the_registry(monkeypatch):
    """The help of a fresh process (from the snapshot) names every flag the registry makes, and is the very text
    a process with the registry loaded prints."""
    monkeypatch.setenv("COLUMNS", "120")  # argparse wraps help to the terminal's width: the same in both processes
    fresh = cli_in_fresh_process("train", "--help")
    assert fresh["heavy"] == []
    for name, spec in [*train_flags.live_model_flags(), *train_flags.live_training_flags()]:
        assert spec.flag(name) in fresh["out"], spec.flag(name)
    for flag in ("--lora-layers", "--beta", "--n-prompts", "--pair-iterations", "--head-c", "--top-layers", "--epochs"):
        assert flag in fresh["out"]
    assert train_flags.registry_loaded()  # this test process imported the kinds
    assert fresh["out"] == help_text(["train", "--help"])


def help_text(argv: list[str]) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def test_the_snapshot_is_what_the_registry_makes():
    """The flags and methods `train` is parsed with before the registry loads are those of the registry: after a
    change to a kind's options or a method, `python -m infoprompt.train_flags` writes them again."""
    hint = "the train flags' snapshot is stale: run `python -m infoprompt.train_flags` and commit train_flags.json"
    snapshot = train_flags.snapshot()
    assert train_flags.decode(snapshot["model_flags"]) == train_flags.live_model_flags(), hint
    assert train_flags.decode(snapshot["training_flags"]) == train_flags.live_training_flags(), hint
    assert tuple(snapshot["methods"]) == train_flags.live_method_names(), hint
    assert json.loads(train_flags.snapshot_text()) == snapshot, hint


def test_the_snapshot_refuses_a_check_it_cannot_name():
    from infoprompt.options import Option
    from infoprompt.validation import Rule

    unnamed = Rule(lambda value, name: value, int)
    with pytest.raises(ValueError, match="module-level function of builtins, infoprompt.validation"):
        train_flags.encode([("x", Option("x", unnamed))])


@pytest.mark.parametrize("args,message", [
    (["train", "--out", "x", "--meth", "warp"], "unrecognized arguments: --meth warp"),
    (["train", "--out", "x", "--method", "setfit-lora-al"],
     "argument --method: unknown method 'setfit-lora-al'; did you mean 'setfit-lora-all'? valid methods: "),
    (["train", "--out", "x", "--task", "sst3"], "unknown task 'sst3'; did you mean 'sst2'? valid tasks: "),
    (["eval", "--adapter", "run", "--out", "x.json"], "unrecognized arguments: --out x.json"),
    (["predict", "--adapter", "run", "--input", "-", "--format", "xml"], "argument --format: invalid choice"),
    (["trian"], "argument COMMAND: invalid choice: "),
])
def test_usage_errors_are_one_line_without_heavy_modules(args, message):
    result = cli_in_fresh_process(*args)
    assert result["code"] == 2 and message in result["err"], result["err"]
    assert result["err"].count("\n") == 1 and result["out"] == ""
    assert result["heavy"] == []


def test_no_option_is_abbreviated(capsys, tmp_path):
    """`--meth` is not `--method`, `--shot` not `--shots`, also in sub-sub-commands; the whole name works."""
    for argv in (["train", "--out", str(tmp_path / "a"), "--shot", "8"],
                 ["theory", "newton", "--n", "4", "--d", "2", "--max", "3"],
                 ["sweep", "--results", str(tmp_path), "--seed", "1"]):
        assert main(argv) == 2
        assert "unrecognized arguments" in capsys.readouterr().err
    args = build_parser().parse_args(["train", "--out", "x", "--method", "warp", "--shots", "8"])
    assert args.method == "warp" and args.shots == 8


def test_did_you_mean_is_in_the_lookups_the_api_uses():
    with pytest.raises(UserError, match=r"unknown method 'setfit-lora-al'; did you mean 'setfit-lora-all'\? valid "
                                        r"methods: infoprompt, "):
        get_method("setfit-lora-al")
    with pytest.raises(UserError, match=r"unknown method 'zzzzzz'; valid methods: "):  # nothing close: no guess
        get_method("zzzzzz")
    with pytest.raises(UserError, match=r"unknown task 'sst3'; did you mean 'sst2'\?"):
        get_task("sst3")


def test_the_snapshot_check_of_a_method_says_what_the_registry_says(monkeypatch):
    with pytest.raises(UserError) as registry:
        get_method("setfit-lora-al")
    monkeypatch.setattr(train_flags, "registry_loaded", lambda: False)
    with pytest.raises(UserError) as snapshot:
        train_flags.check_method("setfit-lora-al")
    assert str(snapshot.value) == str(registry.value)
    assert train_flags.check_method("warp") == "warp"


def test_train_defaults_to_the_recommended_method_and_methods_marks_it(capsys):
    assert build_parser().parse_args(["train", "--out", "x"]).method == RECOMMENDED_METHOD
    assert f"default {RECOMMENDED_METHOD}" in help_text(["train", "--help"])
    assert main(["methods"]) == 0
    lines = capsys.readouterr().out.splitlines()
    marked = [line.split()[1] for line in lines if line.startswith("* ") and not line.startswith(f"* {RECOMMENDED_METHOD}:")]
    assert marked == [RECOMMENDED_METHOD]
    assert lines[-1].startswith(f"* {RECOMMENDED_METHOD}: the recommended method")
    # One recommended method in the table's words: the marked row, named under the table, and no other.
    assert [line for line in lines if "recommended" in line] == [lines[-1]]


def test_methods_answers_from_the_snapshot_without_torch():
    """``infoprompt methods`` in a fresh process loads no heavy module (it took 10 s loading torch) and prints the
    table the registry prints."""
    fresh = cli_in_fresh_process("methods")
    assert fresh["code"] == 0 and fresh["heavy"] == [], fresh["heavy"]
    assert train_flags.registry_loaded() and fresh["out"] == help_text(["methods"])  # the live table here


@pytest.mark.parametrize("command,blocked,extra", [
    (["export", "--onnx", "--adapter", "runs/x", "--out", "runs/x-onnx"], "onnxruntime", "onnx"),
    (["serve", "--adapter", "x=runs/x"], "fastapi", "serve"),
])
def test_a_missing_extra_is_one_line_before_torch_loads(command, blocked, extra):
    """The command needs an extra this environment lacks (a module blocked as if uninstalled): one line naming
    the pip install, exit 2, and torch never imported (it was reported after 26 s of loading)."""
    code = f"import sys; sys.modules[{blocked!r}] = None\nHEAVY = {HEAVY!r}\n{PROBE}"
    done = subprocess.run([sys.executable, "-c", code, *command], capture_output=True, text=True, timeout=300)
    result = json.loads(done.stdout)
    assert result["code"] == 2 and result["heavy"] == [], result
    assert result["err"] == (f"infoprompt: error: infoprompt {command[0]} needs {blocked} (the {extra} extra): "
                             f"pip install 'infoprompt[{extra}]'\n")
