"""The command line's shared parts: the one-line-error parser, argparse types (counts, shots), and flags made from
config dataclass fields' metadata; sub-command modules need nothing from :mod:`infoprompt.cli`, which stands on top."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass

from infoprompt.validation import finite_number, module_names, nonnegative_int, option, positive_int

POSITIVE = option(positive_int)
COUNT = option(nonnegative_int)
NON_NEGATIVE = option(finite_number, float)
POSITIVE_FLOAT = option(lambda value, name: finite_number(value, name, positive=True), float)
# "query,value" -> ("query", "value")
NAME_LIST = option(module_names, lambda text: [part.strip() for part in text.split(",") if part.strip()])


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes are one line on stderr (exit 2), like every other user error."""

    def error(self, message: str) -> typing.NoReturn:
        message = message.replace("\r", "\\r").replace("\n", "\\n")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parse_shots(value: str) -> int | None:
    """argparse type for --shots: a positive number of examples, or 'full'."""
    if value == "full":
        return None
    try:
        shots = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of examples or 'full', got {value!r}") from None
    if shots <= 0:
        raise argparse.ArgumentTypeError(f"shots must be positive, got {shots}")
    return shots


@dataclass(frozen=True)
class CommandLine:
    """How a config dataclass field appears on the command line (the field's ``metadata["cli"]``).

    Attributes:
        help: the flag's help text.
        type: argparse type (a checker from this module); ``None`` for text.
        choices: the values allowed, also shown in ``--help``.
        switch: ``"flag"`` for ``--x/--no-x`` (unset: the config's default) or ``"negate"`` for a ``--no-x``
            that sets the field to False.
    """

    help: str
    type: Callable[[str], object] | None = None
    choices: tuple[str, ...] | None = None
    switch: str | None = None

    def flag(self, name: str) -> str:
        return f"--{'no-' if self.switch == 'negate' else ''}{name.replace('_', '-')}"


def cli(help: str, **options: object) -> dict[str, CommandLine]:
    """Field metadata that puts a config field on the command line: ``field(default=..., metadata=cli(...))``."""
    return {"cli": CommandLine(help, **options)}


def command_line_fields(config_type: type) -> list[tuple[str, CommandLine]]:
    return [(f.name, f.metadata["cli"]) for f in dataclasses.fields(config_type) if "cli" in f.metadata]


def add_config_options(group: argparse.ArgumentParser | argparse._ArgumentGroup, config_type: type) -> None:
    """One flag per field of ``config_type`` that carries :func:`cli` metadata; unset flags leave the field to
    the config (and the method's preset)."""
    for name, line in command_line_fields(config_type):
        if line.switch == "negate":
            group.add_argument(line.flag(name), dest=f"no_{name}", action="store_true", help=line.help)
        elif line.switch == "flag":
            group.add_argument(line.flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                               help=line.help)
        else:
            group.add_argument(line.flag(name), dest=name, type=line.type, choices=line.choices, help=line.help)


def config_overrides(args: argparse.Namespace, config_type: type) -> dict[str, object]:
    """The fields of ``config_type`` that the command line set, as keyword arguments."""
    overrides: dict[str, object] = {}
    for name, line in command_line_fields(config_type):
        if line.switch == "negate":
            if getattr(args, f"no_{name}", False):
                overrides[name] = False
        elif getattr(args, name, None) is not None:
            overrides[name] = getattr(args, name)
    return overrides


def task_name(value: str) -> str:
    """argparse type for --task: a registered task (the list is in the error and in ``infoprompt tasks``)."""
    from infoprompt.errors import UserError
    from infoprompt.tasks import get_task

    try:
        return get_task(value).name
    except UserError as error:
        raise argparse.ArgumentTypeError(str(error)) from None

