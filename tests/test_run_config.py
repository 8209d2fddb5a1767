"""Run configs: YAML or TOML files of flags, command-line flags winning, every mistake a one-line error."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from infoprompt.cli import build_parser, parse_shots, train_option_keys
from infoprompt.errors import UserError
from infoprompt.options import POSITIVE, POSITIVE_FLOAT
from infoprompt.run_config import apply_run_config, config_argv, read_run_config


def small_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train")
    parser.add_argument("--task", required=True)
    parser.add_argument("--shots", type=parse_shots, default=64)
    parser.add_argument("--epochs", type=POSITIVE, default=30)
    parser.add_argument("--batch-size", type=POSITIVE, default=8)
    parser.add_argument("--lr", type=POSITIVE_FLOAT)
    parser.add_argument("--select", choices=("none", "holdout"))
    parser.add_argument("--template")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--warm-start", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--seeds", type=int, nargs="+")
    parser.add_argument("--config", help="a .yaml or .toml file of these flags")
    return parser


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_yaml_settings_fill_in_under_command_line_flags(tmp_path):
    path = write(tmp_path, "run.yaml", "task: intent\nshots: full\nbatch-size: 16\nepochs: 10\nlr: 1e-3\n"
                                       "overwrite: true\nwarm_start: false\nseeds: [1, 2, 3]\n"
                                       "template: '<cls> <p> {text} <p> <mask> <p> <sep>'\n")
    args = apply_run_config(small_parser(), ["--epochs", "5", "--config", str(path), "--warm-start"])
    assert (args.task, args.shots, args.batch_size, args.epochs, args.lr) == ("intent", None, 16, 5, 0.001)
    assert (args.overwrite, args.warm_start, args.seeds, args.config) == (True, True, [1, 2, 3], str(path))
    assert args.template == "<cls> <p> {text} <p> <mask> <p> <sep>"
    assert args.select is None  # not in the file: the parser's default


def test_toml_and_the_equals_form(tmp_path):
    path = write(tmp_path, "run.toml", 'task = "intent"\nshots = 8\nselect = "holdout"\nwarm-start = false\n'
                                       "lr = 0.0005\n")
    args = apply_run_config(small_parser(), [f"--config={path}", "--task", "other"])
    assert (args.task, args.shots, args.select, args.warm_start, args.lr) == ("other", 8, "holdout", False, 0.0005)


def test_without_a_config_the_parser_alone_decides():
    assert apply_run_config(small_parser(), ["--task", "t"]) == small_parser().parse_args(["--task", "t"])
    assert config_argv(small_parser(), ["--task", "t", "--", "--config"]) == ["--task", "t", "--", "--config"]


def test_read_run_config_returns_snake_case_keys_in_file_order(tmp_path):
    path = write(tmp_path, "run.yml", "method: infoprompt-plus\nbatch-size: 16\nno_feature_cache: true\n")
    assert read_run_config(path, train_option_keys()) == {"method": "infoprompt-plus", "batch_size": 16, "no_feature_cache": True}
    keys = train_option_keys()
    assert {"task", "shots", "batch_size", "warm_start", "max_length"} <= keys
    assert not keys & {"help", "config", "handler"}


def test_the_real_train_parser_takes_a_config(tmp_path):
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    path = write(tmp_path, "run.yaml", "task: sst2\nout: runs/a\nshots: 16\nmethod: infoprompt-plus\n"
                                       "no-feature-cache: true\nverbalizer-init: false\n")
    argv = ["train", *config_argv(commands.choices["train"], ["--config", str(path), "--shots", "32"])]
    args = build_parser().parse_args(argv)
    assert (args.task, args.out, args.shots, args.method) == ("sst2", "runs/a", 32, "infoprompt-plus")
    assert (args.no_feature_cache, args.verbalizer_init) == (True, False)


@pytest.mark.parametrize(("name", "text", "fragments"), [
    ("run.yaml", "task: t\nepoch: 3\n", ["run.yaml:2", "unknown key 'epoch'", "did you mean 'epochs'", "batch-size"]),
    ("run.yaml", "task: &name t\ntemplate: *name\n", ["run.yaml:2", "aliases (*name)"]),
    ("run.yaml", "base: &b {epochs: 3}\n<<: *b\n", ["alias"]),
    ("run.yaml", "batch-size: 8\nbatch_size: 16\n", ["run.yaml:2", "'batch_size' is given twice", "run.yaml:1"]),
    ("run.yaml", "epochs: 3\nepochs: 4\n", ["run.yaml:2", "twice"]),
    ("run.yaml", "task:\n", ["run.yaml:1", "key 'task' has no value"]),
    ("run.yaml", "task: {name: t}\n", ["key 'task'", "holds a table"]),
    ("run.yaml", "config: other.yaml\n", ["key 'config'", "cannot name another"]),
    ("run.yaml", "epochs: 0\n", ["run.yaml:1", "key 'epochs'", "positive integer"]),
    ("run.yaml", "epochs: ten\n", ["key 'epochs'", "expected a number", "'ten'"]),
    ("run.yaml", "shots: -4\n", ["key 'shots'", "positive"]),
    ("run.yaml", "lr: 0\n", ["key 'lr'"]),
    ("run.yaml", "select: maybe\n", ["key 'select'", "'maybe' is not one of none, holdout"]),
    ("run.yaml", "task: true\n", ["key 'task'", "got True"]),
    ("run.yaml", "overwrite: 1\n", ["key 'overwrite'", "expected true or false"]),
    ("run.yaml", "seeds: 3\n", ["key 'seeds'", "expected a list"]),
    ("run.yaml", "seeds: [1, x]\n", ["key 'seeds'", "'x'"]),
    ("run.yaml", "task: [t\n", ["run.yaml:2", "not valid YAML"]),
    ("run.yaml", "- task\n", ["must be a mapping"]),
    ("run.yaml", "1: x\n", ["key 1 is not a name"]),
    ("run.toml", "task = \n", ["run.toml", "not valid TOML"]),
    ("run.toml", "[model]\nrank = 4\n", ["run.toml", "unknown key 'model'"]),
    ("run.toml", "epochs = 2.5\n", ["run.toml", "key 'epochs'", "2.5"]),
    ("run.json", "{}", ["unknown format '.json'", ".yaml, .yml, .toml"]),
])
def test_mistakes_are_one_line_errors_naming_file_and_key(tmp_path, name, text, fragments):
    path = write(tmp_path, name, text)
    with pytest.raises(UserError) as caught:
        apply_run_config(small_parser(), ["--task", "t", "--config", str(path)])
    message = str(caught.value)
    assert str(tmp_path) in message and "\n" not in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_config_option_mistakes(tmp_path):
    with pytest.raises(UserError, match="not found"):
        apply_run_config(small_parser(), ["--config", str(tmp_path / "absent.yaml")])
    with pytest.raises(UserError, match="given twice"):
        config_argv(small_parser(), ["--config", "a.yaml", "--config=b.yaml"])
    with pytest.raises(UserError, match="needs the path"):
        config_argv(small_parser(), ["--task", "t", "--config"])


def test_an_empty_config_changes_nothing(tmp_path):
    path = write(tmp_path, "empty.yaml", "# nothing yet\n")
    assert apply_run_config(small_parser(), ["--task", "t", "--config", str(path)]).epochs == 30
