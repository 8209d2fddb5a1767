"""PromptClassifier: a frozen backbone plus prompt source, head and MI critics; saved as a small adapter."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import torch
from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.io_utils import write_safetensors
from infoprompt.kinds.common import AdapterModel, write_adapter
from infoprompt.kinds.config import (
    FORMAT_VERSION,
    TRAINING_STATE_NAME,
    WEIGHTS_NAME,
    ClassifierConfig,
    check_backbone,
    config_task,
    read_weights,
)
from infoprompt.kinds.prompt.bottleneck import BottleneckAdapters
from infoprompt.kinds.prompt.objectives import HeadMI, RepresentationMI, mi_cap, sample_context_negatives
from infoprompt.kinds.prompt.options import PromptOptions, resolve_prompt_config
from infoprompt.kinds.prompt.prompts import GeneratedPrompt, StaticPrompt, insert_prompts
from infoprompt.kinds.readouts import count_spans, mean_pool, read_out, readout_width
from infoprompt.kinds.registry import get_method
from infoprompt.templates import Batch, Template, TemplateEncoder
from infoprompt.training.contract import LossTerms

# Parameter names of the information critics, which only the training losses read.
TRAINING_ONLY_PREFIXES = ("head_mi.", "rep_mi.")


class PromptClassifier(AdapterModel):
    """One classifier for every method of the prompt kind (:mod:`infoprompt.kinds.prompt.methods`).

    The backbone stays frozen (unless the method fine-tunes it); the trainable parts are the prompt source,
    the head and the two critics. ``forward`` runs the prompted pass; :meth:`plain_features` runs the
    no-prompt pass whose outputs (``P'``, ``Z'``) are deterministic and can be cached.
    """

    KIND_NAME = "prompt"  # the kind whose method rows this class builds (a subclass's kind names its own)

    def __init__(self, backbone: Backbone, config: ClassifierConfig):
        super().__init__()
        self.task = config_task(config)
        self.preset = get_method(config.method)
        if self.preset.kind != self.KIND_NAME:
            raise UserError(f"method {self.preset.name} is not a {self.KIND_NAME}-kind method; build it with "
                            "infoprompt.make_classifier")
        config = resolve_prompt_config(config, self.task, self.preset)
        check_backbone(config, backbone)
        self.config = config
        options = self.options
        if options.train_encoder:
            # Fine-tuning changes the weights: work on a private copy so a shared backbone stays pristine.
            backbone = dataclasses.replace(backbone, model=copy.deepcopy(backbone.model))
        self.backbone = backbone
        self.encoder = backbone.model
        hidden = backbone.hidden_size
        self.template = Template.parse(config.template)
        missing = [name for name in self.template.fields if name not in self.task.fields]
        if missing:
            raise UserError(f"template {config.template!r} names field(s) {missing} that task {self.task.name} lacks")
        self.template_encoder = TemplateEncoder(
            backbone.tokenizer, self.template, options.n_prompts, config.max_length, config.truncate
        )
        generator = torch.Generator().manual_seed(config.init_seed)
        with torch.random.fork_rng():
            torch.manual_seed(config.init_seed)
            self.prompt = self._build_prompt(hidden, generator)
            width = readout_width(options.readout, hidden, count_spans(self.template))
            self.head = nn.Linear(width, len(config.labels))
            nn.init.normal_(self.head.weight, std=0.02)
            nn.init.zeros_(self.head.bias)
            if options.verbalizer_init and width == hidden:
                self._verbalizer_init()
            self.head_mi = HeadMI(hidden, options.head_summary, width) if options.gamma > 0 else None
            self.rep_mi = RepresentationMI(hidden, width) if options.beta > 0 else None
            # Created last so that methods without adapters draw exactly the same initial parameters as before.
            self.adapters = (
                BottleneckAdapters.for_encoder(self.encoder, hidden, options.adapter_size)
                if options.adapter_size else None
            )
        if options.train_encoder:
            self.encoder.requires_grad_(True)
        self.to(backbone.device)  # new parts join the encoder, wherever a previous run left it

    @property
    def options(self) -> PromptOptions:
        return self.config.options

    # -- construction -------------------------------------------------------------------------------------
    def _token_init(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """Embeddings of ``count`` random ordinary vocabulary tokens (no special tokens)."""
        tokenizer = self.backbone.tokenizer
        special = set(tokenizer.all_special_ids)
        vocab = self.backbone.input_embeddings.weight.shape[0]
        candidates = torch.tensor([i for i in range(min(vocab, len(tokenizer))) if i not in special])
        picks = candidates[torch.randint(len(candidates), (count,), generator=generator)]
        return self.backbone.input_embeddings.weight.detach()[picks].clone()

    def _build_prompt(self, hidden: int, generator: torch.Generator) -> nn.Module | None:
        options = self.options
        n = options.n_prompts
        if options.prompt_source == "static":
            return StaticPrompt(n, self._token_init(n, generator))
        if options.prompt_source == "generated":
            return GeneratedPrompt(n, hidden, options.rank, self._token_init(n, generator), options.generator_bias)
        return None

    def _verbalizer_init(self) -> None:
        tokenizer = self.backbone.tokenizer
        embeddings = self.backbone.input_embeddings.weight.detach()
        rows = []
        for label in self.config.labels:
            words = self.task.label_words.get(label, ())
            ids = [i for word in words for i in tokenizer(word, add_special_tokens=False)["input_ids"]]
            if not ids:
                return  # a label without words: keep the random init for every row
            rows.append(embeddings[ids].mean(0))
        with torch.no_grad():
            weight = torch.stack(rows)
            # Match the scale of a small random init so the first logits are not dominated by one class.
            self.head.weight.copy_(weight / weight.norm(dim=-1, keepdim=True) * 0.02 * math.sqrt(weight.shape[1]))

    # -- passes -------------------------------------------------------------------------------------------
    @property
    def needs_features(self) -> bool:
        """Whether training reads the no-prompt pass: ``P'`` for generated prompts, ``Z'`` for the paper's
        representation-loss negatives."""
        paper_rep = self.rep_mi is not None and self.options.mi_negatives == "paper"
        return self.options.prompt_source == "generated" or paper_rep

    def train(self, mode: bool = True) -> PromptClassifier:
        super().train(mode)
        if not self.options.train_encoder:
            self.encoder.eval()  # frozen means no dropout either
        return self

    def encode_states(self, batch: Batch, prompts: torch.Tensor | None, adapted: bool = True) -> torch.Tensor:
        """Last-layer states; ``adapted=False`` skips the bottleneck adapters (the frozen no-prompt pass)."""
        embeddings = self.backbone.input_embeddings(batch.input_ids)
        if prompts is not None:
            embeddings = insert_prompts(embeddings, prompts, batch.prompt_positions)
        if self.adapters is None or not adapted:
            return self.encoder(inputs_embeds=embeddings, attention_mask=batch.attention_mask).last_hidden_state
        with self.adapters.attached(self.encoder):
            return self.encoder(inputs_embeds=embeddings, attention_mask=batch.attention_mask).last_hidden_state

    @staticmethod
    def readout(states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The state at one token position per example (the paper's ``[MASK]`` readout)."""
        return states[torch.arange(states.shape[0], device=states.device), positions]

    def features(self, states: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The head's input under this adapter's readout."""
        return read_out(states, batch, self.options.readout)

    @property
    def generates_prompts(self) -> bool:
        return self.options.prompt_source == "generated"

    @property
    def inference_needs_plain_pass(self) -> bool:
        """Whether predicting needs the frozen no-prompt pass (generated prompts reading the encoder's output)."""
        return self.generates_prompts and self.options.pooling != "embeddings"

    def plain_pass_identity(self) -> dict[str, object]:
        """What the no-prompt pass depends on besides backbone, template and budget (the feature store's key)."""
        return {"n_prompts": self.options.n_prompts, "pooling": self.options.pooling, "readout": self.options.readout}

    def plain_features(self, plain: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The no-prompt pass: pooled ``P'`` (prompt-generator input) and ``Z'`` (readout state)."""
        with torch.no_grad():
            states = self.encode_states(plain, None, adapted=False)
            if self.options.pooling == "embeddings":
                pooled = self.embedding_pool(plain)
            else:
                pooled = states[:, 0] if self.options.pooling == "cls" else mean_pool(states, plain.attention_mask)
            return pooled, self.features(states, plain)

    def generator_input(self, plain: Batch) -> torch.Tensor:
        """``P'`` alone: with ``pooling="embeddings"`` no encoder pass is run."""
        if self.options.pooling == "embeddings":
            with torch.no_grad():
                return self.embedding_pool(plain)
        return self.plain_features(plain)[0]

    def embedding_pool(self, plain: Batch) -> torch.Tensor:
        return mean_pool(self.backbone.input_embeddings(plain.input_ids), plain.attention_mask)

    def forward(self, batch: Batch, pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Prompted pass: returns logits (B, C), readout states Z (B, D) and prompts (B, n_p, D) or None."""
        prompts = self.prompt(batch.input_ids.shape[0], pooled) if self.prompt is not None else None
        states = self.encode_states(batch, prompts)
        z = self.features(states, batch)
        return self.head(z), z, prompts

    def losses(
        self,
        batch: Batch,
        labels: torch.Tensor,
        pooled: torch.Tensor | None,
        z_plain: torch.Tensor | None,
        generator: torch.Generator | None = None,
    ) -> LossTerms:
        logits, z, prompts = self(batch, pooled)
        if labels.dim() == 2:  # multi-label: a 0/1 matrix, one sigmoid per label
            pred = nn.functional.binary_cross_entropy_with_logits(logits, labels)
        else:
            pred = nn.functional.cross_entropy(logits, labels)
        return self.with_information_terms(pred, batch, logits, z, prompts, z_plain, len(labels), generator)

    def with_information_terms(
        self, pred: torch.Tensor, batch: Batch, logits: torch.Tensor, z: torch.Tensor, prompts: torch.Tensor | None,
        z_plain: torch.Tensor | None, batch_size: int, generator: torch.Generator | None,
    ) -> LossTerms:
        """``pred`` + β · representation term + γ · head term + kl_weight · KL, each term as configured."""
        zero = pred.new_zeros(())
        rep, head, kl = zero, zero, zero
        caps: dict[str, float] = {}
        cfg = self.options
        in_batch = cfg.mi_negatives == "batch"
        if prompts is not None and (self.rep_mi is not None or self.head_mi is not None):
            prompt_mean = prompts.mean(1)
            k = cfg.n_negatives
            if self.head_mi is not None:
                if in_batch:
                    head = self.head_mi.in_batch(prompt_mean, logits, self.head.weight).mean()
                    caps["head"] = mi_cap(batch_size - 1)
                else:
                    negatives = sample_context_negatives(
                        self.backbone.input_embeddings, batch.input_ids, batch.context_positions, batch.context_mask,
                        max(k - 1, 1), generator,
                    )
                    head = self.head_mi(prompt_mean, logits, self.head.weight, negatives).mean()
                    caps["head"] = mi_cap(max(k - 1, 1))
            if self.rep_mi is not None:
                if in_batch:
                    rep_terms, kl_terms = self.rep_mi.in_batch(prompt_mean, z, generator)
                    caps["rep"] = mi_cap(batch_size - 1)
                else:
                    if z_plain is None:
                        raise ValueError("the representation loss needs the no-prompt states Z'")
                    rep_terms, kl_terms = self.rep_mi(prompt_mean, z, z_plain, k, generator)
                    caps["rep"] = mi_cap(k)
                rep, kl = rep_terms.mean(), kl_terms.mean()
        total = pred + cfg.beta * rep + cfg.gamma * head + cfg.kl_weight * kl
        return LossTerms(total=total, pred=pred, rep=rep, head=head, kl=kl, caps=caps)

    # -- parameters ---------------------------------------------------------------------------------------
    def training_only_names(self) -> set[str]:
        """Trained parameters that prediction never reads: the two information critics."""
        return {name for name in self.trainable_state() if name.startswith(TRAINING_ONLY_PREFIXES)}

    def save_pretrained(self, directory: str | Path, keep_training_state: bool = False) -> None:
        """Write what prediction needs (safetensors), the config (JSON) and the model card, each atomically; the
        critics only with ``keep_training_state``, in ``training_state.safetensors`` beside the adapter."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = self.trainable_state()
        training_only = self.training_only_names()
        write_safetensors(directory / WEIGHTS_NAME, {n: t for n, t in state.items() if n not in training_only},
                          FORMAT_VERSION)
        if keep_training_state and training_only:
            write_safetensors(directory / TRAINING_STATE_NAME, {n: state[n] for n in sorted(training_only)},
                              FORMAT_VERSION)
        write_adapter(directory, None, self.config)  # the config, then the model card

    @classmethod
    def load(cls, directory: Path, config: ClassifierConfig, backbone: Backbone) -> PromptClassifier:
        """Build the adapter of ``config`` on ``backbone`` and read its trained parameters from ``directory``:
        a slim adapter, or one written before the critics were left out (which holds them); the critics of a
        ``training_state.safetensors`` beside it are read too."""
        model = cls(backbone, config)
        expected = model.trainable_state()
        training_only = model.training_only_names()
        model.load_state_dict(read_weights(directory, expected, optional=training_only), strict=False)
        if training_only and (directory / TRAINING_STATE_NAME).is_file():
            critics = {name: expected[name] for name in training_only}
            model.load_state_dict(read_weights(directory, critics, name=TRAINING_STATE_NAME), strict=False)
        return model


