"""PromptClassifier: a frozen backbone plus prompt source, head and MI critics; saved as a small adapter."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from infoprompt.backbones import Backbone, load_backbone
from infoprompt.baselines.bottleneck import BottleneckAdapters
from infoprompt.errors import UserError
from infoprompt.io_utils import atomic_write_json, read_json_object, write_safetensors
from infoprompt.methods import MethodPreset, get_method
from infoprompt.objectives import MI_NEGATIVES, HeadMI, RepresentationMI, mi_cap, sample_context_negatives
from infoprompt.prompts import GeneratedPrompt, StaticPrompt, insert_prompts
from infoprompt.readouts import READOUTS, mean_pool, read_out, readout_width
from infoprompt.tasks import TaskSpec, get_task
from infoprompt.templates import Batch, Template, TemplateEncoder
from infoprompt.validation import check_finite, check_labels, require_fingerprint, validate_classifier_config

POOLINGS = ("mean", "cls", "embeddings", "spans")
CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
FORMAT_VERSION = 1


@dataclass
class ClassifierConfig:
    """Everything that defines an adapter; saved next to its weights.

    Attributes:
        task: task name (see ``infoprompt tasks``).
        method: method name (see ``infoprompt methods``); supplies the defaults below.
        backbone: backbone name or path the adapter was trained on.
        labels: class names in head-row order.
        n_prompts: number of prompt tokens ``n_p``.
        template: template string; ``None`` picks the task's, adapted to the method's placement.
        beta: weight of the representation MI loss; ``None`` takes the method's.
        gamma: weight of the head MI loss; ``None`` takes the method's.
        n_negatives: K, negatives per InfoNCE term.
        rank: rank of each slot's up/down projection in generated prompts.
        pooling: what the prompt generator reads as ``P'``: the no-prompt pass pooled by ``mean`` over tokens
            or its ``cls`` state (the paper: ``P' = Φ(X)``), or ``embeddings``, the mean input embedding of
            the tokens, which needs no encoder pass, so that prediction costs one pass instead of two.
            ``spans`` (linear probe on span tasks only): the mean state of each entity mention, concatenated.
        head_summary: how θ is summarised for the head loss: ``predicted`` or ``mean``.
        readout: what the head reads from the prompted pass: the ``mask`` slot (the paper), the ``cls`` state,
            the ``mean`` of the text-field states, ``spans`` (span tasks: the mean state of each entity
            mention, concatenated) or ``auto`` (``spans`` where the template marks mentions, else ``mean``);
            ``None`` takes the method's.
        mi_negatives: the InfoNCE negatives of both information terms. ``paper``: no-prompt states for
            I(P; Z | X) and token embeddings for I(P; θ | X), which a critic tells from prompts within a few
            steps (the bound saturates); ``batch``: the prompts of the other examples of the batch, so the
            critic has to pick the example's own prompt among prompts (the bound is capped at log B).
            ``None`` takes the method's.
        verbalizer_init: initialise head rows from label-word embeddings; ``None`` takes the method's.
        generator_bias: generated prompts carry a bias initialised from token embeddings.
        kl_weight: optional weight of KL(N(μ, σ) ‖ N(0, I)) on the variational Gaussians.
        max_length: token budget of one templated input.
        truncate: shorten text fields that do not fit (otherwise such an input is an error).
        init_seed: seed of the parameter initialisation.
        backbone_fingerprint: architecture and weight hash of the backbone, checked on load.
    """

    task: str
    method: str
    backbone: str
    labels: tuple[str, ...] = ()
    n_prompts: int = 4
    template: str | None = None
    beta: float | None = None
    gamma: float | None = None
    n_negatives: int = 32
    rank: int = 64
    pooling: str = "mean"
    head_summary: str = "predicted"
    readout: str | None = None
    mi_negatives: str | None = None
    verbalizer_init: bool | None = None
    generator_bias: bool = True
    kl_weight: float = 0.0
    max_length: int = 128
    truncate: bool = True
    init_seed: int = 0
    backbone_fingerprint: dict[str, object] = field(default_factory=dict)

    def resolved(self, task: TaskSpec, preset: MethodPreset) -> ClassifierConfig:
        """A copy with every ``None`` default filled from the task and method."""
        values = dataclasses.asdict(self)
        values["labels"] = tuple(self.labels) or task.labels
        values["beta"] = preset.beta if self.beta is None else self.beta
        values["gamma"] = preset.gamma if self.gamma is None else self.gamma
        values["verbalizer_init"] = preset.verbalizer_init if self.verbalizer_init is None else self.verbalizer_init
        if preset.prompt_source is None:
            values["n_prompts"] = 0
        values["template"] = self.template or default_template(task, preset)
        if self.pooling not in POOLINGS:
            raise UserError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.pooling == "spans" and preset.kind != "linear-probe":
            raise UserError(f"pooling 'spans' is for the linear-probe method only, not {preset.name}")
        values["readout"] = resolve_readout(self.readout or preset.readout, Template.parse(values["template"]), task, preset)
        values["mi_negatives"] = self.mi_negatives or preset.mi_negatives
        if values["mi_negatives"] not in MI_NEGATIVES:
            raise UserError(f"mi_negatives must be one of {', '.join(MI_NEGATIVES)}, got {self.mi_negatives!r}")
        if self.head_summary not in ("predicted", "mean"):
            raise UserError(f"head_summary must be 'predicted' or 'mean', got {self.head_summary!r}")
        if values["n_prompts"] < 0 or (preset.prompt_source and values["n_prompts"] == 0):
            raise UserError(f"method {preset.name} needs at least one prompt token, got n_prompts={self.n_prompts}")
        if self.n_negatives < 1:
            raise UserError(f"n_negatives must be at least 1, got {self.n_negatives}")
        check_labels(values["labels"], task)
        return ClassifierConfig(**values)

    def __post_init__(self) -> None:
        validate_classifier_config(self)

    def to_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["labels"] = list(self.labels)
        data["format_version"] = FORMAT_VERSION
        return data

    @classmethod
    def from_json(cls, data: dict[str, object], where: str) -> ClassifierConfig:
        data = dict(data)
        data.pop("format_version", None)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"{where}: unknown field(s) {', '.join(unknown)}")
        missing = [name for name in ("task", "method", "backbone") if name not in data]
        if missing:
            raise UserError(f"{where}: missing field(s) {', '.join(missing)}")
        if not isinstance(data.get("labels", ()), list | tuple):
            raise UserError(f"{where}: labels must be a list of names, got {data['labels']!r}")
        data["labels"] = tuple(data.get("labels", ()))
        try:
            config = cls(**data)
            if config.labels:
                check_labels(config.labels, get_task(config.task))
        except UserError as error:
            raise UserError(f"{where}: {error}") from None
        return config


def check_backbone(config: ClassifierConfig, backbone: Backbone, reserved: int = 0) -> None:
    """Refuse a backbone other than the adapter's, or one too short for ``max_length`` (+ ``reserved`` tokens);
    then record the backbone's fingerprint in ``config``."""
    if config.backbone_fingerprint and config.backbone_fingerprint != backbone.fingerprint():
        raise UserError(
            f"adapter was trained on backbone {config.backbone!r} {config.backbone_fingerprint}, "
            f"but the loaded backbone {backbone.name!r} is {backbone.fingerprint()}"
        )
    config.backbone_fingerprint = backbone.fingerprint()
    if config.max_length + reserved > backbone.max_positions:
        extra = f" plus {reserved} prompt token(s)" if reserved else ""
        raise UserError(
            f"max_length={config.max_length}{extra} exceeds the {backbone.max_positions} positions of backbone "
            f"{backbone.name!r}"
        )


def resolve_readout(readout: str, template: Template, task: TaskSpec, preset: MethodPreset) -> str:
    """The readout a config asks for, with ``auto`` (the method's choice) made concrete: ``spans`` where the
    template marks entity mentions, ``mean`` elsewhere."""
    has_spans = count_spans(template) > 0
    if readout == "auto":
        return "spans" if has_spans else "mean"
    if readout not in READOUTS:
        raise UserError(f"readout must be one of auto, {', '.join(READOUTS)}, got {readout!r}")
    if readout == "spans" and not has_spans:
        raise UserError(f"readout 'spans' needs a task with entity mentions; {task.name} has none")
    if readout == "mask" and preset.readout == "cls":
        raise UserError(f"readout 'mask' needs a [MASK] slot, and method {preset.name}'s template has none")
    return readout


def count_spans(template: Template) -> int:
    """Entity mentions a template marks (its ``{name:keep}`` fields)."""
    return sum(policy == "keep" for policy in template.cut_policies.values())


def default_template(task: TaskSpec, preset: MethodPreset) -> str:
    template = Template.parse(task.template)
    if preset.placement == "prepend":
        if any(":" in part for part in template.parts):
            # Span tasks split one sentence into fields with truncation policies: keep that text as it is.
            # There the mask marks where the entity is; IDPG reads [CLS], so a literal "@" keeps the mark.
            kept = ["@" if part == "<mask>" else part for part in template.parts if part not in ("<p>", "<cls>")]
            return " ".join(["<cls>", "<p>", *kept])
        fields = " <sep> ".join(f"{{{name}}}" for name in task.fields)
        return f"<cls> <p> {fields} <sep>"
    if preset.placement == "none":
        template = template.without_prompts()
    if preset.readout == "cls":
        template = Template.parse(" ".join(p for p in template.parts if p != "<mask>"))
    return template.text


@dataclass
class LossTerms:
    """The objective and its three terms (batch means), kept apart for the logs."""

    total: torch.Tensor
    pred: torch.Tensor
    rep: torch.Tensor
    head: torch.Tensor
    kl: torch.Tensor
    caps: dict[str, float] = field(default_factory=dict)  # log(K+1) of each active InfoNCE term

    def as_floats(self) -> dict[str, float]:
        return {name: float(getattr(self, name).detach()) for name in ("total", "pred", "rep", "head", "kl")}

    def mi_bounds(self) -> dict[str, float]:
        """Each active information term's lower bound ``log(K+1) − nce`` and its cap ``log(K+1)``: a bound at
        its cap means the critic separates every negative and the term gives no more gradient."""
        out: dict[str, float] = {}
        for name, cap in self.caps.items():
            out[f"mi_{name}"] = cap - float(getattr(self, name).detach())
            out[f"mi_{name}_cap"] = cap
        return out


class PromptClassifier(nn.Module):
    """One classifier for every method in :mod:`infoprompt.methods`.

    The backbone stays frozen (unless the method fine-tunes it); the trainable parts are the prompt source,
    the head and the two critics. ``forward`` runs the prompted pass; :meth:`plain_features` runs the
    no-prompt pass whose outputs (``P'``, ``Z'``) are deterministic and can be cached.
    """

    def __init__(self, backbone: Backbone, config: ClassifierConfig):
        super().__init__()
        self.task = get_task(config.task)
        self.preset = get_method(config.method)
        if self.preset.kind != "classifier":
            raise UserError(
                f"method {self.preset.name} is not a PromptClassifier method; build it with "
                "infoprompt.pipeline.build_classifier or infoprompt.kinds.build_model"
            )
        config = config.resolved(self.task, self.preset)
        check_backbone(config, backbone)
        self.config = config
        if self.preset.train_encoder:
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
            backbone.tokenizer, self.template, config.n_prompts, config.max_length, config.truncate
        )
        generator = torch.Generator().manual_seed(config.init_seed)
        with torch.random.fork_rng():
            torch.manual_seed(config.init_seed)
            self.prompt = self._build_prompt(hidden, generator)
            width = readout_width(config.readout, hidden, count_spans(self.template))
            self.head = nn.Linear(width, len(config.labels))
            nn.init.normal_(self.head.weight, std=0.02)
            nn.init.zeros_(self.head.bias)
            if config.verbalizer_init and width == hidden:
                self._verbalizer_init()
            self.head_mi = HeadMI(hidden, config.head_summary, width) if config.gamma > 0 else None
            self.rep_mi = RepresentationMI(hidden, width) if config.beta > 0 else None
            # Created last so that methods without adapters draw exactly the same initial parameters as before.
            self.adapters = (
                BottleneckAdapters.for_encoder(self.encoder, hidden, self.preset.adapter_size)
                if self.preset.adapter_size else None
            )
        if self.preset.train_encoder:
            self.encoder.requires_grad_(True)
        self.to(backbone.device)  # new parts join the encoder, wherever a previous run left it

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
        n = self.config.n_prompts
        if self.preset.prompt_source == "static":
            return StaticPrompt(n, self._token_init(n, generator))
        if self.preset.prompt_source == "generated":
            return GeneratedPrompt(n, hidden, self.config.rank, self._token_init(n, generator), self.config.generator_bias)
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
        paper_rep = self.rep_mi is not None and self.config.mi_negatives == "paper"
        return self.preset.prompt_source == "generated" or paper_rep

    def train(self, mode: bool = True) -> PromptClassifier:
        super().train(mode)
        if not self.preset.train_encoder:
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
        return read_out(states, batch, self.config.readout)

    @property
    def generates_prompts(self) -> bool:
        return self.preset.prompt_source == "generated"

    @property
    def inference_needs_plain_pass(self) -> bool:
        """Whether predicting needs the frozen no-prompt pass (generated prompts reading the encoder's output)."""
        return self.generates_prompts and self.config.pooling != "embeddings"

    def plain_features(self, plain: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The no-prompt pass: pooled ``P'`` (prompt-generator input) and ``Z'`` (readout state)."""
        with torch.no_grad():
            states = self.encode_states(plain, None, adapted=False)
            if self.config.pooling == "embeddings":
                pooled = self.embedding_pool(plain)
            else:
                pooled = states[:, 0] if self.config.pooling == "cls" else mean_pool(states, plain.attention_mask)
            return pooled, self.features(states, plain)

    def generator_input(self, plain: Batch) -> torch.Tensor:
        """``P'`` alone: with ``pooling="embeddings"`` no encoder pass is run."""
        if self.config.pooling == "embeddings":
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
        pred = nn.functional.cross_entropy(logits, labels)
        zero = pred.new_zeros(())
        rep, head, kl = zero, zero, zero
        caps: dict[str, float] = {}
        cfg = self.config
        in_batch = cfg.mi_negatives == "batch"
        if prompts is not None and (self.rep_mi is not None or self.head_mi is not None):
            prompt_mean = prompts.mean(1)
            k = cfg.n_negatives
            if self.head_mi is not None:
                if in_batch:
                    head = self.head_mi.in_batch(prompt_mean, logits, self.head.weight).mean()
                    caps["head"] = mi_cap(len(labels) - 1)
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
                    caps["rep"] = mi_cap(len(labels) - 1)
                else:
                    if z_plain is None:
                        raise ValueError("the representation loss needs the no-prompt states Z'")
                    rep_terms, kl_terms = self.rep_mi(prompt_mean, z, z_plain, k, generator)
                    caps["rep"] = mi_cap(k)
                rep, kl = rep_terms.mean(), kl_terms.mean()
        total = pred + cfg.beta * rep + cfg.gamma * head + cfg.kl_weight * kl
        return LossTerms(total=total, pred=pred, rep=rep, head=head, kl=kl, caps=caps)

    # -- parameters ---------------------------------------------------------------------------------------
    def trainable_state(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().contiguous() for name, p in self.named_parameters() if p.requires_grad}

    def parameter_counts(self) -> dict[str, int]:
        trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        total = sum(p.numel() for p in self.parameters())
        return {"trainable": trainable, "frozen": total - trainable, "total": total}

    def save_pretrained(self, directory: str | Path) -> None:
        """Write the trained parameters (safetensors) and the config (JSON), each atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_safetensors(directory / WEIGHTS_NAME, self.trainable_state(), FORMAT_VERSION)
        atomic_write_json(directory / CONFIG_NAME, self.config.to_json())

    @classmethod
    def from_pretrained(
        cls, directory: str | Path, backbone: Backbone | None = None, cache_dir: str | None = None
    ) -> PromptClassifier:
        """Load a PromptClassifier adapter; its backbone is loaded from the saved name unless one is given (and
        must match), on the backbone's device. Adapters of other kinds load with :func:`infoprompt.kinds.load_adapter`."""
        directory = Path(directory)
        config = read_adapter_config(directory)
        if get_method(config.method).kind != "classifier":
            raise UserError(f"{directory} holds a {config.method} adapter, not a PromptClassifier; load it with "
                            "infoprompt.load_adapter (the CLI does)")
        return load_saved(cls, directory, config, backbone, cache_dir)

    @classmethod
    def load(cls, directory: Path, config: ClassifierConfig, backbone: Backbone) -> PromptClassifier:
        """Build the adapter of ``config`` on ``backbone`` and read its trained parameters from ``directory``."""
        model = cls(backbone, config)
        model.load_state_dict(read_weights(directory, model.trainable_state()), strict=False)
        return model


def load_saved(model_type: Any, directory: Path, config: ClassifierConfig, backbone: Backbone | None,
               cache_dir: str | None) -> Any:
    """Load the adapter in ``directory`` as ``model_type`` on ``backbone`` (the saved one unless given), on the
    backbone's device: the one place every kind's loading goes through."""
    if backbone is None:
        backbone = load_backbone(config.backbone, cache_dir=cache_dir, from_file=True)
    return model_type.load(directory, config, backbone).to(backbone.device)


def read_adapter_config(directory: Path) -> ClassifierConfig:
    """The config of the adapter saved in ``directory`` (any kind), with its files checked to be there."""
    config_path = directory / CONFIG_NAME
    if not directory.is_dir():
        raise UserError(f"adapter directory {directory} does not exist")
    if not config_path.is_file():
        raise UserError(f"adapter file {config_path} is missing")
    return ClassifierConfig.from_json(require_fingerprint(read_json_object(config_path), str(config_path)), str(config_path))


def read_weights(
    directory: Path, expected: dict[str, torch.Tensor], free_shapes: Collection[str] = ()
) -> dict[str, torch.Tensor]:
    """Read ``adapter_model.safetensors`` and check its names, the shapes of all but ``free_shapes`` against
    ``expected``, and that every value is finite."""
    path = directory / WEIGHTS_NAME
    if not path.is_file():
        raise UserError(f"adapter file {path} is missing")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise UserError(f"{path}: not a readable safetensors file ({error})") from None
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise UserError(f"{path}: parameters do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    for name, tensor in state.items():
        if name not in free_shapes and tensor.shape != expected[name].shape:
            raise UserError(f"{path}: {name} has shape {tuple(tensor.shape)}, expected {tuple(expected[name].shape)}")
    check_finite(state, str(path))
    return state
