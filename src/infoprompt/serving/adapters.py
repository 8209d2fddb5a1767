"""The server's only door into the library: read an adapter's config, load backbones and adapters, predict.

Everything else in :mod:`infoprompt.serving` calls these functions and never the library's model code, so
that a change of the library's internals is mended here alone.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

FEATURE_BATCH = 64
# Rows per encoder call of a mixed LoRA batch, length-sorted: a micro-batch of 32 SST-2 sentences (9 to 46 tokens)
# ran through MiniLM on one thread in 2471 ms as one padded call, 1807 ms in calls of 16, 1595 ms of 8, 1881 ms of 4.
MIXED_CHUNK = 8


@dataclass(frozen=True)
class AdapterInfo:
    """What an adapter's config says about it, read without loading any model.

    Attributes:
        task: the task name; ``fields`` are its text fields, in template order.
        method: the method name; ``kind`` the kind of model it builds.
        labels: class names in head order.
        backbone: the backbone name as saved; ``backbone_fingerprint`` its saved fingerprint (may be empty).
    """

    task: str
    method: str
    kind: str
    labels: tuple[str, ...]
    fields: tuple[str, ...]
    backbone: str
    backbone_fingerprint: dict[str, object]


def read_adapter_info(directory: Path) -> AdapterInfo:
    """The task, method, kind, labels and backbone of the adapter in ``directory``, read (and checked) by the
    library's own adapter-config reader without loading any model."""
    from infoprompt.kinds.config import config_task, read_adapter_config

    config = read_adapter_config(directory)
    task = config_task(config)  # a task the adapter carries (trained on the user's own file) needs no registration
    return AdapterInfo(task=task.name, method=config.method, kind=config.kind.name,
                       labels=tuple(config.labels or task.labels), fields=tuple(task.fields), backbone=config.backbone,
                       backbone_fingerprint=dict(config.backbone_fingerprint))


def config_path(directory: Path) -> Path:
    """The adapter's metadata file, under its current or its legacy name."""
    from infoprompt.io_utils import adapter_config_file
    from infoprompt.kinds.config import CONFIG_NAME

    return adapter_config_file(directory) or directory / CONFIG_NAME


def backbone_key(name: str) -> str:
    """One spelling per backbone: a local directory by its resolved path, anything else by its name."""
    local = Path(name).expanduser()
    return str(local.resolve()) if local.exists() else name


def load_backbone(name: str, cache_dir: str | None = None) -> Any:
    """The backbone an adapter's config names, looked up on this machine only (never downloaded)."""
    from infoprompt.backbones import load_backbone as load

    return load(name, cache_dir=cache_dir, from_file=True)


def is_named_backbone(name: str) -> bool:
    """Whether ``name`` is a packaged backbone (``minilm``, ``mpnet``) or a Hugging Face id (``org/model``) that is
    no local path: what :func:`load_backbone` finds by name, not as a directory."""
    from infoprompt.backbones import PACKAGED

    return name in PACKAGED or (len(name) <= HUB_ID_LENGTH and HUB_ID.fullmatch(name) is not None
                                and ".." not in name and not Path(name).exists())


# A Hub model id, as the Hub spells them: a name, or an owner and a name, at most 96 characters.
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?")
HUB_ID_LENGTH = 96


def own_weights(backbone: Any) -> Any:
    """``backbone`` with its weights copied into memory of its own. A loaded encoder may keep its weights in the
    memory-mapped checkpoint file; in a server process here its passes ran about 3x slower so (MiniLM, 32
    inputs: 2.0-2.4 s against 0.7-0.9 s), and separate per-task models (fine-tuned, as SetFit's are) hold
    their own weights anyway, which is what the one-model-per-task baseline must cost."""
    with torch.no_grad():
        for tensor in [*backbone.model.parameters(), *backbone.model.buffers()]:
            tensor.data = tensor.data.clone()
    return backbone


def fingerprint_of(backbone: Any) -> dict[str, object]:
    return backbone.fingerprint()


def load_model(directory: Path, backbone: Any) -> Any:
    """The adapter in ``directory`` built on ``backbone`` (which the library checks against its fingerprint)."""
    from infoprompt.kinds import load_adapter

    return load_adapter(directory, backbone=backbone).eval()


def feature_group(model: Any, kind: str) -> Hashable | None:
    """A key shared by every loaded adapter whose features are the same encoder pass over the same input (same
    backbone object, kind, template, token budget, truncation and feature options), or ``None`` for a model whose
    encoder pass is its own (prompted inputs, a fine-tuned private body): only kinds with the shared-plain-pass
    capability predict from features of the plain input alone."""
    from infoprompt.kinds.registry import SHARED_PLAIN_PASS

    config = model.config
    if config.kind.refusal(SHARED_PLAIN_PASS, config.options) is not None:
        return None
    return (id(model.backbone), kind, config.task, config.template, config.max_length, config.truncate,
            config.options.feature_options())  # a probe's C changes its head, not its features


def mixed_lora_lane(model: Any) -> Hashable | None:
    """The lane shared by every loaded LoRA adapter on the same backbone object whose rows can share a batch
    (:mod:`infoprompt.kinds.mixed_lora`: each input tokenised by its own adapter, each row through its own
    LoRA), or ``None`` for a model that is no such adapter. Such an adapter is served only in that lane, so it
    keeps only its LoRA tensors and head (:func:`~infoprompt.kinds.mixed_lora.keep_mixed_parts_only`)."""
    from infoprompt.kinds.mixed_lora import keep_mixed_parts_only

    return ("lora", id(model.backbone)) if keep_mixed_parts_only(model) is not None else None


def predict_mixed(requests: Sequence[tuple[Any, Sequence[dict[str, str]], Sequence[str]]]) -> tuple[list[Any], int]:
    """Each request's records (a LoRA adapter of one :func:`mixed_lora_lane`, its rows and their sources), as
    :func:`predict` gives them alone, computed in one mixed batch; and the number of distinct inputs the
    shared blocks read."""
    from infoprompt.kinds.mixed_lora import predict_mixed as library_predict_mixed

    mixed = library_predict_mixed(requests, batch_size=MIXED_CHUNK)
    return mixed.records, mixed.texts


def _records(labels: Sequence[str], probabilities: torch.Tensor) -> list[dict[str, object]]:
    """The records of :func:`infoprompt.training.inference.predict`: the arg-max label and every label's
    probability, rounded as that function rounds them."""
    return [
        {"label": labels[int(row.argmax())],
         "probabilities": {label: round(float(p), 6) for label, p in zip(labels, row, strict=True)}}
        for row in probabilities
    ]


def predict(model: Any, rows: Sequence[dict[str, str]], sources: Sequence[str]) -> list[dict[str, object]]:
    """One ``{"label", "probabilities"}`` record per row, exactly as ``infoprompt predict`` computes it."""
    from infoprompt.training.inference import predict as library_predict

    return library_predict(model, rows, batch_size=FEATURE_BATCH, sources=sources)


@torch.no_grad()
def plain_features(model: Any, rows: Sequence[dict[str, str]], sources: Sequence[str]) -> torch.Tensor:
    """The features (N, D) that a plain-feature adapter's head reads, in row order, computed in length-sorted
    batches as :func:`infoprompt.training.inference.predict` does (so the numbers are the ones it gets)."""
    from infoprompt.tasks import Example
    from infoprompt.training.data import batches, encode_examples, length_sorted, prompted_batch

    encoded = encode_examples(model, [Example(fields=dict(r), source=s) for r, s in zip(rows, sources, strict=True)])
    result = torch.empty(len(rows), model.feature_width)
    for chunk in batches(length_sorted(encoded), FEATURE_BATCH):
        _, features, _ = model(prompted_batch(model, encoded, chunk))
        result[chunk] = features.float().cpu()
    return result


@torch.no_grad()
def head_records(model: Any, features: torch.Tensor) -> list[dict[str, object]]:
    """The records of a plain-feature adapter from features of :func:`plain_features`."""
    probabilities = model.head_logits(features).float().softmax(-1).cpu()
    return _records(model.config.labels, probabilities)
