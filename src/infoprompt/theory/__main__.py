"""``python -m infoprompt.theory newton ...``: the theory commands without the main ``infoprompt`` CLI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from infoprompt.errors import UserError
from infoprompt.theory.cli import add_newton_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m infoprompt.theory", description=__doc__, allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_newton_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except UserError as error:
        print(f"infoprompt: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
