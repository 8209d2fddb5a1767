"""The recommended recipe's parts: in-batch MI estimator, text-mean and span readouts, probe warm start,
held-out epoch selection that never reads the evaluation split, and the saturation log."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from infoprompt.kinds.prompt.objectives import Bilinear, HeadMI, RepresentationMI, in_batch_info_nce
from infoprompt.kinds.readouts import count_spans, text_mean
from infoprompt.logistic import REGULARISATION_C, head_from_sklearn
from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.tasks import Example
from infoprompt.training import (
    TrainConfig,
    encode_examples,
    generator_inputs,
    holdout_split,
    prompted_batch,
    train,
    warm_start_head,
)

# -- estimator ------------------------------------------------------------------------------------------------


def test_in_batch_bound_is_zero_when_every_prompt_is_the_same():
    # Identical prompts carry no information about the example: the bound must be exactly 0, not log(K+1).
    critic = Bilinear(8)
    prompts = torch.randn(1, 8).expand(6, -1)
    targets = torch.randn(6, 8)
    loss = in_batch_info_nce(critic.pairwise(prompts, targets))
    assert torch.allclose(math.log(6) - loss, torch.zeros(6), atol=1e-5)


def test_in_batch_bound_stays_low_for_unrelated_prompts():
    # Prompts drawn independently of the targets: on average the bound is far below its cap log(B).
    generator = torch.Generator().manual_seed(0)
    critic = Bilinear(16)
    bounds = []
    for _ in range(200):
        prompts = torch.randn(8, 16, generator=generator)
        targets = torch.randn(8, 16, generator=generator)
        with torch.no_grad():
            bounds.append(math.log(8) - in_batch_info_nce(critic.pairwise(prompts, targets)).mean())
    assert float(torch.stack(bounds).mean()) < 0.1 * math.log(8)


def test_in_batch_bound_approaches_the_cap_when_the_target_is_the_prompt():
    critic = Bilinear(16)
    prompts = torch.randn(8, 16, generator=torch.Generator().manual_seed(1)) * 10
    bound = math.log(8) - in_batch_info_nce(critic.pairwise(prompts, prompts)).mean()
    assert bound > 0.95 * math.log(8)


def test_paper_head_estimator_saturates_where_in_batch_does_not():
    # The paper's negatives are token embeddings; prompts far from them are told apart at once. The same
    # (example-independent) prompts give an in-batch bound of zero.
    hidden = 16
    head_mi = HeadMI(hidden, "mean")
    prompt = torch.full((4, hidden), 5.0)
    head_weight = torch.full((2, hidden), 5.0)
    logits = torch.zeros(4, 2)
    negatives = torch.randn(4, 31, hidden, generator=torch.Generator().manual_seed(2)) * 0.1
    paper_bound = math.log(32) - head_mi(prompt, logits, head_weight, negatives).mean()
    with torch.no_grad():
        batch_bound = math.log(4) - head_mi.in_batch(prompt, logits, head_weight).mean()
    assert paper_bound > 0.95 * math.log(32)
    assert abs(float(batch_bound)) < 1e-5


def test_pairwise_scores_match_the_elementwise_critic():
    critic = Bilinear(6, 12)
    with torch.no_grad():
        critic.weight.normal_()
    left, right = torch.randn(5, 6), torch.randn(5, 12)
    with torch.no_grad():
        matrix = critic.pairwise(left, right)
    for i in range(5):
        for j in range(5):
            assert matrix[i, j] == pytest.approx(float(critic(left[j], right[i]).detach()), rel=1e-5, abs=1e-6)


def test_in_batch_representation_term_needs_no_plain_states():
    rep = RepresentationMI(8, 16)
    loss, kl = rep.in_batch(torch.randn(4, 8), torch.randn(4, 16), torch.Generator().manual_seed(0))
    assert loss.shape == (4,) and kl.shape == (4,) and torch.isfinite(loss).all()


# -- readouts ---------------------------------------------------------------------------------------------------


def test_text_mean_readout_is_the_mean_over_text_tokens_only(bert_backbone):
    model = build_classifier(RunSpec(task="sst2", method="infoprompt-plus", classifier={"max_length": 48}), bert_backbone)
    assert model.config.options.readout == "mean"
    examples = [Example({"sentence": "a great movie"}, "positive"), Example({"sentence": "boring dull plot and bad story"}, "negative")]
    encoded = encode_examples(model, examples)
    batch = prompted_batch(model, encoded, [0, 1])
    states = torch.randn(*batch.input_ids.shape, 7).to(batch.input_ids.device)
    tokenizer = bert_backbone.tokenizer
    for row, example in enumerate(examples):
        text_ids = tokenizer(example.fields["sentence"], add_special_tokens=False)["input_ids"]
        ids = batch.input_ids[row].tolist()
        start = next(i for i in range(len(ids)) if ids[i : i + len(text_ids)] == text_ids)
        expected = states[row, start : start + len(text_ids)].mean(0)
        got = text_mean(states, batch.context_positions, batch.context_mask)[row]
        assert torch.allclose(got, expected, atol=1e-6)


def test_span_readout_on_relation_tasks_reads_both_mentions(bert_backbone):
    model = build_classifier(RunSpec(task="semeval", method="infoprompt-plus", classifier={"max_length": 60}), bert_backbone)
    assert model.config.options.readout == "spans"
    # The span probe's features: every marked mention of the template (the pair in the sentence and again
    # around the mask), concatenated.
    assert count_spans(model.template) == 4
    assert model.head.in_features == 4 * bert_backbone.hidden_size


def test_paper_presets_keep_the_mask_readout(bert_backbone):
    for method in ("infoprompt", "infoprompt-ce", "warp"):
        model = build_classifier(RunSpec(task="sst2", method=method, classifier={"max_length": 48}), bert_backbone)
        assert model.config.options.readout == "mask" and model.config.options.mi_negatives == "paper"


def test_a_readout_any_prompt_method_can_take(bert_backbone):
    model = build_classifier(RunSpec(task="sst2", method="warp", classifier={"readout": "mean", "max_length": 48}), bert_backbone)
    assert model.config.options.readout == "mean"
    from infoprompt.errors import UserError

    with pytest.raises(UserError, match="spans"):
        build_classifier(RunSpec(task="sst2", method="warp", classifier={"readout": "spans", "max_length": 48}), bert_backbone)


# -- warm start and selection ----------------------------------------------------------------------------------


def test_warm_start_makes_the_head_the_logistic_regression_solution(bert_backbone, toy_examples):
    model = build_classifier(RunSpec(task="sst2", method="infoprompt-plus", classifier={"max_length": 48}), bert_backbone)
    encoded = encode_examples(model, toy_examples)
    warm_start_head(model, encoded, 64, seed=0, precision="fp32")
    with torch.no_grad():
        every = list(range(len(encoded)))
        logits, z, _ = model(prompted_batch(model, encoded, every), generator_inputs(model, encoded, every))
    z, logits = z.double().cpu().numpy(), logits.cpu()  # the model may be on a GPU that a training run left it on
    reference = LogisticRegression(C=REGULARISATION_C, max_iter=2000, random_state=0).fit(z, encoded.labels.numpy())
    weight, bias = head_from_sklearn(reference, 2)
    assert np.allclose(logits.softmax(-1).numpy(), reference.predict_proba(z), atol=1e-4)
    assert np.allclose(model.head.weight.detach().cpu().numpy(), weight, atol=1e-5)


def test_holdout_split_is_stratified_disjoint_and_seeded():
    labels = [0] * 12 + [1] * 4 + [2]
    fit, held = holdout_split(labels, 0.25, seed=3)
    assert sorted(fit + held) == list(range(len(labels))) and not set(fit) & set(held)
    assert [labels[i] for i in held].count(0) == 3 and [labels[i] for i in held].count(1) == 1
    assert 16 in fit  # a class of one is never held out
    assert holdout_split(labels, 0.25, seed=3) == (fit, held)
    assert holdout_split(labels, 0.25, seed=4) != (fit, held)


class WatchedExamples(list):
    """An evaluation split that records how many training steps were logged when it was first read."""

    def __init__(self, examples, log_path):
        super().__init__(examples)
        self.log_path = log_path
        self.steps_logged_at_first_read: int | None = None

    def _seen(self):
        if self.steps_logged_at_first_read is None:
            lines = self.log_path.read_text().splitlines() if self.log_path.exists() else []
            self.steps_logged_at_first_read = sum(json.loads(line)["type"] == "step" for line in lines)

    def __iter__(self):
        self._seen()
        return super().__iter__()

    def __getitem__(self, index):
        self._seen()
        return super().__getitem__(index)


def plus_run(backbone, examples, eval_examples, log_path, epochs=3):
    model = build_classifier(RunSpec(task="sst2", method="infoprompt-plus", seed=5, classifier={"max_length": 48}), backbone)
    config = TrainConfig(epochs=epochs, batch_size=4, seed=5, progress=False)
    return model, train(model, examples, eval_examples, config, log_path)


def test_selection_never_reads_the_evaluation_split_before_training_ends(bert_backbone, toy_examples, tmp_path):
    dev = [dataclasses.replace(e, source=f"dev:{i}") for i, e in enumerate(toy_examples[:8])]
    watched = WatchedExamples(dev, tmp_path / "log.jsonl")
    _, result = plus_run(bert_backbone, toy_examples, watched, tmp_path / "log.jsonl")
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert watched.steps_logged_at_first_read == sum(r["type"] == "step" for r in records) > 0
    assert not [r for r in records if r["type"] == "eval"]  # no periodic dev evaluation under selection
    assert [r["epoch"] for r in records if r["type"] == "holdout"] == [0, 1, 2, 3]
    selection = result.selection
    assert selection["n_fit"] + selection["n_holdout"] == len(toy_examples)
    assert selection["epochs"] in (0, 1, 2, 3) and result.steps == selection["epochs"] * 4


def test_dev_labels_cannot_change_the_trained_adapter(bert_backbone, toy_examples, tmp_path):
    flip = {"positive": "negative", "negative": "positive"}
    dev = toy_examples[:8]
    flipped = [dataclasses.replace(e, label=flip[e.label]) for e in dev]
    first, a = plus_run(bert_backbone, toy_examples, dev, tmp_path / "a.jsonl")
    second, b = plus_run(bert_backbone, toy_examples, flipped, tmp_path / "b.jsonl")
    assert a.selection == b.selection
    for (name, p), (_, q) in zip(first.trainable_state().items(), second.trainable_state().items(), strict=True):
        assert torch.equal(p, q), name
    assert a.metrics["accuracy"] == pytest.approx(1 - b.metrics["accuracy"])


def test_refit_equals_a_plain_run_of_the_selected_epochs(bert_backbone, toy_examples, tmp_path):
    selected, result = plus_run(bert_backbone, toy_examples, toy_examples[:4], tmp_path / "s.jsonl")
    epochs = result.selection["epochs"]
    plain = build_classifier(RunSpec(task="sst2", method="infoprompt-plus", seed=5, classifier={"max_length": 48}), bert_backbone)
    train(plain, toy_examples, None, TrainConfig(epochs=epochs, batch_size=4, seed=5, progress=False, select="none"))
    for (name, p), (_, q) in zip(selected.trainable_state().items(), plain.trainable_state().items(), strict=True):
        assert torch.allclose(p, q, atol=1e-6), name


def test_log_and_result_show_information_term_saturation(bert_backbone, toy_examples, tmp_path):
    for method, cap in (("infoprompt", math.log(33)), ("infoprompt-plus", math.log(4))):
        model = build_classifier(RunSpec(task="sst2", method=method, classifier={"max_length": 48}), bert_backbone)
        log = tmp_path / f"{method}.jsonl"
        result = train(model, toy_examples, None, TrainConfig(epochs=2, batch_size=4, progress=False, select="none"), log)
        steps = [json.loads(line) for line in log.read_text().splitlines() if json.loads(line)["type"] == "step"]
        assert steps[0]["mi_rep_cap"] == pytest.approx(cap)
        assert all(r["mi_rep"] <= r["mi_rep_cap"] + 1e-6 for r in steps)
        assert set(result.information) == {"mi_rep", "mi_head"}
        assert result.information["mi_rep"]["cap"] == pytest.approx(cap)


def test_span_readout_trains_and_evaluates_on_a_relation_task(bert_backbone, tmp_path):
    # Concatenated mentions make Z' several hidden sizes wide: the no-prompt cache and the store must follow.
    from infoprompt.tasks.relation import SEMEVAL_LABELS
    from infoprompt.tasks.spans import relation_fields

    text = "the man works for the company"
    examples = [Example(fields=relation_fields(text, (4, 7), (22, 29)), label=label, source=f"toy:{i + 1}")
                for i, label in enumerate(SEMEVAL_LABELS)]
    model = build_classifier(RunSpec(task="semeval", method="infoprompt-plus", classifier={"max_length": 48}), bert_backbone)
    config = TrainConfig(epochs=1, batch_size=8, progress=False, select="none", feature_store_dir=str(tmp_path))
    result = train(model, examples, examples, config)
    assert result.steps == 3 and set(result.metrics) == {"semeval_macro_f1", "accuracy"}
    assert result.eval_feature_store == "miss"
