"""``train --config run.yaml``: a YAML or TOML file of the command's flags, under the flags of the command line.

A run config holds the same keys as the flags, kebab or snake case (``batch-size: 16`` or ``batch_size = 16``),
for runs kept in version control. Values are checked by the flag's own parser, so a config accepts what the
command line accepts (``shots: full``, ``lr: 1e-3``) and refuses the same, naming the file, line and key. A flag
without a value is ``true`` or ``false`` (``overwrite: true``; ``warm-start: false`` for ``--no-warm-start``).
Flags given on the command line win over the file. Paths in the file are used as written, relative to the
working directory like those on the command line.

Refused, with a one-line error: unknown keys (with the nearest known one), a key given twice (also as
``batch-size`` and ``batch_size``), a key without a value, nested tables, YAML aliases (``*name``: a value
should be readable where it stands), and a ``config`` key.
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Collection, Sequence
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.gate import MAX_CONFIG_BYTES, parse_toml, yaml_entries
from infoprompt.io_utils import read_lines

CONFIG_OPTION = "--config"
CONFIG_SUFFIXES = (".yaml", ".yml", ".toml")
# Parser entries that are not settings of a run.
_NOT_SETTINGS = frozenset({"config", "help", "version", "command", "handler"})


def read_run_config(path: str | os.PathLike[str], known_keys: Collection[str]) -> dict[str, object]:
    """The settings of a run config file, keys in snake case (``batch_size``), in file order.

    ``known_keys`` are the accepted keys in snake case (argparse ``dest`` names; ``infoprompt.cli.train_option_keys``
    gives those of ``train``). Values come back as the file holds them; :func:`config_argv` checks them.
    """
    values, _ = _read(Path(path), set(known_keys))
    return values


def config_argv(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``argv`` with its ``--config PATH`` replaced by the file's settings as flags, placed before the other
    flags so that those win (argparse keeps the last value of an option). Without ``--config``, ``argv``."""
    path, rest = split_config_option(argv)
    if path is None:
        return rest
    actions = _settings(parser)
    values, wheres = _read(Path(path), set(actions))
    tokens = [token for key, value in values.items() for token in _tokens(actions[key], value, wheres[key], key)]
    return [*tokens, *rest]


def apply_run_config(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv`` with ``parser``, a ``--config`` file's settings filling in under the command-line flags.

    Precedence: command-line flags, then the config file, then the parser's defaults. The parser may declare
    ``--config`` itself (for its help text); the namespace then holds the path.
    """
    path, _ = split_config_option(argv)
    args = parser.parse_args(config_argv(parser, argv))
    if path is not None and "config" in _dests(parser):
        args.config = path
    return args


def split_config_option(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The ``--config`` path of ``argv`` (``--config PATH`` or ``--config=PATH``) and the other arguments."""
    path: str | None = None
    rest: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            rest.extend(["--", *tokens])
            break
        if token != CONFIG_OPTION and not token.startswith(CONFIG_OPTION + "="):
            rest.append(token)
            continue
        if path is not None:
            raise UserError(f"{CONFIG_OPTION} is given twice ({path!r} and another); give one run config")
        value = token.partition("=")[2] if "=" in token else next(tokens, None)
        if not value:
            raise UserError(f"{CONFIG_OPTION} needs the path of a .yaml, .yml or .toml file")
        path = value
    return path, rest


def setting_keys(parser: argparse.ArgumentParser) -> set[str]:
    """The keys a run config for ``parser`` may hold (its options' ``dest`` names, not help or config)."""
    return set(_settings(parser))


# -- reading --------------------------------------------------------------------------------------------------

def _read(path: Path, known: set[str]) -> tuple[dict[str, object], dict[str, str]]:
    """The settings and, per key, where it stands (``file:line`` for YAML, ``file`` for TOML)."""
    if path.suffix.lower() not in CONFIG_SUFFIXES:
        raise UserError(f"run config {path}: unknown format {path.suffix or '(no extension)'!r}; use "
                        f"{', '.join(CONFIG_SUFFIXES)}")
    if not path.is_file():
        raise UserError(f"run config {path} not found")
    # Read no further than 4 bytes a character of the gate's limit (which counts characters).
    text = "\n".join(line for _, line in read_lines(path, limit=4 * MAX_CONFIG_BYTES))
    entries = _yaml_entries(path, text) if path.suffix.lower() != ".toml" else _toml_entries(path, text)
    values: dict[str, object] = {}
    wheres: dict[str, str] = {}
    for raw_key, value, where in entries:
        if not isinstance(raw_key, str):
            raise UserError(f"{where}: key {raw_key!r} is not a name")
        key = raw_key.replace("-", "_")
        if key in values:
            raise UserError(f"{where}: key {raw_key!r} is given twice (also at {wheres[key]})")
        _check_key(key, raw_key, known, where)
        if value is None:
            raise UserError(f"{where}: key {raw_key!r} has no value (remove the line to use the default)")
        if isinstance(value, dict):
            raise UserError(f"{where}: key {raw_key!r} holds a table; run configs are flat (one value per flag)")
        values[key] = value
        wheres[key] = f"{where}: key {raw_key!r}"
    return values, wheres


def _check_key(key: str, raw_key: str, known: set[str], where: str) -> None:
    if key == "config":
        raise UserError(f"{where}: key {raw_key!r}: a run config cannot name another run config")
    if key not in known:
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f" (did you mean {close[0].replace('_', '-')!r}?)" if close else ""
        raise UserError(f"{where}: unknown key {raw_key!r}{hint}; known keys: "
                        f"{', '.join(sorted(name.replace('_', '-') for name in known))}")


def _yaml_entries(path: Path, text: str) -> list[tuple[object, object, str]]:
    entries = yaml_entries(text, str(path), "a run config")
    if entries is None:
        raise UserError(f"{path}: a run config must be a mapping of keys to values")
    return [(key, value, f"{path}:{line}") for key, value, line in entries]


def _toml_entries(path: Path, text: str) -> list[tuple[object, object, str]]:
    return [(key, value, str(path)) for key, value in parse_toml(text, str(path)).items()]


# -- settings to flags ----------------------------------------------------------------------------------------

def _settings(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's options by ``dest`` (argparse has no public listing of them)."""
    return {action.dest: action for action in parser._actions
            if action.option_strings and action.dest not in _NOT_SETTINGS
            and not isinstance(action, argparse._HelpAction | argparse._VersionAction)}


def _dests(parser: argparse.ArgumentParser) -> set[str]:
    return {action.dest for action in parser._actions}


def _tokens(action: argparse.Action, value: object, where: str, key: str) -> list[str]:
    """The command-line tokens that set ``value`` through ``action``, after the action's own checks."""
    option = next((name for name in action.option_strings if name.startswith("--")), action.option_strings[0])
    if action.nargs == 0:
        return _switch(action, value, where, option)
    if action.nargs in (None, "?"):
        return [f"{option}={_checked(action, value, where)}"]
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}: expected a list of values, got {value!r}")
    return [option, *(_checked(action, item, where) for item in value)]


def _switch(action: argparse.Action, value: object, where: str, option: str) -> list[str]:
    """A flag without a value: ``true`` sets it; ``false`` leaves the default (or picks ``--no-x``)."""
    if not isinstance(value, bool):
        raise UserError(f"{where}: expected true or false, got {value!r}")
    if isinstance(action, argparse.BooleanOptionalAction):
        negative = next(name for name in action.option_strings if name.startswith("--no-"))
        return [option if value else negative]
    sets_false = isinstance(action, argparse._StoreFalseAction)
    return [option] if value != sets_false else []


def _checked(action: argparse.Action, value: object, where: str) -> str:
    """``value`` as the text the command line would give, parsed and checked as argparse would."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UserError(f"{where}: expected a value like those of {action.option_strings[0]}, got {value!r}")
    text = value if isinstance(value, str) else repr(value)
    converted: object = text
    if callable(action.type):
        try:
            converted = action.type(text)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
            message = str(error) or "invalid value"
            got = "" if str(value) in message else f" (got {value!r})"
            raise UserError(f"{where}: {message}{got}") from None
    if action.choices is not None and converted not in action.choices:
        raise UserError(f"{where}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return text
