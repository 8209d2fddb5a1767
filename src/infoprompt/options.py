"""The command line's shared parts: the one-line-error parser, argparse types (counts, shots), and config fields
that carry their own check and flag (:func:`option`); sub-command modules need nothing from :mod:`infoprompt.cli`."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from infoprompt.errors import UserError
from infoprompt.validation import (
    Rule,
    finite_number,
    fraction,
    module_names,
    nonnegative_int,
    one_of,
    positive_int,
    positive_number,
    token_budget,
)

POSITIVE = Rule(positive_int)
COUNT = Rule(nonnegative_int)
NON_NEGATIVE = Rule(finite_number, float)
POSITIVE_FLOAT = Rule(positive_number, float)
FRACTION = Rule(fraction, float)
TOKEN_BUDGET = Rule(token_budget)


def name_list(text: str) -> list[str]:
    """``"query,value"`` -> ``["query", "value"]`` (a named function, not a lambda, so that the train flags'
    snapshot can name it: see :mod:`infoprompt.train_flags`)."""
    return [part.strip() for part in text.split(",") if part.strip()]


NAME_LIST = Rule(module_names, name_list)


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes are one line on stderr (exit 2), like every other user error; options are never abbreviated
    (``--meth`` is refused, not read as ``--method``): a prefix that is unique today could name another option
    tomorrow, and run configs and scripts would change meaning silently. Sub-parsers are of this class too."""

    def __init__(self, *args: Any, allow_abbrev: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

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
class Option:
    """How one config field is checked and shown on the command line (the field's ``metadata["option"]``).

    Attributes:
        help: the flag's help text; ``None``: the field has no flag (set in Python, by a method's preset or a file).
        type: the value's :class:`~infoprompt.validation.Rule` (checked by
            :func:`~infoprompt.validation.check_fields`; it also parses the flag's text); ``None``: text.
        choices: the values allowed, also shown in ``--help``.
        switch: ``"flag"`` for ``--x/--no-x`` (unset: the config's default) or ``"negate"`` for a ``--no-x``
            that sets the field to False.
        preset: the field is part of what a method is (the prompt kind's prompt source, say): methods set it,
            a user's overrides may not.
    """

    help: str | None = None
    type: Rule | None = None
    choices: tuple[Any, ...] | None = None
    switch: str | None = None
    preset: bool = False

    def flag(self, name: str) -> str:
        return f"--{'no-' if self.switch == 'negate' else ''}{name.replace('_', '-')}"

    def check(self, value: Any, name: str) -> None:
        """Refuse a value outside the choices or against the rule (``None``, where the type allows it, passes)."""
        if value is None:
            return
        if self.choices is not None:
            one_of(value, name, self.choices)
        if self.type is not None:
            self.type.check(value, name)


def option(default: Any = dataclasses.MISSING, help: str | None = None, *, type: Rule | None = None,
           choices: Iterable[Any] | None = None, switch: str | None = None, preset: bool = False,
           default_factory: Any = dataclasses.MISSING) -> Any:
    """A config field with its check and its flag: ``n_prompts: int = option(4, "prompt tokens", type=COUNT)``."""
    spec = Option(help, type, tuple(choices) if choices is not None else None, switch, preset)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"option": spec})


def field_options(config_type: type) -> list[tuple[str, Option]]:
    """Every field of ``config_type`` that carries an :class:`Option`, in field order."""
    return [(f.name, f.metadata["option"]) for f in dataclasses.fields(config_type) if "option" in f.metadata]


def command_line_fields(config_type: type) -> list[tuple[str, Option]]:
    """The fields of ``config_type`` that have a flag."""
    return [(name, spec) for name, spec in field_options(config_type) if spec.help is not None]


def add_flags(group: argparse.ArgumentParser | argparse._ArgumentGroup, entries: Iterable[tuple[str, Option]]) -> None:
    """One flag per ``(name, option)``; an unset flag leaves the field to the config (and the method's preset)."""
    for name, spec in entries:
        if spec.switch == "negate":
            group.add_argument(spec.flag(name), dest=f"no_{name}", action="store_true", help=spec.help)
        elif spec.switch == "flag":
            group.add_argument(spec.flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                               help=spec.help)
        else:
            group.add_argument(spec.flag(name), dest=name, type=spec.type, choices=spec.choices, help=spec.help)


def add_config_options(group: argparse.ArgumentParser | argparse._ArgumentGroup, config_type: type) -> None:
    """One flag per field of ``config_type`` that has one."""
    add_flags(group, command_line_fields(config_type))


def flag_values(args: argparse.Namespace, entries: Iterable[tuple[str, Option]]) -> dict[str, object]:
    """The fields among ``entries`` that the command line set, as keyword arguments."""
    values: dict[str, object] = {}
    for name, spec in entries:
        if spec.switch == "negate":
            if getattr(args, f"no_{name}", False):
                values[name] = False
        elif getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    return values


def config_overrides(args: argparse.Namespace, config_type: type) -> dict[str, object]:
    """The fields of ``config_type`` that the command line set, as keyword arguments."""
    return flag_values(args, command_line_fields(config_type))


def merged_flags(owners: Iterable[tuple[str, type]]) -> dict[str, tuple[Option, tuple[str, ...]]]:
    """The flags of several options classes (``(owner name, class)`` pairs: each kind's options), one per field
    name: its option, with the choices of every owner and a help text naming the owners, and the owners."""
    found: dict[str, list[tuple[str, Option]]] = {}
    for owner, options_type in owners:
        for name, spec in command_line_fields(options_type):
            found.setdefault(name, []).append((owner, spec))
    merged = {}
    for name, specs in found.items():
        first = specs[0][1]
        names = tuple(owner for owner, _ in specs)
        helps: dict[str, list[str]] = {}
        for owner, spec in specs:
            helps.setdefault(spec.help, []).append(owner)
        if len(helps) == 1:
            text = f"{first.help} [{', '.join(names)}]"
        else:
            text = "; ".join(f"[{', '.join(owners)}] {help}" for help, owners in helps.items())
        choices = None
        if first.choices is not None:
            choices = tuple(dict.fromkeys(choice for _, spec in specs for choice in spec.choices or ()))
        merged[name] = (dataclasses.replace(first, help=text, choices=choices), names)
    return merged


def task_name(value: str) -> str:
    """argparse type for --task: a registered task (the list is in the error and in ``infoprompt tasks``)."""
    from infoprompt.tasks import get_task

    try:
        return get_task(value).name
    except UserError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
