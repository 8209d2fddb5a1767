"""The setfit kind: SetFit (contrastive sentence-transformer fine-tuning + logistic regression) via the ``setfit``
library."""

from infoprompt.kinds.registry import ONNX_EXPORT, Kind, Method
from infoprompt.kinds.setfit.card import CARD
from infoprompt.kinds.setfit.fit import SETFIT_TRAINING, fit_setfit, select_head_c, train_body
from infoprompt.kinds.setfit.model import (
    HEAD_ATTRIBUTES,
    HEAD_FILE,
    SetFitClassifier,
    build_body,
    read_settings,
    require_setfit,
)
from infoprompt.kinds.setfit.options import (
    HEAD_C_GRID,
    HeadOptions,
    SetFitOptions,
    SetFitSettings,
    pair_options,
)
from infoprompt.kinds.setfit.text import SetFitTextEncoder, render_text

__all__ = ["HEAD_ATTRIBUTES", "HEAD_C_GRID", "HEAD_FILE", "KIND", "SETFIT_TRAINING", "HeadOptions", "SetFitClassifier",
           "SetFitOptions", "SetFitSettings", "SetFitTextEncoder", "build_body", "fit_setfit", "pair_options",
           "read_settings", "render_text", "require_setfit", "select_head_c", "train_body"]

KIND = Kind("setfit", SetFitClassifier, fit_setfit, options=SetFitOptions, capabilities={ONNX_EXPORT}, card=CARD,
            training_options=SETFIT_TRAINING, require=require_setfit, methods=(
                Method("setfit", SetFitOptions(), lr=2e-5, table_order=12,
                       description="SetFit via the setfit library: contrastive body fine-tuning + logistic "
                                   "regression"),
            ))
