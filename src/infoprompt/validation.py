"""Checks of values from users: config dataclasses, CLI options, adapter files; one-line errors naming the value."""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import types
import typing
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from infoprompt.errors import UserError

# Longest token budget accepted before a backbone is known; the backbone's own limit is checked when it loads.
MAX_LENGTH_LIMIT = 1 << 20


def positive_int(value: Any, name: str) -> int:
    """``value`` as an integer >= 1 (not a bool, not a float)."""
    return _integer(value, name, 1, "a positive integer")


def nonnegative_int(value: Any, name: str) -> int:
    return _integer(value, name, 0, "an integer >= 0")


def _integer(value: Any, name: str, minimum: int, wanted: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UserError(f"{name} must be {wanted}, got {value!r}")
    if value < minimum:
        raise UserError(f"{name} must be {wanted}, got {value}")
    return int(value)


def finite_number(value: Any, name: str, *, positive: bool = False) -> float:
    """``value`` as a finite float that is > 0 (``positive``) or >= 0."""
    wanted = "a finite number > 0" if positive else "a finite number >= 0"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = " (a string: in YAML write numbers like 1.0e-3 with a dot)" if isinstance(value, str) else ""
        raise UserError(f"{name} must be {wanted}, got {value!r}{hint}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise UserError(f"{name} must be {wanted}, got {value!r}")
    return number


def one_of(value: Any, name: str, choices: typing.Sequence[str]) -> str:
    if value not in choices:
        raise UserError(f"unknown {name} {value!r}; valid: {', '.join(choices)}")
    return value


def option(check: Callable[..., Any], parse: Callable[[str], Any] = int) -> Callable[[str], Any]:
    """An argparse ``type=`` that parses a string and applies ``check``; argparse names the option."""

    def convert(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        try:
            return check(value, "value")
        except UserError as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix("value ")) from None

    convert.__name__ = getattr(check, "__name__", "value")
    return convert


# -- dataclass field types ------------------------------------------------------------------------------------
def _matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` fits a simple annotation (int, float, str, bool, None, unions, tuple/list/dict of those)."""
    if annotation in (Any, object):
        return True
    if annotation is type(None) or annotation is None:
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arm) for arm in typing.get_args(annotation))
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (tuple, list):
        if not isinstance(value, tuple | list):
            return False
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return not args or all(_matches(item, args[0]) for item in value)
    if origin is dict or annotation is dict:
        return isinstance(value, Mapping)
    return True  # anything richer is the owning code's business


def _type_name(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "").replace("NoneType", "None")
    return getattr(annotation, "__name__", text) if not typing.get_args(annotation) else text


def check_field_types(obj: Any, where: str = "") -> None:
    """Refuse a dataclass whose fields do not have their annotated types (``"four"`` for an int, ...)."""
    hints = typing.get_type_hints(type(obj))
    prefix = f"{where}: " if where else ""
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        annotation = hints.get(field.name, Any)
        if not _matches(value, annotation):
            numeric = isinstance(value, str) and (_matches(0.5, annotation) or _matches(1, annotation))
            hint = " (a string: in YAML write numbers like 1.0e-3 with a dot)" if numeric else ""
            raise UserError(f"{prefix}{field.name} must be of type {_type_name(annotation)}, got {value!r}{hint}")


def validate_train_config(config: Any, precisions: typing.Sequence[str], selections: typing.Sequence[str]) -> None:
    """Types and ranges of a :class:`~infoprompt.training.TrainConfig`; ``epochs=0`` is refused."""
    check_field_types(config)
    one_of(config.precision, "precision", precisions)
    positive_int(config.epochs, "epochs")
    positive_int(config.batch_size, "batch_size")
    positive_int(config.eval_batch_size, "eval_batch_size")
    if config.lr is not None:
        finite_number(config.lr, "lr", positive=True)
    finite_number(config.weight_decay, "weight_decay")
    if config.max_steps is not None:
        positive_int(config.max_steps, "max_steps")
    if config.grad_clip is not None:
        finite_number(config.grad_clip, "grad_clip", positive=True)
    for name in ("eval_every", "eval_every_epochs", "eval_subset"):
        nonnegative_int(getattr(config, name), name)
    if config.select is not None:
        one_of(config.select, "select", selections)
    if not 0 < finite_number(config.holdout_fraction, "holdout_fraction") < 1:
        raise UserError(f"holdout_fraction must be between 0 and 1, got {config.holdout_fraction}")
    nonnegative_int(config.patience, "patience")


def validate_classifier_config(config: Any) -> None:
    """Types and ranges of a :class:`~infoprompt.model.ClassifierConfig` (names are checked on :meth:`resolved`)."""
    check_field_types(config)
    for name in ("beta", "gamma"):
        if getattr(config, name) is not None:
            finite_number(getattr(config, name), name)
    finite_number(config.kl_weight, "kl_weight")
    nonnegative_int(config.n_prompts, "n_prompts")
    positive_int(config.n_negatives, "n_negatives")
    positive_int(config.rank, "rank")
    positive_int(config.max_length, "max_length")
    if config.max_length > MAX_LENGTH_LIMIT:
        raise UserError(f"max_length must be at most {MAX_LENGTH_LIMIT}, got {config.max_length}")
    if len(set(config.labels)) != len(config.labels):
        raise UserError(f"labels must be distinct, got {list(config.labels)}")


def check_labels(labels: typing.Sequence[str], task: Any) -> None:
    """An adapter's labels must be its task's (in any order: they name the head rows)."""
    if sorted(labels) != sorted(task.labels):
        raise UserError(f"labels {list(labels)} are not those of task {task.name} ({', '.join(task.labels)})")


def check_finite(tensors: Mapping[str, Any], where: str) -> None:
    """Refuse NaN or infinite values in named tensors (adapter weights, trained parameters)."""
    import torch

    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise UserError(f"{where}: {name} holds NaN or infinite values")


def is_blank(text: str) -> bool:
    """Text with nothing a tokenizer keeps: whitespace, or invisible format characters (zero-width spaces and
    joiners, byte-order marks) only."""
    stripped = text.strip()
    return not stripped or all(char.isspace() or unicodedata.category(char) in ("Cf", "Cc") for char in stripped)


def check_encodable(text: str, where: str) -> None:
    """Refuse a lone surrogate (``"\\ud800"`` in JSON), which is no character and no tokenizer takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise UserError(f"{where} holds a lone surrogate (U+{ord(text[error.start]):04X}) at character "
                        f"{error.start + 1}, which is not text") from None
