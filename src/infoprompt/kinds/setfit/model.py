"""SetFitClassifier: a ``setfit.SetFitModel`` (sentence-transformer body + logistic regression) as a peer
method, its files in the sentence-transformers layout, read back without pickles."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from torch import nn

from infoprompt.backbones import Backbone
from infoprompt.errors import UserError
from infoprompt.io_utils import atomic_write_json, read_json_object, write_safetensors
from infoprompt.kinds.common import BaselineModel, write_adapter
from infoprompt.kinds.config import FORMAT_VERSION, ClassifierConfig, read_weights
from infoprompt.kinds.setfit.options import SetFitOptions, SetFitSettings, pair_options
from infoprompt.kinds.setfit.text import SetFitTextEncoder
from infoprompt.logistic import head_from_sklearn
from infoprompt.tasks import Example
from infoprompt.templates import Batch, Template
from infoprompt.validation import check_field_types

SETTINGS_NAME = "setfit_config.json"
INSTALL_HINT = "pip install 'infoprompt[setfit]'"
# The regression's fitted arrays, named as LogisticRegression's attributes, so that they can be set on the
# fresh head SetFitModel.from_pretrained builds (setfit itself reads a head only from a joblib pickle).
HEAD_FILE = "setfit_head.safetensors"
HEAD_ATTRIBUTES = ("coef_", "intercept_", "classes_")
# The files setfit and sentence-transformers read from the adapter directory (their own names).
SETFIT_CONFIG_NAME = "config_setfit.json"
BODY_MODULES_NAME = "modules.json"
BODY_WEIGHTS_NAME = "model.safetensors"
# Adapters written before the body moved into the sentence-transformers layout kept body and arrays in
# adapter_model.safetensors under these names.
LEGACY_HEAD_ARRAYS = ("setfit_head.coef", "setfit_head.intercept", "setfit_head.classes")


def require_setfit() -> None:
    """Fail with one line when the optional ``setfit`` extra (setfit, sentence-transformers, datasets) is missing."""
    try:
        import datasets  # noqa: F401
        import sentence_transformers  # noqa: F401
        import setfit  # noqa: F401
    except ImportError as error:
        # Not "method setfit": the setfit-lora and top-lora methods need the same extra.
        raise UserError(f"the setfit extra is missing ({error.name} cannot be imported): {INSTALL_HINT}") from None


def build_body(backbone: Backbone, max_length: int, copy_weights: bool = True) -> Any:
    """A ``SentenceTransformer`` (Transformer → mean Pooling → Normalize, the layout of all-MiniLM-L6-v2 and
    all-mpnet-base-v2) whose transformer is a private copy of the backbone's weights (``copy_weights=False``:
    the caller replaces the transformer's model)."""
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers 6 moved the modules; 3-5 (which setfit 1.1 allows) have them here
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import models

    if copy_weights:
        transformer = load_transformer(models, backbone, max_length)
        # The backbone as loaded (dtype, weights) is what the adapter is fingerprinted against: copy it in.
        transformer.auto_model.load_state_dict(backbone.model.state_dict())
        transformer.auto_model.to(torch.float32)
    else:
        transformer = shared_transformer(models, backbone, max_length)
    dimension = (getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension)()
    pooling = models.Pooling(dimension, "mean")
    return SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device=str(backbone.device))


def load_transformer(models: Any, backbone: Backbone, max_length: int) -> Any:
    """sentence-transformers' ``Transformer`` module read from the backbone's files (its own weights and tokenizer)."""
    location = getattr(backbone.model, "name_or_path", "") or backbone.name
    try:
        return models.Transformer(str(location), max_seq_length=max_length)
    except (OSError, ValueError) as error:
        raise UserError(f"method setfit could not build a sentence-transformers body from {location!r} ({error})") from None


# Per backbone encoder and token budget, one Transformer module read from disk (its own weights let go); the bodies
# of adapters that share the backbone's weights are shallow copies of it. Reading it per adapter cost about 11 MiB
# each (a tokenizer of its own, mostly): a hundred LoRA adapters, a gigabyte. Keyed by the encoder, which no
# template refers to, so that a backbone let go takes its templates along.
_TEMPLATES: weakref.WeakKeyDictionary[nn.Module, dict[int, Any]] = weakref.WeakKeyDictionary()


def shared_transformer(models: Any, backbone: Backbone, max_length: int) -> Any:
    """A ``Transformer`` module whose model is the backbone's own and whose tokenizer and settings are those of
    one read from the backbone's files once, with module and setting dicts of its own: the caller replaces its
    model (with LoRA) without touching the other adapters' bodies."""
    templates = _TEMPLATES.setdefault(backbone.model, {})
    template = templates.get(max_length)
    if template is None:
        template = load_transformer(models, backbone, max_length)
        template.model = nn.Identity()  # the weights read from disk are let go; each copy gets the backbone's
        templates[max_length] = template
    body = copy.copy(template)
    for name, value in vars(template).items():
        if isinstance(value, dict):  # _modules, _parameters, _buffers, hooks, caches and settings
            object.__setattr__(body, name, copy.copy(value))
    body.model = backbone.model
    return body


class SetFitClassifier(BaselineModel):
    """SetFit as a peer method: a ``setfit.SetFitModel`` whose body is a sentence-transformer built from the
    run's backbone (a fine-tuned private copy; the shared backbone stays untouched) and whose head is
    scikit-learn's ``LogisticRegression`` on the normalised mean-pooled embedding.

    ``forward`` returns the head's log-probabilities (an ``nn.Linear`` equal to the fitted regression), so
    evaluation and prediction run through :mod:`infoprompt.training` like every other method; ``self.setfit``
    is the library's model and predicts the same probabilities from text.
    """

    def __init__(self, backbone: Backbone, config: ClassifierConfig, settings: SetFitSettings | None = None):
        require_setfit()
        from setfit import SetFitModel

        super().__init__(backbone, config)
        self.settings = settings or self.default_settings()
        self.body = self._make_body(backbone)
        self.template_encoder = SetFitTextEncoder(
            self.body, self.body.tokenizer, Template.parse(self.config.template), self.config.max_length,
            self.config.truncate,
        )
        self.setfit = SetFitModel(
            model_body=self.body,
            model_head=LogisticRegression(C=self.settings.head_c, max_iter=self.settings.head_max_iter,
                                          random_state=self.config.init_seed),
        )
        dimension = (getattr(self.body, "get_embedding_dimension", None)
                     or self.body.get_sentence_embedding_dimension)()
        self.head = nn.Linear(dimension, len(self.config.labels))
        with torch.no_grad():
            self.head.weight.zero_()
            self.head.bias.zero_()
        self.head.to(backbone.device)
        self.fitted = False

    def default_settings(self) -> SetFitSettings:
        """SetFit's defaults with the adapter's options (``--pair-iterations``, ``--head-c``, ...)."""
        return SetFitSettings(**pair_options(self.options))

    @property
    def options(self) -> SetFitOptions:
        return self.config.options

    def _make_body(self, backbone: Backbone) -> Any:
        return build_body(backbone, self.config.max_length)

    def texts(self, examples: Sequence[Example]) -> list[str]:
        """The texts SetFit trains on and predicts from (see :func:`render_text`)."""
        return [self.template_encoder.text(e.fields, e.source)[0] for e in examples]

    def embed(self, batch: Batch) -> torch.Tensor:
        """The body's sentence embedding (mean-pooled, L2-normalised), as ``SentenceTransformer.encode`` gives it."""
        features = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        return self.body(features)["sentence_embedding"]

    def head_features(self, texts: Sequence[str]) -> np.ndarray:
        """The body's embeddings of ``texts`` as setfit's own head fit reads them (float64, one row per text)."""
        return np.asarray(self.setfit.model_body.encode(list(texts), normalize_embeddings=self.setfit.normalize_embeddings,
                                                        show_progress_bar=False), dtype=np.float64)

    def forward(self, batch: Batch, pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, None]:
        """Log-probabilities of the logistic-regression head (B, C) and the embeddings (B, D)."""
        features = self.embed(batch)
        return self.head(features).log_softmax(-1), features, None

    def set_head(self, classifier: LogisticRegression) -> None:
        weight, bias = head_from_sklearn(classifier, len(self.config.labels))
        with torch.no_grad():
            self.head.weight.copy_(torch.as_tensor(weight, dtype=self.head.weight.dtype))
            self.head.bias.copy_(torch.as_tensor(bias, dtype=self.head.bias.dtype))
        self.setfit.model_head = classifier
        self.fitted = True

    def body_state(self) -> dict[str, torch.Tensor]:
        """The fine-tuned transformer's weights, named as its ``model.safetensors`` names them."""
        return {name: t.detach().contiguous().cpu().clone() for name, t in self.body[0].auto_model.state_dict().items()}

    def saved_state(self) -> dict[str, torch.Tensor]:
        """The linear head (``adapter_model.safetensors``); the body and the regression have files of their own."""
        return {"head.weight": self.head.weight.detach().cpu().clone(), "head.bias": self.head.bias.detach().cpu().clone()}

    def head_arrays(self) -> dict[str, torch.Tensor]:
        """The regression's fitted arrays as tensors, keyed by LogisticRegression's attribute names (no pickle)."""
        classifier = self.setfit.model_head
        if self.fitted:
            arrays = (classifier.coef_, classifier.intercept_, np.asarray(classifier.classes_, dtype=np.int64))
        else:
            arrays = (np.zeros((1, self.head.in_features)), np.zeros(1), np.zeros(2, dtype=np.int64))
        return {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in zip(HEAD_ATTRIBUTES, arrays, strict=True)}

    def save_pretrained(self, directory: str | Path, keep_training_state: bool = False) -> None:
        """The sentence-transformers layout of the body (``SentenceTransformer(directory)`` and
        ``SetFitModel.from_pretrained(directory)`` load it), setfit's ``config_setfit.json`` with the label names,
        the regression's arrays in ``setfit_head.safetensors``, and this library's head, config and settings."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.body.save(str(directory), create_model_card=False)
        atomic_write_json(directory / SETFIT_CONFIG_NAME, {"labels": list(self.config.labels),
                                                           "normalize_embeddings": False})
        self.save_head(directory, SETTINGS_NAME, "Transformer -> Pooling(mean) -> Normalize")

    def save_head(self, directory: Path, settings_name: str, body: str) -> None:
        """The regression's arrays, the settings (as ``settings_name``, ``body`` describing the body), the linear
        head and the config: what every SetFit-kind adapter writes after its body."""
        write_safetensors(directory / HEAD_FILE, self.head_arrays(), FORMAT_VERSION)
        atomic_write_json(directory / settings_name, {"settings": self.settings.to_json(), "fitted": self.fitted,
                                                       "body": body})
        write_adapter(directory, self.saved_state(), self.config)  # last: its config marks a complete adapter

    @classmethod
    def load(cls, directory: Path, config: ClassifierConfig, backbone: Backbone) -> SetFitClassifier:
        require_setfit()
        settings, fitted = read_settings(directory / SETTINGS_NAME, SetFitSettings)
        model = cls(backbone, config, settings)
        body, head, arrays = read_saved_parts(model, directory)
        model.body[0].auto_model.load_state_dict(body)
        model.head.load_state_dict({"weight": head["head.weight"], "bias": head["head.bias"]})
        if fitted:
            model.restore_head(arrays)
        return model.eval()

    def restore_head(self, arrays: dict[str, torch.Tensor]) -> None:
        """Rebuild the fitted scikit-learn head from its saved arrays (keyed by :data:`HEAD_ATTRIBUTES`; no pickle)."""
        classifier = self.setfit.model_head
        coef, intercept, classes = (arrays[name] for name in HEAD_ATTRIBUTES)
        classifier.coef_ = coef.numpy().astype(np.float64)
        classifier.intercept_ = intercept.numpy().astype(np.float64)
        classifier.classes_ = classes.numpy()
        classifier.n_features_in_ = classifier.coef_.shape[1]
        self.fitted = True


def read_settings(path: Path, settings_type: type[SetFitSettings]) -> tuple[SetFitSettings, bool]:
    """The checked settings saved at ``path`` and whether the head had been fitted."""
    if not path.is_file():
        raise UserError(f"adapter file {path} is missing")
    saved = read_json_object(path)
    try:
        settings = settings_type(**saved["settings"])
    except (KeyError, TypeError) as error:
        raise UserError(f"{path}: malformed settings ({error})") from None
    check_field_types(settings, str(path))
    return settings, bool(saved.get("fitted"))


def read_saved_parts(model: SetFitClassifier, directory: Path) -> tuple[dict[str, torch.Tensor], ...]:
    """The body weights, the linear head and the regression's arrays of a saved adapter, checked: from the
    sentence-transformers layout, or from an adapter written before it (all three in adapter_model.safetensors)."""
    free = HEAD_ATTRIBUTES  # the regression's shapes depend on the classes it saw
    if (directory / BODY_MODULES_NAME).is_file():
        body = read_weights(directory, model.body_state(), name=BODY_WEIGHTS_NAME)
        head = read_weights(directory, model.saved_state())
        arrays = read_weights(directory, model.head_arrays(), free_shapes=free, name=HEAD_FILE)
        return body, head, arrays
    legacy_names = dict(zip(LEGACY_HEAD_ARRAYS, HEAD_ATTRIBUTES, strict=True))
    expected = {**{f"body.{n}": t for n, t in model.body_state().items()}, **model.saved_state(),
                **{old: model.head_arrays()[new] for old, new in legacy_names.items()}}
    state = read_weights(directory, expected, free_shapes=LEGACY_HEAD_ARRAYS)
    body = {n[len("body."):]: t for n, t in state.items() if n.startswith("body.")}
    arrays = {new: state[old] for old, new in legacy_names.items()}
    return body, {n: state[n] for n in ("head.weight", "head.bias")}, arrays
