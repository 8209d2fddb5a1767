"""The contrastive kind: InfoPrompt's generated prompts trained with a label-aware InfoNCE on a prompted pass that
starts at the plain features, the head fitted by logistic regression after every epoch."""

from infoprompt.kinds.contrastive.methods import CONTRASTIVE_METHODS, KIND_NAME
from infoprompt.kinds.contrastive.model import ContrastivePromptClassifier
from infoprompt.kinds.contrastive.options import ContrastiveOptions
from infoprompt.kinds.prompt import PROMPTS_NOT_EXPORTABLE
from infoprompt.kinds.registry import ONNX_EXPORT, Kind
from infoprompt.training import train

KIND = Kind(KIND_NAME, ContrastivePromptClassifier, train, options=ContrastiveOptions,
            limits={ONNX_EXPORT: PROMPTS_NOT_EXPORTABLE}, methods=CONTRASTIVE_METHODS)
