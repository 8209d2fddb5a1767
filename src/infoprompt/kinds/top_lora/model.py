"""The top-lora model: LoRA in the top k blocks of the shared encoder, mean pooling and a logistic head, saved as
setfit-lora saves (peft's LoRA layout, the head's arrays, settings and config)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.lora_layers import lora_config
from infoprompt.kinds.setfit import HEAD_C_GRID
from infoprompt.kinds.setfit_lora import SetFitLoraClassifier
from infoprompt.kinds.top_lora.blocks import check_top_layers, encoder_blocks
from infoprompt.kinds.top_lora.options import DEFAULT_TOP_LAYERS, TopLoraOptions
from infoprompt.templates import Batch, Template
from infoprompt.validation import positive_number


@dataclass(frozen=True)
class TopLoraSettings:
    """What top-lora trains and how, as its fit reads them and the adapter saves them (``setfit_lora_config.json``,
    as setfit-lora's): the adapter's :class:`~infoprompt.kinds.top_lora.options.TopLoraOptions` with
    ``top_layers`` made concrete, LoRA's options under setfit-lora's settings names (``rank``, ``alpha``,
    ``targets``, ``layers``), ``max_steps`` -1 for none, the head's C as a number and its grid as
    ``head_c_choices``. Each value is checked by the rule of the option it comes from.

    Attributes:
        top_layers: k, the blocks at the top of the encoder that carry LoRA; the states entering block L − k
            are computed once per text and every step runs only these k blocks. ``None`` (the default):
            :data:`DEFAULT_TOP_LAYERS`, or every block of an encoder with fewer.
        rank / alpha / lora_dropout / targets / layers: LoRA in those blocks, as setfit-lora's settings
            (``layers`` names a key of :data:`~infoprompt.kinds.lora_layers.LAYER_SETS`).
        loss: the in-batch objective (``supcon``, ``pairs``, ``batch-all``; :mod:`.losses`).
        temperature: ``supcon``'s temperature τ.
        margin: ``batch-all``'s margin on cosine distance.
        epochs: passes over the draw (without selection), or the most the selection pass tries.
        batch_size: texts per step; every pair among them is scored. Classes are dealt out evenly over a
            step's batches, two texts at a time, so that each text meets texts of its own class.
        encode_batch: texts per encoder call within a batch, grouped by length (each padded to its longest), for
            an encoder that does not compute the same with a batch's texts packed into rows
            (:meth:`~infoprompt.kinds.top_lora.blocks.SplitEncoder.pooled`).
        body_learning_rate: AdamW's learning rate of the LoRA weights (linear decay after warm-up).
        warmup_proportion: share of the steps spent warming the learning rate up.
        max_steps: stop after this many steps (-1: all epochs).
        top_dropout: dropout active in the top blocks while training (as SetFit trains its body); the cached
            lower blocks always run in eval mode.
        select: ``none`` (train ``epochs``) or ``holdout`` (the epoch count that scores best on a held-out
            slice of the draw, with the head refitted at each check; then trained again on the whole draw).
        holdout_fraction / check_every / patience: the held-out share of each class, the epochs between
            checks, and the checks without a better score after which the selection pass stops (0: never).
        stop: ``none`` or ``plateau``: end training once the epoch's mean loss has improved on the best epoch
            before it by less than ``plateau_tolerance`` × the first epoch's mean loss, ``plateau_patience``
            epochs running (the draw's classes are as separated as the objective makes them; more epochs
            only repeat it).
        head_c / head_max_iter / head_c_choices: the logistic head, as setfit's.
        head_balanced: weigh the head's classes inversely to their counts in the draw (scikit-learn's
            ``class_weight="balanced"``), so that a minority class is not predicted away. ``None`` (the default):
            balanced where the task's primary metric weighs every class alike
            (:data:`~infoprompt.kinds.top_lora.options.BALANCED_METRICS`: Matthews correlation, macro-F1), plain
            where it counts examples (accuracy); a fit records its choice.
        pair_reading: ``joined`` (a pair is one text, the two separated by the tokenizer's separator) or
            ``separate`` (each text of a pair pooled alone through the same encoder; the head reads
            :func:`pair_features`). Single-text tasks read one text either way.
        pair_training: whether the top blocks train on pairs read apart; without it the fit is the head alone on
            the frozen encoder's pair features (LoRA stays at its zero start).
    """

    top_layers: int | None = None
    rank: int = 8
    alpha: int = 16
    lora_dropout: float = 0.0
    targets: tuple[str, ...] = ()
    layers: str = "all-linear"
    loss: str = "supcon"
    temperature: float = 0.07
    margin: float = 0.25
    epochs: int = 20
    batch_size: int = 32
    encode_batch: int = 16
    body_learning_rate: float = 5e-4
    warmup_proportion: float = 0.1
    max_steps: int = -1
    top_dropout: bool = True
    select: str = "none"
    holdout_fraction: float = 0.25
    check_every: int = 2
    patience: int = 2
    stop: str = "none"
    plateau_tolerance: float = 0.01
    plateau_patience: int = 2
    head_c: float = 1.0
    head_max_iter: int = 100
    head_c_choices: tuple[float, ...] = ()
    head_balanced: bool | None = None
    pair_reading: str = "joined"
    pair_training: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))  # as JSON gives them
        object.__setattr__(self, "head_c_choices", tuple(self.head_c_choices))
        try:
            self.as_options()  # every value checked by the rule of the option it comes from
            for choice in self.head_c_choices:
                positive_number(choice, "head_c_choices")
        except UserError as error:
            raise UserError(f"top-lora settings: {error}") from None

    def as_options(self) -> TopLoraOptions:
        """The kind's options that give these settings (the head's C choices aside), checked."""
        return TopLoraOptions(**{name: getattr(self, name) for name in SAME_NAMES}, lora_rank=self.rank,
                              lora_alpha=self.alpha, lora_targets=self.targets or None, lora_layers=self.layers,
                              max_steps=None if self.max_steps == -1 else self.max_steps, head_c=self.head_c)

    @classmethod
    def from_options(cls, options: TopLoraOptions, top_layers: int | None) -> TopLoraSettings:
        """The settings that ``options`` give, with ``top_layers`` made concrete by the caller."""
        return cls(**{**{name: getattr(options, name) for name in SAME_NAMES}, "top_layers": top_layers},
                   rank=options.lora_rank, alpha=options.lora_alpha, targets=options.lora_targets or (),
                   layers=options.lora_layers, max_steps=-1 if options.max_steps is None else options.max_steps,
                   head_c=1.0 if options.head_c is None else options.head_c,
                   head_c_choices=HEAD_C_GRID if options.select_head_c else ())

    def to_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["targets"] = list(self.targets)
        data["head_c_choices"] = list(self.head_c_choices)
        return data


# The settings that are options of the same name and meaning (the rest: LoRA's and the head's names, max_steps).
SAME_NAMES = tuple(sorted({f.name for f in dataclasses.fields(TopLoraSettings)} & set(TopLoraOptions.names())
                          - {"max_steps", "head_c"}))


def pair_features(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """What the head reads of a pair read apart: ``[u, v, |u - v|, u * v, cos(u, v)]`` of the two texts' normalised
    embeddings (B, 4D + 1): each text alone, where they differ, where they agree, and how alike they are."""
    u, v = functional.normalize(u, dim=-1), functional.normalize(v, dim=-1)
    return torch.cat([u, v, (u - v).abs(), u * v, (u * v).sum(-1, keepdim=True)], dim=-1)


def split_pair(ids: list[int], wrap: tuple[list[int], list[int]], sep_id: int) -> tuple[list[int], list[int]]:
    """The token ids of a joined pair (``[CLS] A [SEP] B [SEP]``) as the ids of each text alone (``[CLS] A [SEP]``,
    ``[CLS] B [SEP]``): what the tokenizer gives each text by itself, so both halves read as single texts do.
    ``wrap``: the ids the tokenizer puts before and after one text (:func:`special_wrap`); ``sep_id``: the
    separator between the two texts (the first one after the leading ids splits)."""
    before, after = wrap
    inner = ids[len(before) : len(ids) - len(after)]
    cut = inner.index(sep_id) if sep_id in inner else len(inner)
    return [*before, *inner[:cut], *after], [*before, *inner[cut + 1 :], *after]


def special_wrap(tokenizer: object) -> tuple[list[int], list[int]]:
    """The special ids a tokenizer puts before and after one text (``[CLS]`` / ``[SEP]``, ``<s>`` / ``</s>``, none)."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    wrapped = tokenizer("a")["input_ids"]
    at = next(i for i in range(len(wrapped) - len(plain) + 1) if wrapped[i : i + len(plain)] == plain)
    return wrapped[:at], wrapped[at + len(plain) :]


class TopLoraClassifier(SetFitLoraClassifier):
    """setfit-lora's model (the shared encoder with LoRA, mean pooling, normalisation, a logistic head) with
    LoRA only in the encoder's top ``top_layers`` blocks: the blocks below stay the backbone's own. With
    ``pair_reading="separate"`` a pair's two texts are encoded apart and the head reads :func:`pair_features`."""

    settings_type = TopLoraSettings

    def __init__(self, backbone: Backbone, config: ClassifierConfig, settings: TopLoraSettings | None = None):
        super().__init__(backbone, config, settings)
        # The options record the k this model has (the default made concrete, or a loaded adapter's).
        options = dataclasses.replace(self.options, top_layers=self.settings.top_layers)
        self.config = dataclasses.replace(self.config, options=options)
        if self.reads_pairs_apart:
            self.head = nn.Linear(4 * self.head.in_features + 1, len(self.config.labels)).to(backbone.device)
            with torch.no_grad():
                self.head.weight.zero_()
                self.head.bias.zero_()

    @property
    def reads_pairs_apart(self) -> bool:
        """Whether this adapter encodes the two texts of a pair apart (its task's template holds two texts)."""
        return self.settings.pair_reading == "separate" and len(Template.parse(self.config.template).fields) == 2

    @functools.cached_property
    def pair_wrap(self) -> tuple[list[int], list[int]]:
        """:func:`special_wrap` of the backbone's tokenizer, read once (every pair of every batch splits with it)."""
        return special_wrap(self.backbone.tokenizer)

    def split_pair(self, ids: list[int]) -> tuple[list[int], list[int]]:
        """A joined pair's token ids as the ids of its two texts alone (:func:`split_pair`)."""
        return split_pair(ids, self.pair_wrap, self.backbone.tokenizer.sep_token_id)

    def embed(self, batch: Batch) -> torch.Tensor:
        """The head's features: the normalised sentence embedding, or :func:`pair_features` of a pair read apart."""
        if not self.reads_pairs_apart:
            return super().embed(batch)
        rows = [ids[mask.bool()].tolist() for ids, mask in zip(batch.input_ids, batch.attention_mask, strict=True)]
        halves = [self.split_pair(ids) for ids in rows]
        u, v = (self.embed_ids([pair[side] for pair in halves], batch.input_ids.device) for side in (0, 1))
        return pair_features(u, v)

    def embed_ids(self, rows: list[list[int]], device: torch.device) -> torch.Tensor:
        """The body's normalised sentence embeddings of token-id rows (padded here)."""
        pad = self.backbone.tokenizer.pad_token_id
        length = max(len(ids) for ids in rows)
        ids = torch.full((len(rows), length), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), length), dtype=torch.long)
        for row, values in enumerate(rows):
            ids[row, : len(values)] = torch.tensor(values, dtype=torch.long)
            mask[row, : len(values)] = 1
        return self.body({"input_ids": ids.to(device), "attention_mask": mask.to(device)})["sentence_embedding"]

    def default_settings(self) -> TopLoraSettings:
        """The settings of the adapter's options, ``top_layers`` unset made :data:`DEFAULT_TOP_LAYERS` (at most
        the encoder's depth)."""
        options: TopLoraOptions = self.options
        top_layers = options.top_layers
        if top_layers is None:
            top_layers = min(DEFAULT_TOP_LAYERS, len(encoder_blocks(self.backbone.model)))
        return TopLoraSettings.from_options(options, top_layers)

    def _make_body(self, backbone: Backbone) -> Any:
        check_top_layers(self.settings.top_layers, len(encoder_blocks(backbone.model)))
        return super()._make_body(backbone)

    def lora_config(self, encoder: nn.Module) -> Any:
        """setfit-lora's LoRA config restricted to the top ``top_layers`` blocks (peft's ``layers_to_transform``,
        so that ``peft/`` loads onto the whole encoder with ``PeftModel.from_pretrained``)."""
        settings = self.settings
        depth = len(encoder_blocks(encoder))
        return lora_config(encoder, settings.rank, settings.alpha, settings.targets, settings.layers,
                           settings.lora_dropout, layers_to_transform=list(range(depth - settings.top_layers, depth)),
                           layers_pattern="layer")

    @property
    def lora_encoder(self) -> nn.Module:
        """The encoder with LoRA injected (peft's base model), whose blocks :class:`SplitEncoder` runs."""
        return self.lora_model.base_model.model
