"""The released kind: InfoPrompt as the authors' released code trains it (github JoshuaWu1997/infoprompt),
on any encoder; docs/released.md compares it with the paper and the prompt kind row by row."""

from infoprompt.kinds.prompt import PROMPTS_NOT_EXPORTABLE
from infoprompt.kinds.registry import ONNX_EXPORT, Kind
from infoprompt.kinds.released.fit import fit_released
from infoprompt.kinds.released.methods import KIND_NAME, RELEASED_METHODS
from infoprompt.kinds.released.model import ReleasedClassifier
from infoprompt.kinds.released.options import ReleasedOptions

KIND = Kind(KIND_NAME, ReleasedClassifier, fit_released, options=ReleasedOptions,
            limits={ONNX_EXPORT: PROMPTS_NOT_EXPORTABLE}, methods=RELEASED_METHODS)
