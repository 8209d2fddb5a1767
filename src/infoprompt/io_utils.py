"""Atomic file writes: a reader never sees a half-written result, config or adapter."""

from __future__ import annotations

import codecs
import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a JSON file that must hold an object; a broken file is a :class:`UserError` naming it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and rename it into place."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as error:
        raise UserError(f"cannot write {target}: {error.strerror} ({error.filename})") from None
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes owner-only files; results should read like any other
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"cannot write {target}: {error.strerror}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default, allow_nan=False) + "\n")


def finite_json(value: Any) -> Any:
    """``value`` with every NaN or infinite float written as a string (``"nan"``, ``"inf"``), for numbers that
    may legitimately be undefined (analysis summaries): JSON has no such numbers, and writers are strict."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(item) for item in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def canonical_safetensors(data: bytes) -> bytes:
    """``data`` with its JSON header re-serialised with sorted keys: safetensors writes the metadata in hash
    order, so two identical states would otherwise give different bytes. Offsets are relative to the data,
    so only the header changes."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the format pads the header with spaces to an 8-byte boundary
    return len(text).to_bytes(8, "little") + text + data[8 + size :]


def write_safetensors(path: str | os.PathLike[str], state: dict[str, Any], format_version: int) -> None:
    """Write ``state`` as a safetensors file atomically, with the same bytes for the same tensors."""
    from safetensors.torch import save

    metadata = {"format": "pt", "infoprompt_format": str(format_version)}
    atomic_write_bytes(path, canonical_safetensors(save(state, metadata=metadata)))


def check_output_file(path: str | os.PathLike[str]) -> None:
    """Refuse, before any work, an output file that cannot be written: a directory, or a parent that is a file."""
    target = Path(path)
    if target.is_dir():
        raise UserError(f"cannot write {target}: it is a directory")
    _check_parent(target)


def _check_parent(target: Path) -> None:
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"cannot write {target}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot write {target}: directory {parent} is not writable")


# The library's own adapter metadata. Adapters written before it moved keep it under the legacy name, which
# PEFT reserves: transformers and PEFT read any file of that name as a PEFT config.
ADAPTER_CONFIG_NAME = "infoprompt_adapter.json"
LEGACY_ADAPTER_CONFIG_NAME = "adapter_config.json"
OWN_CONFIG_KEYS = ("task", "method", "backbone")
RUN_MARKERS = (ADAPTER_CONFIG_NAME, "metrics.json")


def adapter_config_file(directory: Path) -> Path | None:
    """The adapter metadata file in ``directory``: the current name, else the legacy one when it holds this
    library's metadata (a PEFT config under that name does not), else ``None``."""
    current = directory / ADAPTER_CONFIG_NAME
    if current.is_file():
        return current
    legacy = directory / LEGACY_ADAPTER_CONFIG_NAME
    if legacy.is_file() and not is_foreign_config(legacy):
        return legacy
    return None


def is_foreign_config(path: Path) -> bool:
    """Whether a legacy-named config is another library's: a JSON object with PEFT's ``peft_type`` or with none
    of this library's keys. A file that does not parse counts as ours, so that reading it names the damage."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and ("peft_type" in data or not any(key in data for key in OWN_CONFIG_KEYS))


def is_run_directory(path: Path) -> bool:
    """A directory this library wrote as a run: its adapter config (current or legacy name) and metrics are there."""
    return path.is_dir() and adapter_config_file(path) is not None and (path / RUN_MARKERS[1]).is_file()


def check_run_target(final: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """Refuse, before any work, a run directory that may not or cannot be written; returns it as a Path.

    ``overwrite`` replaces only a recognisable run directory, never another directory, a file, or a
    directory that holds the current one.
    """
    final_path = Path(final)
    resolved = final_path.resolve()
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents or not resolved.name:
        raise UserError(f"output directory {final_path} is the current directory or holds it; name a new directory")
    if final_path.exists() or final_path.is_symlink():
        if not overwrite:
            raise UserError(f"output directory {final_path} already exists (pass --overwrite to replace it)")
        if not is_run_directory(final_path) or final_path.is_symlink():
            raise UserError(
                f"--overwrite replaces only a run directory (one holding {' and '.join(RUN_MARKERS)}); "
                f"{final_path} is not one, so it is left alone"
            )
    _check_parent(final_path)
    return final_path


@contextmanager
def staged_directory(final: str | os.PathLike[str], overwrite: bool = False) -> Iterator[Path]:
    """Yield a scratch directory that replaces ``final`` only when the block finishes without error.

    The scratch directory ``.<name>.<pid>.<random>.partial`` is this run's alone, so that concurrent runs on
    one ``final`` cannot touch each other's files; a failed or interrupted run removes it and leaves
    ``final`` untouched. When another run put ``final`` in place meanwhile, this one loses: without
    ``overwrite`` its result is discarded with an error, with it only a run directory is replaced.
    """
    final_path = check_run_target(final, overwrite)
    try:
        final_path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final_path.name}.{os.getpid()}.", suffix=".partial",
                                        dir=final_path.parent))
    except OSError as error:
        raise UserError(f"cannot create the run directory {final_path}: {error.strerror}") from None
    try:
        yield staging
        if not staging.is_dir():
            raise UserError(f"the scratch directory {staging} of this run was removed; {final_path} is unchanged")
        _install(staging, final_path, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _install(staging: Path, final_path: Path, overwrite: bool) -> None:
    """Rename ``staging`` to ``final_path``; an existing run directory moves aside first (with ``overwrite``)."""
    check_run_target(final_path, overwrite)  # another run may have put something there meanwhile
    backup = None
    try:
        if final_path.exists():
            backup = Path(tempfile.mkdtemp(prefix=f".{final_path.name}.{os.getpid()}.", suffix=".old",
                                           dir=final_path.parent))
            with contextlib.suppress(FileNotFoundError):  # another run moved it aside meanwhile
                os.replace(final_path, backup / final_path.name)
        # The target is absent now; rename fails rather than merge if another run installed meanwhile.
        os.rename(staging, final_path)
    except OSError as error:
        if backup is not None and not final_path.exists():
            with contextlib.suppress(OSError):
                os.replace(backup / final_path.name, final_path)
        raise UserError(f"cannot install the run at {final_path}: {error.strerror}; another run may have "
                        "finished there first") from None
    finally:
        # The old run is gone only once something replaced it; otherwise its backup stays for the user.
        if backup is not None and (final_path.exists() or not (backup / final_path.name).exists()):
            shutil.rmtree(backup, ignore_errors=True)


_WIDE_BOMS = {codecs.BOM_UTF32_LE: "UTF-32", codecs.BOM_UTF32_BE: "UTF-32", codecs.BOM_UTF16_LE: "UTF-16",
              codecs.BOM_UTF16_BE: "UTF-16"}


def decode_lines(data: bytes, name: str, encoding: str = "utf-8", hint: str = "") -> list[tuple[int, str]]:
    """``data`` split on newlines and decoded, as (line number, text without the line end) pairs.

    A byte that is not valid in ``encoding`` is an error naming the file, line and column, and saying how to
    re-encode; a UTF-8 byte-order mark is skipped, a UTF-16/32 one is named. ``hint`` adds another remedy
    (e.g. an ``--encoding`` option).
    """
    try:
        codec = codecs.lookup(encoding).name
    except LookupError:
        raise UserError(f"unknown text encoding {encoding!r}") from None
    remedy = f"re-encode it as UTF-8 (iconv -f <encoding> -t utf-8 {name}){hint}"
    if codec.startswith(("utf-16", "utf-32")):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as error:
            raise UserError(f"{name}: not valid {encoding} text at byte {error.start} ({error.reason}); {remedy}") from None
        return [(n, raw.rstrip("\r")) for n, raw in enumerate(text.removeprefix("\ufeff").split("\n"), 1)]
    for bom, wide in _WIDE_BOMS.items():
        if data.startswith(bom):
            raise UserError(f"{name}: the file is {wide} text (it starts with a {wide} byte-order mark); {remedy}")
    if codec == "utf-8":
        data = data.removeprefix(codecs.BOM_UTF8)
    lines = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        try:
            lines.append((number, raw.decode(encoding).rstrip("\r")))
        except UnicodeDecodeError as error:
            raise UserError(
                f"{name}:{number}: not valid {encoding} text (byte 0x{raw[error.start]:02x} at column "
                f"{error.start + 1}); {remedy}"
            ) from None
    return lines


def read_lines(path: str | os.PathLike[str], encoding: str = "utf-8", hint: str = "") -> list[tuple[int, str]]:
    """The lines of a text file as :func:`decode_lines` gives them; an unreadable file is a one-line error."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    return decode_lines(data, str(path), encoding, hint)
