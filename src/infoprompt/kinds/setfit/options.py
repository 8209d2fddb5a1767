"""The setfit kind's options (pairs per example, the head's C or its selection) and the settings they give
setfit's trainer."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from infoprompt.errors import UserError
from infoprompt.kinds.options import KindOptions
from infoprompt.options import POSITIVE, POSITIVE_FLOAT, option

# The C values select_head_c picks from: SetFit's fixed 1 sits in the middle of a log grid.
HEAD_C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
HEAD_CV_FOLDS = 5


@dataclass(frozen=True)
class HeadOptions(KindOptions):
    """The C of a logistic-regression head fitted on a trained body's embeddings: fixed, or picked on the draw
    (SetFit's kinds; a kind with such a head inherits these).

    Attributes:
        head_c: inverse L2 strength C of the head; ``None``: SetFit's default, 1 (or the C that ``select_head_c``
            picks).
        select_head_c: pick the head's C on the few-shot draw (stratified k-fold log-loss of the trained body's
            embeddings over :data:`HEAD_C_GRID`) instead of using a fixed one.
    """

    head_c: float | None = option(None, "C (inverse L2 strength) of the logistic-regression head (default SetFit's "
                                  "1)", type=POSITIVE_FLOAT)
    select_head_c: bool = option(False, "pick the head's C on the few-shot draw by stratified cross-validation "
                                 "(log-loss, C in 0.01 ... 1000) instead of a fixed C", switch="flag")

    def check(self) -> None:
        if self.head_c is not None and self.select_head_c:
            raise UserError("head_c fixes the head's C and select_head_c picks it on the draw: give one of them")


@dataclass(frozen=True)
class SetFitOptions(HeadOptions):
    """SetFit's options: the head's (:class:`HeadOptions`) and ``pair_iterations``, the contrastive pairs per
    training example and per polarity (SetFit's ``num_iterations``)."""

    pair_iterations: int = option(20, "contrastive pairs per training example and polarity, SetFit's "
                                  "num_iterations (default 20)", type=POSITIVE)


@dataclass(frozen=True)
class SetFitSettings:
    """SetFit's own optimisation settings (its documented defaults for the embedding phase).

    The prompt methods' ``--epochs`` and ``--batch-size`` (30 and 8) do not apply; ``--lr`` and
    ``--max-steps`` do (they override ``body_learning_rate`` and ``max_steps``), ``--seed`` seeds training.

    Attributes:
        num_iterations: contrastive pairs per training example and per polarity (SetFit paper: 20), i.e.
            ``2 · num_iterations · n_train`` sentence pairs per epoch.
        epochs: passes over the pairs (SetFit default 1).
        batch_size: pairs per step of the body fine-tuning (SetFit default 16).
        body_learning_rate: AdamW learning rate of the body (SetFit default 2e-5), linear decay, 10 % warm-up.
        warmup_proportion: share of the steps spent warming the learning rate up.
        max_steps: stop the body fine-tuning after this many steps (-1: all epochs).
        head_c: inverse L2 strength of the logistic-regression head (scikit-learn's and SetFit's default 1).
        head_max_iter: lbfgs iterations of the head (scikit-learn's and SetFit's default 100).
        head_c_choices: C values to pick the head's C from on the few-shot draw (:func:`select_head_c`); empty:
            ``head_c`` is used as it is. After a fit, ``head_c`` is the C the head was fitted with.
    """

    num_iterations: int = 20
    epochs: int = 1
    batch_size: int = 16
    body_learning_rate: float = 2e-5
    warmup_proportion: float = 0.1
    max_steps: int = -1
    head_c: float = 1.0
    head_max_iter: int = 100
    head_c_choices: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "head_c_choices", tuple(self.head_c_choices))  # as JSON gives it

    def to_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["head_c_choices"] = list(self.head_c_choices)
        return data


def pair_options(options: SetFitOptions) -> dict[str, object]:
    """The :class:`SetFitSettings` fields that SetFit's options set (pairs, the head's C or the grid to pick it
    from)."""
    settings: dict[str, object] = {"num_iterations": options.pair_iterations}
    if options.head_c is not None:
        settings["head_c"] = options.head_c
    if options.select_head_c:
        settings["head_c_choices"] = HEAD_C_GRID
    return settings
