"""PeftPromptClassifier: ``peft``'s prompt tuning on ``AutoModelForSequenceClassification`` around the shared encoder."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from peft import PeftModel, PromptTuningConfig, PromptTuningInit, TaskType, get_peft_model
from peft.utils import CONFIG_NAME as PEFT_CONFIG_NAME
from transformers import AutoModelForSequenceClassification, PreTrainedModel

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.io_utils import replaced_directory
from infoprompt.kinds.common import BaselineModel, quiet_peft_wrap, save_peft, write_adapter
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.templates import Batch
from infoprompt.validation import check_peft_adapter

PEFT_DIR = "peft"


def sequence_classifier(backbone: Backbone, labels: tuple[str, ...], seed: int) -> PreTrainedModel:
    """``AutoModelForSequenceClassification`` whose encoder *is* the (frozen, shared) backbone model.

    Only the classification head is new (seeded); reusing the loaded encoder keeps one copy of its weights
    per process instead of reading the checkpoint again for every run.
    """
    config = copy.deepcopy(backbone.model.config)
    config.num_labels = len(labels)
    config.id2label = dict(enumerate(labels))
    config.label2id = {label: i for i, label in enumerate(labels)}
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = AutoModelForSequenceClassification.from_config(config)
    except ValueError as error:
        raise UserError(f"backbone {backbone.name!r} has no sequence-classification model in transformers ({error})") from None
    setattr(model, model.base_model_prefix, backbone.model)
    return model.eval()


class PeftPromptClassifier(BaselineModel):
    """Soft prompt tuning exactly as ``peft`` does it: ``n_prompts`` virtual tokens prepended to the input
    embeddings (before ``[CLS]``), the model's own sequence-classification head, both trained, the encoder
    frozen. ``peft``'s prompt init ``SAMPLE_VOCAB`` starts the prompts at random token embeddings (as WARP's
    are). In training mode the encoder's dropout is on, as in every ``peft`` training script.

    Saved as our ``infoprompt_adapter.json`` plus ``peft``'s own adapter (``peft/adapter_model.safetensors``),
    which ``PeftModel.from_pretrained`` can also load directly, with the sequence-classification model's
    ``peft/config.json`` (label names) beside it.
    """

    def __init__(self, backbone: Backbone, config: ClassifierConfig, peft_dir: Path | None = None):
        super().__init__(backbone, config, reserved=config.n_prompts)
        n_prompts = self.config.options.n_prompts
        base = sequence_classifier(backbone, self.config.labels, self.config.init_seed)
        if peft_dir is None:
            peft_config = PromptTuningConfig(
                task_type=TaskType.SEQ_CLS,
                num_virtual_tokens=n_prompts,
                prompt_tuning_init=PromptTuningInit.SAMPLE_VOCAB,
                base_model_name_or_path=getattr(backbone.model, "name_or_path", None) or backbone.name,
            )
            with torch.random.fork_rng(), quiet_peft_wrap():
                torch.manual_seed(self.config.init_seed)
                self.peft = get_peft_model(base, peft_config)
        else:
            with quiet_peft_wrap():
                self.peft = PeftModel.from_pretrained(base, str(peft_dir), is_trainable=False)
            # trainable_state() reads requires_grad; peft >= 0.22 clears it on the head (modules_to_save) of a
            # frozen load as well as on the prompt, and refuses is_trainable=True for prompt learning.
            for name, parameter in self.peft.named_parameters():
                parameter.requires_grad_(name.startswith("prompt_encoder.") or ".modules_to_save." in name)
        self.peft.eval()
        self.to(backbone.device)

    def forward(self, batch: Batch, pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, None, None]:
        """Logits (B, C); no readout state or prompt tensor is exposed."""
        output = self.peft(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        return output.logits, None, None

    def save_pretrained(self, directory: str | Path, keep_training_state: bool = False) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with replaced_directory(directory / PEFT_DIR) as staging:
            save_peft(self.peft, staging, self.config)
            # peft saves no model config; this one carries id2label/label2id, so that a model built from it
            # (AutoConfig.from_pretrained on the peft folder) names its classes as this adapter does.
            self.peft.get_base_model().config.save_pretrained(str(staging))
        write_adapter(directory, None, self.config)

    @classmethod
    def load(cls, directory: Path, config: ClassifierConfig, backbone: Backbone) -> PeftPromptClassifier:
        peft_dir = directory / PEFT_DIR
        if not (peft_dir / PEFT_CONFIG_NAME).is_file():
            raise UserError(f"adapter directory {directory} lacks the peft adapter {peft_dir / PEFT_CONFIG_NAME}")
        check_peft_adapter(peft_dir, config.n_prompts, backbone.hidden_size)
        return cls(backbone, config, peft_dir=peft_dir)
