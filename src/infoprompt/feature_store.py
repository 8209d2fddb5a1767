"""An on-disk store of the frozen no-prompt pass over evaluation examples, shared by runs, methods and seeds.

The no-prompt pass (``P'``, ``Z'``) depends only on the frozen backbone, the template, the token budget, the
pooling, the readout and the exact examples, so one computation serves every seed and every method that reads
it. The key hashes all of these, including the examples' text and the token ids fed to the encoder: a changed
byte of the split file or of the template is a miss, never a stale hit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from infoprompt.io_utils import atomic_write_bytes
from infoprompt.tasks import Example

STORE_VERSION = 1


def feature_key(model, examples: Sequence[Example], pairs: Sequence, precision: str) -> str:
    """A hash of everything the no-prompt pass of ``model`` over ``examples`` depends on."""
    digest = hashlib.sha256()
    config = model.config
    header = {
        "version": STORE_VERSION, "backbone": config.backbone_fingerprint, "template": config.template,
        "n_prompts": config.n_prompts, "max_length": config.max_length, "truncate": config.truncate,
        "pooling": config.pooling, "readout": config.readout, "precision": precision,
    }
    digest.update(json.dumps(header, sort_keys=True).encode())
    for example, pair in zip(examples, pairs, strict=True):
        digest.update(json.dumps(example.fields, sort_keys=True, ensure_ascii=False).encode())
        plain = pair.plain
        digest.update(json.dumps([plain.input_ids, plain.readout_position, plain.context_positions,
                                  [list(span) for span in plain.span_positions]]).encode())
    return digest.hexdigest()


def store_path(cache_dir: str | Path, key: str) -> Path:
    return Path(cache_dir) / "features" / f"{key}.safetensors"


def load_features(path: Path, count: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The stored ``(P', Z')``, or ``None`` when the entry is absent, unreadable or of another size."""
    if not path.is_file():
        return None
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError):
        return None  # a damaged entry is recomputed and rewritten
    pooled, z_plain = tensors.get("pooled"), tensors.get("z_plain")
    if pooled is None or z_plain is None or len(pooled) != count or len(z_plain) != count:
        return None
    return pooled, z_plain


def save_features(path: Path, pooled: torch.Tensor, z_plain: torch.Tensor) -> None:
    """Write atomically: concurrent workers computing the same entry write the same bytes."""
    data = save({"pooled": pooled.detach().float().cpu().contiguous(), "z_plain": z_plain.detach().float().cpu().contiguous()},
                metadata={"format": "pt"})
    atomic_write_bytes(path, data)
