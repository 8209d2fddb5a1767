"""Few-shot sampling: stratified, every class present, seed-deterministic, clear errors."""

from __future__ import annotations

from collections import Counter

import pytest

from infoprompt.errors import UserError
from infoprompt.tasks import Example, sample_few_shot
from infoprompt.tasks.sampling import allocate


def population(counts: dict[str, int]) -> list[Example]:
    return [Example(fields={"sentence": f"{label} {i}"}, label=label, source=f"f:{i}")
            for label, n in counts.items() for i in range(n)]


def test_allocation_is_proportional_with_every_class():
    assert allocate({"a": 900, "b": 100}, 64) == {"a": 57, "b": 7}
    assert allocate({"a": 1000, "b": 1, "c": 1}, 10) == {"a": 8, "b": 1, "c": 1}
    assert sum(allocate({"a": 5, "b": 7, "c": 11}, 23).values()) == 23


def test_sample_is_stratified_and_deterministic():
    data = population({"negative": 300, "positive": 500})
    first = sample_few_shot(data, 64, seed=1)
    again = sample_few_shot(data, 64, seed=1)
    other = sample_few_shot(data, 64, seed=2)
    assert [e.fields for e in first] == [e.fields for e in again]
    assert [e.fields for e in first] != [e.fields for e in other]
    assert Counter(e.label for e in first) == {"negative": 24, "positive": 40}
    assert len({e.fields["sentence"] for e in first}) == 64  # no duplicates


def test_rare_class_is_present():
    data = population({"common": 1000, "rare": 2})
    for seed in range(5):
        assert "rare" in {e.label for e in sample_few_shot(data, 16, seed)}


def test_full_mode_and_errors():
    data = population({"a": 3, "b": 3})
    assert len(sample_few_shot(data, None, 0)) == 6
    with pytest.raises(UserError, match="every one of 2 classes"):
        sample_few_shot(data, 1, 0)
    with pytest.raises(UserError, match="from a split of 6"):
        sample_few_shot(data, 7, 0)
    with pytest.raises(UserError, match="empty"):
        sample_few_shot([], 4, 0)


def test_run_spec_passes_the_sampling_strategy(monkeypatch):
    from infoprompt import pipeline

    seen = {}

    def fake_sample(examples, k, seed, **options):
        seen.update(options)
        raise RuntimeError("stop here")

    monkeypatch.setattr(pipeline, "read_split", lambda *a: population({"a": 5, "b": 5}))
    monkeypatch.setattr(pipeline, "sample_few_shot", fake_sample)
    with pytest.raises(RuntimeError, match="stop here"):
        pipeline.run_training(pipeline.RunSpec(task="sst2", method="warp", shots=4, sampling="balanced"))
    assert seen == {"labels": ("negative", "positive"), "strategy": "balanced"}
