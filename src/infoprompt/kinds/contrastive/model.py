"""ContrastivePromptClassifier: generated prompts whose prompted features start at the plain pass's mean pool and
move by a learnt gate, trained with a label-aware InfoNCE (and, as options, the paper's two terms)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.contrastive.methods import KIND_NAME
from infoprompt.kinds.prompt.model import PromptClassifier
from infoprompt.templates import Batch
from infoprompt.training.contract import LossTerms

# The gate is read as GATE_SCALE · g: Adam moves g by about the learning rate per step whatever the gradient's
# size, so at lr 1e-3 the prompted share can reach tenths within the few dozen steps a 64-shot run takes.
GATE_SCALE = 10.0


def label_info_nce(features: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """Label-aware InfoNCE over a batch (supervised contrastive loss): for every example with another example of
    its label in the batch, the mean over those positives of ``-log(e^{s_ip/τ} / Σ_{a≠i} e^{s_ia/τ})`` with
    cosine similarities ``s``; the batch mean over such anchors (0 when the batch has none)."""
    normalised = F.normalize(features.float(), dim=-1)
    scores = normalised @ normalised.T / temperature
    self_mask = torch.eye(len(labels), dtype=torch.bool, device=features.device)
    scores = scores.masked_fill(self_mask, float("-inf"))
    log_probability = scores - torch.logsumexp(scores, dim=-1, keepdim=True)
    positives = (labels.unsqueeze(0) == labels.unsqueeze(1)) & ~self_mask
    counts = positives.sum(-1)
    anchors = counts > 0
    if not anchors.any():
        return features.sum() * 0.0  # still a function of the features: the step's backward has a graph
    per_anchor = -(log_probability.masked_fill(~positives, 0.0).sum(-1)[anchors] / counts[anchors])
    return per_anchor.mean().to(features.dtype)


class ContrastivePromptClassifier(PromptClassifier):
    """IDPG-placed generated prompts (read from the no-prompt mean pool ``P'``) and a head on
    ``z = P' + GATE_SCALE · g · (readout(prompted pass) − P')`` with the scalar gate ``g`` starting at 0.

    ``P'`` is the linear probe's feature (the plain input, mean-pooled), so before any training step the
    logistic head fitted on ``z`` is the linear probe, and held-out selection's "0 epochs" is the probe itself.
    On span tasks the readout is the mentions' states, concatenated, and ``P'`` is repeated once per mention.
    Training minimises the label-aware InfoNCE of ``z`` (logged as ``pred``) plus the configured β and γ terms;
    the head takes no part in it and is refitted by logistic regression after every epoch.
    """

    KIND_NAME = KIND_NAME

    def __init__(self, backbone: Backbone, config: ClassifierConfig):
        if config.options.pooling != "mean":
            raise UserError(f"method {config.method} starts at the plain mean pool; pooling "
                            f"{config.options.pooling!r} is not available")
        super().__init__(backbone, config)
        self.gate = nn.Parameter(torch.zeros((), device=backbone.device))

    def forward(self, batch: Batch, pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if pooled is None:
            raise ValueError("the contrastive prompted pass needs the plain mean pool P'")
        prompts = self.prompt(batch.input_ids.shape[0], pooled)
        prompted = self.features(self.encode_states(batch, prompts), batch)
        start = pooled.to(prompted.dtype).repeat(1, prompted.shape[-1] // pooled.shape[-1])
        z = start + GATE_SCALE * self.gate * (prompted - start)
        return self.head(z), z, prompts

    def losses(self, batch: Batch, labels: torch.Tensor, pooled: torch.Tensor | None, z_plain: torch.Tensor | None,
               generator: torch.Generator | None = None) -> LossTerms:
        logits, z, prompts = self(batch, pooled)
        contrastive = label_info_nce(z, labels, self.options.temperature)
        return self.with_information_terms(contrastive, batch, logits, z, prompts, z_plain, len(labels), generator)
