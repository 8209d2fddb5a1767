"""The prompt kind: prompts (static or generated from the input) in a template, a head on a readout of the
prompted pass, the two information critics; and the baselines that share its model (fine-tuning, adapters)."""

from infoprompt.kinds.prompt.methods import PROMPT_METHODS
from infoprompt.kinds.prompt.model import PromptClassifier
from infoprompt.kinds.prompt.options import PromptOptions
from infoprompt.kinds.registry import MULTI_LABEL, ONNX_EXPORT, Kind
from infoprompt.training import train

# Why prompted passes are no ONNX graph of the tokenizer's inputs (the contrastive and released kinds too).
PROMPTS_NOT_EXPORTABLE = ("prompt methods insert soft prompts (generated ones from a first encoder pass) at template "
                          "positions, which the tokenizer's inputs do not carry")

KIND = Kind("prompt", PromptClassifier, train, options=PromptOptions, capabilities={MULTI_LABEL},
            limits={ONNX_EXPORT: PROMPTS_NOT_EXPORTABLE}, methods=PROMPT_METHODS)
