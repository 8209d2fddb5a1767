"""The adapters a server holds, and the one copy of each backbone they share; paths kept under a root."""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.io_utils import short_path
from infoprompt.serving import adapters

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class AdapterNotFound(UserError):
    """No adapter of that name is loaded (HTTP 404)."""


class AdapterConflict(UserError):
    """The name is taken, or the adapter's backbone fingerprint differs from the loaded backbone's (HTTP 409)."""


class ForbiddenPath(UserError):
    """A path outside the adapter root, or runtime loading without a root (HTTP 403)."""


@dataclass
class SharedBackbone:
    """One loaded encoder and the names of the adapters that use it."""

    key: str
    backbone: Any
    fingerprint: dict[str, object]
    users: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class LoadedAdapter:
    """An adapter ready to predict. ``lane`` names the micro-batching queue its requests join: its own name,
    a feature group that plain-feature adapters on the same encoder pass share, or the mixed lane of the LoRA
    adapters on its backbone (``mixes_lora``: rows of any of them share a batch)."""

    name: str
    directory: Path
    info: adapters.AdapterInfo
    model: Any
    backbone_key: str
    lane: Hashable
    shares_features: bool
    mixes_lora: bool = False

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.info.kind, "method": self.info.method, "task": self.info.task,
                "labels": list(self.info.labels), "fields": list(self.info.fields), "backbone": self.info.backbone,
                "shared_encoder_pass": self.shares_features, "mixed_lora_batch": self.mixes_lora}


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise UserError(f"adapter name {name!r} must be 1-64 letters, digits, '.', '_' or '-', starting with a "
                        "letter or digit")
    return name


def contained_directory(root: Path, path: str | Path, what: str = "adapter path") -> Path:
    """``path`` (relative to ``root``, or absolute) resolved, refused unless it and every file in it lie under
    ``root`` after symbolic links are followed. A path the file system cannot take (a NUL character, a name
    too long, a link loop) is a one-line error too, never a server fault."""
    text = str(path)
    if "\x00" in text:
        raise UserError(f"{what} {text!r} holds a NUL character, which no file name may hold")
    try:
        os.fsencode(text)
    except UnicodeEncodeError as error:  # a lone surrogate ("\ud800" in the JSON): no file system name
        raise UserError(f"{what} {short_path(text)!r} holds {text[error.start]!r}, which no file name may hold") from None
    try:
        root = root.resolve()
        candidate = Path(path)
        if ".." in candidate.parts:
            raise ForbiddenPath(f"{what} {text!r} may not contain '..'")
        directory = (candidate if candidate.is_absolute() else root / candidate).resolve()
        if not directory.is_relative_to(root):
            raise ForbiddenPath(f"{what} {text!r} leads outside the adapter root {root}")
        if not directory.is_dir():
            raise UserError(f"{what} {text!r} does not exist under the adapter root")
        for entry in directory.rglob("*"):
            if not entry.resolve().is_relative_to(root):
                raise ForbiddenPath(f"{what} {text!r} holds {entry.relative_to(directory)}, a link that "
                                    f"leads outside the adapter root {root}")
    except (OSError, RuntimeError) as error:  # RuntimeError: a symbolic link loop (Python 3.11's resolve)
        reason = getattr(error, "strerror", None) or str(error)
        raise UserError(f"{what} {short_path(text)!r} cannot be read ({reason})") from None
    return directory


class AdapterRegistry:
    """Loaded adapters by name, each backbone loaded once (by name) and shared by every adapter on it.

    Loads are serialised by a lock and may run in any thread; lookups take no lock (a dict read), so the
    event loop never waits for a load. ``separate_backbones`` gives each adapter a private copy of its
    backbone instead: what a one-model-per-task server needs (the baseline of ``benchmarks/serve_bench.py``).
    ``mixed_lora`` False gives every LoRA adapter a lane of its own, as before mixed batches (the other baseline).
    """

    def __init__(self, root: Path | None = None, cache_dir: str | None = None, separate_backbones: bool = False,
                 backbone_dirs: Sequence[Path] = (), mixed_lora: bool = True):
        self.root = root.resolve() if root is not None else None
        # With a root, adapters name their backbones by name, or as directories under the root or these.
        self.backbone_dirs = tuple(Path(directory).resolve() for directory in backbone_dirs)
        self.cache_dir = cache_dir
        self.separate_backbones = separate_backbones
        self.mixed_lora = mixed_lora
        # Where adapters are built on a backbone already in use: the server's inference thread, because the
        # encoder and its tokenizer are not safe to share between threads (a fast tokenizer refuses a second
        # caller, bottleneck adapters hook the encoder during their pass). None: the calling thread.
        self.model_thread: Executor | None = None
        self.adapters: dict[str, LoadedAdapter] = {}
        self.backbones: dict[str, SharedBackbone] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> LoadedAdapter:
        adapter = self.adapters.get(name)
        if adapter is None:
            raise AdapterNotFound(f"no adapter named {name!r} is loaded")
        return adapter

    def resolve(self, path: str | Path, runtime: bool) -> Path:
        """The directory to load: under the root when there is one; a runtime load needs a root. A runtime
        path is relative to the root; a startup path (the operator's command line) to the working directory."""
        if self.root is not None:
            return contained_directory(self.root, path if runtime else Path(path).resolve())
        if runtime:
            raise ForbiddenPath("loading adapters at runtime is off: start the server with --adapter-root")
        return Path(path).resolve()

    def load(self, name: str, path: str | Path, runtime: bool = False) -> LoadedAdapter:
        check_name(name)
        directory = self.resolve(path, runtime)
        with self._lock:
            if name in self.adapters:
                raise AdapterConflict(f"an adapter named {name!r} is already loaded (delete it first)")
            info = adapters.read_adapter_info(directory)
            self.check_backbone(info, directory)
            shared = self._backbone_for(name, info, directory)
            try:
                if self.model_thread is None:
                    model = adapters.load_model(directory, shared.backbone)
                else:
                    model = self.model_thread.submit(adapters.load_model, directory, shared.backbone).result()
            except BaseException:
                self._release(shared, name)
                raise
            group = adapters.feature_group(model, info.kind)
            lora = adapters.mixed_lora_lane(model) if self.mixed_lora and group is None else None
            lane = ("features", group) if group is not None else lora or ("adapter", name, id(model))
            loaded = LoadedAdapter(name=name, directory=directory, info=info, model=model, backbone_key=shared.key,
                                   lane=lane, shares_features=group is not None, mixes_lora=lora is not None)
            self.adapters[name] = loaded
            return loaded

    def check_backbone(self, info: adapters.AdapterInfo, directory: Path) -> None:
        """With an adapter root, an adapter's backbone is a packaged name or a Hugging Face id (both looked up on
        this machine only), or a directory under the root or an ``--allow-backbone-dir``: an adapter placed under
        the root must not make the server read any model directory the server's user can read."""
        if self.root is None or adapters.is_named_backbone(info.backbone):
            return
        location = Path(info.backbone).expanduser()
        for allowed in (self.root, *self.backbone_dirs):
            with contextlib.suppress(OSError, RuntimeError, UnicodeError):  # no path: a named backbone, or none
                if location.resolve().is_relative_to(allowed):
                    contained_directory(allowed, location.resolve(), "backbone directory")
                    return
        raise ForbiddenPath(
            f"{adapters.config_path(directory)}: backbone {short_path(info.backbone)!r} is a directory outside the "
            f"adapter root {self.root}; a served adapter's backbone must be a packaged name (minilm, mpnet), a "
            f"Hugging Face id, or a directory under the root (start the server with --allow-backbone-dir DIR to "
            f"allow another)")

    def _backbone_for(self, name: str, info: adapters.AdapterInfo, directory: Path) -> SharedBackbone:
        key = adapters.backbone_key(info.backbone)
        if self.separate_backbones:
            key = f"{key}#{name}"
        shared = self.backbones.get(key)
        if shared is None:
            # Weights in memory of its own: passes over a memory-mapped checkpoint ran slower (see own_weights).
            backbone = adapters.own_weights(adapters.load_backbone(info.backbone, self.cache_dir))
            shared = SharedBackbone(key=key, backbone=backbone, fingerprint=adapters.fingerprint_of(backbone))
            self.backbones[key] = shared
        if info.backbone_fingerprint and info.backbone_fingerprint != shared.fingerprint:
            if not shared.users:
                del self.backbones[key]
            raise AdapterConflict(
                f"{adapters.config_path(directory)}: adapter was trained on backbone {info.backbone!r} "
                f"{info.backbone_fingerprint}, but the loaded backbone of that name is {shared.fingerprint}")
        shared.users.add(name)
        return shared

    def _release(self, shared: SharedBackbone, name: str) -> None:
        shared.users.discard(name)
        if not shared.users:
            self.backbones.pop(shared.key, None)  # the last user is gone: let the encoder's memory go

    def remove(self, name: str) -> LoadedAdapter:
        with self._lock:
            adapter = self.get(name)
            del self.adapters[name]
            self._release(self.backbones[adapter.backbone_key], name)
            return adapter

    def describe(self) -> list[dict[str, object]]:
        return [adapter.describe() for adapter in sorted(self.adapters.values(), key=lambda a: a.name)]
