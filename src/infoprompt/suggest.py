"""The one-line error for a name that is not in a table (a method, a task), with a "did you mean" hint."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def unknown_name(what: str, name: str, valid: Iterable[str]) -> str:
    """``unknown method 'setfit-lora-al'; did you mean 'setfit-lora-all'? valid methods: …``: the closest valid
    name first (a typo is the usual cause, and the full list of methods is long), then every valid name."""
    names = list(valid)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f" did you mean {close[0]!r}?" if close else ""
    return f"unknown {what} {name!r};{hint} valid {what}s: {', '.join(names)}"
