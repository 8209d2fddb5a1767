"""LinearProbe: a linear head on frozen, pooled embeddings of the plain input (fitted by :mod:`.fit`)."""

from __future__ import annotations

import torch
from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.kinds.common import BaselineModel
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.probe.options import ProbeOptions
from infoprompt.kinds.readouts import count_spans, mean_pool, span_pool
from infoprompt.templates import Batch, Template, TemplateEncoder

# long_text="chunk": at most this many windows of max_length tokens per input (the rest is cut and counted),
# and windows encoded per encoder call.
MAX_WINDOWS = 16
WINDOW_BATCH = 64


class LinearProbe(BaselineModel):
    """A linear head on ``pool(encoder(X))`` (its ``pooling`` option: mean over tokens or the ``[CLS]`` state;
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
        if self.pooling == "spans":
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

    @property
    def pooling(self) -> str:
        options: ProbeOptions = self.config.options
        return options.pooling

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
        if batch.input_ids.shape[1] > self.config.max_length and self.pooling != "embeddings":
            return self._window_features(batch)
        if self.pooling == "embeddings":
            return mean_pool(self.backbone.input_embeddings(batch.input_ids), batch.attention_mask)
        states = self.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        if self.pooling == "cls":
            return states[:, 0]
        if self.pooling == "spans":
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
            pooled.append(states[:, 0] if self.pooling == "cls" else mean_pool(states, mask))
        features = torch.cat(pooled)
        index = torch.tensor(owners, device=features.device)
        sums = features.new_zeros(batch.input_ids.shape[0], features.shape[1]).index_add_(0, index, features)
        return sums / torch.bincount(index, minlength=sums.shape[0]).unsqueeze(1).to(sums.dtype)

    def forward(self, batch: Batch, pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, None]:
        """Logits (B, C) and the pooled features (B, D)."""
        features = self.features(batch)
        return self.head(features), features, None
