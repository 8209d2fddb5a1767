"""The method table: every prompt-tuning method is one preset of the same classifier."""

from __future__ import annotations

from dataclasses import dataclass, replace

from infoprompt.errors import UserError


@dataclass(frozen=True)
class MethodPreset:
    """How one method configures the shared pipeline.

    Attributes:
        name: CLI / table name.
        prompt_source: ``"static"`` (WARP), ``"generated"`` (IDPG, InfoPrompt) or ``None`` (no prompts).
        placement: ``"template"`` (prompt places of the task template) or ``"prepend"`` (right after
            ``[CLS]``, the IDPG layout) or ``"none"``.
        readout: ``"mask"`` (state at the ``[MASK]`` slot), ``"cls"`` (state at ``[CLS]``), ``"mean"`` (mean of
            the text-field states) or ``"auto"`` (``spans`` on span tasks, ``mean`` elsewhere).
        beta: weight of the representation MI loss.
        gamma: weight of the head MI loss.
        verbalizer_init: initialise head rows from label-word embeddings.
        lr: default learning rate.
        train_encoder: every encoder weight is trained (fine-tuning).
        description: one line for ``infoprompt methods``.
        kind: which model and trainer run the method: ``"classifier"`` (:class:`~infoprompt.model.PromptClassifier`
            trained by :func:`~infoprompt.training.train`), ``"peft"`` (Hugging Face ``peft`` prompt tuning) or
            ``"linear-probe"`` (logistic regression on frozen pooled embeddings) or ``"setfit"`` (the ``setfit``
            library); see :mod:`infoprompt.baselines`.
        adapter_size: bottleneck width of the adapters inserted after every transformer layer (0: none).
        mi_negatives: InfoNCE negatives of the information terms, ``"paper"`` or ``"batch"`` (other examples'
            prompts); see :class:`~infoprompt.model.ClassifierConfig`.
        warm_start: fit the head by logistic regression on the initial features before training.
        select: ``"none"`` (train all epochs) or ``"holdout"`` (pick the epoch count on a held-out slice of the
            few-shot draw, then refit); see :class:`~infoprompt.training.TrainConfig`.
    """

    name: str
    prompt_source: str | None
    placement: str
    readout: str
    beta: float
    gamma: float
    verbalizer_init: bool
    lr: float
    train_encoder: bool = False
    description: str = ""
    kind: str = "classifier"
    adapter_size: int = 0
    mi_negatives: str = "paper"
    warm_start: bool = False
    select: str = "none"

    @property
    def uses_features(self) -> bool:
        """Whether the no-prompt pass (P', Z') is needed during training."""
        return self.prompt_source == "generated" or self.beta > 0


RECOMMENDED = "infoprompt-plus"
PLUS = MethodPreset(RECOMMENDED, "generated", "template", "auto", 0.1, 0.05, False, 1e-3,
                    mi_negatives="batch", warm_start=True, select="holdout",
                    description="recommended: InfoPrompt with in-batch MI negatives, text-mean (or entity-span) "
                                "readout, probe-initialised head, epochs picked on a held-out slice of the draw")

METHODS: dict[str, MethodPreset] = {
    preset.name: preset
    for preset in (
        MethodPreset("infoprompt", "generated", "template", "mask", 0.1, 0.05, True, 1e-3,
                     description="generated prompts + head MI (γ) + representation MI (β)"),
        MethodPreset("infoprompt-no-head", "generated", "template", "mask", 0.1, 0.0, True, 1e-3,
                     description="InfoPrompt without the head loss (γ=0)"),
        MethodPreset("infoprompt-no-rep", "generated", "template", "mask", 0.0, 0.05, True, 1e-3,
                     description="InfoPrompt without the representation loss (β=0)"),
        MethodPreset("infoprompt-ce", "generated", "template", "mask", 0.0, 0.0, True, 1e-3,
                     description="generated template prompts trained with cross-entropy only (β=γ=0)"),
        MethodPreset("warp", "static", "template", "mask", 0.0, 0.0, True, 1e-3,
                     description="WARP: static prompt embeddings in the template, head on [MASK]"),
        MethodPreset("idpg", "generated", "prepend", "cls", 0.0, 0.0, False, 1e-3,
                     description="IDPG: generated prompts prepended after [CLS], head on [CLS]"),
        MethodPreset("finetune", None, "none", "mask", 0.0, 0.0, True, 2e-5, train_encoder=True,
                     description="full fine-tuning of the encoder, head on [MASK]"),
        MethodPreset("adapter", None, "none", "mask", 0.0, 0.0, True, 1e-3, adapter_size=64,
                     description="bottleneck adapters (64) after every transformer layer, head on [MASK]"),
        MethodPreset("linear-probe", None, "none", "cls", 0.0, 0.0, False, 0.0, kind="linear-probe",
                     description="logistic regression on frozen mean-pooled embeddings (lr unused)"),
        MethodPreset("peft-prompt-tuning", "static", "prepend", "cls", 0.0, 0.0, False, 1e-3, kind="peft",
                     description="Hugging Face peft PromptTuningConfig on AutoModelForSequenceClassification"),
        # The recommended recipe (not the paper's): see README "Which method".
        PLUS,
        replace(PLUS, name=f"{RECOMMENDED}-ce", beta=0.0, gamma=0.0,
                description=f"{RECOMMENDED} without the information terms (β=γ=0)"),
        # One part of the recommended recipe at a time set back to the paper's choice: the ablation table of
        # docs/results.md pairs each of these with infoprompt-plus on the same draws.
        replace(PLUS, name=f"{RECOMMENDED}-mask", readout="mask",
                description=f"ablation: {RECOMMENDED} with the paper's [MASK] readout"),
        replace(PLUS, name=f"{RECOMMENDED}-paper-mi", mi_negatives="paper",
                description=f"ablation: {RECOMMENDED} with the paper's MI negatives (no-prompt pass, tokens)"),
        replace(PLUS, name=f"{RECOMMENDED}-cold", warm_start=False,
                description=f"ablation: {RECOMMENDED} with a randomly initialised head (no warm start)"),
        replace(PLUS, name=f"{RECOMMENDED}-fixed", select="none",
                description=f"ablation: {RECOMMENDED} trained for all epochs (no held-out selection)"),
        MethodPreset("setfit", None, "none", "cls", 0.0, 0.0, False, 2e-5, kind="setfit",
                     description="SetFit via the setfit library: contrastive body fine-tuning + logistic regression"),
    )
}


def register_method(preset: MethodPreset) -> MethodPreset:
    """Add (or replace) a row of the method table, e.g. a method of a kind registered with
    :func:`infoprompt.kinds.register_kind`; returns it."""
    METHODS[preset.name] = preset
    return preset


def get_method(name: str) -> MethodPreset:
    try:
        return METHODS[name]
    except KeyError:
        raise UserError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}") from None
