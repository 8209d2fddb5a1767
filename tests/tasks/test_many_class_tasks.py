"""Many-class tasks: few-shot coverage of every class, balanced draws, and the classifier with 19 labels."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from infoprompt.errors import UserError
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.prompt.model import PromptClassifier
from infoprompt.tasks import Example, get_task, load_split, sample_few_shot
from infoprompt.tasks.relation import NO_RELATION, SEMEVAL_LABELS
from infoprompt.tasks.sampling import allocate_balanced, missing_classes
from infoprompt.tasks.spans import relation_fields
from infoprompt.training import TrainConfig, train


def population(counts: dict[str, int]) -> list[Example]:
    return [Example(fields={"sentence": f"{label} {i}"}, label=label, source=f"f:{i}")
            for label, n in counts.items() for i in range(n)]


@pytest.fixture(scope="module")
def semeval_train(data_dir):
    return load_split(get_task("semeval"), "train", data_dir)


@pytest.mark.parametrize("shots", [64, 256])
def test_semeval_sample_covers_all_19_classes(semeval_train, shots):
    for seed in (1, 2, 3):
        sample = sample_few_shot(semeval_train, shots, seed)
        counts = Counter(e.label for e in sample)
        assert len(sample) == shots and set(counts) == set(SEMEVAL_LABELS)
        assert counts["Entity-Destination(e2,e1)"] == 1  # the one training example of that class is always drawn
        assert counts["Other"] == max(counts.values())  # the rest follows the class sizes
    assert sample_few_shot(semeval_train, shots, 1) == sample_few_shot(semeval_train, shots, 1)


def test_too_few_shots_for_the_classes_fail_clearly(semeval_train):
    with pytest.raises(UserError, match="cannot draw 16 examples with every one of 19 classes present"):
        sample_few_shot(semeval_train, 16, 1)


def test_classes_absent_from_the_split_are_named(semeval_train):
    dropped = [e for e in semeval_train if e.label != "Entity-Destination(e2,e1)"]
    assert missing_classes(dropped, SEMEVAL_LABELS) == ["Entity-Destination(e2,e1)"]
    with pytest.warns(UserWarning, match=r"cannot cover them: Entity-Destination\(e2,e1\)"):
        sample = sample_few_shot(dropped, 64, 1, labels=SEMEVAL_LABELS)
    assert len({e.label for e in sample}) == 18


def test_balanced_strategy():
    assert allocate_balanced({"a": 900, "b": 100, "c": 2}, 64) == {"a": 31, "b": 31, "c": 2}
    assert allocate_balanced({"a": 10, "b": 10}, 7) == {"a": 4, "b": 3}
    sample = sample_few_shot(population({NO_RELATION: 1000, "Kill": 20, "Work_For": 30}), 30, 4, strategy="balanced")
    assert Counter(e.label for e in sample) == {NO_RELATION: 10, "Kill": 10, "Work_For": 10}
    with pytest.raises(UserError, match="unknown few-shot strategy"):
        sample_few_shot(sample, 3, 0, strategy="uniform")


def test_conll04_re_sample_has_every_relation(data_dir):
    pairs = load_split(get_task("conll04-re"), "train", data_dir)
    counts = Counter(e.label for e in sample_few_shot(pairs, 64, 1))
    assert set(counts) == set(get_task("conll04-re").labels)
    assert counts[NO_RELATION] == 53  # proportional: 10,715 of 11,998 pairs hold no relation


def relation_examples() -> list[Example]:
    """Nineteen tiny SemEval-style examples, one per label."""
    text = "the man works for the company"
    return [Example(fields=relation_fields(text, (4, 7), (22, 29)), label=label, source=f"toy:{i + 1}")
            for i, label in enumerate(SEMEVAL_LABELS)]


def test_classifier_with_19_labels_verbalizer_and_head_loss(bert_backbone):
    torch.manual_seed(0)
    config = ClassifierConfig.create(task="semeval", method="infoprompt", backbone="tiny-bert", max_length=48)
    model = PromptClassifier(bert_backbone, config)
    assert model.head.out_features == 19 and model.config.options.gamma > 0 and model.config.options.verbalizer_init
    rows = model.head.weight.detach()
    # every row came from its label words (the verbalizer init rescales rows to one norm) ...
    expected = 0.02 * math.sqrt(rows.shape[1])
    assert torch.allclose(rows.norm(dim=-1), torch.full((19,), expected), atol=1e-5)
    # ... and the two directions of a relation start from different rows
    labels = model.config.labels
    forward, backward = labels.index("Cause-Effect(e1,e2)"), labels.index("Cause-Effect(e2,e1)")
    assert not torch.allclose(rows[forward], rows[backward])
    examples = relation_examples()
    result = train(model, examples, examples, TrainConfig(epochs=1, batch_size=8, progress=False, eval_every_epochs=0))
    assert result.steps == 3
    losses = result.last_losses
    assert all(math.isfinite(v) for v in losses.values()) and losses["head"] > 0 and losses["rep"] > 0
    assert set(result.metrics) == {"semeval_macro_f1", "accuracy"}
    assert 0.0 <= result.metrics["semeval_macro_f1"] <= 1.0
