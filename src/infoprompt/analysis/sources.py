"""Prompt sources to compare (random embeddings, handcrafted text, trained adapters) and their states.

For every source and example this computes the prompt summary ``P̄`` (mean of the inserted prompt vectors),
the readout state ``Z`` of the prompted pass and the readout state ``Z'`` of the no-prompt pass. Every
source goes through the one insertion function, :meth:`PromptClassifier.encode_states`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from infoprompt.analysis.embeddings import embedding_statistics
from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.kinds import load_adapter
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.prompt.model import PromptClassifier
from infoprompt.progress import bar_disabled
from infoprompt.tasks import Example, TaskSpec
from infoprompt.templates import Template, collate
from infoprompt.training.data import (
    EncodedSet,
    batches,
    encode_examples,
    length_sorted,
    pad_id,
    prompted_batch,
)

# Handcrafted prompts of the paper's Figure 1 (MRPC, SST-2), used when the user names none.
DEFAULT_TEXTS: dict[str, tuple[str, ...]] = {
    "mrpc": ("it is equivalent to", "has the same meaning"),
    "sst2": ("this is positive", "this is negative"),
}


@dataclass(frozen=True)
class SourceSpec:
    """One prompt source.

    Attributes:
        kind: ``random`` (per-example Gaussian vectors matched to the token-embedding statistics),
            ``text`` (the token embeddings of a handcrafted text) or ``adapter`` (a trained adapter's
            prompts).
        label: name shown in the figure and the tables.
        text: the handcrafted text (``text`` sources).
        adapter: adapter directory (``adapter`` sources).
        n_prompts: prompt vectors per example (``random`` sources).
    """

    kind: str
    label: str
    text: str | None = None
    adapter: Path | None = None
    n_prompts: int = 4


@dataclass
class SourceStates:
    """Per-example ``P̄`` (N, D), ``Z`` (N, D) and ``Z'`` (N, D) of one source, plus what produced them."""

    spec: SourceSpec
    prompt_mean: torch.Tensor
    z: torch.Tensor
    z_plain: torch.Tensor
    template: str
    n_prompts: int
    details: dict[str, object] = field(default_factory=dict)
    z_swapped: torch.Tensor | None = None  # (N, K, D): Z of input i under the prompts of its K partners
    static: bool = False  # every input got the same prompt


def parse_adapter_arg(value: str) -> SourceSpec:
    """``LABEL=DIR`` or ``DIR`` (the label is then the adapter's method)."""
    label, sep, path = value.partition("=")
    if not sep:
        label, path = "", value
    return SourceSpec(kind="adapter", label=label, adapter=Path(path))


def text_template(task: TaskSpec) -> str:
    """The task template with every prompt place merged into one place right before ``<mask>``.

    A handcrafted prompt is a phrase, so its tokens stay together (``… {sentence} this is positive [MASK] …``)
    instead of being spread over the places as soft prompt tokens are. Without prompts the template is the
    same as the soft-prompt one, so every source shares the same no-prompt states ``Z'``.
    """
    parts = [part for part in Template.parse(task.template).parts if part != "<p>"]
    if "<mask>" not in parts:
        raise UserError(f"task {task.name}: its template has no <mask> to put a handcrafted prompt before")
    at = parts.index("<mask>")
    return " ".join(parts[:at] + ["<p>"] + parts[at:])


class StateCollector:
    """Computes :class:`SourceStates` for one task, backbone and example list; shares the no-prompt pass."""

    def __init__(
        self,
        backbone: Backbone,
        task: TaskSpec,
        examples: Sequence[Example],
        batch_size: int = 32,
        seed: int = 0,
        progress: bool = True,
    ):
        self.backbone = backbone
        self.task = task
        self.examples = list(examples)
        self.batch_size = batch_size
        self.seed = seed
        self.progress = progress
        self._plain: dict[str, torch.Tensor] = {}

    def collect(self, spec: SourceSpec, partners: torch.Tensor | None = None) -> SourceStates:
        """States of ``spec``; with ``partners`` (N, K) also each input's Z under its partners' prompts."""
        if spec.kind == "adapter":
            spec, model, make_prompts, details = self._adapter(spec)
        elif spec.kind == "text":
            spec, model, make_prompts, details = self._text(spec)
        elif spec.kind == "random":
            spec, model, make_prompts, details = self._random(spec)
        else:
            raise UserError(f"unknown prompt source kind {spec.kind!r}; known: random, text, adapter")
        prompts, prompt_mean, z, z_plain, swapped = self._run(model, make_prompts, spec.label, partners)
        return SourceStates(
            spec=spec,
            prompt_mean=prompt_mean,
            z=z,
            z_plain=z_plain,
            template=model.config.template,
            n_prompts=model.config.n_prompts,
            details=details,
            z_swapped=swapped,
            static=bool((prompts == prompts[:1]).all()),
        )

    # -- sources: each gives a classifier for the passes and a function (indices, pooled P') -> prompts
    def _carrier(self, n_prompts: int, template: str | None) -> PromptClassifier:
        """A classifier used only for its template and passes (its own prompt is never used)."""
        config = ClassifierConfig.create(
            task=self.task.name,
            method="warp",
            backbone=self.backbone.name,
            n_prompts=n_prompts,
            template=template,
            max_length=min(ClassifierConfig.max_length, self.backbone.max_positions),
        )
        return PromptClassifier(self.backbone, config)

    def _text(self, spec: SourceSpec):
        text = (spec.text or "").strip()
        ids = self.backbone.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
        if not ids:
            raise UserError(f"handcrafted prompt {spec.text!r} has no tokens")
        model = self._carrier(len(ids), text_template(self.task))
        vectors = self.backbone.input_embeddings.weight.detach()[torch.tensor(ids)].to(torch.float32)

        def make_prompts(index: list[int], pooled: torch.Tensor) -> torch.Tensor:
            return vectors.unsqueeze(0).expand(len(index), -1, -1)

        return spec, model, make_prompts, {"text": text, "token_ids": ids}

    def _random(self, spec: SourceSpec):
        if spec.n_prompts < 1:
            raise UserError(f"random prompts need at least one prompt token, got {spec.n_prompts}")
        mean, std = embedding_statistics(self.backbone)
        generator = torch.Generator().manual_seed(self.seed)
        # One fresh draw per example, made up front in input order so the draw does not depend on batching.
        draws = mean + std * torch.randn(
            (len(self.examples), spec.n_prompts, mean.shape[0]), generator=generator
        )

        def make_prompts(index: list[int], pooled: torch.Tensor) -> torch.Tensor:
            return draws[index]

        details = {
            "distribution": "N(mean, diag(std^2)) of the ordinary token embeddings, one draw per example",
            "seed": self.seed,
        }
        return spec, self._carrier(spec.n_prompts, None), make_prompts, details

    def _adapter(self, spec: SourceSpec):
        assert spec.adapter is not None
        model = load_adapter(spec.adapter, backbone=self.backbone)
        if model.task.name != self.task.name:
            raise UserError(
                f"adapter {spec.adapter} was trained on task {model.task.name}, not {self.task.name}"
            )
        if not isinstance(model, PromptClassifier) or model.prompt is None:
            raise UserError(f"adapter {spec.adapter} (method {model.config.method}) has no prompt to analyse")
        model.eval()
        spec = SourceSpec(
            kind="adapter",
            label=spec.label or model.config.method,
            adapter=spec.adapter,
            n_prompts=model.config.n_prompts,
        )

        def make_prompts(index: list[int], pooled: torch.Tensor) -> torch.Tensor:
            return model.prompt(len(index), pooled)

        return spec, model, make_prompts, {"adapter": str(spec.adapter), "method": model.config.method}

    # -- passes ------------------------------------------------------------------------------------------
    def _run(self, model: PromptClassifier, make_prompts, label: str, partners: torch.Tensor | None):
        encoded = encode_examples(model, self.examples)
        pooled, z_plain = self._plain_states(model, encoded)
        n, hidden = len(encoded), self.backbone.hidden_size
        with torch.no_grad():
            prompts = (
                make_prompts(list(range(n)), pooled).detach().to(torch.float32)
            )  # (N, n_p, D), input order
        z = self._states(model, encoded, lambda chunk: prompts[chunk], f"states {label}")
        swapped = None
        if partners is not None:
            if partners.shape[0] != n:
                raise ValueError(f"partners has {partners.shape[0]} rows for {n} examples")
            if bool((prompts == prompts[:1]).all()):
                # One prompt for every input: every partner's prompt is the same, so are the states.
                swapped = z.unsqueeze(1).expand(-1, partners.shape[1], -1).clone()
            else:
                swapped = torch.empty(n, partners.shape[1], hidden)
                for k in range(partners.shape[1]):
                    column = partners[:, k]
                    swapped[:, k] = self._states(
                        model,
                        encoded,
                        lambda chunk, c=column: prompts[c[chunk]],
                        f"swapped states {label} {k + 1}/{partners.shape[1]}",
                    )
        return prompts, prompts.mean(1), z, z_plain, swapped

    def _states(self, model: PromptClassifier, encoded: EncodedSet, prompts_for, desc: str) -> torch.Tensor:
        """Readout states (N, D) of the prompted pass with ``prompts_for(chunk)`` inserted."""
        z = torch.empty(len(encoded), self.backbone.hidden_size)
        with torch.no_grad():
            for chunk in tqdm(
                batches(length_sorted(encoded), self.batch_size),
                desc=desc,
                disable=bar_disabled(self.progress),
                leave=False,
            ):
                batch = prompted_batch(model, encoded, chunk)
                z[chunk] = model.readout(
                    model.encode_states(batch, prompts_for(chunk)), batch.readout_position
                )
        return z

    def _plain_states(
        self, model: PromptClassifier, encoded: EncodedSet
    ) -> tuple[torch.Tensor, torch.Tensor]:
        key = f"{model.template.without_prompts().text}|{model.options.pooling}"
        if key not in self._plain:
            # Run the no-prompt pass even for classifiers that skip it in training (static prompts).
            pooled = torch.empty(len(encoded), self.backbone.hidden_size)
            z_plain = torch.empty(len(encoded), self.backbone.hidden_size)
            chunks = batches(length_sorted(encoded), self.batch_size)
            for chunk in tqdm(chunks, desc="no-prompt states", disable=bar_disabled(self.progress), leave=False):
                p, zp = model.plain_features(collate([encoded.pairs[i].plain for i in chunk], pad_id(model)))
                pooled[chunk], z_plain[chunk] = p, zp
            self._plain[key] = (pooled, z_plain)
        return self._plain[key]
