"""Atomic file writes: a reader never sees a half-written result, config or adapter."""

from __future__ import annotations

import codecs
import contextlib
import glob
import io
import json
import math
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from infoprompt.errors import UserError
from infoprompt.gate import MAX_DOCUMENT_BYTES, parse_json


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a JSON file that must hold an object (through :func:`~infoprompt.gate.parse_json`, with its size and
    depth limits); a broken file is a :class:`UserError` naming it."""
    data = parse_json(read_bytes(path, MAX_DOCUMENT_BYTES), str(path), limit=MAX_DOCUMENT_BYTES)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


# Hidden scratch names carry at most this many bytes of the target's name, so that a target whose own name is
# legal (up to 255 bytes) never gets a scratch name over the file-system limit.
SCRATCH_NAME_BYTES = 80
SCRATCH_SUFFIX = ".partial"  # a run's or a sweep cell's working copy, renamed into place when complete
# Paths that name the process's own streams or kernel objects: never a place for a temporary file and a rename.
STREAM_ROOTS = ("/dev/", "/proc/", "/sys/")
SHARED_MEMORY = "/dev/shm/"  # a tmpfs of ordinary files: written like any other directory


def scratch_directory(target: Path, failure: str) -> Path:
    """A new, empty ``.<name>.<pid>.<random>.partial`` directory beside ``target``, to be renamed over it once
    complete; a directory that cannot be made is ``failure`` plus the target and the reason, in one line."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{scratch_prefix(target.name)}{os.getpid()}.", suffix=SCRATCH_SUFFIX,
                                     dir=target.parent))
    except OSError as error:
        raise UserError(f"{failure} {target}: {error.strerror}") from None


def remove_scratch_directories(target: Path, pid: int) -> None:
    """Delete the :func:`scratch_directory` copies of ``target`` that process ``pid`` made: a killed process
    cannot remove its own, so whoever takes over its work does."""
    pattern = f"{glob.escape(scratch_prefix(target.name))}{pid}.*{SCRATCH_SUFFIX}"
    for scratch in target.parent.glob(pattern):
        shutil.rmtree(scratch, ignore_errors=True)


def scratch_prefix(name: str) -> str:
    """``.<name>.`` with ``name`` cut to :data:`SCRATCH_NAME_BYTES` bytes (whole characters only)."""
    short = name.encode("utf-8", "surrogateescape")[:SCRATCH_NAME_BYTES].decode("utf-8", "ignore")
    return f".{short}."


def is_stream_target(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is written in place rather than through a temporary file and a rename: ``-`` (standard
    output), a character or block device, a FIFO or socket, or anything under ``/dev``, ``/proc`` or ``/sys``
    (``/dev/stdout`` is a link there). Renaming over such a path would replace the device itself."""
    text = os.fspath(path)
    if text == "-":
        return True
    for where in (os.path.abspath(text), os.path.realpath(text)):
        if where.startswith(STREAM_ROOTS) and not where.startswith(SHARED_MEMORY):
            return True
    try:
        mode = os.stat(text).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _rename_target(path: str | os.PathLike[str]) -> Path:
    """Where a regular output goes: through symbolic links to the file they name, so a link stays a link."""
    return Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)


@contextmanager
def open_output(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary handle on ``path`` for writing as you go.

    A regular file is written to a hidden temporary file beside it, which replaces ``path`` only when the block
    finishes without error (an error or interrupt removes it, and ``path`` is untouched). A stream target
    (:func:`is_stream_target`: ``-``, ``/dev/stdout``, ``/dev/null``, a FIFO) is opened and written directly:
    what was written before an error stays written.
    """
    if is_stream_target(path):
        with _open_stream(path) as handle:
            yield handle
        return
    target = _rename_target(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=scratch_prefix(target.name), suffix=".tmp", dir=target.parent)
    except OSError as error:
        raise UserError(f"cannot write {target}: {error.strerror} ({error.filename})") from None
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes owner-only files; results should read like any other
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"cannot write {target}: {error.strerror}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _open_stream(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    text = os.fspath(path)
    if text in ("-", "/dev/stdout"):
        # The process's standard output as Python holds it (tests and callers may have redirected it).
        stream = getattr(sys.stdout, "buffer", None)
        try:
            if stream is None:
                sys.stdout.flush()
                yield _TextAsBinary(sys.stdout)
            else:
                sys.stdout.flush()
                yield stream
                stream.flush()
        except OSError as error:
            raise UserError(f"cannot write {text}: {error.strerror}") from None
        return
    try:
        handle = open(text, "wb")  # noqa: SIM115 - closed below, after the caller's block
    except OSError as error:
        raise UserError(f"cannot write {text}: {error.strerror}") from None
    try:
        with handle:
            yield handle
    except OSError as error:
        raise UserError(f"cannot write {text}: {error.strerror}") from None


class _TextAsBinary:
    """Bytes written to a text stream without a binary buffer (``io.StringIO`` standing in for stdout)."""

    def __init__(self, stream: Any):
        self.stream = stream

    def write(self, data: bytes) -> int:
        self.stream.write(data.decode("utf-8"))
        return len(data)

    def flush(self) -> None:
        self.stream.flush()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and rename it into place
    (written directly when ``path`` is a device, a FIFO or ``-``: see :func:`open_output`)."""
    with open_output(path) as handle:
        handle.write(data)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def replaced_directory(final: Path) -> Iterator[Path]:
    """A fresh ``.NAME.writing`` folder beside ``final`` to write into; once the block ends without an error it
    replaces ``final`` (a library's own saved folder, such as peft's, written whole or not at all)."""
    staging = final.parent / f".{final.name}.writing"
    if staging.exists():
        shutil.rmtree(staging)
    yield staging
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)


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
    check_name_lengths(target)
    if is_stream_target(path):
        if os.fspath(path) != "-" and not os.access(path, os.W_OK):
            raise UserError(f"cannot write {target}: it is a device or pipe that is not writable (or does not exist)")
        return
    if target.is_dir():
        raise UserError(f"cannot write {target}: it is a directory")
    _check_parent(_rename_target(target))


def check_name_lengths(target: Path) -> None:
    """Refuse a path component over the file system's name limit (usually 255 bytes), or a whole path over its
    path limit (usually 4096 bytes), with one line."""
    ancestor = _existing_ancestor(target)
    limits = {}
    for name, default in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):
        try:
            limits[name] = os.pathconf(ancestor, name)
        except (OSError, ValueError):
            limits[name] = default
    for part in target.parts:
        if len(part.encode("utf-8", "surrogateescape")) > limits["PC_NAME_MAX"]:
            raise UserError(f"cannot write {short_path(target)}: the name {part[:40]}… is longer than "
                            f"{limits['PC_NAME_MAX']} bytes")
    length = len(os.fsencode(os.path.abspath(target)))
    if length >= limits["PC_PATH_MAX"]:
        raise UserError(f"cannot write {short_path(target)}: the path is {length} bytes long, more than the "
                        f"{limits['PC_PATH_MAX'] - 1} a path may have")


def _existing_ancestor(target: Path) -> Path:
    parent = target.absolute().parent
    while parent != parent.parent:
        try:
            if parent.exists():
                break
        except OSError:  # a path over the length limit: its ancestors are shorter
            pass
        parent = parent.parent
    return parent


def os_error_message(error: OSError) -> str:
    """An ``OSError`` as one line naming the path (shortened) and the reason."""
    reason = error.strerror or str(error)
    return f"cannot use {short_path(error.filename)}: {reason}" if error.filename is not None else reason


def _check_parent(target: Path) -> None:
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        if parent.is_symlink():  # a link to nothing, or a loop: mkdir would fail after the work
            raise UserError(f"cannot write {target}: {parent} is a symbolic link that leads nowhere (its target is "
                            "missing, or it loops)")
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
METRICS_NAME = "metrics.json"
LOG_NAME = "train_log.jsonl"
RUN_MARKERS = (ADAPTER_CONFIG_NAME, METRICS_NAME)
# What a run directory holds besides the adapter itself.
RUN_ONLY_FILES = (METRICS_NAME, LOG_NAME)
# The model card every save writes (and the pointer to it in a peft/ folder): documentation, not the adapter.
CARD_NAME = "README.md"


def adapter_bytes(directory: str | os.PathLike[str]) -> int:
    """Bytes on disk of the adapter ``save_pretrained`` wrote into ``directory``: every regular file below it,
    recursively, except a run directory's own training log and metrics and the model cards (``README.md``),
    which are no part of the adapter."""
    root = Path(directory)
    total = 0
    for path in root.rglob("*"):
        if path.is_symlink() or not path.is_file() or path.name == CARD_NAME:
            continue
        if path.parent == root and path.name in RUN_ONLY_FILES:
            continue
        total += path.stat().st_size
    return total


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
        data = read_json_object(path)
    except UserError:
        return False
    return ("peft_type" in data or not any(key in data for key in OWN_CONFIG_KEYS))


def is_run_directory(path: Path) -> bool:
    """A directory this library wrote as a run: its adapter config (current or legacy name) and metrics are there."""
    return path.is_dir() and adapter_config_file(path) is not None and (path / RUN_MARKERS[1]).is_file()


def check_run_target(final: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """Refuse, before any work, a run directory that may not or cannot be written; returns it as a Path.

    ``overwrite`` replaces only a recognisable run directory, never another directory, a file, or a
    directory that holds the current one.
    """
    final_path = Path(final)
    check_name_lengths(final_path)
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
    staging = scratch_directory(final_path, "cannot create the run directory")
    try:
        yield staging
        if not staging.is_dir():
            raise UserError(f"the scratch directory {staging} of this run was removed; {final_path} is unchanged")
        _install(staging, final_path, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_save_target(final: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """Refuse, before any work, a directory that ``Classifier.save`` may not or cannot write; returns it.

    The Python counterpart of :func:`check_run_target`: a new path or an empty directory is written; a
    non-empty directory only with ``overwrite``, and then only one this library saved an adapter to (one
    holding its adapter config), never another directory, a file, a symbolic link, or the current directory
    or one that holds it.
    """
    final_path = Path(final)
    check_name_lengths(final_path)
    resolved = final_path.resolve()
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents or not resolved.name:
        raise UserError(f"directory {final_path} is the current directory or holds it; name a new directory")
    if final_path.is_symlink() or (final_path.exists() and not final_path.is_dir()):
        raise UserError(f"cannot save to {final_path}: it is a file or a symbolic link, not a directory")
    if final_path.is_dir() and any(final_path.iterdir()):
        if not overwrite:
            raise UserError(f"directory {final_path} is not empty (pass overwrite=True to replace a saved adapter)")
        if adapter_config_file(final_path) is None:
            raise UserError(f"overwrite=True replaces only a saved adapter (a directory holding "
                            f"{ADAPTER_CONFIG_NAME}); {final_path} is not one, so it is left alone")
    _check_parent(final_path)
    return final_path


@contextmanager
def staged_save_directory(final: str | os.PathLike[str], overwrite: bool = False) -> Iterator[Path]:
    """Yield a scratch directory beside ``final`` that replaces it, whole, only when the block finishes without
    error (:func:`check_save_target` says which ``final`` may be replaced); a failure leaves ``final`` as it
    was, so a saved adapter is never a mix of two saves."""
    final_path = check_save_target(final, overwrite)
    staging = scratch_directory(final_path, "cannot save to")
    try:
        # mkdtemp makes an owner-only folder; a saved adapter should read like any other directory.
        os.chmod(staging, 0o777 & ~_umask())
        yield staging
        check_save_target(final_path, overwrite)  # something may have been put there meanwhile
        try:
            replace_directory(staging, final_path)
        except OSError as error:
            raise UserError(f"cannot save to {final_path}: {error.strerror}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _install(staging: Path, final_path: Path, overwrite: bool) -> None:
    """Rename ``staging`` to ``final_path``; an existing run directory moves aside first (with ``overwrite``)."""
    check_run_target(final_path, overwrite)  # another run may have put something there meanwhile
    backup = None
    try:
        if final_path.exists():
            backup = Path(tempfile.mkdtemp(prefix=f"{scratch_prefix(final_path.name)}{os.getpid()}.", suffix=".old",
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


def replace_directory(staging: Path, final: Path) -> None:
    """Rename ``staging`` to ``final``; an existing ``final`` moves aside first and is deleted once the new one
    is in place (put back if the rename fails). Errors are ``OSError``."""
    backup = None
    if final.exists():
        backup = Path(tempfile.mkdtemp(prefix=f"{scratch_prefix(final.name)}{os.getpid()}.", suffix=".old",
                                       dir=final.parent))
        os.replace(final, backup / final.name)
    try:
        os.rename(staging, final)
    except BaseException:
        if backup is not None and not final.exists():
            os.replace(backup / final.name, final)
        raise
    finally:
        if backup is not None and final.exists():
            shutil.rmtree(backup, ignore_errors=True)


_WIDE_BOMS = {codecs.BOM_UTF32_LE: "UTF-32", codecs.BOM_UTF32_BE: "UTF-32", codecs.BOM_UTF16_LE: "UTF-16",
              codecs.BOM_UTF16_BE: "UTF-16"}


def decode_lines(data: bytes, name: str, encoding: str = "utf-8", hint: str = "") -> list[tuple[int, str]]:
    """``data`` split on newlines and decoded, as (line number, text without the line end) pairs.

    A byte that is not valid in ``encoding`` is an error naming the file, line and column, and saying how to
    re-encode; a UTF-8 byte-order mark is skipped, a UTF-16/32 one is named. ``hint`` adds another remedy
    (e.g. an ``--encoding`` option). Line ends are ``\n``, ``\r\n`` or a lone ``\r`` (old Mac files).
    """
    lines = list(iter_lines(io.BytesIO(data), name, encoding, hint))
    # What follows the last line end is a line too (empty for a file that ends with one).
    if not lines or lines[-1][2]:
        lines.append((lines[-1][0] + 1 if lines else 1, "", False))
    return [(number, text) for number, text, _ in lines]


# The largest training or evaluation file read (a user's file, a built-in task's split): it is read whole (rows are
# drawn from all of it), and its text takes several times its size in memory; larger data is a sample to draw first.
MAX_DATA_FILE_BYTES = 512 << 20
# The most bytes of one line a reader holds (JSON lines, TSV rows, stdin): a longer line is a one-line error, not
# gigabytes of memory. A line of plain text (a .txt input) is cut instead (``cut_chars``).
MAX_LINE_BYTES = 16 << 20
LINE_PIECE_BYTES = 1 << 20  # an over-long line is read and decoded this many bytes at a time


def iter_lines(
    handle: IO[bytes], name: str, encoding: str = "utf-8", hint: str = "", cut_chars: int | None = None,
) -> Iterator[tuple[int, str, bool]]:
    """The lines of a binary stream as they arrive, decoded: (line number, text, whether a line end followed).

    Errors and line ends as :func:`decode_lines`; only one line is held at a time, and of it at most
    :data:`MAX_LINE_BYTES`: a longer line is a one-line error, or, with ``cut_chars``, its first and last
    ``cut_chars`` characters joined (every byte of it is still read and checked): so an over-long line costs no
    more memory than its cut, whatever its length.
    """
    try:
        codec = codecs.lookup(encoding).name
    except LookupError:
        raise UserError(f"unknown text encoding {encoding!r}") from None
    if not codec.startswith(("utf-16", "utf-32")):
        try:
            "\n".encode(codec)
            if b"\n".decode(codec) != "\n":
                raise ValueError
        except (LookupError, ValueError, UnicodeError):
            raise UserError(f"{encoding!r} is not a text encoding that can be read line by line") from None
    remedy = f"re-encode it as UTF-8 (iconv -f <encoding> -t utf-8 {name}){hint}"
    pieces = _wide_lines(handle, name, encoding, remedy, cut_chars) if codec.startswith(("utf-16", "utf-32")) else \
        _narrow_lines(handle, name, encoding, codec, remedy, cut_chars)
    number = 0
    for text, terminated in pieces:
        # A lone \r inside a line is a line end too (universal newlines): old Mac files read as lines.
        parts = text.split("\r")
        for index, part in enumerate(parts):
            number += 1
            yield number, part, terminated or index < len(parts) - 1


def _line_too_long(where: str) -> UserError:
    return UserError(f"{where}: the line is longer than {MAX_LINE_BYTES} bytes, the most a line of JSON or columns "
                     "may have; shorten it (a .txt input, one text a line, is cut instead)")


class _HeadAndTail:
    """The first and last ``keep`` characters of a text that arrives in pieces."""

    def __init__(self, keep: int):
        self.keep, self.head, self.tail = keep, "", ""

    def add(self, text: str) -> None:
        if len(self.head) < self.keep:
            room = self.keep - len(self.head)
            self.head, text = self.head + text[:room], text[room:]
        if text:
            self.tail = (self.tail + text)[-self.keep:]

    def text(self) -> str:
        return self.head + self.tail


def _narrow_raw_lines(handle: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """Each line's bytes (its first :data:`LINE_PIECE_BYTES` at most) and whether that was the whole line."""
    while raw := handle.readline(LINE_PIECE_BYTES):
        yield raw, raw.endswith(b"\n") or len(raw) < LINE_PIECE_BYTES


def _whole_line(handle: IO[bytes], start: bytes, where: str) -> bytes:
    """An over-long line that began with ``start``, whole up to :data:`MAX_LINE_BYTES` (an error past that)."""
    pieces, size = [start], len(start)
    while not pieces[-1].endswith(b"\n") and (piece := handle.readline(LINE_PIECE_BYTES)):
        size += len(piece)
        if size > MAX_LINE_BYTES + 1:  # the line end may follow the limit
            raise _line_too_long(where)
        pieces.append(piece)
    return b"".join(pieces)


def _cut_line(handle: IO[bytes], start: bytes, where: str, encoding: str, cut_chars: int,
              remedy: str) -> tuple[str, bool]:
    """An over-long line that began with ``start``, read to its end a piece at a time and decoded as it goes
    (so every byte is checked), of which the first and last ``cut_chars`` characters are kept."""
    decoder = codecs.getincrementaldecoder(encoding)()
    kept, piece, offset = _HeadAndTail(cut_chars), start, 0
    while True:
        terminated = piece.endswith(b"\n")
        body = piece[:-1] if terminated else piece
        try:
            kept.add(decoder.decode(body, final=terminated or not piece))
        except UnicodeDecodeError as error:
            raise UserError(f"{where}: not valid {encoding} text (byte 0x{body[error.start]:02x} at column "
                            f"{offset + error.start + 1}); {remedy}") from None
        if terminated or not piece:
            return kept.text().removesuffix("\r"), terminated
        offset += len(body)
        piece = handle.readline(LINE_PIECE_BYTES)


def _narrow_lines(handle: IO[bytes], name: str, encoding: str, codec: str, remedy: str,
                  cut_chars: int | None = None) -> Iterator[tuple[str, bool]]:
    first = True
    for number, (raw, whole) in enumerate(_narrow_raw_lines(handle), 1):
        if first:
            for bom, wide in _WIDE_BOMS.items():
                if raw.startswith(bom):
                    raise UserError(f"{name}: the file is {wide} text (it starts with a {wide} byte-order mark); {remedy}")
            if codec == "utf-8":
                raw = raw.removeprefix(codecs.BOM_UTF8)
            first = False
        if not whole and cut_chars is not None:
            yield _cut_line(handle, raw, f"{name}:{number}", encoding, cut_chars, remedy)
            continue
        if not whole:
            raw = _whole_line(handle, raw, f"{name}:{number}")
        terminated = raw.endswith(b"\n")
        body = raw[:-1] if terminated else raw
        body = body[:-1] if terminated and body.endswith(b"\r") else body  # CRLF; a lone \r is split later
        try:
            yield body.decode(encoding), terminated
        except UnicodeDecodeError as error:
            raise UserError(
                f"{name}:{number}: not valid {encoding} text (byte 0x{body[error.start]:02x} at column "
                f"{error.start + 1}); {remedy}"
            ) from None


def _rest_of_wide_line(text: IO[str], start: str, where: str, cut_chars: int | None) -> str:
    """As :func:`_whole_line` (``cut_chars=None``) and :func:`_cut_line`, for a decoded stream."""
    kept, pieces, size, line = _HeadAndTail(cut_chars or 0), [], 0, start
    while True:
        terminated = line.endswith("\n")
        if cut_chars is None:
            pieces.append(line)
            size += 2 * len(line)
            if size > MAX_LINE_BYTES + 2:
                raise _line_too_long(where)
        else:
            kept.add(line.removesuffix("\n"))
        if terminated or not line:
            break
        line = text.readline(LINE_PIECE_BYTES // 2)
    return "".join(pieces) if cut_chars is None else kept.text() + ("\n" if terminated else "")


def bounded_text_lines(text: IO[str], name: str) -> Iterator[str]:
    """The lines of a decoded stream with their line ends (what :mod:`csv` reads), each at most
    :data:`MAX_LINE_BYTES` (counted as two bytes a character): a longer one is a one-line error naming it."""
    number = 0
    while line := text.readline(LINE_PIECE_BYTES // 2):
        number += 1
        if not line.endswith(("\n", "\r")) and len(line) >= LINE_PIECE_BYTES // 2:
            line = _rest_of_wide_line(text, line, f"{name}:{number}", None)
        yield line


def _wide_lines(handle: IO[bytes], name: str, encoding: str, remedy: str,
                cut_chars: int | None = None) -> Iterator[tuple[str, bool]]:
    text = io.TextIOWrapper(handle, encoding=encoding, newline="\n")  # type: ignore[arg-type]
    number = 0
    piece_chars = LINE_PIECE_BYTES // 2
    try:
        while line := text.readline(piece_chars):
            number += 1
            if number == 1:
                line = line.removeprefix("\ufeff")
            terminated = line.endswith("\n")
            if not terminated and len(line) >= piece_chars:  # an over-long line: read on, holding its cut
                line = _rest_of_wide_line(text, line, f"{name}:{number}", cut_chars)
                terminated = line.endswith("\n")
            body = line[:-1] if terminated else line
            yield (body[:-1] if terminated and body.endswith("\r") else body), terminated
    except UnicodeError as error:  # UTF-16 without a byte-order mark is a plain UnicodeError, with no reason
        reason = getattr(error, "reason", None) or str(error)
        raise UserError(f"{name}:{number + 1}: not valid {encoding} text ({reason}); {remedy}") from None
    finally:
        text.detach()  # the caller owns (and closes) the binary stream


def read_lines(path: str | os.PathLike[str], encoding: str = "utf-8", hint: str = "",
               limit: int | None = None) -> list[tuple[int, str]]:
    """The lines of a text file as :func:`decode_lines` gives them; an unreadable file is a one-line error, and
    so is one over ``limit`` bytes (read no further than that)."""
    data = read_bytes(path, limit)
    if limit is not None and len(data) > limit:
        raise UserError(f"{short_path(path)}: more than {limit} bytes, the most a file of this kind may have")
    return decode_lines(data, str(path), encoding, hint)


def read_bytes(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of a file; one that cannot be read (missing, a directory, a name too long) is a one-line error.
    With ``limit``, at most ``limit + 1`` bytes are read (a file grown huge, a FIFO or ``/dev/zero`` is not read
    whole), so that the caller's size check sees it is over the limit."""
    try:
        if limit is None:
            return Path(path).read_bytes()
        with Path(path).open("rb") as handle:
            return handle.read(limit + 1)
    except OSError as error:
        raise UserError(f"cannot read {short_path(path)}: {error.strerror}") from None


def short_path(path: object, limit: int = 200) -> str:
    """``path`` for a message: cut in the middle when longer than ``limit`` characters (a path may be 4 kB)."""
    text = os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else str(path)
    return text if len(text) <= limit else f"{text[: limit // 2]}…{text[-limit // 2 :]}"


@contextmanager
def scoped_environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` for the block (MLflow reads its HTTP settings from there on each request)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
