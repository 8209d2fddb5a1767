"""``linear-probe``: logistic regression on frozen, mean-pooled embeddings of the plain input."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.kinds.common import BaselineModel, finish_fit, write_adapter
from infoprompt.kinds.config import ClassifierConfig, count_spans, read_weights
from infoprompt.kinds.readouts import mean_pool, span_pool
from infoprompt.kinds.registry import Kind, Method
from infoprompt.logistic import (
    REGULARISATION_C,
    fit_logistic_head,
    fit_one_vs_rest_head,
    head_from_sklearn,
    pick_threshold,
)
from infoprompt.tasks import Example, is_multi_label
from infoprompt.templates import Batch, Template, TemplateEncoder
from infoprompt.training.config import TrainConfig
from infoprompt.training.contract import FitResult
from infoprompt.training.data import batches, encode_examples, length_sorted, prompted_batch
from infoprompt.training.loop import JsonlLog
from infoprompt.training.runtime import autocast, resolve_device

# long_text="chunk": at most this many windows of max_length tokens per input (the rest is cut and counted),
# and windows encoded per encoder call.
MAX_WINDOWS = 16
WINDOW_BATCH = 64

__all__ = ["LinearProbe", "fit_linear_probe", "head_from_sklearn", "span_pool"]


class LinearProbe(BaselineModel):
    """A linear head on ``pool(encoder(X))`` (``config.pooling``: mean over tokens or the ``[CLS]`` state;
    ``embeddings``, the mean input embedding, a bag-of-embeddings probe without an encoder pass; or ``spans``
    for span tasks: the mean state of each entity mention of the template, concatenated, so that the probe
    knows which entities of the sentence are meant).

    The head is fitted by logistic regression (:func:`fit_linear_probe`), then lives as an ordinary
    ``nn.Linear`` so evaluation and prediction run through :mod:`infoprompt.training` like every other method.
    """

    def __init__(self, backbone: Backbone, config: ClassifierConfig):
        super().__init__(backbone, config)
        self.encoder = backbone.model  # registered: .to(device) moves it and parameter counts include it
        n_spans = 1
        if self.config.pooling == "spans":
            n_spans = count_spans(Template.parse(self.config.template))
            if not n_spans:
                raise UserError(f"pooling 'spans' needs a template with entity fields ({{name:keep}}); task "
                                f"{self.task.name}'s template {self.config.template!r} has none")
        if self.config.long_text == "chunk":
            self._read_windows()
        self.head = nn.Linear(backbone.hidden_size * n_spans, len(self.config.labels))
        with torch.no_grad():
            self.head.weight.zero_()
            self.head.bias.zero_()
        self.to(backbone.device)

    def _read_windows(self) -> None:
        """``long_text="chunk"``: encode inputs up to ``MAX_WINDOWS`` windows long; :meth:`features` splits them."""
        template = Template.parse(self.config.template)
        if len(template.fields) != 1:
            raise UserError(f"long_text 'chunk' reads one text per example; template {self.config.template!r} "
                            f"has {len(template.fields)} fields")
        self.template_encoder = TemplateEncoder(self.backbone.tokenizer, template, 0,
                                                self.config.max_length * MAX_WINDOWS, self.config.truncate)

    def train(self, mode: bool = True) -> LinearProbe:
        super().train(mode)
        self.encoder.eval()  # frozen: no dropout, deterministic features
        return self

    @torch.no_grad()
    def features(self, batch: Batch) -> torch.Tensor:
        if batch.input_ids.shape[1] > self.config.max_length and self.config.pooling != "embeddings":
            return self._window_features(batch)
        if self.config.pooling == "embeddings":
            return mean_pool(self.backbone.input_embeddings(batch.input_ids), batch.attention_mask)
        states = self.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        if self.config.pooling == "cls":
            return states[:, 0]
        if self.config.pooling == "spans":
            return span_pool(states, batch.span_positions, batch.span_mask)
        return mean_pool(states, batch.attention_mask)

    def _window_features(self, batch: Batch) -> torch.Tensor:
        """The mean over windows of each input's pooled features: its text cut into pieces of ``max_length``
        tokens, each framed by the input's first and last token ([CLS] ... [SEP]) and encoded on its own."""
        width = self.config.max_length - 2
        windows: list[torch.Tensor] = []
        owners: list[int] = []
        for row, length in enumerate(batch.attention_mask.sum(1).tolist()):
            ids = batch.input_ids[row, :length]
            body = ids[1:-1]
            for start in range(0, max(len(body), 1), width):
                windows.append(torch.cat([ids[:1], body[start:start + width], ids[-1:]]))
                owners.append(row)
        pooled = []
        pad = self.backbone.tokenizer.pad_token_id or 0
        for first in range(0, len(windows), WINDOW_BATCH):
            group = windows[first:first + WINDOW_BATCH]
            ids = nn.utils.rnn.pad_sequence(group, batch_first=True, padding_value=pad)
            mask = nn.utils.rnn.pad_sequence([torch.ones_like(w) for w in group], batch_first=True)
            states = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled.append(states[:, 0] if self.config.pooling == "cls" else mean_pool(states, mask))
        features = torch.cat(pooled)
        index = torch.tensor(owners, device=features.device)
        sums = features.new_zeros(batch.input_ids.shape[0], features.shape[1]).index_add_(0, index, features)
        return sums / torch.bincount(index, minlength=sums.shape[0]).unsqueeze(1).to(sums.dtype)

    def forward(self, batch: Batch, pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, None]:
        """Logits (B, C) and the pooled features (B, D)."""
        features = self.features(batch)
        return self.head(features), features, None

    def set_head(self, weight: np.ndarray, bias: np.ndarray) -> None:
        with torch.no_grad():
            self.head.weight.copy_(torch.as_tensor(weight, dtype=self.head.weight.dtype))
            self.head.bias.copy_(torch.as_tensor(bias, dtype=self.head.bias.dtype))

    def save_pretrained(self, directory: str | Path) -> None:
        write_adapter(Path(directory), self.trainable_state(), self.config)

    @classmethod
    def load(cls, directory: Path, config: ClassifierConfig, backbone: Backbone) -> LinearProbe:
        model = cls(backbone, config)
        model.load_state_dict(read_weights(directory, model.trainable_state()), strict=False)
        return model.eval()


def fit_linear_probe(
    model: LinearProbe,
    train_examples: Sequence[Example],
    eval_examples: Sequence[Example] | None = None,
    config: TrainConfig | None = None,
    log_path: Path | None = None,
) -> FitResult:
    """Fit the head by logistic regression; returns its :class:`~infoprompt.training.contract.FitResult`."""

    config = config or TrainConfig()
    started = time.perf_counter()
    train_set = encode_examples(model, train_examples)
    if train_set.labels is None:
        raise UserError("training examples must all be labelled")
    device = resolve_device(config.device)
    model.to(device).eval()
    features = torch.empty(len(train_set), model.head.in_features)
    with autocast(device, config.precision):
        for chunk in batches(length_sorted(train_set), config.eval_batch_size):
            features[chunk] = model.features(prompted_batch(model, train_set, chunk)).float().cpu()
    cache_seconds = time.perf_counter() - started

    fit_started = time.perf_counter()
    labels = train_set.labels.numpy()
    extra: dict[str, object] = {}
    if is_multi_label(model.task):
        weight, bias, iterations, model.config.threshold = fit_multi_label(features.numpy(), labels, config)
        extra = {"threshold": model.config.threshold}
    else:
        weight, bias, iterations = fit_logistic_head(features.numpy(), labels, len(model.config.labels), config.seed)
    model.set_head(weight, bias)
    fit_seconds = time.perf_counter() - fit_started
    with torch.no_grad():
        logits, targets = model.head(features.to(device)), train_set.labels.to(device)
        loss = nn.functional.binary_cross_entropy_with_logits if extra else nn.functional.cross_entropy
        train_loss = float(loss(logits, targets))
    log = JsonlLog(log_path)
    log.write({"type": "fit", "step": iterations, "loss_total": train_loss, "loss_pred": train_loss, "C": REGULARISATION_C,
               **extra})

    return finish_fit(model, train_set, eval_examples, config, log, steps=iterations, loss=train_loss, lr=None,
                      started=started, cache_seconds=cache_seconds, train_seconds=fit_seconds)


def fit_multi_label(features: np.ndarray, targets: np.ndarray, config: TrainConfig) -> tuple[np.ndarray, np.ndarray, int, float]:
    """One-vs-rest logistic regression on the whole draw, with the decision threshold picked on a seeded
    held-out slice (``holdout_fraction`` of the examples, at least one) by a fit on the rest."""
    order = np.random.default_rng(config.seed).permutation(len(features))
    held = order[: max(1, round(config.holdout_fraction * len(features)))]
    kept = order[len(held):]
    threshold = 0.5
    if len(kept):
        weight, bias, _ = fit_one_vs_rest_head(features[kept], targets[kept], config.seed)
        probabilities = 1 / (1 + np.exp(-(features[held] @ weight.T + bias)))
        threshold = pick_threshold(probabilities, targets[held])
    weight, bias, iterations = fit_one_vs_rest_head(features, targets, config.seed)
    return weight, bias, iterations, threshold


KIND = Kind("linear-probe", LinearProbe, fit_linear_probe, methods=(
    Method("linear-probe", None, "none", "cls", 0.0, 0.0, False, 0.0, kind="linear-probe", table_order=11,
           description="logistic regression on frozen mean-pooled embeddings (lr unused)"),
))
