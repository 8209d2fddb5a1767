"""LoRA inside the shared, frozen encoder, for the kinds that train it (setfit-lora, lora): their common options,
the modules LoRA adapts, and structure copies of the encoder that share its weights."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from infoprompt.errors import UserError
from infoprompt.kinds.options import KindOptions
from infoprompt.options import NAME_LIST, POSITIVE, option
from infoprompt.validation import Rule, module_names

# The modules LoRA adapts when no --lora-targets are named, per layer set and architecture (peft's own table
# lacks MPNet). "attention-qv": the attention query and value projections (peft's default); "all-linear": every
# linear layer of each transformer block, the four attention projections and both feed-forward layers (the
# "output.dense" suffix also matches BERT's attention output projection).
_BERT_ALL = ("query", "key", "value", "intermediate.dense", "output.dense")
LAYER_SETS = {
    "attention-qv": {"bert": ("query", "value"), "roberta": ("query", "value"), "xlm-roberta": ("query", "value"),
                     "mpnet": ("q", "v")},
    "all-linear": {"bert": _BERT_ALL, "roberta": _BERT_ALL, "xlm-roberta": _BERT_ALL,
                   "mpnet": ("q", "k", "v", "o", "intermediate.dense", "output.dense")},
}


@dataclass(frozen=True)
class LoraOptions(KindOptions):
    """LoRA's options.

    Attributes:
        lora_rank: rank r of each LoRA update.
        lora_alpha: LoRA's scaling numerator α (the update is ``α / r · B A x``).
        lora_targets: names of the encoder modules LoRA adapts (peft's ``target_modules``); ``None``: the
            architecture's attention query and value projections.
    """

    lora_rank: int = option(8, "LoRA rank r (default: the method's, 8)", type=POSITIVE)
    lora_alpha: int = option(16, "LoRA scaling alpha, the update is alpha/r * BAx (default: the method's, 16)",
                             type=POSITIVE)
    lora_targets: tuple[str, ...] | None = option(
        None, "comma-separated encoder module names LoRA adapts, e.g. query,key,value (default: the attention query "
              "and value projections)", type=Rule(module_names, NAME_LIST.parse))


class ReleasedEncoder(nn.Module):
    """Stands where a served adapter's own LoRA encoder was released (see
    :func:`infoprompt.kinds.mixed_lora.keep_mixed_parts_only`): the adapter predicts only in mixed batches. It
    keeps the encoder's ``config``, which tokenising code reads (sentence-transformers' ``Transformer.config``)."""

    def __init__(self, config: Any):
        super().__init__()
        self.config = config

    def forward(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("this adapter's encoder was released for mixed LoRA batches "
                           "(infoprompt.kinds.mixed_lora.keep_mixed_parts_only): it predicts only through them")


def structure_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module``'s modules that shares every parameter and buffer tensor with it: LoRA layers can be
    injected into the copy while the shared encoder, and every other adapter on it, stays as it is."""
    shared = {id(tensor): tensor for tensor in itertools.chain(module.parameters(), module.buffers())}
    return copy.deepcopy(module, shared)


def lora_targets(encoder: nn.Module, targets: tuple[str, ...], layers: str) -> list[str]:
    """The module names LoRA adapts: ``targets``, each checked against the encoder, or (none named) the
    architecture's modules of the layer set ``layers`` (a key of :data:`LAYER_SETS`)."""
    if targets:
        names = [name for name, _ in encoder.named_modules()]
        missing = [target for target in targets
                   if not any(name == target or name.endswith(f".{target}") for name in names)]  # peft's matching
        if missing:
            linear = {name.rsplit(".", 1)[-1] for name, module in encoder.named_modules() if isinstance(module, nn.Linear)}
            raise UserError(f"LoRA target {missing[0]!r} names no module of this encoder; its linear layers are "
                            f"{', '.join(sorted(linear))}")
        return list(targets)
    model_type = getattr(getattr(encoder, "config", None), "model_type", "")
    defaults = LAYER_SETS[layers]
    if model_type not in defaults:
        raise UserError(f"setfit-lora has no default LoRA targets for a {model_type or 'unknown'} encoder; "
                        f"name the projection modules to adapt (--lora-targets)")
    return list(defaults[model_type])


def lora_config(encoder: nn.Module, rank: int, alpha: int, targets: tuple[str, ...], layers: str,
                dropout: float = 0.0, **fields: Any) -> Any:
    """peft's ``LoraConfig`` of LoRA in ``encoder`` (see :func:`lora_targets`); ``fields``: further ``LoraConfig``
    fields (``layers_to_transform``, ...)."""
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=lora_targets(encoder, targets, layers),
                      bias="none", **fields)


def with_lora(encoder: nn.Module, config: Callable[[nn.Module], Any]) -> Any:
    """peft's LoRA on a structure copy of ``encoder``, as ``config(copy)`` describes it (A matrices drawn from
    torch's generator, which the caller seeds; B at zero)."""
    from peft import get_peft_model

    from infoprompt.kinds.common import quiet_peft_wrap

    copied = structure_copy(encoder)
    lora = config(copied)
    with quiet_peft_wrap():
        return get_peft_model(copied, lora)


def lora_encoder(encoder: nn.Module, rank: int, alpha: int, targets: tuple[str, ...], layers: str,
                 dropout: float = 0.0) -> Any:
    """peft's LoRA of the modules of ``layers`` (or ``targets``) on a structure copy of ``encoder``."""
    return with_lora(encoder, lambda copied: lora_config(copied, rank, alpha, targets, layers, dropout))
