"""Progress bars: on a terminal when asked for, never in a file or a CI log."""

from __future__ import annotations

import io

from tqdm.auto import tqdm

from infoprompt.progress import bar_disabled


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def drawn(stream: io.StringIO, enabled: bool) -> str:
    for _ in tqdm(range(50), file=stream, disable=bar_disabled(enabled), mininterval=0):
        pass
    return stream.getvalue()


def test_a_bar_written_to_a_file_prints_nothing():
    assert drawn(io.StringIO(), enabled=True) == ""


def test_a_terminal_gets_the_bar_unless_quiet():
    assert "50/50" in drawn(Terminal(), enabled=True)
    assert drawn(Terminal(), enabled=False) == ""
