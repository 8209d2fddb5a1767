"""InfoNCE against hand-computed values, the log(K+1) bound, and the two MI objectives."""

from __future__ import annotations

import math

import torch

from infoprompt.kinds.prompt.objectives import (
    HeadMI,
    RepresentationMI,
    info_nce,
    mi_lower_bound,
    sample_context_negatives,
)


def test_info_nce_hand_computed():
    positive = torch.tensor([2.0])
    negatives = torch.tensor([[0.0, 1.0]])
    expected = -math.log(math.exp(2) / (math.exp(2) + math.exp(0) + math.exp(1)))
    assert math.isclose(float(info_nce(positive, negatives)), expected, rel_tol=1e-6)
    # equal scores: the positive is one of K+1 equals
    assert math.isclose(float(info_nce(torch.zeros(1), torch.zeros(1, 31))), math.log(32), rel_tol=1e-6)


def test_bound_never_exceeds_log_k_plus_one():
    torch.manual_seed(0)
    for scale in (0.1, 10.0, 1000.0):
        positive = torch.randn(64) * scale + scale
        negatives = torch.randn(64, 32) * scale
        bound = mi_lower_bound(info_nce(positive, negatives), 32)
        assert torch.all(bound <= math.log(33) + 1e-6)
        assert torch.all(info_nce(positive, negatives) >= 0)


def test_head_mi_uses_predicted_head_summary():
    torch.manual_seed(0)
    head = HeadMI(4)
    logits = torch.tensor([[10.0, -10.0]])
    weight = torch.randn(2, 4)
    assert torch.allclose(head.summarise(logits, weight), weight[0:1], atol=1e-6)
    assert torch.allclose(HeadMI(4, "mean").summarise(logits, weight), weight.mean(0, keepdim=True))
    loss = head(torch.randn(1, 4), logits, weight, torch.randn(1, 31, 4))
    assert loss.shape == (1,) and float(loss.detach()) >= 0


def test_representation_mi_shapes_and_seeded_noise():
    torch.manual_seed(0)
    rep = RepresentationMI(8)
    args = (torch.randn(3, 8), torch.randn(3, 8), torch.randn(3, 8), 32)
    a, kl = rep(*args, generator=torch.Generator().manual_seed(1))
    b, _ = rep(*args, generator=torch.Generator().manual_seed(1))
    assert a.shape == (3,) and kl.shape == (3,) and torch.equal(a, b)
    assert torch.all(kl >= 0)


def test_context_negatives_come_only_from_context_tokens():
    embeddings = torch.nn.Embedding(10, 2)
    input_ids = torch.tensor([[1, 7, 8, 0], [1, 9, 0, 0]])
    positions = torch.tensor([[1, 2], [1, 0]])
    mask = torch.tensor([[True, True], [True, False]])
    picked = sample_context_negatives(embeddings, input_ids, positions, mask, 50, torch.Generator().manual_seed(0))
    first = {tuple(v.tolist()) for v in picked[0]}
    assert first <= {tuple(embeddings.weight[7].tolist()), tuple(embeddings.weight[8].tolist())} and len(first) == 2
    assert {tuple(v.tolist()) for v in picked[1]} == {tuple(embeddings.weight[9].tolist())}
