"""``infoprompt eval``'s per-class report: precision, recall, F1 and support per class and the confusion matrix.

NumPy, scikit-learn and matplotlib load in the functions, so that the CLI's parser can name the PNG at once."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CONFUSION_PNG = "confusion_matrix.png"
# Why a multi-label evaluation has no confusion matrix (said on stderr and kept in the record).
MULTI_LABEL_NOTE = ("no confusion matrix for a multi-label task: an example may have several true and several "
                    "predicted labels, so there is no one cell to count it in; the per-class report scores each "
                    "label on its own")


def per_class(gold: Any, predicted: Any, labels: Sequence[str]) -> dict[str, dict[str, float | int]]:
    """``{label: {precision, recall, f1, support}}`` in label order. ``gold`` and ``predicted`` are class indices
    (single-label) or 0/1 matrices of examples × labels (multi-label); a class never predicted (or never true)
    has precision (or recall) 0, not a warning."""
    from sklearn.metrics import precision_recall_fscore_support

    precision, recall, f1, support = precision_recall_fscore_support(
        gold, predicted, labels=list(range(len(labels))), zero_division=0)
    return {label: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for label, p, r, f, s in zip(labels, precision, recall, f1, support, strict=True)}


def confusion(gold: Sequence[int], predicted: Sequence[int], labels: Sequence[str]) -> dict[str, Any]:
    """``{"labels": [...], "matrix": [[...]]}``: ``matrix[i][j]`` counts examples of true label ``labels[i]``
    predicted as ``labels[j]`` (every label of the adapter, also one the data lacks, so matrices of two runs align)."""
    from sklearn.metrics import confusion_matrix

    matrix = confusion_matrix(gold, predicted, labels=list(range(len(labels))))
    return {"labels": list(labels), "matrix": matrix.astype(int).tolist()}


def report_text(gold: Any, predicted: Any, labels: Sequence[str], matrix: dict[str, Any] | None) -> str:
    """scikit-learn's classification report (four decimals), then the confusion matrix with numbered columns
    (label names as column heads would make a many-class table unreadably wide)."""
    from sklearn.metrics import classification_report

    text = classification_report(gold, predicted, labels=list(range(len(labels))), target_names=list(labels),
                                 digits=4, zero_division=0)
    if matrix is None:
        return f"{text}\n{MULTI_LABEL_NOTE}\n"
    rows = matrix["matrix"]
    names = [f"[{i}] {label}" for i, label in enumerate(labels)]
    name_width = max(len(name) for name in names)
    cell = max(len(f"[{len(labels) - 1}]"), *(len(str(value)) for row in rows for value in row))
    lines = ["confusion matrix (rows: true label, columns: predicted label)",
             " " * name_width + "".join(f"  {f'[{j}]':>{cell}}" for j in range(len(labels)))]
    lines += [name.ljust(name_width) + "".join(f"  {value:>{cell}}" for value in row) for name, row in zip(names, rows, strict=True)]
    return f"{text}\n" + "\n".join(lines) + "\n"


def plot_confusion(matrix: dict[str, Any], path: str | os.PathLike[str], title: str) -> None:
    """The confusion matrix as a PNG: counts in the cells, shaded by the share of the true label's row (so that
    a rare class's mistakes show as clearly as a frequent one's), written atomically on the Agg canvas.

    Labels and the title are user text, drawn as they are: ``$``, ``\\``, ``^`` and ``_`` never start mathtext
    (a label ``$\\frac$`` would be a parse error), and TeX is never used."""
    from infoprompt.figures import literal_text

    with literal_text():
        _draw_confusion(matrix, path, title)


def _draw_confusion(matrix: dict[str, Any], path: str | os.PathLike[str], title: str) -> None:
    import numpy as np

    from infoprompt.figures import drawable, new_figure, save_png

    labels, counts = [drawable(label) for label in matrix["labels"]], np.asarray(matrix["matrix"], dtype=float)
    title = drawable(title)
    totals = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    size = min(16.0, 2.5 + 0.45 * len(labels))
    figure = new_figure(size + 1.5, size)
    axes = figure.add_subplot()
    image = axes.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    figure.colorbar(image, ax=axes, label="share of the true label's examples")
    ticks = range(len(labels))
    axes.set_xticks(ticks, labels, rotation=45 if len(labels) > 2 else 0, ha="right" if len(labels) > 2 else "center")
    axes.set_yticks(ticks, labels)
    axes.set_xlabel("predicted label")
    axes.set_ylabel("true label")
    axes.set_title(title, fontsize=10)
    font = 9 if len(labels) <= 10 else 6
    for i in ticks:
        for j in ticks:
            axes.text(j, i, str(int(counts[i, j])), ha="center", va="center", fontsize=font,
                      color="white" if shares[i, j] > 0.5 else "black")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_png(figure, path)
