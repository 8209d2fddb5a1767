"""JSONL records with entity spans: line-numbered reading, span checks, and span-split text fields."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.gate import parse_json
from infoprompt.io_utils import MAX_DATA_FILE_BYTES, read_lines

# Entity markers of the relation templates (punctuation, so every tokenizer has them as plain tokens).
HEAD_MARK = "@"
TAIL_MARK = "#"


def read_jsonl(path: Path) -> Iterator[tuple[str, dict]]:
    """Yield ``("<path>:<line>", record)`` for every non-blank line of a JSON-lines file."""
    for line_number, line in read_lines(path, limit=MAX_DATA_FILE_BYTES):
        if not line.strip():
            continue
        where = f"{path}:{line_number}"
        record = parse_json(line, where)
        if not isinstance(record, dict):
            raise UserError(f"{where}: expected a JSON object, found {type(record).__name__}")
        yield where, record


def require(record: dict, key: str, kind: type | tuple[type, ...], where: str):
    """``record[key]``, which must exist and be of ``kind``."""
    if key not in record:
        raise UserError(f"{where}: missing field {key!r}")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise UserError(f"{where}: field {key!r} must be {expected}, found {type(value).__name__}")
    return value


def check_span(start: object, end: object, size: int, what: str, unit: str, where: str) -> tuple[int, int]:
    """A ``[start, end)`` span that is non-empty and lies inside a sequence of ``size`` ``unit``s."""
    if not isinstance(start, int) or not isinstance(end, int) or isinstance(start, bool) or isinstance(end, bool):
        raise UserError(f"{where}: {what} span [{start!r}, {end!r}) must be two integers")
    if start >= end:
        raise UserError(f"{where}: {what} span [{start}, {end}) is empty or reversed (start must be < end)")
    if start < 0 or end > size:
        raise UserError(f"{where}: {what} span [{start}, {end}) is out of range for a text of {size} {unit}")
    return start, end


def check_char_span(text: str, span: object, mention: str, what: str, where: str) -> tuple[int, int]:
    """A character span into ``text`` whose covered text must equal ``mention``."""
    if not isinstance(span, list | tuple) or len(span) != 2:
        raise UserError(f"{where}: {what} span must be a [start, end) pair, found {span!r}")
    start, end = check_span(span[0], span[1], len(text), what, "characters", where)
    if text[start:end] != mention:
        raise UserError(f"{where}: {what} text {mention!r} does not match its span [{start}, {end}), "
                        f"which covers {text[start:end]!r}")
    return start, end


def check_entities(tokens: Sequence[str], entities: list, where: str) -> list[tuple[int, int, str]]:
    """Token-level entities ``{start, end, type[, text]}`` as ``(start, end, type)``, each checked."""
    checked = []
    for index, entity in enumerate(entities):
        what = f"entity {index}"
        if not isinstance(entity, dict):
            raise UserError(f"{where}: {what} must be a JSON object, found {type(entity).__name__}")
        start, end = check_span(entity.get("start"), entity.get("end"), len(tokens), what, "tokens", where)
        kind = require(entity, "type", str, f"{where}: {what}")
        covered = " ".join(tokens[start:end])
        if "text" in entity and entity["text"] != covered:
            raise UserError(f"{where}: {what} text {entity['text']!r} does not match tokens [{start}, {end}), "
                            f"which read {covered!r}")
        checked.append((start, end, kind))
    return checked


def token_char_spans(tokens: Sequence[str], spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character spans in ``" ".join(tokens)`` of token spans ``[start, end)``."""
    offsets, position = [], 0
    for token in tokens:
        offsets.append(position)
        position += len(token) + 1
    return [(offsets[start], offsets[end - 1] + len(tokens[end - 1])) for start, end in spans]


def typing_fields(text: str, start: int, end: int) -> dict[str, str]:
    """Entity-typing fields of the mention ``text[start:end]``: the text left of it, it, the text right of it."""
    return {"left": text[:start].strip(), "mention": text[start:end].strip(), "right": text[end:].strip()}


def relation_fields(text: str, head: tuple[int, int], tail: tuple[int, int]) -> dict[str, str]:
    """Relation fields of a head and a tail mention of ``text`` (character spans, not overlapping).

    The sentence is split at the two mentions in reading order (``before``, ``first``, ``between``,
    ``second``, ``after``); the mention fields carry the head marker ``@ … @`` or the tail marker
    ``# … #``, and ``head`` / ``tail`` repeat the bare mention texts for the template.
    """
    if head[0] < tail[1] and tail[0] < head[1]:
        raise ValueError(f"head span {head} and tail span {tail} overlap")
    marked = {head: f"{HEAD_MARK} {text[head[0]:head[1]].strip()} {HEAD_MARK}",
              tail: f"{TAIL_MARK} {text[tail[0]:tail[1]].strip()} {TAIL_MARK}"}
    first, second = sorted((head, tail))
    return {
        "before": text[: first[0]].strip(),
        "first": marked[first],
        "between": text[first[1] : second[0]].strip(),
        "second": marked[second],
        "after": text[second[1] :].strip(),
        "head": text[head[0] : head[1]].strip(),
        "tail": text[tail[0] : tail[1]].strip(),
    }
