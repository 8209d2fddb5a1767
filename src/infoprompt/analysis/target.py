"""What an analysis of one task reads (task, backbone, data) and where its files go: the shared config fields."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class AnalysisTarget:
    """Fields every task analysis (``cmi``, ``landscape``) shares; its own config adds the rest.

    Attributes:
        task: task name (as for ``infoprompt train``).
        out: output directory; the files are ``<out>/<name>.{png,json,...}``.
        backbone: ``minilm``, ``mpnet``, a Hugging Face id or a local path.
        data_dir: data directory (``None``: ``$INFOPROMPT_DATA_DIR``).
        source: ``files`` (data directory) or ``hub`` (Hugging Face datasets).
        name: file stem of the outputs (``None``: ``<analysis>-<task>-<backbone>``).
        seed: seeds every draw of the analysis (see its config for which).
        cache_dir: where packaged backbones are extracted.
        progress: progress bars.
    """

    task: str
    out: str
    backbone: str = "minilm"
    data_dir: str | None = None
    source: str = "files"
    name: str | None = None
    seed: int = 1
    cache_dir: str | None = None
    progress: bool = True

    def stem(self, analysis: str, task_name: str) -> str:
        """The outputs' file stem: ``name``, else ``<analysis>-<task>-<backbone's last path part>``."""
        return self.name or f"{analysis}-{task_name}-{Path(self.backbone).name}"
