"""Multi-label examples: the label-set encoding, a seeded few-shot draw covering every label, micro/macro-F1.

An :class:`~infoprompt.tasks.base.Example` holds one ``label`` string. A multi-label example keeps that type:
its ``label`` is the JSON array of its label names, sorted by code point, without duplicates and written
compactly (``'["Loc","Peop"]'``; ``'[]'`` when no label applies). The encoding is unambiguous whatever the
names hold (separators, brackets, quotes), is one canonical string per set, so equal sets compare equal, and
prints readably in error messages. :func:`label_set` turns it back into a tuple.
"""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Iterable, Sequence

from infoprompt.errors import UserError
from infoprompt.tasks.base import Example

# Examples with an empty label set form their own stratum of the draw, named so no label can clash with it.
NO_LABEL_STRATUM = "\x00no label"


def encode_label_set(labels: Iterable[str]) -> str:
    """The canonical ``Example.label`` of a multi-label example holding ``labels``."""
    return json.dumps(sorted(set(labels)), ensure_ascii=False, separators=(",", ":"))


def label_set(example: Example) -> tuple[str, ...]:
    """The labels of a multi-label example (as :func:`encode_label_set` wrote them), sorted."""
    where = example.source or "input"
    if example.label is None:
        raise UserError(f"{where}: unlabelled example where a labelled one is needed")
    try:
        labels = json.loads(example.label)
    except json.JSONDecodeError:
        labels = None
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise UserError(f"{where}: label {example.label!r} is not a multi-label set (a JSON list of names)")
    return tuple(sorted(set(labels)))


def sample_few_shot_multilabel(
    examples: Sequence[Example], k: int | None, seed: int, *, labels: Sequence[str] | None = None
) -> list[Example]:
    """Draw ``k`` multi-label examples with ``seed`` such that every label occurring in ``examples`` is present.

    ``k`` counts examples, as for :func:`~infoprompt.tasks.sampling.sample_few_shot`; ``None`` returns all of
    them. The draw first covers the labels, rarest first (one random example carrying each label not yet
    covered), then adds one example at a time from the label least represented in the draw so far (ties by
    name), so rare labels are not swamped by the frequent ones they co-occur with. Examples without any
    label are a stratum of their own. Given the task's ``labels``, one the examples never carry is an error,
    since no draw can cover it. The draw depends only on ``seed`` and the examples' order; it is shuffled.
    """
    if k is not None and k <= 0:
        raise UserError(f"few-shot size must be positive, got {k}")
    sets = [label_set(example) for example in examples]
    strata = _strata(sets)
    if labels is not None and (absent := sorted(set(labels) - set(strata))):
        raise UserError(f"the training examples never carry {len(absent)} label(s), so no draw can cover them: "
                        f"{', '.join(absent)}")
    if k is None:
        return list(examples)
    if k > len(examples):
        raise UserError(f"cannot draw {k} examples from a split of {len(examples)}")
    rng = random.Random(seed)
    pools = {name: rng.sample(members, len(members)) for name, members in sorted(strata.items())}
    chosen: list[int] = []
    taken: set[int] = set()
    in_draw = dict.fromkeys(pools, 0)

    def take(stratum: str) -> bool:
        pool = pools[stratum]
        while pool:
            index = pool.pop()
            if index not in taken:
                taken.add(index)
                chosen.append(index)
                for name in sets[index] or (NO_LABEL_STRATUM,):
                    in_draw[name] += 1
                return True
        return False

    for stratum in sorted(pools, key=lambda name: (len(strata[name]), name)):
        if not in_draw[stratum]:
            take(stratum)
    if len(chosen) > k:
        raise UserError(f"cannot draw {k} examples with every one of {len(pools)} labels present: this draw "
                        f"needs {len(chosen)} to cover them (seed {seed})")
    while len(chosen) < k:
        open_strata = sorted((count, name) for name, count in in_draw.items() if pools[name])
        if not any(take(name) for _, name in open_strata):
            break  # unreachable: k <= len(examples) and every example sits in some pool
    rng.shuffle(chosen)
    return [examples[i] for i in chosen]


def _strata(sets: Sequence[tuple[str, ...]]) -> dict[str, list[int]]:
    strata: dict[str, list[int]] = {}
    for index, names in enumerate(sets):
        for name in names or (NO_LABEL_STRATUM,):
            strata.setdefault(name, []).append(index)
    return strata


# -- metrics --------------------------------------------------------------------------------------------------

def _indicator(rows: Sequence[Collection[int]], n_labels: int):
    """An (examples x labels) 0/1 matrix from each example's collection of class indices."""
    import numpy as np

    matrix = np.zeros((len(rows), n_labels), dtype=np.int64)
    for row, indices in enumerate(rows):
        for index in indices:
            if not 0 <= index < n_labels:
                raise ValueError(f"class index {index} out of range for {n_labels} labels")
            matrix[row, index] = 1
    return matrix


def multilabel_micro_f1(gold: Sequence[Collection[int]], predicted: Sequence[Collection[int]],
                        labels: Sequence[str], positive: str | None) -> float:
    """F1 over every (example, label) decision pooled; each example's gold and prediction are index sets."""
    from sklearn.metrics import f1_score

    return float(f1_score(_indicator(gold, len(labels)), _indicator(predicted, len(labels)),
                          average="micro", zero_division=0))


def multilabel_macro_f1(gold: Sequence[Collection[int]], predicted: Sequence[Collection[int]],
                        labels: Sequence[str], positive: str | None) -> float:
    """Unweighted mean over the task's labels of each label's F1 (a label never gold nor predicted scores 0,
    as in the single-label ``macro_f1``)."""
    from sklearn.metrics import f1_score

    return float(f1_score(_indicator(gold, len(labels)), _indicator(predicted, len(labels)),
                          average="macro", zero_division=0))


MULTI_LABEL_METRICS = {"multilabel_micro_f1": multilabel_micro_f1, "multilabel_macro_f1": multilabel_macro_f1}


def register_multilabel_metrics() -> None:
    """Add the two metrics to :data:`infoprompt.metrics.METRICS` (done when a multi-label task is built, so
    importing the tasks does not import scikit-learn). The registry's Metric type names class indices; these
    take one collection of indices per example."""
    from infoprompt.metrics import register_metric

    for name, metric in MULTI_LABEL_METRICS.items():
        register_metric(name, metric)  # type: ignore[arg-type]
