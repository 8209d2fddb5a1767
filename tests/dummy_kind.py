"""A kind that exists only for the tests: nearest class centroid on the frozen mean-pooled states.

It is the whole of what a new kind needs: its options (a dataclass whose fields carry their flag and check), a
model class (built from a backbone and a config, loaded by ``load``), a fit, its method-table rows and its
capabilities, described by one ``KIND``, plus one registry line, ``register_kind(dummy_kind.KIND)`` (see
tests/test_kinds.py). Nothing in the package names it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from infoprompt.kinds.common import BaselineModel, finish_fit
from infoprompt.kinds.options import KindOptions
from infoprompt.kinds.readouts import mean_pool
from infoprompt.kinds.registry import SHARED_PLAIN_PASS, Kind, Method
from infoprompt.options import POSITIVE_FLOAT, option
from infoprompt.training import JsonlLog, TrainConfig, batches, encode_examples, length_sorted, prompted_batch
from infoprompt.training.contract import FitResult


@dataclass(frozen=True)
class CentroidOptions(KindOptions):
    """``centroid_scale``: the logits are minus this times the squared distances to the class centroids."""

    centroid_scale: float = option(1.0, "logits are minus this times the squared distance to each class centroid",
                                   type=POSITIVE_FLOAT)


class CentroidClassifier(BaselineModel):
    """Logits are negative squared distances to each class's mean feature, scaled."""

    def __init__(self, backbone, config):
        super().__init__(backbone, config)
        self.encoder = backbone.model  # registered, so that .to(device) moves it with the centroids
        self.centroids = nn.Parameter(torch.zeros(len(self.config.labels), backbone.hidden_size), requires_grad=False)

    @property
    def feature_width(self) -> int:
        return self.centroids.shape[1]

    def trainable_state(self) -> dict[str, torch.Tensor]:
        return {"centroids": self.centroids.detach().contiguous()}

    @torch.no_grad()
    def forward(self, batch, pooled=None):
        states = self.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        features = mean_pool(states, batch.attention_mask)
        return self.head_logits(features), features, None

    def head_logits(self, features):
        return -self.config.options.centroid_scale * torch.cdist(features, self.centroids).pow(2)


def fit_centroids(model, train_examples, eval_examples=None, config=None, log_path=None) -> FitResult:
    config = config or TrainConfig()
    started = time.perf_counter()
    train_set = encode_examples(model, train_examples)
    features = torch.zeros(len(train_set), model.backbone.hidden_size)
    for chunk in batches(length_sorted(train_set), 16):
        features[chunk] = model(prompted_batch(model, train_set, chunk))[1]
    for row in range(len(model.config.labels)):
        members = features[train_set.labels == row]
        if len(members):
            model.centroids.data[row] = members.mean(0)
    return finish_fit(model, train_set, eval_examples, config, JsonlLog(log_path), steps=1, loss=0.0, lr=None,
                      started=started, cache_seconds=0.0, train_seconds=time.perf_counter() - started)


KIND = Kind("centroid", CentroidClassifier, fit_centroids, options=CentroidOptions, capabilities={SHARED_PLAIN_PASS},
            training_options=(), methods=(
                Method("centroid", CentroidOptions(), lr=0.0, description="test-only: nearest class centroid"),
                Method("centroid-sharp", CentroidOptions(centroid_scale=4.0), lr=0.0,
                       description="test-only: sharper"),
            ))
