"""Checks of values from users: config dataclasses, CLI options, adapter files; one-line errors naming the value."""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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


def module_names(value: Any, name: str) -> tuple[str, ...]:
    """A non-empty sequence of non-empty names without spaces (module names, column names)."""
    names = tuple(value) if isinstance(value, list | tuple) else ()
    if not names or not all(isinstance(n, str) and n and not any(c.isspace() for c in n) for n in names):
        raise UserError(f"{name} must be a non-empty list of names, got {value!r}")
    return names


def one_of(value: Any, name: str, choices: typing.Sequence[str]) -> str:
    if value not in choices:
        raise UserError(f"unknown {name} {value!r}; valid: {', '.join(choices)}")
    return value


@dataclass(frozen=True)
class Rule:
    """One kind of value: its check (``check(value, name)``, a one-line error naming ``name``) and how command-line
    text becomes such a value. Calling a rule parses and checks text: it is an argparse ``type=``, and argparse
    names the option in the error."""

    check: Callable[[Any, str], Any]
    parse: Callable[[str], Any] = int

    def __call__(self, text: str) -> Any:
        try:
            value = self.parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        try:
            return self.check(value, "value")
        except UserError as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix("value ")) from None


def option(check: Callable[..., Any], parse: Callable[[str], Any] = int) -> Rule:
    """An argparse ``type=`` that parses a string and applies ``check`` (a :class:`Rule`)."""
    return Rule(check, parse)


def positive_number(value: Any, name: str) -> float:
    return finite_number(value, name, positive=True)


def fraction(value: Any, name: str) -> float:
    """A number strictly between 0 and 1 (a share held out, a probability cut)."""
    if not 0 < finite_number(value, name) < 1:
        raise UserError(f"{name} must be between 0 and 1, got {value}")
    return float(value)


def proportion(value: Any, name: str) -> float:
    """A share from 0 up to but not including 1 (a dropout rate, a warm-up share of the steps)."""
    if not finite_number(value, name) < 1:
        raise UserError(f"{name} must be at least 0 and below 1, got {value}")
    return float(value)


def at_least_two(value: Any, name: str) -> int:
    """A count of at least 2 (texts per batch of an objective that scores pairs within it)."""
    return _integer(value, name, 2, "an integer >= 2")


def token_budget(value: Any, name: str) -> int:
    """A positive token count no larger than :data:`MAX_LENGTH_LIMIT` (the backbone's own limit is checked when
    it loads)."""
    positive_int(value, name)
    if value > MAX_LENGTH_LIMIT:
        raise UserError(f"{name} must be at most {MAX_LENGTH_LIMIT}, got {value}")
    return int(value)


def distinct_names(value: Any, name: str) -> tuple[str, ...]:
    if len(set(value)) != len(value):
        raise UserError(f"{name} must be distinct, got {list(value)}")
    return tuple(value)


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


def check_fields(obj: Any, where: str = "") -> None:
    """The one check of every config dataclass and every kind's options: each field has its annotated type
    (:func:`check_field_types`) and passes its own rule, the ``check(value, name)`` of the ``Option`` in its
    metadata (:func:`infoprompt.options.option`: a choice, a positive count, a list of names, ...)."""
    check_field_types(obj, where)
    for field in dataclasses.fields(obj):
        spec = field.metadata.get("option")
        if spec is None:
            continue
        try:
            spec.check(getattr(obj, field.name), field.name)
        except UserError as error:
            raise UserError(f"{where}: {error}" if where else str(error)) from None


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


# What every backbone fingerprint holds (see :meth:`infoprompt.backbones.Backbone.fingerprint`).
FINGERPRINT_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "embedding_sha256")


def require_fingerprint(data: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """An adapter config's JSON, refused unless it records its backbone's fingerprint: without one, an adapter
    would run on whatever backbone its name finds now, and give wrong numbers without an error."""
    fingerprint = data.get("backbone_fingerprint")
    if not fingerprint:
        raise UserError(f"{where}: no backbone_fingerprint, so the backbone it was trained on cannot be checked "
                        "(an adapter of an old format, or an edited one); retrain it with this version")
    missing = [key for key in FINGERPRINT_KEYS if not isinstance(fingerprint, Mapping) or key not in fingerprint]
    if missing:
        raise UserError(f"{where}: backbone_fingerprint lacks {', '.join(missing)}; retrain the adapter with this version")
    return data


def check_peft_adapter(peft_dir: Any, n_prompts: int, hidden_size: int) -> None:
    """Refuse, with one line, a ``peft`` prompt-tuning adapter that does not fit its ``adapter_config.json``
    or holds NaN: another ``peft_type`` or ``num_virtual_tokens``, pickled weights (``adapter_model.bin``,
    which could run code), prompt embeddings of another shape, values that are not finite."""
    from pathlib import Path

    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from infoprompt.io_utils import read_json_object

    peft_dir = Path(peft_dir)
    config_path = peft_dir / "adapter_config.json"
    peft_config = read_json_object(config_path)
    if peft_config.get("peft_type") != "PROMPT_TUNING":
        raise UserError(f"{config_path}: peft_type must be PROMPT_TUNING, got {peft_config.get('peft_type')!r}")
    if peft_config.get("num_virtual_tokens") != n_prompts:
        raise UserError(f"{config_path}: num_virtual_tokens is {peft_config.get('num_virtual_tokens')!r}, but the "
                        f"adapter's config says n_prompts={n_prompts}")
    weights = peft_dir / "adapter_model.safetensors"
    if not weights.is_file():
        pickled = " (only a pickled adapter_model.bin, which infoprompt never reads: it could run code)" \
            if (peft_dir / "adapter_model.bin").exists() else ""
        raise UserError(f"adapter file {weights} is missing{pickled}")
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError) as error:
        raise UserError(f"{weights}: not a readable safetensors file ({error})") from None
    prompts = state.get("prompt_embeddings")
    if prompts is None or tuple(prompts.shape) != (n_prompts, hidden_size):
        shape = None if prompts is None else tuple(prompts.shape)
        raise UserError(f"{weights}: prompt_embeddings has shape {shape}, expected {(n_prompts, hidden_size)}")
    check_finite(state, str(weights))


# The keys of a LoRA adapter's peft config that decide what its weights mean: a saved config that differs from the
# model the weights were loaded into would load differently (or not at all) in peft itself.
LORA_CONFIG_KEYS = ("peft_type", "r", "lora_alpha", "target_modules", "bias", "use_dora", "use_rslora",
                    "rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform", "layers_pattern")


def check_lora_config(peft_dir: Any, built: Mapping[str, Any], backbone_names: typing.Sequence[str]) -> None:
    """Refuse, with one line, a LoRA adapter whose ``peft/adapter_config.json`` is missing or does not describe
    the weights it sits beside: each of :data:`LORA_CONFIG_KEYS` must equal that of ``built`` (the config of
    the model built from the adapter's settings, whose names and shapes the weights matched), and
    ``base_model_name_or_path`` must name the adapter's backbone: one of ``backbone_names``, or a path ending
    in the same two components as one of them (a packaged encoder extracted on another machine)."""
    from pathlib import Path

    from infoprompt.io_utils import read_json_object

    path = Path(peft_dir) / "adapter_config.json"
    if not path.is_file():
        raise UserError(f"adapter file {path} is missing (peft's description of the LoRA weights beside it)")
    saved = read_json_object(path)
    for key in LORA_CONFIG_KEYS:
        if _peft_value(saved.get(key)) != _peft_value(built.get(key)):
            raise UserError(f"{path}: {key} is {saved.get(key)!r}, but the adapter's weights and settings are "
                            f"those of {key}={_peft_value(built.get(key))!r}")
    base = saved.get("base_model_name_or_path")
    tails = {Path(name).parts[-2:] for name in backbone_names}
    if not isinstance(base, str) or (base not in backbone_names and Path(base).parts[-2:] not in tails):
        raise UserError(f"{path}: base_model_name_or_path is {base!r}, but the adapter was trained on backbone "
                        f"{backbone_names[0]!r}")


def _peft_value(value: Any) -> Any:
    """A peft config value as JSON spells it: enums by value, sets and lists sorted, empty containers None."""
    value = getattr(value, "value", value)
    if isinstance(value, set | list | tuple):
        return sorted(map(str, value)) or None
    return value or None if isinstance(value, dict) else value


# A LoRA adapter's options (``infoprompt_adapter.json``) and the names its saved settings
# (``setfit_lora_config.json``) give them: the settings built the model whose names and shapes the weights matched.
LORA_OPTION_SETTINGS = {"lora_rank": "rank", "lora_alpha": "alpha", "lora_targets": "targets",
                        "lora_layers": "layers", "top_layers": "top_layers"}


def check_options_match_settings(config_path: Any, options: Any, settings_path: Any, settings: Any) -> None:
    """Refuse, with one line naming the file and field, a saved adapter whose options in ``config_path`` say
    other than its settings in ``settings_path`` (which its weights were checked against): each option of
    :data:`LORA_OPTION_SETTINGS` that the file records must equal the setting of its name (a list as a tuple, no
    targets as none). An edited ``top_layers: 99`` would otherwise load and serve as if nothing were wrong. (A
    record of the first format holds no options of these kinds: those it lacks come from the method's row.)"""
    from infoprompt.io_utils import read_json_object

    record = read_json_object(config_path)
    recorded = record["options"] if isinstance(record.get("options"), dict) else record
    for option_name, setting_name in LORA_OPTION_SETTINGS.items():
        if option_name not in recorded or not hasattr(options, option_name) or not hasattr(settings, setting_name):
            continue
        said, built = getattr(options, option_name), getattr(settings, setting_name)
        if option_name == "top_layers" and said is None:
            continue  # unset: the default k, which the settings make concrete
        if _setting_value(said) != _setting_value(built):
            raise UserError(f"{config_path}: options.{option_name} is {said!r}, but the adapter's weights and "
                            f"{settings_path} are those of {option_name}={_setting_value(built)!r}")


def _setting_value(value: Any) -> Any:
    return (tuple(value) or None) if isinstance(value, list | tuple) else value
