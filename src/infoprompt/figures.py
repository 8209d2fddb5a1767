"""Figures on matplotlib's Agg canvas (no interactive backend, no pyplot state), user text drawn as it is, and
written atomically: what ``eval --plots`` and the research figures (:mod:`infoprompt.analysis.plotting`) share."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import textwrap
import unicodedata
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from infoprompt.io_utils import atomic_write_bytes


@contextlib.contextmanager
def literal_text() -> Iterator[None]:
    """Within it, text is drawn as it is: ``$``, ``\\``, ``^`` and ``_`` never start mathtext (user text, labels
    and task names, would be parsed: ``$\\frac$`` is an error) and TeX is never run; a glyph the font lacks is
    drawn as a box without a warning. Held while a figure is built and saved (ticks read rcParams as drawn)."""
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        yield


def drawn_literally(draw: Callable[..., Any]) -> Callable[..., Any]:
    """``draw`` run within :func:`literal_text`."""
    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with literal_text():
            return draw(*args, **kwargs)
    return wrapper


def drawable(text: str) -> str:
    """``text`` as a font can draw it: a control character or a lone surrogate (no character, which FreeType
    refuses) becomes U+FFFD; everything else is kept."""
    return "".join("\ufffd" if unicodedata.category(char) in ("Cc", "Cs") else char for char in text)


def new_figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def footer(figure: Figure, text: str) -> None:
    """Put the provenance line (backbone, task, seeds, sizes) under the axes."""
    figure.get_layout_engine().set(h_pad=0.1)
    # About 15 characters of 8-point text per inch: wrap so that a long line is not cut at the figure edge.
    width = max(40, int(figure.get_figwidth() * 15))
    figure.supxlabel(textwrap.fill(text, width=width), fontsize=8, color="#333333")


def save_png(figure: Figure, path: str | os.PathLike[str], dpi: int = 150) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    atomic_write_bytes(path, buffer.getvalue())
