"""The linear-probe kind: logistic regression on frozen, pooled embeddings of the plain input."""

from infoprompt.kinds.probe.card import CARD
from infoprompt.kinds.probe.fit import PROBE_TRAINING, fit_linear_probe, fit_multi_label
from infoprompt.kinds.probe.model import LinearProbe
from infoprompt.kinds.probe.options import ProbeOptions
from infoprompt.kinds.readouts import span_pool
from infoprompt.kinds.registry import (
            LONG_TEXT_CHUNKS,
            MULTI_LABEL,
            ONNX_EXPORT,
            SHARED_PLAIN_PASS,
            Kind,
            Method,
)
from infoprompt.logistic import head_from_sklearn

__all__ = ["KIND", "LinearProbe", "fit_linear_probe", "fit_multi_label", "head_from_sklearn", "span_pool"]

KIND = Kind("linear-probe", LinearProbe, fit_linear_probe, options=ProbeOptions, card=CARD,
            capabilities={MULTI_LABEL, LONG_TEXT_CHUNKS, ONNX_EXPORT, SHARED_PLAIN_PASS},
            training_options=PROBE_TRAINING, methods=(
                Method("linear-probe", ProbeOptions(), lr=0.0, table_order=11,
                       description="logistic regression on frozen mean-pooled embeddings (lr unused)"),
            ))
