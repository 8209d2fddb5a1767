"""The prompt kind: prompts (static or generated from the input) in a template, a head on a readout of the
prompted pass, the two information critics; and the baselines that share its model (fine-tuning, adapters)."""

from infoprompt.kinds.prompt.methods import PROMPT_METHODS
from infoprompt.kinds.prompt.model import PromptClassifier
from infoprompt.kinds.registry import Kind
from infoprompt.training import train

KIND = Kind("prompt", PromptClassifier, train, methods=PROMPT_METHODS)
