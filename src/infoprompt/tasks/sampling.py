"""Stratified, seed-deterministic few-shot sampling with every class present."""

from __future__ import annotations

import random
import warnings
from collections import defaultdict
from collections.abc import Sequence

from infoprompt.errors import UserError
from infoprompt.tasks.base import Example


def allocate(class_sizes: dict[str, int], k: int) -> dict[str, int]:
    """Split ``k`` over classes proportionally to their sizes, at least one each (largest remainder)."""
    classes = sorted(class_sizes)
    total = sum(class_sizes.values())
    if k < len(classes):
        raise UserError(f"cannot draw {k} examples with every one of {len(classes)} classes present")
    if k > total:
        raise UserError(f"cannot draw {k} examples from a split of {total}")
    quota = {c: 1 for c in classes}
    remaining = k - len(classes)
    spare = {c: class_sizes[c] - 1 for c in classes}
    spare_total = sum(spare.values())
    if remaining and spare_total:
        exact = {c: remaining * spare[c] / spare_total for c in classes}
        floors = {c: min(int(exact[c]), spare[c]) for c in classes}
        for c in classes:
            quota[c] += floors[c]
        leftover = remaining - sum(floors.values())
        order = sorted(classes, key=lambda c: (-(exact[c] - floors[c]), c))
        while leftover > 0:
            for c in order:
                if leftover and quota[c] < class_sizes[c]:
                    quota[c] += 1
                    leftover -= 1
    return quota


def allocate_balanced(class_sizes: dict[str, int], k: int) -> dict[str, int]:
    """Split ``k`` as evenly as the class sizes allow (round robin in class-name order, small classes capped)."""
    if k < len(class_sizes):
        raise UserError(f"cannot draw {k} examples with every one of {len(class_sizes)} classes present")
    if k > sum(class_sizes.values()):
        raise UserError(f"cannot draw {k} examples from a split of {sum(class_sizes.values())}")
    quota = {c: 0 for c in class_sizes}
    remaining = k
    while remaining:
        for c in sorted(class_sizes):
            if remaining and quota[c] < class_sizes[c]:
                quota[c] += 1
                remaining -= 1
    return quota


ALLOCATIONS = {"proportional": allocate, "balanced": allocate_balanced}


def missing_classes(examples: Sequence[Example], labels: Sequence[str]) -> list[str]:
    """Labels of ``labels`` that no example carries: a few-shot sample cannot cover them."""
    present = {example.label for example in examples}
    return [label for label in labels if label not in present]


def sample_few_shot(
    examples: Sequence[Example],
    k: int | None,
    seed: int,
    *,
    labels: Sequence[str] | None = None,
    strategy: str = "proportional",
) -> list[Example]:
    """Draw ``k`` examples stratified by label with ``seed``; ``k=None`` returns all of them (full data).

    Every class that occurs in ``examples`` gets at least one example; ``k`` below the number of classes is
    an error. ``strategy`` shares out the rest: ``proportional`` to the class sizes (the default) or
    ``balanced`` (equal shares where the classes are big enough). Given the task's ``labels``, classes
    that the split does not hold at all are named in a warning, since no sample can cover them.

    The draw depends only on ``seed`` and the examples' order, so the same seed gives the same sample on
    every machine. The result is shuffled so that classes are interleaved.
    """
    if strategy not in ALLOCATIONS:
        raise UserError(f"unknown few-shot strategy {strategy!r}; valid: {', '.join(ALLOCATIONS)}")
    if labels is not None and (absent := missing_classes(examples, labels)):
        warnings.warn(
            f"the training split holds no example of {len(absent)} class(es), so the sample cannot cover "
            f"them: {', '.join(absent)}",
            stacklevel=2,
        )
    if k is None:
        return list(examples)
    if k <= 0:
        raise UserError(f"few-shot size must be positive, got {k}")
    by_label: dict[str, list[int]] = defaultdict(list)
    for index, example in enumerate(examples):
        if example.label is None:
            raise UserError(f"{example.source}: unlabelled example in a training split")
        by_label[example.label].append(index)
    if not by_label:
        raise UserError("few-shot sample is empty: the training split holds no examples")
    quota = ALLOCATIONS[strategy]({label: len(indices) for label, indices in by_label.items()}, k)
    rng = random.Random(seed)
    chosen: list[int] = []
    for label in sorted(by_label):
        chosen.extend(rng.sample(by_label[label], quota[label]))
    rng.shuffle(chosen)
    return [examples[i] for i in chosen]
