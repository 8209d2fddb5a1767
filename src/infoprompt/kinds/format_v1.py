"""The reader of format-1 adapter configs (infoprompt up to 0.1.0): one flat record of every kind's fields.

A format-1 record holds the shared fields and, flat beside them, every option of every kind as it was resolved
for the adapter (``beta``, ``rank``, ``pooling``, ... on a linear probe too). The fields that the adapter's kind
has become its options, over its method's preset; the others are dropped: that kind never read them. The result
is the config a format-2 adapter of the same model records, so both load into the same model.
"""

from __future__ import annotations

from infoprompt.errors import UserError
from infoprompt.kinds.registry import kind_of

SHARED = ("task", "method", "backbone", "labels", "template", "max_length", "truncate", "long_text", "init_seed",
          "backbone_fingerprint", "task_spec", "threshold")
# Every field a format-1 record could hold besides the shared ones: the options of all kinds, flat.
FLAT_OPTIONS = ("n_prompts", "beta", "gamma", "n_negatives", "rank", "pooling", "head_summary", "readout",
                "mi_negatives", "verbalizer_init", "generator_bias", "kl_weight", "released_batch_prompt",
                "temperature", "pair_iterations", "lora_rank", "lora_alpha", "lora_targets", "head_c",
                "select_head_c")


def fields_from_v1(data: dict[str, object], where: str) -> dict[str, object]:
    """The fields of a format-2 config (``options`` holding the kind's own, over its method's preset) from a
    format-1 record ``data`` (read from ``where``, which every error names)."""
    data = dict(data)
    data.pop("format_version", None)
    unknown = sorted(set(data) - set(SHARED) - set(FLAT_OPTIONS))
    if unknown:
        raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}")
    missing = [name for name in ("task", "method", "backbone") if name not in data]
    if missing:
        raise UserError(f"{where}: missing field(s) {', '.join(missing)}")
    try:
        names = kind_of(str(data["method"])).options.names()
    except UserError as error:
        raise UserError(f"{where}: {error}") from None
    # An unset option (None) was left out of later format-1 records; the method's preset stands for it.
    options = {name: value for name, value in data.items() if name in names and value is not None}
    return {**{name: value for name, value in data.items() if name in SHARED}, "options": options}
