"""Examples encoded once for a model, their batches, and the cached no-prompt pass (in memory and on disk)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from infoprompt.errors import UserError
from infoprompt.gate import check_texts
from infoprompt.tasks import Example, is_multi_label, label_set
from infoprompt.templates import CHARS_PER_TOKEN, CUT_POLICIES, Batch, EncodedPair, clip_characters, collate
from infoprompt.training.config import TrainConfig
from infoprompt.training.contract import Adapter
from infoprompt.training.runtime import autocast, map_chunks, model_device
from infoprompt.validation import positive_int

if TYPE_CHECKING:
    from accelerate import Accelerator


@dataclass
class EncodedSet:
    """Examples encoded once for a classifier, with label indices and (optionally) cached plain features."""

    pairs: list[EncodedPair]
    labels: torch.Tensor | None
    pooled: torch.Tensor | None = None
    z_plain: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.pairs)


def encode_examples(model: Adapter, examples: Sequence[Example]) -> EncodedSet:
    """``examples`` tokenised for ``model``, with their label indices when every example has a label. Every text
    passes the gate here too, so examples built in Python (not read by a reader) meet the same checks."""
    for index, example in enumerate(examples):
        check_texts(example.fields, example.source or f"input {index + 1}", every_field=False)
    fields = [clipped_fields(model, example) for example in examples]
    pairs = model.template_encoder.encode_many(fields, [e.source for e in examples])
    if all(e.label is not None for e in examples):
        if is_multi_label(model.task):
            labels = label_matrix(model.config.labels, examples)
        else:
            labels = torch.tensor(
                [model.config.labels.index(model.task.labels[model.task.label_index(e.label, e.source)])
                 for e in examples]
            )
    else:
        labels = None
    return EncodedSet(pairs=pairs, labels=labels)


def clipped_fields(model: Adapter, example: Example) -> dict[str, str]:
    """The example's text fields cut to the characters its token budget can use (see
    :data:`~infoprompt.templates.CHARS_PER_TOKEN`), so that tokenising a huge text costs no more than that."""
    max_length, policies = model.config.max_length, model.template_encoder.policies
    fields = {}
    for name, text in example.fields.items():
        fields[name] = clip_characters(text, max_length, policies.get(name, CUT_POLICIES[0]))
        if len(fields[name]) < len(text) and not model.config.truncate:
            raise UserError(
                f"{example.source or 'input'}: field {name} has {len(text)} characters, more than max_length={max_length} "
                f"tokens can hold (at most {CHARS_PER_TOKEN} characters a token are read), and truncation is off "
                "(shorten the input; when training, raise --max-length or drop --no-truncate)"
            )
    return fields


def label_matrix(labels: Sequence[str], examples: Sequence[Example]) -> torch.Tensor:
    """Multi-label targets: a float 0/1 matrix (examples x ``labels``); a label outside ``labels`` is an error."""
    index = {label: i for i, label in enumerate(labels)}
    matrix = torch.zeros(len(examples), len(labels))
    for row, example in enumerate(examples):
        for label in label_set(example):
            if label not in index:
                raise UserError(f"{example.source or 'input'}: unknown label {label!r}; labels: {', '.join(labels)}")
            matrix[row, index[label]] = 1.0
    return matrix


def report_truncation(count: int, total: int, what: str, max_length: int) -> None:
    """One warning line on stderr when ``count`` of ``total`` inputs were cut to the token budget (nothing when
    none was): text beyond ``max_length`` tokens is never read, and the user should know."""
    if count:
        print(f"infoprompt: warning: {count} of {total} {what} had more than max_length={max_length} tokens and "
              f"were cut (raise --max-length, or read windows with --long-text chunk)", file=sys.stderr)


def subset(encoded: EncodedSet, indices: list[int]) -> EncodedSet:
    pick = torch.tensor(indices, dtype=torch.long)
    return EncodedSet(
        [encoded.pairs[i] for i in indices],
        None if encoded.labels is None else encoded.labels[pick],
        None if encoded.pooled is None else encoded.pooled[pick.to(encoded.pooled.device)],
        None if encoded.z_plain is None else encoded.z_plain[pick.to(encoded.z_plain.device)],
    )


def pad_id(model: Adapter) -> int:
    tokenizer = model.backbone.tokenizer
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def batches(indices: Sequence[int], size: int) -> list[list[int]]:
    positive_int(size, "batch size")  # a size < 1 would make no batch at all and leave results unset
    return [list(indices[i : i + size]) for i in range(0, len(indices), size)]


def length_sorted(encoded: EncodedSet) -> list[int]:
    """Indices ordered by length so evaluation batches carry little padding."""
    return sorted(range(len(encoded)), key=lambda i: len(encoded.pairs[i].prompted.input_ids))


def plain_batch(model: Adapter, encoded: EncodedSet, chunk: list[int]) -> Batch:
    return collate([encoded.pairs[i].plain for i in chunk], pad_id(model)).to(model_device(model))


def prompted_batch(model: Adapter, encoded: EncodedSet, chunk: list[int]) -> Batch:
    return collate([encoded.pairs[i].prompted for i in chunk], pad_id(model)).to(model_device(model))


def cache_features(
    model: Adapter, encoded: EncodedSet, batch_size: int, progress: bool = False,
    accelerator: Accelerator | None = None, precision: str = "fp32",
) -> None:
    """Run the frozen no-prompt pass once per example and keep ``P'`` and ``Z'`` on ``encoded`` (on the
    model's device). Under ``accelerate launch`` each process runs a share of the batches (see
    :func:`~infoprompt.training.runtime.map_chunks`)."""
    if not model.needs_features or encoded.pooled is not None:
        return
    device = model_device(model)
    was_training = model.training
    model.eval()
    # Z' is as wide as the readout (several hidden sizes for concatenated entity spans).
    widths = (model.backbone.hidden_size, model.feature_width)
    with autocast(device, precision):
        encoded.pooled, encoded.z_plain = map_chunks(
            accelerator, batches(length_sorted(encoded), batch_size), len(encoded), widths,
            lambda chunk: model.plain_features(plain_batch(model, encoded, chunk)), device, "no-prompt features", progress,
        )
    model.train(was_training)


def cache_eval_features(
    model: Adapter, examples: Sequence[Example], encoded: EncodedSet, config: TrainConfig,
    accelerator: Accelerator | None, precision: str, progress: bool = False,
) -> str:
    """Fill ``encoded``'s no-prompt features from the feature store, or compute and store them. Returns
    ``hit``, ``miss`` or ``off`` (store disabled, or a multi-process run, which computes its share)."""
    from infoprompt.backbones import default_cache_dir
    from infoprompt.feature_store import feature_key, load_features, save_features, store_path

    if not config.feature_store or (accelerator is not None and accelerator.num_processes > 1):
        cache_features(model, encoded, config.eval_batch_size, progress, accelerator, precision)
        return "off"
    path = store_path(config.feature_store_dir or default_cache_dir(), feature_key(model, examples, encoded.pairs, precision))
    stored = load_features(path, len(encoded), (model.backbone.hidden_size, model.feature_width))
    if stored is not None:
        device = model_device(model)
        encoded.pooled, encoded.z_plain = stored[0].to(device), stored[1].to(device)
        return "hit"
    cache_features(model, encoded, config.eval_batch_size, progress, accelerator, precision)
    save_features(path, encoded.pooled, encoded.z_plain)
    return "miss"


def features_for(model: Adapter, encoded: EncodedSet, chunk: list[int]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if not model.needs_features:
        return None, None
    if encoded.pooled is not None:
        return encoded.pooled[chunk], encoded.z_plain[chunk]
    return model.plain_features(plain_batch(model, encoded, chunk))


def generator_inputs(model: Adapter, encoded: EncodedSet, chunk: list[int]) -> torch.Tensor | None:
    """What prediction needs from the no-prompt side: ``P'`` for generated prompts (cached, or computed, which
    is a whole encoder pass unless the generator reads input embeddings), nothing otherwise."""
    if not model.generates_prompts:
        return None
    if encoded.pooled is not None:
        return encoded.pooled[chunk]
    return model.generator_input(plain_batch(model, encoded, chunk))
