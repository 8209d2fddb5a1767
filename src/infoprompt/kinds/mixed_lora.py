"""Rows of different LoRA adapters on one frozen encoder in one batch: each row passes through its own adapter's
low-rank pairs (stacked per batch and gathered per row, never merged into the shared weights), and the blocks
below the lowest LoRA block of the batch's adapters run once per distinct text for all of them."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from infoprompt.kinds.lora_layers import structure_copy
from infoprompt.kinds.registry import MIXED_LORA
from infoprompt.kinds.top_lora.blocks import SplitEncoder, by_length, encoder_blocks, pad_states

ADAPTER = "default"  # the name peft gives the one LoRA adapter of each of our models


@dataclass(frozen=True)
class LoraParts:
    """One adapter's LoRA, read from its peft layers (its own tensors, not copies).

    Attributes:
        pairs: per adapted linear layer (its module path in the encoder): A (r, in), B (out, r) and the scaling.
        first_block: the lowest encoder block holding a LoRA layer; the blocks below are the backbone's own.
    """

    pairs: dict[str, tuple[torch.Tensor, torch.Tensor, float]]
    first_block: int


_KEPT: weakref.WeakKeyDictionary[Any, LoraParts] = weakref.WeakKeyDictionary()  # models of keep_mixed_parts_only


def lora_parts(model: Any) -> LoraParts | None:
    """``model``'s LoRA as :class:`LoraParts` when its kind mixes (the mixed-lora-batch capability) and every
    LoRA layer is a plain one inside an encoder block (no DoRA, bias, merge or transposed weights); ``None``
    otherwise: such an adapter runs in a lane of its own."""
    kept = _KEPT.get(model)
    if kept is not None:
        return kept
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    from infoprompt.tasks import is_multi_label

    config = model.config
    pairs = len(model.task.fields) == 2
    if config.kind.refusal(MIXED_LORA, config.options, pairs=pairs) is not None or is_multi_label(model.task):
        return None
    encoder = model.lora_model.base_model.model
    block_of = {id(module): index for index, block in enumerate(encoder_blocks(encoder)) for module in block.modules()}
    pairs, blocks = {}, []
    for name, module in encoder.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        plain = (type(module) is LoraLinear and id(module) in block_of and not module.merged
                 and not module.fan_in_fan_out and not module.use_dora.get(ADAPTER, False)
                 and not getattr(module, "lora_bias", {}).get(ADAPTER, False) and ADAPTER in module.lora_A)
        if not plain:
            return None
        pairs[name] = (module.lora_A[ADAPTER].weight.detach(), module.lora_B[ADAPTER].weight.detach(),
                       float(module.scaling[ADAPTER]))
        blocks.append(block_of[id(module)])
    if not pairs:
        return None
    return LoraParts(pairs=pairs, first_block=min(blocks))


def keep_mixed_parts_only(model: Any) -> LoraParts | None:
    """Make ``model``, when it is a LoRA adapter that mixes (:func:`lora_parts` not None), an adapter that runs
    only in mixed batches: its LoRA tensors are kept as :class:`LoraParts` and its own copy of the encoder's module
    tree (peft's wrappers around the backbone's layers: about 0.6–1.2 MiB of Python objects per MiniLM adapter,
    more than its weights) is released. A server that mixes every such adapter holds only weights per adapter;
    the model can no longer run its own forward pass or be saved. Returns its parts, or ``None`` (the model left
    as it is) for a model that does not mix; a model kept already is left as it is."""
    if model in _KEPT:
        return _KEPT[model]
    parts = lora_parts(model)
    if parts is not None:
        model.release_lora_encoder()
        _KEPT[model] = parts
    return parts


class RoutedLinear(nn.Module):
    """A frozen linear layer of the shared encoder plus, per row, that row's LoRA update ``B_i (A_i x)``: the
    A and B of each row are gathered from stacks of the batch's adapters (``route``), so that every row of the
    batch costs two small batched products whichever adapter it belongs to. ``route`` None: the layer alone."""

    def __init__(self, base: nn.Linear):
        super().__init__()
        self.base = base
        self.route: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, r, in), (B, out, r) with scaling in B

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        if self.route is None:
            return out
        a, b = self.route
        low = torch.bmm(x, a.transpose(1, 2))
        if torch.is_grad_enabled():
            return out.baddbmm(low, b.transpose(1, 2))
        return out.baddbmm_(low, b.transpose(1, 2))  # ``out`` is this call's own tensor: no copy of (B, T, out)


class MixedLoraEncoder:
    """A structure copy of one shared encoder (its weights are the backbone's own tensors) whose block linear
    layers are :class:`RoutedLinear`: it runs rows of many LoRA adapters in one pass."""

    def __init__(self, encoder: nn.Module):
        self.model = structure_copy(encoder).eval()
        blocks = encoder_blocks(self.model)
        self.depth = len(blocks)
        self.routed: dict[str, RoutedLinear] = {}
        self.trunks: dict[tuple[int, int], SplitEncoder] = {}  # (first LoRA block, pad id) -> its split
        prefix = next(name for name, module in self.model.named_modules() if module is blocks)
        for block_index, block in enumerate(blocks):
            for name, module in list(block.named_modules()):
                if isinstance(module, nn.Linear):
                    parent_name, _, leaf = name.rpartition(".")
                    routed = RoutedLinear(module)
                    setattr(block.get_submodule(parent_name) if parent_name else block, leaf, routed)
                    self.routed[f"{prefix}.{block_index}.{name}"] = routed

    def stacks(self, parts: Sequence[LoraParts]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per adapted layer, the A (S, r, in) and scaled B (S, out, r) of the ``parts`` (zeros where an adapter
        leaves the layer alone, or has a smaller rank)."""
        stacked = {}
        for path in sorted({path for part in parts for path in part.pairs}):
            if path not in self.routed:
                raise ValueError(f"LoRA layer {path} is not a linear layer of the shared encoder's blocks")
            base = self.routed[path].base
            rank = max(part.pairs[path][0].shape[0] for part in parts if path in part.pairs)
            a = base.weight.new_zeros((len(parts), rank, base.in_features))
            b = base.weight.new_zeros((len(parts), base.out_features, rank))
            for slot, part in enumerate(parts):
                if path in part.pairs:
                    lora_a, lora_b, scaling = part.pairs[path]
                    a[slot, : lora_a.shape[0]] = lora_a
                    b[slot, :, : lora_b.shape[1]] = lora_b * scaling
            stacked[path] = (a, b)
        return stacked

    @torch.no_grad()
    def last_states(self, token_ids: Sequence[Sequence[int]], rows: Sequence[tuple[int, int]],
                    parts: Sequence[LoraParts], pad_id: int,
                    batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor, list[int]]]:
        """The last hidden states of each row (text index, adapter index into ``parts``): the blocks below the
        lowest first LoRA block of ``parts`` run once per text, the rest once per row with the row's adapter.
        Returns, per chunk of rows, the padded states (B, T, D), their attention mask (B, T) and the row indices
        it holds."""
        split = min(part.first_block for part in parts)
        device = next(self.model.parameters()).device
        trunk = self.trunks.get((split, pad_id))
        if trunk is None:  # made once per split point, not on every batch
            trunk = self.trunks[(split, pad_id)] = SplitEncoder(self.model, self.depth - split, pad_id)
        lower = trunk.lower_states(token_ids, batch_size, device)
        stacked = self.stacks(parts)
        chunks = []
        try:
            for chunk in by_length([len(token_ids[text]) for text, _ in rows], batch_size):
                slots = torch.tensor([rows[i][1] for i in chunk], device=device)
                for path, (a, b) in stacked.items():
                    self.routed[path].route = (a[slots], b[slots])
                padded, mask = pad_states([lower[rows[i][0]] for i in chunk])
                chunks.append((trunk.upper(inputs_embeds=padded, attention_mask=mask).last_hidden_state, mask, chunk))
        finally:
            for layer in self.routed.values():
                layer.route = None
        return chunks


_ENCODERS: weakref.WeakKeyDictionary[nn.Module, MixedLoraEncoder] = weakref.WeakKeyDictionary()


def mixed_encoder(encoder: nn.Module) -> MixedLoraEncoder:
    """The one :class:`MixedLoraEncoder` of ``encoder`` (a backbone's model), made on first use; it goes with
    the backbone."""
    mixed = _ENCODERS.get(encoder)
    if mixed is None:
        mixed = _ENCODERS[encoder] = MixedLoraEncoder(encoder)
    return mixed


@torch.no_grad()
def mixed_probabilities(models: Sequence[Any], token_ids: Sequence[Sequence[int]],
                        rows: Sequence[tuple[int, int]], batch_size: int = 64) -> list[torch.Tensor]:
    """Class probabilities (on the CPU) of each row (text index into ``token_ids``, model index into
    ``models``): every model a LoRA adapter (:func:`lora_parts` not None) on the same backbone."""
    from infoprompt.training.data import pad_id

    backbone = models[0].backbone
    parts = [lora_parts(model) for model in models]
    if any(part is None for part in parts) or any(model.backbone is not backbone for model in models):
        raise ValueError("mixed_probabilities takes LoRA adapters of one backbone only")
    encoder = mixed_encoder(backbone.model)
    result: list[torch.Tensor | None] = [None] * len(rows)
    for states, mask, chunk in encoder.last_states(token_ids, rows, parts, pad_id(models[0]), batch_size):  # type: ignore[arg-type]
        adapter_of = [rows[index][1] for index in chunk]
        for adapter in sorted(set(adapter_of)):
            picked = [row for row, owner in enumerate(adapter_of) if owner == adapter]
            logits = models[adapter].readout_logits(states[picked], mask[picked])
            for row, probabilities in zip(picked, logits.float().softmax(-1).cpu(), strict=True):
                result[chunk[row]] = probabilities
    return result  # type: ignore[return-value]


@dataclass(frozen=True)
class MixedPrediction:
    """What :func:`predict_mixed` gives: each request's records, and how many distinct inputs the shared
    blocks read (an input sent to several adapters counts once)."""

    records: list[list[dict[str, object]]]
    texts: int


def predict_mixed(requests: Sequence[tuple[Any, Sequence[dict[str, str]], Sequence[str]]],
                  batch_size: int = 64) -> MixedPrediction:
    """The records :func:`~infoprompt.training.inference.predict` gives each request (a model, its inputs as
    field dicts, their names in error messages) alone, computed together: every model a LoRA adapter
    (:func:`lora_parts` not None) on one backbone. Each input is tokenised by its own adapter; inputs with the
    same tokens share the blocks below the adapters' LoRA, and an input sent twice to one adapter runs once."""
    from infoprompt.tasks import Example
    from infoprompt.training.data import encode_examples, report_truncation
    from infoprompt.training.inference import prediction_records

    models: list[Any] = []
    slot_of: dict[int, int] = {}
    texts: dict[tuple[int, ...], int] = {}
    rows: dict[tuple[int, int], int] = {}
    picked_rows: list[list[int]] = []
    for model, inputs, sources in requests:
        if id(model) not in slot_of:
            slot_of[id(model)] = len(models)
            models.append(model)
        encoded = encode_examples(model, [Example(fields=dict(f), source=s) for f, s in zip(inputs, sources, strict=True)])
        report_truncation(sum(p.truncated for p in encoded.pairs), len(encoded), "inputs", model.config.max_length)
        picked = []
        for pair in encoded.pairs:
            text = texts.setdefault(tuple(pair.prompted.input_ids), len(texts))
            picked.append(rows.setdefault((text, slot_of[id(model)]), len(rows)))
        picked_rows.append(picked)
    probabilities = mixed_probabilities(models, list(texts), list(rows), batch_size) if rows else []
    records = [prediction_records(model, torch.stack([probabilities[i] for i in picked])) if picked else []
               for (model, _, _), picked in zip(requests, picked_rows, strict=True)]
    return MixedPrediction(records=records, texts=len(texts))
