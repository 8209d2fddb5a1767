"""The prompt kind's options (prompts, readout, the two information terms) and their resolution against a task."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infoprompt.errors import UserError
from infoprompt.kinds.options import KindOptions
from infoprompt.kinds.readouts import READOUTS, count_spans
from infoprompt.options import COUNT, NON_NEGATIVE, POSITIVE, option
from infoprompt.tasks import TaskSpec
from infoprompt.templates import Template

if TYPE_CHECKING:
    from infoprompt.kinds.config import ClassifierConfig
    from infoprompt.kinds.registry import Method

PROMPT_SOURCES = ("static", "generated")
PLACEMENTS = ("template", "prepend", "none")
# Where the InfoNCE negatives come from: "paper" (no-prompt states, token embeddings) or "batch" (the other
# examples' prompts).
MI_NEGATIVES = ("paper", "batch")
POOLINGS = ("mean", "cls", "embeddings")
HEAD_SUMMARIES = ("predicted", "mean")


@dataclass(frozen=True)
class PromptOptions(KindOptions):
    """The prompt kind's options: what a method is (its prompt source, placement, what it trains) and what a run
    may change (prompt count, readout, the information terms' weights and estimators).

    Attributes:
        prompt_source: ``"static"`` (WARP), ``"generated"`` (IDPG, InfoPrompt) or ``None`` (no prompts).
        placement: ``"template"`` (prompt places of the task template), ``"prepend"`` (right after ``[CLS]``,
            the IDPG layout) or ``"none"``.
        train_encoder: every encoder weight is trained (fine-tuning).
        adapter_size: bottleneck width of the adapters inserted after every transformer layer (0: none).
        n_prompts: number of prompt tokens ``n_p`` (0 for methods without prompts).
        readout: what the head reads from the prompted pass: the ``mask`` slot (the paper), the ``cls`` state,
            the ``mean`` of the text-field states, ``spans`` (span tasks: the mean state of each entity mention,
            concatenated) or ``auto`` (``spans`` where the template marks mentions, else ``mean``).
        beta: weight of the representation MI loss.
        gamma: weight of the head MI loss.
        n_negatives: K, negatives per InfoNCE term.
        rank: rank of each slot's up/down projection in generated prompts.
        pooling: what the prompt generator reads as ``P'``: the no-prompt pass pooled by ``mean`` over tokens
            or its ``cls`` state (the paper: ``P' = Φ(X)``), or ``embeddings``, the mean input embedding of the
            tokens, which needs no encoder pass, so that prediction costs one pass instead of two.
        head_summary: how θ is summarised for the head loss: ``predicted`` or ``mean``.
        mi_negatives: the InfoNCE negatives of both information terms. ``paper``: no-prompt states for
            I(P; Z | X) and token embeddings for I(P; θ | X), which a critic tells from prompts within a few
            steps (the bound saturates); ``batch``: the prompts of the other examples of the batch, so the critic
            has to pick the example's own prompt among prompts (the bound is capped at log B).
        verbalizer_init: initialise head rows from label-word embeddings.
        generator_bias: generated prompts carry a bias initialised from token embeddings.
        kl_weight: optional weight of KL(N(μ, σ) ‖ N(0, I)) on the variational Gaussians.
    """

    prompt_source: str | None = option("generated", choices=PROMPT_SOURCES, preset=True)
    placement: str = option("template", choices=PLACEMENTS, preset=True)
    train_encoder: bool = option(False, preset=True)
    adapter_size: int = option(0, type=COUNT, preset=True)
    n_prompts: int = option(4, "prompt tokens n_p (default 4)", type=COUNT)
    readout: str = option("mask", "head features: the [MASK] state (paper), [CLS], the mean of the text tokens, the "
                          "entity mentions (span tasks), or auto (spans on span tasks, else mean)",
                          choices=("auto", *READOUTS))
    beta: float = option(0.0, "weight of the representation MI loss", type=NON_NEGATIVE)
    gamma: float = option(0.0, "weight of the head MI loss", type=NON_NEGATIVE)
    n_negatives: int = option(32, "K, negatives per InfoNCE term (default 32)", type=POSITIVE)
    rank: int = option(64, "rank of the prompt generator projections (default 64)", type=POSITIVE)
    pooling: str = option("mean", "generator input P': the no-prompt pass pooled by mean (default) or cls, or the "
                          "mean input embedding (embeddings: one encoder pass at prediction instead of two)",
                          choices=POOLINGS)
    head_summary: str = option("predicted", "how θ is summarised for the head loss", choices=HEAD_SUMMARIES)
    mi_negatives: str = option("paper", "InfoNCE negatives: paper (no-prompt states, token embeddings) or batch "
                               "(other examples' prompts)", choices=MI_NEGATIVES)
    verbalizer_init: bool = option(False, "initialise head rows from label-word embeddings", switch="flag")
    generator_bias: bool = option(True)
    kl_weight: float = option(0.0, "weight of the optional KL term (default 0)", type=NON_NEGATIVE)

    def prompt_tokens(self) -> int:
        return self.n_prompts if self.prompt_source is not None else 0


def resolve_prompt_config(config: ClassifierConfig, task: TaskSpec, preset: Method) -> ClassifierConfig:
    """``config`` made concrete for the prompt kind: the task's template adapted to the method's placement and
    readout where none is given, ``auto`` readout decided by the template, no prompt tokens for a method
    without prompts; then the checks every kind shares."""
    options = config.options
    template = config.template or default_template(task, preset)
    readout = resolve_readout(options.readout, Template.parse(template), task, preset)
    n_prompts = options.n_prompts if options.prompt_source is not None else 0
    if options.prompt_source is not None and n_prompts == 0:
        raise UserError(f"method {preset.name} needs at least one prompt token, got n_prompts=0")
    options = dataclasses.replace(options, readout=readout, n_prompts=n_prompts)
    return dataclasses.replace(config, template=template, options=options).resolved(task)


def resolve_readout(readout: str, template: Template, task: TaskSpec, preset: Method) -> str:
    """The readout a config asks for, with ``auto`` (the method's choice) made concrete: ``spans`` where the
    template marks entity mentions, ``mean`` elsewhere."""
    has_spans = count_spans(template) > 0
    if readout == "auto":
        return "spans" if has_spans else "mean"
    if readout == "spans" and not has_spans:
        raise UserError(f"readout 'spans' needs a task with entity mentions; {task.name} has none")
    if readout == "mask" and preset.options.readout == "cls":
        raise UserError(f"readout 'mask' needs a [MASK] slot, and method {preset.name}'s template has none")
    return readout


def default_template(task: TaskSpec, preset: Method) -> str:
    """The task's template laid out for the method: prompts after ``[CLS]`` (prepend), none (no placement), no
    ``[MASK]`` slot for a method that reads ``[CLS]``."""
    template = Template.parse(task.template)
    if preset.options.placement == "prepend":
        if any(":" in part for part in template.parts):
            # Span tasks split one sentence into fields with truncation policies: keep that text as it is.
            # There the mask marks where the entity is; IDPG reads [CLS], so a literal "@" keeps the mark.
            kept = ["@" if part == "<mask>" else part for part in template.parts if part not in ("<p>", "<cls>")]
            return " ".join(["<cls>", "<p>", *kept])
        fields = " <sep> ".join(f"{{{name}}}" for name in task.fields)
        return f"<cls> <p> {fields} <sep>"
    if preset.options.placement == "none":
        template = template.without_prompts()
    if preset.options.readout == "cls":
        template = Template.parse(" ".join(p for p in template.parts if p != "<mask>"))
    return template.text
