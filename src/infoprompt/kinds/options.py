"""KindOptions: the base of every kind's options dataclass, checked by the one generic validator."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from infoprompt.validation import check_fields


def _takes_tuple(annotation: Any) -> bool:
    """Whether a field of type ``annotation`` holds a tuple (``tuple[str, ...]``, ``tuple[str, ...] | None``)."""
    arms = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    return any(typing.get_origin(arm) is tuple or arm is tuple for arm in arms)


@dataclass(frozen=True)
class KindOptions:
    """What one kind's adapters can be told, as a frozen dataclass whose fields are made with
    :func:`infoprompt.options.option` (their flag, type and choices). Every subclass is checked the same way when
    it is built: list values become tuples where the field is a tuple (as JSON and YAML give them), then
    :func:`~infoprompt.validation.check_fields` checks every field and :meth:`check` what spans fields.

    A method (:class:`~infoprompt.kinds.registry.Method`) is a named instance; an adapter saves its own.
    """

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, list) and _takes_tuple(hints.get(field.name)):
                object.__setattr__(self, field.name, tuple(value))
        check_fields(self)
        self.check()

    def check(self) -> None:
        """Refuse, with a one-line :class:`~infoprompt.errors.UserError`, a combination of values that do not go
        together (each value on its own is checked already)."""

    def prompt_tokens(self) -> int:
        """Prompt tokens these options insert in an input (0: none); the sweep's ``n_prompts`` axis and the run
        record read it."""
        return 0

    def limits(self, pairs: bool = False) -> dict[str, str]:
        """Capabilities of the kind that these settings take away, each with the reason (see
        :meth:`~infoprompt.kinds.registry.Kind.refusal`); ``pairs``: for an adapter whose inputs are text pairs."""
        return {}

    # Options that change only how the head is fitted, not the features it reads: adapters that differ in these
    # alone share the server's encoder pass and an ONNX export's encoder graph.
    HEAD_ONLY: ClassVar[tuple[str, ...]] = ()

    def feature_options(self) -> tuple[tuple[str, Any], ...]:
        """The options the features depend on, as hashable ``(name, value)`` pairs (all but :attr:`HEAD_ONLY`)."""
        return tuple((field.name, getattr(self, field.name)) for field in dataclasses.fields(self)
                     if field.name not in self.HEAD_ONLY)

    def to_json(self) -> dict[str, Any]:
        return {name: list(value) if isinstance(value, tuple) else value
                for name, value in dataclasses.asdict(self).items()}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def preset_names(cls) -> tuple[str, ...]:
        """The options a method's row sets and a user's overrides may not (``option(..., preset=True)``)."""
        return tuple(field.name for field in dataclasses.fields(cls)
                     if "option" in field.metadata and field.metadata["option"].preset)
