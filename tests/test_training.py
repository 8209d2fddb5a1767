"""Training: determinism for a seed, the feature cache changes nothing but speed, the log records every step."""

from __future__ import annotations

import json

import pytest
import torch

from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.training import Saturation, TrainConfig, train


def run(backbone, examples, seed=3, method="infoprompt", **overrides):
    model = build_classifier(RunSpec(task="sst2", method=method, seed=seed, classifier={"max_length": 48}), backbone)
    config = TrainConfig(epochs=2, batch_size=4, seed=seed, progress=False, **overrides)
    return model, train(model, examples, examples[:8], config)


def test_same_seed_same_numbers(bert_backbone, toy_examples):
    _, first = run(bert_backbone, toy_examples)
    _, second = run(bert_backbone, toy_examples)
    _, third = run(bert_backbone, toy_examples, seed=4)
    assert first.metrics == second.metrics and first.last_losses == second.last_losses
    assert first.last_losses != third.last_losses


def test_feature_cache_matches_recomputation(bert_backbone, toy_examples):
    cached_model, cached = run(bert_backbone, toy_examples)
    fresh_model, fresh = run(bert_backbone, toy_examples, feature_cache=False)
    for name in ("pred", "rep", "head"):
        assert cached.last_losses[name] == pytest.approx(fresh.last_losses[name], rel=1e-4, abs=1e-5)
    for a, b in zip(cached_model.parameters(), fresh_model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-4)


def test_log_has_every_step_and_evaluations(bert_backbone, toy_examples, tmp_path):
    model = build_classifier(RunSpec(task="sst2", method="infoprompt", classifier={"max_length": 48}), bert_backbone)
    log = tmp_path / "log.jsonl"
    result = train(model, toy_examples, toy_examples[:6], TrainConfig(epochs=3, batch_size=8, eval_every=3, progress=False), log)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [r for r in records if r["type"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 7)) and result.steps == 6
    assert {"loss_total", "loss_pred", "loss_rep", "loss_head"} <= set(steps[0])
    assert [r["step"] for r in records if r["type"] == "eval"] == [3, 6]
    assert records[-1]["type"] == "final_eval" and records[-1]["n_eval"] == 6


@pytest.mark.slow
def test_minilm_learns_sst2(minilm, data_dir):
    """On the real encoder a few epochs of InfoPrompt lower the task loss and beat chance on held-out dev rows."""
    from infoprompt.tasks import get_task, load_split, sample_few_shot

    task = get_task("sst2")
    shots = sample_few_shot(load_split(task, "train", data_dir), 32, seed=1)
    dev = load_split(task, "dev", data_dir)[:128]
    model = build_classifier(RunSpec(task="sst2", method="infoprompt", seed=1), minilm)
    result = train(model, shots, dev, TrainConfig(epochs=6, batch_size=8, seed=1, progress=False, eval_every_epochs=0))
    assert result.last_losses["pred"] < 0.3
    assert result.metrics["accuracy"] > 0.6


def test_max_steps(bert_backbone, toy_examples):
    _, result = run(bert_backbone, toy_examples, max_steps=3)
    assert result.steps == 3


def test_saturation_skips_a_batch_of_one_which_has_no_in_batch_bound():
    saturation = Saturation()
    saturation.update(1, {"mi_head": 0.5, "mi_head_cap": 1.0})
    saturation.update(2, {"mi_head": 0.0, "mi_head_cap": 0.0})  # log(1): one example, no negative
    saturation.end_epoch()
    assert saturation.summary()["mi_head"] == {"cap": 1.0, "last_epoch_bound": 0.5, "last_epoch_share_of_cap": 0.5,
                                               "saturated_at_step": None}
