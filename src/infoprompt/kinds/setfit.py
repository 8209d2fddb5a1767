"""``setfit``: SetFit (contrastive sentence-transformer fine-tuning + logistic regression) via the ``setfit`` library."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from torch import nn

from infoprompt.backbones import Backbone, silence_length_warning
from infoprompt.errors import UserError
from infoprompt.io_utils import atomic_write_json, read_json_object, write_safetensors
from infoprompt.kinds.common import BaselineModel, finish_fit, write_adapter
from infoprompt.kinds.config import FORMAT_VERSION, ClassifierConfig, read_weights
from infoprompt.kinds.registry import Kind, Method
from infoprompt.logistic import head_from_sklearn
from infoprompt.tasks import Example
from infoprompt.templates import (
    _FIELD,
    SPECIAL_PARTS,
    Batch,
    Encoded,
    EncodedPair,
    Template,
    cut,
    shorten_longest_first,
)
from infoprompt.training.config import TrainConfig
from infoprompt.training.contract import FitResult
from infoprompt.training.data import encode_examples
from infoprompt.training.loop import JsonlLog
from infoprompt.training.runtime import resolve_device
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
        raise UserError(f"method setfit needs the setfit library ({error.name} is missing): {INSTALL_HINT}") from None


@dataclass(frozen=True)
class SetFitSettings:
    """SetFit's own optimisation settings (its documented defaults for the embedding phase).

    The prompt methods' ``--epochs`` and ``--batch-size`` (30 and 8) do not apply; ``--lr`` and
    ``--max-steps`` do (they override ``body_learning_rate`` and ``max_steps``), ``--seed`` seeds training.

    Attributes:
        num_iterations: contrastive pairs per training example and per polarity (SetFit paper: 20), i.e.
            ``2 · num_iterations · n_train`` sentence pairs per epoch.
        epochs: passes over the pairs (SetFit default 1).
        batch_size: pairs per step of the body fine-tuning (SetFit default 16).
        body_learning_rate: AdamW learning rate of the body (SetFit default 2e-5), linear decay, 10 % warm-up.
        warmup_proportion: share of the steps spent warming the learning rate up.
        max_steps: stop the body fine-tuning after this many steps (-1: all epochs).
        head_c: inverse L2 strength of the logistic-regression head (scikit-learn's and SetFit's default 1).
        head_max_iter: lbfgs iterations of the head (scikit-learn's and SetFit's default 100).
        head_c_choices: C values to pick the head's C from on the few-shot draw (:func:`select_head_c`); empty:
            ``head_c`` is used as it is. After a fit, ``head_c`` is the C the head was fitted with.
    """

    num_iterations: int = 20
    epochs: int = 1
    batch_size: int = 16
    body_learning_rate: float = 2e-5
    warmup_proportion: float = 0.1
    max_steps: int = -1
    head_c: float = 1.0
    head_max_iter: int = 100
    head_c_choices: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "head_c_choices", tuple(self.head_c_choices))  # as JSON gives it

    def to_json(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["head_c_choices"] = list(self.head_c_choices)
        return data


# The C values select_head_c picks from: SetFit's fixed 1 sits in the middle of a log grid.
HEAD_C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
HEAD_CV_FOLDS = 5


def pair_options(config: ClassifierConfig) -> dict[str, object]:
    """The SetFit settings an adapter config sets (pairs, the head's C or its selection); empty when it sets none."""
    options: dict[str, object] = {}
    if config.pair_iterations is not None:
        options["num_iterations"] = config.pair_iterations
    if config.head_c is not None:
        options["head_c"] = config.head_c
    if config.select_head_c:
        options["head_c_choices"] = HEAD_C_GRID
    return options


def select_head_c(features: np.ndarray, labels: np.ndarray, choices: Sequence[float], max_iter: int,
                  seed: int) -> tuple[float, dict[str, float]]:
    """The C of ``choices`` whose logistic regression has the lowest stratified k-fold log-loss on the draw
    (ties: the smaller C), and each C's mean held-out log-loss. A class missing from a fold's training part gets
    probability 1e-6 on that fold's held-out rows; k is at most the draw's smallest class count (at least 2)."""
    import warnings

    from sklearn.model_selection import StratifiedKFold

    classes = np.unique(labels)
    smallest = int(np.bincount(np.searchsorted(classes, labels)).min())
    folds = StratifiedKFold(n_splits=max(2, min(HEAD_CV_FOLDS, smallest)), shuffle=True, random_state=seed)
    losses: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "least populated class has fewer members than n_splits" is expected
        splits = list(folds.split(features, labels))
        for c in choices:
            total = 0.0
            for fit_rows, held_rows in splits:
                classifier = LogisticRegression(C=c, max_iter=max_iter, random_state=seed)
                classifier.fit(features[fit_rows], labels[fit_rows])
                probabilities = np.full((len(held_rows), len(classes)), 1e-6)
                probabilities[:, np.searchsorted(classes, classifier.classes_)] = classifier.predict_proba(
                    features[held_rows])
                truth = probabilities[np.arange(len(held_rows)), np.searchsorted(classes, labels[held_rows])]
                total -= float(np.log(np.clip(truth, 1e-12, None)).sum())
            losses[f"{c:g}"] = total / len(labels)
    best = min(choices, key=lambda c: (losses[f"{c:g}"], c))
    return float(best), losses


def render_text(template: Template, fields: dict[str, str], sep_token: str | None) -> str:
    """The one text SetFit sees for an example: the method's plain template with the field texts filled in.

    The leading ``<cls>`` and the last ``<sep>`` are left to the tokenizer; an inner ``<sep>`` (between the
    two sentences of MRPC/RTE, or before the relation's tail mention) becomes the tokenizer's separator token
    (``[SEP]``, ``</s>``), which it reads as that special token; literal markers (``#``, ``@``) stay as words.
    """
    parts = list(template.parts)
    if parts and parts[0] == "<cls>":
        parts = parts[1:]
    if parts and parts[-1] == "<sep>":
        parts = parts[:-1]
    words: list[str] = []
    for part in parts:
        if part == "<sep>":
            words.append(sep_token or "")
        elif part in SPECIAL_PARTS:
            continue
        elif m := _FIELD.match(part):
            words.append(fields[m.group(1)].strip())
        else:
            words.append(part)
    return " ".join(word for word in words if word)


class SetFitTextEncoder:
    """Encodes examples as :mod:`infoprompt.training` expects, but with exactly the token ids SetFit's body
    produces for the rendered text, so that training (inside ``setfit``) and our predictions read one input.

    Texts over the budget are shortened first with the template's truncation policies (entity mentions are
    kept, as in every other method), then decoded back to text; the body cuts any remainder from the end.
    """

    def __init__(self, body: Any, tokenizer: Any, template: Template, max_length: int, truncate: bool):
        self.body = body
        self.tokenizer = tokenizer
        silence_length_warning(tokenizer)  # ``text`` counts the tokens of whole fields before cutting them
        self.template = template
        self.max_length = max_length
        self.truncate = truncate
        self.policies = template.cut_policies
        sep = getattr(tokenizer, "sep_token", None)
        self.sep_token = sep
        inner_seps = max(0, template.parts.count("<sep>") - (1 if template.parts[-1] == "<sep>" else 0))
        literals = [p for p in template.parts if p not in SPECIAL_PARTS and not _FIELD.match(p)]
        literal_tokens = sum(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in literals)
        self.fixed_length = tokenizer.num_special_tokens_to_add() + inner_seps + literal_tokens
        if self.fixed_length >= max_length:
            raise UserError(f"template {template.text!r} leaves no room for text within max_length={max_length}")

    def text(self, fields: dict[str, str], where: str) -> tuple[str, bool]:
        """The rendered text of one example and whether it had to be shortened."""
        names = self.template.fields
        missing = [name for name in names if name not in fields]
        if missing:
            raise UserError(f"{where}: missing text field {missing[0]!r}")
        ids = {name: self.tokenizer(fields[name], add_special_tokens=False)["input_ids"] for name in names}
        budget = self.max_length - self.fixed_length
        if sum(len(v) for v in ids.values()) <= budget:
            return render_text(self.template, fields, self.sep_token), False
        if not self.truncate:
            raise UserError(
                f"{where}: input has {sum(len(v) for v in ids.values()) + self.fixed_length} tokens, more than "
                f"max_length={self.max_length} (enable truncation or raise --max-length)"
            )
        lengths = shorten_longest_first({n: len(v) for n, v in ids.items()}, budget, self.policies)
        short = {n: self.tokenizer.decode(cut(v, lengths[n], self.policies[n])) for n, v in ids.items()}
        return render_text(self.template, short, self.sep_token), True

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """What the body's own tokenisation (``SentenceTransformer.preprocess``/``tokenize``) gives each text."""
        tokenize = getattr(self.body, "preprocess", None) or self.body.tokenize
        rows: list[list[int]] = []
        for start in range(0, len(texts), 256):
            features = tokenize(list(texts[start : start + 256]))
            for ids, mask in zip(features["input_ids"].tolist(), features["attention_mask"].tolist(), strict=True):
                rows.append([i for i, m in zip(ids, mask, strict=True) if m])
        return rows

    def encode_many(self, field_texts: Sequence[dict[str, str]], sources: Sequence[str] | None = None) -> list[EncodedPair]:
        rendered = [self.text(f, sources[i] if sources else f"input {i + 1}") for i, f in enumerate(field_texts)]
        pairs = []
        for (_, truncated), ids in zip(rendered, self.token_ids([text for text, _ in rendered]), strict=True):
            encoded = Encoded(input_ids=ids, prompt_positions=[], readout_position=0,
                              context_positions=list(range(len(ids))))
            pairs.append(EncodedPair(prompted=encoded, plain=encoded, truncated=truncated))
        return pairs


def build_body(backbone: Backbone, max_length: int, copy_weights: bool = True) -> Any:
    """A ``SentenceTransformer`` (Transformer → mean Pooling → Normalize, the layout of all-MiniLM-L6-v2 and
    all-mpnet-base-v2) whose transformer is a private copy of the backbone's weights (``copy_weights=False``:
    the caller replaces the transformer's model)."""
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers 6 moved the modules; 3-5 (which setfit 1.1 allows) have them here
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import models

    location = getattr(backbone.model, "name_or_path", "") or backbone.name
    try:
        transformer = models.Transformer(str(location), max_seq_length=max_length)
    except (OSError, ValueError) as error:
        raise UserError(f"method setfit could not build a sentence-transformers body from {location!r} ({error})") from None
    if copy_weights:
        # The backbone as loaded (dtype, weights) is what the adapter is fingerprinted against: copy it in.
        transformer.auto_model.load_state_dict(backbone.model.state_dict())
        transformer.auto_model.to(torch.float32)
    dimension = (getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension)()
    pooling = models.Pooling(dimension, "mean")
    return SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device=str(backbone.device))


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
        """SetFit's defaults with the adapter config's options (``--pair-iterations``)."""
        return SetFitSettings(**pair_options(self.config))

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

    def save_pretrained(self, directory: str | Path) -> None:
        """The sentence-transformers layout of the body (``SentenceTransformer(directory)`` and
        ``SetFitModel.from_pretrained(directory)`` load it), setfit's ``config_setfit.json`` with the label names,
        the regression's arrays in ``setfit_head.safetensors``, and this library's head, config and settings."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.body.save(str(directory), create_model_card=False)
        atomic_write_json(directory / SETFIT_CONFIG_NAME, {"labels": list(self.config.labels),
                                                           "normalize_embeddings": False})
        write_safetensors(directory / HEAD_FILE, self.head_arrays(), FORMAT_VERSION)
        atomic_write_json(directory / SETTINGS_NAME, {"settings": self.settings.to_json(), "fitted": self.fitted,
                                                       "body": "Transformer -> Pooling(mean) -> Normalize"})
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


@contextlib.contextmanager
def quiet_libraries(progress: bool) -> Iterator[None]:
    """setfit logs its run banner at INFO and datasets draws a bar per map; keep them out unless asked."""
    import datasets

    loggers = [logging.getLogger(name) for name in ("setfit", "sentence_transformers", "transformers.trainer")]
    levels = [logger.level for logger in loggers]
    bars = datasets.utils.logging.is_progress_bar_enabled()
    if not progress:
        for logger in loggers:
            logger.setLevel(logging.WARNING)
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        if bars:
            datasets.enable_progress_bars()


def train_body(model: SetFitClassifier, texts: list[str], labels: list[int], settings: SetFitSettings,
               config: TrainConfig, log: JsonlLog, device: torch.device,
               callbacks: Sequence[Any] = ()) -> tuple[int, list[float]]:
    """SetFit's contrastive training of the body and its head fit, through ``setfit.Trainer``; returns the steps
    taken and the logged contrastive losses (each also written to the run's JSONL ``log``). ``callbacks``: more
    ``transformers.TrainerCallback`` objects for the body's training loop."""
    from datasets import Dataset
    from setfit import Trainer, TrainingArguments
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class LossLog(TrainerCallback):
        """Each logged step's contrastive loss, in the run's JSONL log."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "embedding_loss" in logs:
                loss = float(logs["embedding_loss"])
                log.write({"type": "step", "step": state.global_step, "epoch": logs.get("epoch"),
                           "lr": logs.get("learning_rate"), "loss_total": loss, "loss_pred": loss})

    with tempfile.TemporaryDirectory(prefix="infoprompt-setfit-") as scratch, quiet_libraries(config.progress):
        args = TrainingArguments(
            output_dir=scratch,
            batch_size=(settings.batch_size, settings.batch_size),
            num_epochs=(settings.epochs, 1),
            num_iterations=settings.num_iterations,
            body_learning_rate=(settings.body_learning_rate, settings.body_learning_rate),
            warmup_proportion=settings.warmup_proportion,
            max_steps=settings.max_steps,
            max_length=model.config.max_length,
            seed=config.seed,
            report_to="none",
            save_strategy="no",
            logging_strategy="steps",
            logging_steps=1,
            logging_first_step=True,
            show_progress_bar=config.progress,
        )
        trainer = Trainer(model=model.setfit, args=args, callbacks=[LossLog(), *callbacks],
                          train_dataset=Dataset.from_dict({"text": texts, "label": labels}))
        # transformers prints every log dict when its progress bar is off; the JSONL log keeps them instead.
        trainer.st_trainer.remove_callback(PrinterCallback)
        if device.type == "cpu":
            trainer.st_trainer.args.dataloader_pin_memory = False  # pinning needs an accelerator
        if not config.progress:
            trainer.st_trainer.remove_callback(ProgressCallback)
        trainer.train()
        steps = int(trainer.st_trainer.state.global_step)
        losses = [h["embedding_loss"] for h in trainer.st_trainer.state.log_history if "embedding_loss" in h]
    return steps, losses


def fit_setfit(
    model: SetFitClassifier,
    train_examples: Sequence[Example],
    eval_examples: Sequence[Example] | None = None,
    config: TrainConfig | None = None,
    log_path: Path | None = None,
    *,
    callbacks: Sequence[Any] = (),
) -> FitResult:
    """Fine-tune the body contrastively and fit the head with ``setfit.Trainer``; ``callbacks`` (more
    ``transformers.TrainerCallback`` objects) see the body's training loop (``benchmarks/tiny_adapters.py`` times
    its steps with one)."""
    require_setfit()
    config = config or TrainConfig()
    started = time.perf_counter()
    settings = model.settings
    if config.lr is not None or config.max_steps is not None:
        settings = dataclasses.replace(
            settings,
            body_learning_rate=config.lr if config.lr is not None else settings.body_learning_rate,
            max_steps=config.max_steps if config.max_steps is not None else settings.max_steps,
        )
        model.settings = settings
    device = resolve_device(config.device)
    train_set = encode_examples(model, train_examples)
    if train_set.labels is None:
        raise UserError("training examples must all be labelled")
    labels = train_set.labels.tolist()
    if len(set(labels)) < 2:
        raise UserError("setfit needs training examples of at least two classes")
    texts = model.texts(train_examples)
    log = JsonlLog(log_path)
    log.write({"type": "setfit", "step": 0, "n_train": len(texts), **settings.to_json()})

    model.body.to(device)
    model.head.to(device)
    train_started = time.perf_counter()
    steps, losses = train_body(model, texts, labels, settings, config, log, device, callbacks)
    selection = None
    if settings.head_c_choices:
        features = model.head_features(texts)
        chosen, scores = select_head_c(features, np.asarray(labels), settings.head_c_choices, settings.head_max_iter,
                                       config.seed)
        settings = model.settings = dataclasses.replace(settings, head_c=chosen)
        head = LogisticRegression(C=chosen, max_iter=settings.head_max_iter, random_state=model.config.init_seed)
        model.setfit.model_head = head.fit(features, labels)
        selection = {"head_c": chosen, "head_c_log_loss": scores}
        log.write({"type": "selection", "step": steps, **selection})
    train_seconds = time.perf_counter() - train_started
    model.set_head(model.setfit.model_head)
    # The transformers trainer places the body itself (on the GPU when there is one): evaluate on ``device``.
    model.to(device).eval()
    last = float(losses[-1]) if losses else 0.0

    result = finish_fit(model, train_set, eval_examples, config, log, steps=steps, loss=last,
                        lr=settings.body_learning_rate, started=started, cache_seconds=0.0, train_seconds=train_seconds)
    result.timings["step_s"] = train_seconds / steps if steps else 0.0
    result.selection = selection
    return result


KIND = Kind("setfit", SetFitClassifier, fit_setfit, require=require_setfit, methods=(
    Method("setfit", None, "none", "cls", 0.0, 0.0, False, 2e-5, kind="setfit", table_order=12,
           description="SetFit via the setfit library: contrastive body fine-tuning + logistic regression"),
))
