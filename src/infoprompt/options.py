"""The argparse types and the parser every ``infoprompt`` sub-command shares (one-line usage errors, counts,
shots), so that sub-command modules need nothing from :mod:`infoprompt.cli`, which stands on top of them."""

from __future__ import annotations

import argparse
import typing

from infoprompt.validation import finite_number, nonnegative_int, option, positive_int

POSITIVE = option(positive_int)
COUNT = option(nonnegative_int)
NON_NEGATIVE = option(finite_number, float)
POSITIVE_FLOAT = option(lambda value, name: finite_number(value, name, positive=True), float)


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
