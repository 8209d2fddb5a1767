"""The one gate for what users hand in: every text, and every JSON, YAML or TOML document, from any path.

Texts (built-in task files, ``--train-file``/``--eval-file``, ``predict`` inputs, server requests, ``Classifier``)
pass :func:`check_texts`; documents (configs, grids, adapter metadata, records, data rows, request bodies) pass
:func:`parse_json`, :func:`parse_yaml` or :func:`parse_toml`. So the same bad input gets the same one-line
:class:`~infoprompt.errors.UserError` on every path, before a tokenizer or a recursive reader sees it.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from infoprompt.errors import UserError

# Nesting levels a document may have: configs, records, data rows and requests use a handful; deeper input is
# refused before a recursive reader (json, PyYAML, tomllib, and the code that walks the result) overflows.
MAX_DEPTH = 100
# Bytes of a configuration-like document read whole (adapter metadata, records, run configs, grids).
MAX_DOCUMENT_BYTES = 64 << 20
MAX_CONFIG_BYTES = 1 << 20  # a YAML or TOML run config or grid: a few kB in practice; PyYAML reads ~1 MB/s
_SURROGATE = re.compile("[\ud800-\udfff]")


# -- texts ----------------------------------------------------------------------------------------------------
# Characters that show nothing on their own, by Unicode property (not by a list, which always misses some):
# whitespace, controls (Cc), format characters (Cf: zero-width spaces and joiners, soft hyphens, byte-order
# marks, tags) and combining marks (Mn, Me), which have no base to sit on, as Python's Unicode database has them;
# and default-ignorable code points (Hangul fillers U+3164, U+115F, U+1160, U+FFA0, the combining grapheme
# joiner U+034F, variation selectors), which only the regex module knows.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Mn", "Me"})


@functools.cache
def _default_ignorable() -> Any:
    import regex  # Python's re and unicodedata know no Default_Ignorable_Code_Point

    return regex.compile(r"\p{Default_Ignorable_Code_Point}")


def is_invisible(char: str) -> bool:
    """Whether the character ``char`` shows nothing on its own (see :data:`_INVISIBLE_CATEGORIES`)."""
    return (char.isspace() or unicodedata.category(char) in _INVISIBLE_CATEGORIES
            or _default_ignorable().match(char) is not None)


def is_blank(text: str) -> bool:
    """Text with nothing to read: every character is whitespace, a control or format character, a combining
    mark or a default-ignorable code point (:func:`is_invisible`). Files, ``Classifier`` and the server all ask
    this."""
    return all(is_invisible(char) for char in text)


def check_texts(fields: Mapping[str, object], where: str, *, every_field: bool = True) -> dict[str, str]:
    """``fields`` (name -> text), refused unless each is text a tokenizer can take: a string (``None`` counts as
    empty), not blank or invisible only (:func:`is_blank`), without a lone surrogate (``"\\ud800"`` in JSON,
    which is no character). ``where`` names the row (``in.jsonl:3``, ``inputs[2]``, ``texts[0]``).
    ``every_field=False`` lets some fields be empty as long as one is not (the context left of an entity
    mention may be empty): what a check must allow that does not know the task's fields."""
    for name, value in fields.items():
        if value is not None and not isinstance(value, str):
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
            raise UserError(f"{where}: field {name} must be text, got {type(value).__name__} {shown}")
    empty = [name for name, value in fields.items() if value is None or is_blank(value)]  # type: ignore[arg-type]
    if empty and (every_field or len(empty) == len(fields)):
        raise UserError(f"{where}: empty text field(s) {', '.join(empty)}")
    for name, value in fields.items():
        found = None if value is None else _SURROGATE.search(value)  # type: ignore[arg-type]
        if found is not None:
            raise UserError(f"{where}: field {name} holds a lone surrogate (U+{ord(found.group()):04X}) at character "
                            f"{found.start() + 1}, which is not text")
    return dict(fields)  # type: ignore[arg-type]


# -- JSON -----------------------------------------------------------------------------------------------------
def parse_json(text: str | bytes, where: str, *, limit: int | None = None,
               object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """The JSON value of ``text``; not JSON, not UTF-8, over ``limit`` bytes or nested more than
    :data:`MAX_DEPTH` levels is a one-line error naming ``where``."""
    _check_size(text, where, limit, "JSON")
    with _json_errors(where, text):
        if isinstance(text, bytes):
            text = text.decode("utf-8-sig")
        value = json.loads(text, object_pairs_hook=object_pairs_hook)
    _check_depth(value, text, where, "JSON")
    return value


def parse_json_at(text: str, position: int, where: str,
                  object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> tuple[Any, int]:
    """The JSON value that starts at ``position`` of ``text`` and where it ends (the elements of a JSON array
    read one by one); errors as :func:`parse_json`."""
    with _json_errors(where, text):
        value, end = json.JSONDecoder(object_pairs_hook=object_pairs_hook).raw_decode(text, position)
    _check_depth(value, text[position:end], where, "JSON")
    return value, end


@contextmanager
def _json_errors(where: str, text: str | bytes) -> Iterator[None]:
    try:
        yield
    except json.JSONDecodeError as error:
        at = f"line {error.lineno} column {error.colno}" if error.lineno > 1 or "\n" in error.doc else \
            f"column {error.colno}"
        raise UserError(f"{where}: not valid JSON ({error.msg} at {at})") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{where}: not valid UTF-8 text (byte 0x{error.object[error.start]:02x} at byte "
                        f"{error.start + 1})") from None
    except RecursionError:
        raise _too_deep(where, "JSON") from None


# -- YAML and TOML --------------------------------------------------------------------------------------------
def parse_yaml(text: str, where: str, what: str) -> Any:
    """The data of a YAML document (``what`` names it in errors: "grid files", "a run config"); see
    :func:`yaml_entries` for the refusals."""
    with _yaml_loader(text, where, what) as loader:
        node = loader.get_single_node()
        return None if node is None else loader.construct_document(node)


def yaml_entries(text: str, where: str, what: str) -> list[tuple[object, object, int]] | None:
    """The top-level ``(key, value, line)`` entries of a YAML mapping; ``[]`` for an empty document, ``None``
    when the document is no mapping. Aliases (``*name``, whose nesting expands to gigabytes), nesting over
    :data:`MAX_DEPTH` levels and text over :data:`MAX_CONFIG_BYTES` are one-line errors naming the line."""
    import yaml

    with _yaml_loader(text, where, what) as loader:
        node = loader.get_single_node()
        if node is None:
            return []
        if not isinstance(node, yaml.MappingNode):
            return None
        return [(loader.construct_object(key, deep=True), loader.construct_object(value, deep=True),
                 key.start_mark.line + 1) for key, value in node.value]


@contextmanager
def _yaml_loader(text: str, where: str, what: str) -> Iterator[Any]:
    import yaml

    _check_size(text, where, MAX_CONFIG_BYTES, "YAML")
    loader = _loader_class()(text)
    loader.refusal = what
    try:
        yield loader
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        raise UserError(f"{where}{at}: not valid YAML ({getattr(error, 'problem', None) or error})") from None
    except RecursionError:
        raise _too_deep(where, "YAML") from None
    finally:
        loader.dispose()


def _loader_class() -> type:
    """PyYAML's safe loader without aliases and with a depth limit (built on first use: yaml loads lazily)."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class GatedLoader(yaml.SafeLoader):
            depth = 0
            refusal = "this file"

            def compose_node(self, parent, index):  # noqa: ANN001, ANN201 - PyYAML's signature
                if self.check_event(yaml.AliasEvent):
                    event = self.peek_event()
                    raise yaml.composer.ComposerError(
                        None, None, f"aliases (*{event.anchor}) are not allowed in {self.refusal}; write the "
                                    "values out", event.start_mark)
                if self.depth >= MAX_DEPTH:
                    raise yaml.composer.ComposerError(
                        None, None, f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
                self.depth += 1
                try:
                    return super().compose_node(parent, index)
                finally:
                    self.depth -= 1

        _LOADER = GatedLoader
    return _LOADER


_LOADER: type | None = None


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """The table of a TOML document; errors, size and depth limits as :func:`parse_yaml`."""
    _check_size(text, where, MAX_CONFIG_BYTES, "TOML")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{where}: not valid TOML ({error})") from None
    except RecursionError:
        raise _too_deep(where, "TOML") from None
    _check_depth(data, text, where, "TOML")
    return data


# -- limits ---------------------------------------------------------------------------------------------------
def _check_size(text: str | bytes, where: str, limit: int | None, kind: str) -> None:
    if limit is not None and len(text) > limit:
        unit = "bytes" if isinstance(text, bytes) else "characters"
        raise UserError(f"{where}: {len(text)} {unit} of {kind}, more than the {limit} a document may have")


def _check_depth(value: Any, text: str | bytes, where: str, kind: str) -> None:
    """Refuse ``value`` when nested deeper than :data:`MAX_DEPTH`; a text with fewer brackets cannot be, so
    most rows and configs are not walked at all."""
    opening = (b"[", b"{") if isinstance(text, bytes) else ("[", "{")
    if sum(text.count(mark) for mark in opening) <= MAX_DEPTH:  # type: ignore[arg-type]
        return
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(where, kind)
        inner = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in inner if isinstance(child, dict | list))


def _too_deep(where: str, kind: str) -> UserError:
    return UserError(f"{where}: {kind} nested too deeply (more than {MAX_DEPTH} levels)")
