"""Principal plane, grid shapes, landscape surfaces and recorded trajectories on a tiny random encoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infoprompt.analysis.embeddings import ordinary_rows, principal_plane
from infoprompt.analysis.landscape import LandscapeEvaluator, auto_extent, grid_axis
from infoprompt.analysis.trajectory import TrajectoryConfig, prompt_vector, record_trajectory
from infoprompt.errors import UserError
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.prompt.model import PromptClassifier
from infoprompt.training import cache_features, encode_examples

# Small tensors: a second intra-op thread only adds contention on the shared CPU.
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(backbone, method: str = "infoprompt", n_prompts: int = 1, **overrides) -> PromptClassifier:
    config = ClassifierConfig.create(
        task="sst2",
        method=method,
        backbone="tiny-bert",
        n_prompts=n_prompts,
        n_negatives=4,
        rank=4,
        max_length=48,
        **overrides,
    )
    return PromptClassifier(backbone, config)


def test_principal_plane_finds_the_directions_of_largest_variance():
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(4000, 6, generator=g) * torch.tensor([0.5, 3.0, 0.3, 2.0, 0.2, 0.1]) + 5.0
    plane = principal_plane(rows)
    assert plane.axes.shape == (2, 6) and plane.origin.shape == (6,)
    assert abs(float(plane.axes[0, 1])) > 0.99 and abs(float(plane.axes[1, 3])) > 0.99
    torch.testing.assert_close(plane.axes @ plane.axes.T, torch.eye(2), atol=1e-5, rtol=0)
    assert float(plane.variance[0]) == pytest.approx(9.0, rel=0.1)
    assert float(plane.explained.sum()) < 1.0


def test_grid_points_have_grid_shape_and_project_back_to_their_offsets(bert_backbone):
    plane = principal_plane(ordinary_rows(bert_backbone))
    xs, ys = torch.from_numpy(grid_axis(1.5, 5)), torch.from_numpy(grid_axis(1.5, 3))
    points = plane.points(xs, ys)
    assert points.shape == (3, 5, bert_backbone.hidden_size)
    coordinates = plane.project(points)
    assert coordinates.shape == (3, 5, 2)
    torch.testing.assert_close(coordinates[..., 0], xs.float().expand(3, 5), atol=1e-4, rtol=0)
    torch.testing.assert_close(coordinates[..., 1], ys.float().unsqueeze(1).expand(3, 5), atol=1e-4, rtol=0)
    with pytest.raises(UserError):
        grid_axis(1.0, 1)
    assert auto_extent(np.array([[3.0, -4.0]]), spread=0.5) == pytest.approx(4.6)


def test_surfaces_have_grid_shape_and_do_not_depend_on_how_points_are_batched(bert_backbone, toy_examples):
    model = tiny(bert_backbone)
    plane = principal_plane(ordinary_rows(bert_backbone))
    xs, ys = grid_axis(1.0, 4), grid_axis(1.0, 3)
    grid = plane.points(torch.from_numpy(xs), torch.from_numpy(ys))
    one = LandscapeEvaluator(model, toy_examples[:6], noise_seed=0, points_per_pass=1).surfaces(
        grid, xs, ys, False
    )
    many = LandscapeEvaluator(model, toy_examples[:6], noise_seed=0, points_per_pass=5).surfaces(
        grid, xs, ys, False
    )
    assert one.task.shape == (3, 4) and one.rep.shape == (3, 4)
    assert np.isfinite(one.task).all() and np.isfinite(one.rep).all()
    np.testing.assert_allclose(one.task, many.task, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(one.rep, many.rep, rtol=1e-4, atol=1e-5)
    assert one.task.std() > 0  # the prompt changes the loss


def test_landscape_refuses_more_than_one_prompt_token(bert_backbone, toy_examples):
    with pytest.raises(UserError, match="one prompt token"):
        LandscapeEvaluator(tiny(bert_backbone, n_prompts=2), toy_examples[:4])


def test_trajectory_records_the_prompt_before_and_after_every_step(bert_backbone, toy_examples):
    model = tiny(bert_backbone)
    probe = encode_examples(model, toy_examples[:5])
    cache_features(model, probe, 8)
    start = prompt_vector(model, probe)
    trajectory = record_trajectory(
        model, toy_examples, toy_examples[:5], TrajectoryConfig(steps=3, batch_size=4, progress=False)
    )
    assert trajectory.prompts.shape == (4, bert_backbone.hidden_size)
    np.testing.assert_allclose(trajectory.prompts[0], start.numpy())
    assert not np.allclose(trajectory.prompts[1], trajectory.prompts[0])
    assert set(trajectory.losses) >= {"total", "pred", "rep", "head"} and trajectory.losses["pred"].shape == (
        3,
    )
    assert trajectory.losses["head"].max() > 0  # the head loss is on (γ = 0.05)


def test_static_prompt_trajectory_is_the_prompt_itself(bert_backbone, toy_examples):
    model = tiny(bert_backbone, method="warp")
    trajectory = record_trajectory(
        model, toy_examples, toy_examples[:3], TrajectoryConfig(steps=2, batch_size=8, progress=False)
    )
    np.testing.assert_allclose(trajectory.prompts[-1], model.prompt.weight[0].detach().numpy(), atol=1e-6)
