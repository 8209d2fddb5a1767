"""ReleasedClassifier: InfoPrompt as the authors' released code builds it, on any encoder (docs/released.md)."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.kinds.common import AdapterModel
from infoprompt.kinds.config import ClassifierConfig, check_backbone, config_task
from infoprompt.kinds.prompt.objectives import mi_cap, standard_normal
from infoprompt.kinds.prompt.prompts import insert_prompts
from infoprompt.kinds.readouts import read_out
from infoprompt.kinds.registry import Method, get_method
from infoprompt.kinds.released.methods import KIND_NAME
from infoprompt.kinds.released.objectives import NEGATIVES_PER_ROW, bottleneck_term, head_term, mean_kl
from infoprompt.kinds.released.options import KL_WEIGHT, LATENT, ReleasedOptions
from infoprompt.tasks import TaskSpec
from infoprompt.templates import Batch, Template, TemplateEncoder
from infoprompt.training.contract import LossTerms

__all__ = ["KL_WEIGHT", "LATENT", "ReleasedClassifier", "released_config", "released_template"]

LOG_STD_RANGE = (-2.0, 10.0)
WARMUP_SHARE = 0.06


def released_template(task: TaskSpec) -> str:
    """The released code's layout on the task's GLUE template: single sentences get a fourth place before the
    last separator (``<cls> P X P <mask> P P <sep>``), pairs a separator before the second text
    (``<cls> P A P <mask> P <sep> B P <sep>``); any other template is used as it is."""
    parts = list(Template.parse(task.template).parts)
    glue_head = parts[:2] == ["<cls>", "<p>"] and len(parts) > 5 and parts[2].startswith("{") \
        and parts[3:6] == ["<p>", "<mask>", "<p>"]
    if glue_head and parts[6:] == ["<sep>"]:
        parts.insert(6, "<p>")
    elif glue_head and len(parts) == 9 and parts[6].startswith("{") and parts[7:] == ["<p>", "<sep>"]:
        parts.insert(6, "<sep>")
    return " ".join(parts)


def released_config(config: ClassifierConfig, task: TaskSpec, preset: Method) -> ClassifierConfig:
    """``config`` resolved for the released kind: the released layout where no template is given (the generator
    reads the no-prompt pass's CLS state, the head its [MASK] state, which the template must have)."""
    config = dataclasses.replace(config, template=config.template or released_template(task)).resolved(task)
    if "<mask>" not in Template.parse(config.template).parts:
        raise UserError(f"method {preset.name} needs a <mask> slot in its template, got {config.template!r}")
    return config


class PromptGenerator(nn.Module):
    """``n_p`` prompts from the no-prompt pass's CLS state: D → latent → GELU → n_p·D."""

    def __init__(self, hidden: int, latent: int, n_prompts: int):
        super().__init__()
        self.n_prompts = n_prompts
        self.net = nn.Sequential(nn.Linear(hidden, latent), nn.GELU(), nn.Linear(latent, n_prompts * hidden))

    def forward(self, cls_state: torch.Tensor) -> torch.Tensor:
        return self.net(cls_state).view(cls_state.shape[0], self.n_prompts, -1)


class VariationalHead(nn.Module):
    """A Gaussian (mean, clamped log-std) over a latent read from the [MASK] state; a latent is decoded to D
    and scored against trainable copies of the label words' embeddings. ``prompt_critic`` maps the prompt for
    the bottleneck term."""

    def __init__(self, hidden: int, latent: int, label_rows: torch.Tensor):
        super().__init__()
        self.in_features = hidden
        self.prompt_critic = nn.Linear(hidden, hidden)
        self.mean = nn.Linear(hidden, latent)
        self.log_std = nn.Linear(hidden, latent)
        self.output = nn.Linear(latent, hidden)
        self.label_rows = nn.Parameter(label_rows.detach().clone())

    def gaussian(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean(z), self.log_std(z).clamp(*LOG_STD_RANGE)

    def logits(self, latent: torch.Tensor) -> torch.Tensor:
        return self.output(latent) @ self.label_rows.T


class ReleasedClassifier(AdapterModel):
    """A frozen backbone with the released code's prompt generator and variational head.

    Every ``<p>`` place of the template holds the ``n_p`` generated prompts (the released layout has four
    places); with ``released_batch_prompt`` every row gets the batch's first example's prompts. Prediction
    reads the Gaussian's mean, training a reparameterised sample.
    """

    needs_features = True
    generates_prompts = True
    inference_needs_plain_pass = True

    def __init__(self, backbone: Backbone, config: ClassifierConfig):
        super().__init__()
        self.task = config_task(config)
        self.preset = get_method(config.method)
        if self.preset.kind != KIND_NAME:
            raise UserError(f"method {self.preset.name} is not a released-kind method; build it with "
                            "infoprompt.make_classifier")
        config = released_config(config, self.task, self.preset)
        check_backbone(config, backbone)
        self.config = config
        self.backbone = backbone
        self.encoder = backbone.model
        self.encoder.requires_grad_(False)
        self.template = Template.parse(config.template)
        missing = [name for name in self.template.fields if name not in self.task.fields]
        if missing:
            raise UserError(f"template {config.template!r} names field(s) {missing} that task {self.task.name} lacks")
        self.places = self.template.n_places
        options = self.options
        self.template_encoder = TemplateEncoder(backbone.tokenizer, self.template, options.n_prompts * self.places,
                                                config.max_length, config.truncate)
        hidden = backbone.hidden_size
        with torch.random.fork_rng():
            torch.manual_seed(config.init_seed)
            self.prompt = PromptGenerator(hidden, options.rank, options.n_prompts)
            self.head = VariationalHead(hidden, options.rank, self._label_rows())
        self.to(backbone.device)

    @property
    def options(self) -> ReleasedOptions:
        return self.config.options

    def _label_rows(self) -> torch.Tensor:
        """Per label, the mean input embedding of its label words' tokens in this encoder's vocabulary."""
        tokenizer, embeddings = self.backbone.tokenizer, self.backbone.input_embeddings.weight.detach()
        rows = []
        for label in self.config.labels:
            ids = [i for word in self.task.label_words.get(label, ())
                   for i in tokenizer(word, add_special_tokens=False)["input_ids"]]
            if not ids:
                raise UserError(f"method {self.preset.name} scores label words, and label {label!r} of task "
                                f"{self.task.name} has none")
            rows.append(embeddings[ids].mean(0))
        return torch.stack(rows)

    def train(self, mode: bool = True) -> ReleasedClassifier:
        super().train(mode)
        self.encoder.eval()  # frozen means no dropout either
        return self

    def lr_schedule(self, optimizer: torch.optim.Optimizer, total_steps: int) -> torch.optim.lr_scheduler.LRScheduler:
        """The released schedule: linear warm-up over the first 6 % of the steps, then linear decay to zero."""
        from transformers import get_linear_schedule_with_warmup

        return get_linear_schedule_with_warmup(optimizer, int(total_steps * WARMUP_SHARE), total_steps)

    # -- passes -------------------------------------------------------------------------------------------
    def slot_prompts(self, prompts: torch.Tensor) -> torch.Tensor:
        """The prompts (B, n_p, D) for every slot of the template (B, places·n_p, D)."""
        if self.options.released_batch_prompt:
            prompts = prompts[:1].expand_as(prompts)
        return prompts.repeat(1, self.places, 1)

    def encode_states(self, batch: Batch, prompts: torch.Tensor | None) -> torch.Tensor:
        embeddings = self.backbone.input_embeddings(batch.input_ids)
        if prompts is not None:
            embeddings = insert_prompts(embeddings, self.slot_prompts(prompts), batch.prompt_positions)
        return self.encoder(inputs_embeds=embeddings, attention_mask=batch.attention_mask).last_hidden_state

    def plain_features(self, plain: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The no-prompt pass: its CLS state (the generator's input) and its [MASK] state."""
        with torch.no_grad():
            states = self.encode_states(plain, None)
            return states[:, 0], read_out(states, plain, "mask")

    def generator_input(self, plain: Batch) -> torch.Tensor:
        return self.plain_features(plain)[0]

    def plain_pass_identity(self) -> dict[str, object]:
        """What the no-prompt pass depends on besides backbone, template and budget (the feature store's key)."""
        return {"n_prompts": self.options.n_prompts, "pooling": "cls", "readout": "mask"}

    def forward(self, batch: Batch, pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Prompted pass: logits from the Gaussian's mean (B, C), the [MASK] states (B, D), the prompts (B, n_p, D)."""
        if pooled is None:
            raise ValueError("the released prompt generator needs the no-prompt CLS state")
        prompts = self.prompt(pooled)
        z = read_out(self.encode_states(batch, prompts), batch, "mask")
        return self.head.logits(self.head.gaussian(z)[0]), z, prompts

    def losses(self, batch: Batch, labels: torch.Tensor, pooled: torch.Tensor | None, z_plain: torch.Tensor | None,
               generator: torch.Generator | None = None) -> LossTerms:
        """Cross-entropy on a sample of the head + γ·head term + β·bottleneck term + kl_weight·KL."""
        if pooled is None or z_plain is None:
            raise ValueError("the released losses need the no-prompt pass (CLS and [MASK] states)")
        prompts = self.prompt(pooled)
        z = read_out(self.encode_states(batch, prompts), batch, "mask")
        mean, log_std = self.head.gaussian(z)
        plain_mean, plain_log_std = self.head.gaussian(z_plain)
        sample = mean + standard_normal(mean.shape, generator, mean) * log_std.exp()
        pred = nn.functional.cross_entropy(self.head.logits(sample), labels)
        token_mask = batch.attention_mask.bool().scatter(1, batch.prompt_positions, False)
        with torch.no_grad():
            tokens = self.backbone.input_embeddings(batch.input_ids)
        head = head_term(prompts.mean(1), self.head.label_rows, tokens, token_mask).mean()
        rep = bottleneck_term(self.head, prompts, (mean, log_std), (plain_mean, plain_log_std), generator).mean()
        kl = mean_kl(mean, log_std) + mean_kl(plain_mean, plain_log_std)
        cfg = self.options
        total = pred + cfg.gamma * head + cfg.beta * rep + cfg.kl_weight * kl
        caps = {"head": mi_cap(round(float(token_mask.sum(1).float().mean()))),
                "rep": mi_cap(NEGATIVES_PER_ROW * len(labels))}
        return LossTerms(total=total, pred=pred, rep=rep, head=head, kl=kl, caps=caps)
