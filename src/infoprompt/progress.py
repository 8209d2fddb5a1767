"""Progress bars that stay out of logs: shown on a terminal, silent when stderr is a file or a CI log."""

from __future__ import annotations


def bar_disabled(enabled: bool) -> bool | None:
    """tqdm's ``disable`` for a bar the caller wants when ``enabled``: ``None`` lets tqdm switch itself off
    where stderr is not a terminal, so a run written to a file does not fill it with carriage-return updates."""
    return None if enabled else True
