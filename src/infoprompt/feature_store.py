"""An on-disk store of the frozen no-prompt pass over evaluation examples, shared by runs, methods and seeds.

The no-prompt pass (``P'``, ``Z'``) depends only on the frozen backbone, the template, the token budget, the
pooling, the readout and the exact examples, so one computation serves every seed and every method that reads
it. The key hashes all of these, including the examples' text and the token ids fed to the encoder: a changed
byte of the split file or of the template is a miss, never a stale hit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
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
        "max_length": config.max_length, "truncate": config.truncate, "precision": precision,
        **model.plain_pass_identity(),  # the kind's settings the pass reads (prompt count, pooling, readout)
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


def load_features(
    path: Path, count: int, widths: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The stored ``(P', Z')``, or ``None`` when the entry is absent or unusable: unreadable, of another row
    count or width (``widths``: of ``P'`` and ``Z'``) or dtype, holding NaN or infinite values, or not matching
    its content hash. An unusable entry is named in one warning line on stderr, then recomputed and rewritten."""
    if not path.is_file():
        return None
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), "pt") as handle:
            metadata = handle.metadata() or {}
    except (SafetensorError, OSError):
        return _unusable(path, "not a readable safetensors file")
    pooled, z_plain = tensors.get("pooled"), tensors.get("z_plain")
    if pooled is None or z_plain is None:
        return _unusable(path, "lacks the pooled or z_plain tensor")
    expected = [(count, width) for width in widths] if widths is not None else [(count, pooled.shape[-1]),
                                                                                (count, z_plain.shape[-1])]
    for name, tensor, shape in (("pooled", pooled, expected[0]), ("z_plain", z_plain, expected[1])):
        if tensor.dtype != torch.float32 or tuple(tensor.shape) != shape:
            return _unusable(path, f"{name} is {tuple(tensor.shape)} {tensor.dtype}, expected {shape} torch.float32")
        if not bool(torch.isfinite(tensor).all()):
            return _unusable(path, f"{name} holds NaN or infinite values")
    stored = metadata.get("sha256")
    if stored is not None and stored != content_hash(pooled, z_plain):
        return _unusable(path, "its content does not match its hash")
    return pooled, z_plain


def _unusable(path: Path, reason: str) -> None:
    print(f"infoprompt: warning: feature-store entry {path} {reason}; recomputing it", file=sys.stderr)
    return None


def content_hash(pooled: torch.Tensor, z_plain: torch.Tensor) -> str:
    digest = hashlib.sha256()
    for tensor in (pooled, z_plain):
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def save_features(path: Path, pooled: torch.Tensor, z_plain: torch.Tensor) -> None:
    """Write atomically: concurrent workers computing the same entry write the same bytes."""
    pooled, z_plain = pooled.detach().float().cpu().contiguous(), z_plain.detach().float().cpu().contiguous()
    data = save({"pooled": pooled, "z_plain": z_plain},
                metadata={"format": "pt", "sha256": content_hash(pooled, z_plain)})
    atomic_write_bytes(path, data)
