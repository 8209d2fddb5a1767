"""The top-lora kind's options: LoRA's and the head's (shared with the other LoRA and SetFit kinds), the top
blocks, the in-batch objective, its schedule, the epoch selection and the plateau stop."""

from __future__ import annotations

from dataclasses import dataclass

from infoprompt.kinds.lora_layers import LAYER_SETS, LoraOptions
from infoprompt.kinds.registry import MIXED_LORA, ONNX_EXPORT
from infoprompt.kinds.setfit.options import HeadOptions
from infoprompt.kinds.top_lora.losses import LOSSES
from infoprompt.options import COUNT, FRACTION, POSITIVE, POSITIVE_FLOAT, option
from infoprompt.validation import Rule, at_least_two, proportion

SELECTIONS = ("none", "holdout")
PAIR_READINGS = ("joined", "separate")
STOPS = ("none", "plateau")
DEFAULT_TOP_LAYERS = 8  # MPNet training split: k = 8 over 4 and 6 (docs/results.md, "top-lora")
# Primary metrics that weigh each class alike, for which the head's classes are balanced by default.
BALANCED_METRICS = ("mcc", "macro_f1", "semeval_macro_f1")
PAIRED_BATCH = Rule(at_least_two)
PROPORTION = Rule(proportion, float)


@dataclass(frozen=True)
class TopLoraOptions(LoraOptions, HeadOptions):
    """What a top-lora adapter trains and how.

    LoRA (:class:`~infoprompt.kinds.lora_layers.LoraOptions`: ``lora_rank``, ``lora_alpha``, ``lora_targets``)
    sits in the top ``top_layers`` blocks only; the head's C is fixed or picked on the draw
    (:class:`~infoprompt.kinds.setfit.options.HeadOptions`). The other options keep the names of the settings
    the adapter saves (:class:`~infoprompt.kinds.top_lora.model.TopLoraSettings`, which documents each).
    ``epochs``, ``batch_size``, ``max_steps``, ``select``, ``holdout_fraction`` and ``patience`` are set on the
    command line by the training flags of those names; ``--lr`` sets ``body_learning_rate`` for a run.
    """

    top_layers: int | None = option(None, f"k, the encoder blocks at the top that carry LoRA; the blocks below run "
                                    f"once per text (default {DEFAULT_TOP_LAYERS}, or every block of a shallower "
                                    f"encoder)", type=POSITIVE)
    loss: str = option("supcon", "the in-batch objective over every pair of a batch: supcon (supervised "
                       "contrastive, default), pairs (SetFit's cosine targets) or batch-all (triplets)",
                       choices=tuple(LOSSES))
    temperature: float = option(0.07, "temperature of supcon (default 0.07)", type=POSITIVE_FLOAT)
    margin: float = option(0.25, "margin of batch-all on cosine distance (default 0.25)", type=POSITIVE_FLOAT)
    epochs: int = option(20, "passes over the draw, or the most the holdout selection tries (default 20)",
                         type=POSITIVE)
    batch_size: int = option(32, "texts per step, every pair among them scored (at least 2; default 32)",
                             type=PAIRED_BATCH)
    encode_batch: int = option(16, "texts per encoder call within a batch, grouped by length, where the encoder "
                               "cannot run them packed into rows of 128 tokens (default 16)", type=POSITIVE)
    body_learning_rate: float = option(5e-4, type=POSITIVE_FLOAT)
    warmup_proportion: float = option(0.1, "share of the steps spent warming the learning rate up (default 0.1)",
                                      type=PROPORTION)
    max_steps: int | None = option(None, "stop after this many steps (default: all epochs)", type=POSITIVE)
    top_dropout: bool = option(True, "dropout in the top blocks while training, as SetFit trains its body "
                               "(default on)", switch="flag")
    select: str = option("none", "none: train all epochs (default); holdout: the epoch count that scores best on "
                         "a held-out slice of the draw, then trained again on all of it", choices=SELECTIONS)
    holdout_fraction: float = option(0.25, "share of each class the holdout selection holds out (default 0.25)",
                                     type=FRACTION)
    check_every: int = option(2, "epochs between the holdout selection's checks (default 2)", type=POSITIVE)
    patience: int = option(2, "checks without a better held-out score after which the selection stops (0: never; "
                           "default 2)", type=COUNT)
    stop: str = option("none", "plateau: end training once the epoch's mean loss stops improving (see "
                       "--plateau-tolerance, --plateau-patience); none: all epochs (default)", choices=STOPS)
    plateau_tolerance: float = option(0.01, "an epoch improves if its mean loss is below the best one before it by "
                                      "this share of the first epoch's (default 0.01)", type=POSITIVE_FLOAT)
    plateau_patience: int = option(2, "epochs without improvement that end training under --stop plateau "
                                   "(default 2)", type=POSITIVE)
    head_max_iter: int = option(100, "lbfgs iterations of the logistic head (default 100)", type=POSITIVE)
    head_balanced: bool | None = option(None, "weigh the head's classes inversely to their counts in the draw, so "
                                        "that a minority class is not predicted away (default: where the task's "
                                        "primary metric weighs classes alike, MCC or macro-F1; not for accuracy)",
                                        switch="flag")
    lora_dropout: float = option(0.0, "dropout on LoRA's input while training (default 0)", type=PROPORTION)
    pair_reading: str = option("joined", "how a pair of texts (text, text_pair) is read: joined (one text, the pair "
                               "separated by the tokenizer's separator, as SetFit reads it; default) or separate (each "
                               "text through the encoder alone, the head on [u, v, |u - v|, u * v, cos(u, v)], as "
                               "sentence-transformers compares two texts)", choices=PAIR_READINGS)
    pair_training: bool = option(True, "train the top blocks on pairs read apart (their [|u - v|, u * v] in the "
                                 "in-batch objective); off: the head alone on the frozen encoder's pair features "
                                 "(default on; top-lora-siamese: off)", switch="flag")
    lora_layers: str = option("all-linear", "the layers LoRA adapts in each top block when no --lora-targets are "
                              "named: all-linear (default: attention and feed-forward) or attention-qv",
                              choices=tuple(LAYER_SETS))

    def limits(self, pairs: bool = False) -> dict[str, str]:
        if pairs and self.pair_reading == "separate":
            return {ONNX_EXPORT: "a pair read apart runs the encoder on each text alone, which one graph over the "
                                 "joined tokens does not (train with --pair-reading joined to export it)",
                    MIXED_LORA: "a pair read apart runs the encoder on each text alone, not on the joined tokens a "
                                "mixed batch reads"}
        return {}
