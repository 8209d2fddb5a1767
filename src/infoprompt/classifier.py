"""``Classifier``: fit / predict / predict_proba / save / load on in-memory texts and labels, for every method.

A thin layer over the library's one path per verb: :func:`~infoprompt.kinds.make_classifier` builds the model
for a task made from the labels given to :meth:`Classifier.fit` (no registration), :func:`~infoprompt.kinds.train`
trains it with its kind's own fit, :func:`~infoprompt.training.inference.predict_encoded` gives the class
probabilities and :func:`~infoprompt.kinds.load_adapter` reads a saved one back, in any process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.gate import check_texts
from infoprompt.tasks.base import Example
from infoprompt.tasks.files import PAIR_FIELD, TEXT_FIELD, FileColumns
from infoprompt.tasks.multilabel import encode_label_set

LABELS_NAME = "classifier_labels.json"
TASK_NAME = "classifier"
# ClassifierConfig fields that Classifier sets itself (seed is an option of its own).
_MANAGED = {"task", "task_spec", "method", "backbone", "options", "labels", "init_seed", "backbone_fingerprint"}
_JSON_SCALARS = (str, int, float, bool)


class Classifier:
    """A few-shot text classifier in the style of scikit-learn and SetFit.

    ``Classifier(method="infoprompt-plus", backbone="minilm", **options)``: ``method`` is any row of
    ``infoprompt methods``; ``backbone`` a name, path or a loaded :class:`~infoprompt.backbones.Backbone`;
    ``options`` are the shared :class:`~infoprompt.kinds.config.ClassifierConfig` fields (``max_length``, ...),
    the options of the method's kind (``n_prompts``, ``beta``, ``lora_rank``, ...) and the
    :class:`~infoprompt.training.TrainConfig` fields its fit reads (``epochs``, ``lr``, ``device``, ...), with
    ``seed`` (default 1) seeding both the initialisation and training; progress bars are off unless
    ``progress=True``; ``threads`` sets torch's CPU threads for :meth:`fit` and :meth:`predict` (default: the
    CPUs this process may use, see :func:`~infoprompt.threads.use_threads`, which leaves a count the calling
    program set with ``torch.set_num_threads`` alone). An unknown option, or one the method's kind does not have
    or read, is a one-line error.

    Labels may be any hashable values. Inside, a class is named by the label's string form (``3`` -> ``"3"``),
    so two labels with the same string form (``1`` and ``"1"``) are an error. :meth:`predict` returns the
    values given to :meth:`fit`; after :meth:`save` and :meth:`load`, strings, ints, floats and booleans come
    back as themselves and any other value as its string form.
    """

    def __init__(self, method: str = "infoprompt-plus", backbone: Any = "minilm", **options: Any) -> None:
        from infoprompt.kinds.config import ClassifierConfig
        from infoprompt.kinds.registry import KINDS, kind_of
        from infoprompt.training.config import COMMON_TRAINING, TrainConfig
        from infoprompt.validation import positive_int

        kind = kind_of(method)  # an unknown method fails here, not at fit
        threads = options.pop("threads", None)
        self.threads = None if threads is None else positive_int(threads, "threads")
        shared = {f.name for f in dataclasses.fields(ClassifierConfig)} - _MANAGED
        model_fields = shared | set(kind.own_options())
        train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
        anywhere = shared | train_fields | {name for other in KINDS.values() for name in other.own_options()}
        unknown = sorted(set(options) - anywhere - {"seed"})
        if unknown:
            raise UserError(f"unknown Classifier option(s) {', '.join(unknown)}; known: "
                            f"{', '.join(sorted(model_fields | train_fields))}")
        foreign = sorted(name for name in options if name not in model_fields and name not in COMMON_TRAINING
                         and (name not in train_fields or name not in kind.training_options))
        if foreign:
            raise UserError(kind.lacking(method, foreign))
        self.method = method
        self.backbone = backbone
        self.seed = int(options.pop("seed", 1))
        self.model_options = {name: value for name, value in options.items() if name in model_fields}
        # A training field that is also an option of the kind (top-lora's epochs) is the option.
        self.train_options = {"progress": False, **{k: v for k, v in options.items()
                                                    if k in train_fields and k not in model_fields}}
        TrainConfig(seed=self.seed, **self.train_options)  # bad values fail here, not at fit
        self.model_: Any = None
        self.classes_: list[Hashable] = []
        self.fit_result_: Any = None
        self.fit_summary_: dict[str, Any] | None = None  # what the model card says of the training data

    # -- fit --------------------------------------------------------------------------------------------------
    def fit(self, texts: Sequence[str] | Sequence[tuple[str, str]], labels: Sequence[Hashable]) -> Classifier:
        """Train on ``texts`` (strings, or ``(text, text_pair)`` tuples for sentence pairs) and their ``labels``
        (at least two distinct values). Every example trains; nothing is held out unless the method's epoch
        selection holds out part of them.

        Multi-label (the linear probe and the prompt methods): give each text a list, tuple or set of labels
        (empty when none applies); :meth:`predict` then returns lists, and :meth:`predict_proba` each label's
        own probability (rows need not sum to 1).
        """
        from infoprompt.kinds import make_classifier, train
        from infoprompt.pipeline import label_counts
        from infoprompt.tasks.user_task import user_task
        from infoprompt.threads import use_threads
        from infoprompt.training.config import TrainConfig
        from infoprompt.training.data import report_truncation

        use_threads(self.threads)
        if len(texts) != len(labels):
            raise UserError(f"fit got {len(texts)} texts but {len(labels)} labels")
        pairs = _is_pairs(texts)
        multi = bool(len(labels)) and all(isinstance(label, list | tuple | set | frozenset) for label in labels)
        flat = [label for group in labels for label in group] if multi else list(labels)
        names = _label_names(flat)
        values = {name: label for name, label in zip(names, flat, strict=True)}
        if multi:
            targets = [encode_label_set(_label_name(label, f"labels[{i}]") for label in group)
                       for i, group in enumerate(labels)]
        else:
            targets = names
        columns = FileColumns(text_pair_column=PAIR_FIELD if pairs else None, multi_label=multi)
        task = user_task(TASK_NAME, columns, sorted(values))
        examples = [Example(fields=fields, label=target, source=f"texts[{i}]")
                    for i, (fields, target) in enumerate(zip(_fields(texts, pairs), targets, strict=True))]
        backbone = self._backbone()
        model = make_classifier(backbone, task, self.method, seed=self.seed, **self.model_options)
        self.fit_result_ = train(model, examples, None, TrainConfig(seed=self.seed, **self.train_options))
        self.fit_summary_ = {"source": "Classifier.fit", "n_train": len(examples), "seed": self.seed,
                             "train_label_counts": label_counts(task, examples)}
        report_truncation(self.fit_result_.truncated_train, len(examples), "training texts", model.config.max_length)
        self._set_model(model, [values[name] for name in model.config.labels])
        return self

    # -- predict ----------------------------------------------------------------------------------------------
    def predict_proba(self, texts: Sequence[str] | Sequence[tuple[str, str]], batch_size: int = 64):
        """Class probabilities, a NumPy array (n, n_classes) whose columns follow :attr:`classes_`; rows sum to 1
        (multi-label: each label's own probability)."""
        from infoprompt.threads import use_threads
        from infoprompt.training.data import encode_examples, report_truncation
        from infoprompt.training.inference import predict_encoded

        model = self._fitted()
        use_threads(self.threads)
        pairs = _is_pairs(texts) if len(texts) else len(model.task.fields) == 2
        if pairs != (len(model.task.fields) == 2):
            raise UserError(f"this classifier reads {'sentence pairs' if not pairs else 'one text'} per example, "
                            f"got {'pairs' if pairs else 'single texts'}")
        if not len(texts):
            import numpy as np

            return np.zeros((0, len(self.classes_)))
        # Keyed by the adapter's own field names: one that train or another program saved (an SST-2 adapter
        # reads "sentence") loads here too.
        examples = [Example(fields=fields, source=f"texts[{i}]")
                    for i, fields in enumerate(_fields(texts, pairs, tuple(model.task.fields)))]
        precision = self.train_options.get("precision", "fp32")
        encoded = encode_examples(model, examples)
        report_truncation(sum(p.truncated for p in encoded.pairs), len(encoded), "texts", model.config.max_length)
        return predict_encoded(model, encoded, batch_size, precision=precision).double().numpy()

    def predict(self, texts: Sequence[str] | Sequence[tuple[str, str]], batch_size: int = 64) -> list[Any]:
        """The most probable label of each text, as given to :meth:`fit` (multi-label: the list of labels whose
        probability reaches the threshold picked at fit)."""
        from infoprompt.tasks import is_multi_label
        from infoprompt.training.inference import threshold_of

        probabilities = self.predict_proba(texts, batch_size)
        if is_multi_label(self._fitted().task):
            threshold = threshold_of(self.model_)
            return [[label for label, p in zip(self.classes_, row, strict=True) if p >= threshold]
                    for row in probabilities]
        return [self.classes_[int(row.argmax())] for row in probabilities]

    # -- save / load ------------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """Write the adapter (its own files, the task included) and the label values to ``directory``."""
        from infoprompt.io_utils import atomic_write_json
        from infoprompt.model_card import write_model_card

        model = self._fitted()
        directory = Path(directory)
        model.save_pretrained(directory)
        values = [_json_value(label) for label in self.classes_]
        atomic_write_json(directory / LABELS_NAME, {"classes": values})
        if self.fit_summary_ is not None:  # the card save_pretrained wrote knows no training data: this one does
            write_model_card(directory, model.config, self.fit_summary_)

    @classmethod
    def load(cls, directory: str | Path, backbone: Any = None, **options: Any) -> Classifier:
        """A classifier saved by :meth:`save` (or any adapter directory, whose labels are then its class names);
        ``backbone``: a loaded backbone to share (default: the saved one's name); ``options`` as for the
        constructor (``device``, ``precision``, ``eval_batch_size``...)."""
        from infoprompt.kinds import load_adapter
        from infoprompt.kinds.config import read_adapter_config

        directory = Path(directory)
        config = read_adapter_config(directory)
        loaded = backbone if backbone is None or not isinstance(backbone, str) else _load_backbone(backbone)
        model = load_adapter(directory, backbone=loaded, config=config)
        classifier = cls(config.method, backbone=model.backbone, **options)
        classifier._set_model(model, _saved_classes(directory, config.labels))
        return classifier

    # -- internals --------------------------------------------------------------------------------------------
    def _set_model(self, model: Any, classes: list[Hashable]) -> None:
        self.model_, self.classes_ = model, classes

    def _fitted(self) -> Any:
        if self.model_ is None:
            raise UserError("this Classifier is not fitted yet: call fit(texts, labels) or Classifier.load(directory)")
        return self.model_

    def _backbone(self) -> Any:
        if isinstance(self.backbone, str):
            self.backbone = _load_backbone(self.backbone)
        return self.backbone


def _load_backbone(name: str) -> Any:
    from infoprompt.backbones import load_backbone

    return load_backbone(name)


def _json_value(label: Hashable) -> object:
    """``label`` as JSON keeps it: str, int, float, bool (NumPy scalars as their Python value), else its string."""
    if not isinstance(label, _JSON_SCALARS) and hasattr(label, "item"):
        label = label.item()
    return label if isinstance(label, _JSON_SCALARS) else str(label)


def _saved_classes(directory: Path, labels: Sequence[str]) -> list[Hashable]:
    from infoprompt.io_utils import read_json_object

    path = directory / LABELS_NAME
    if not path.is_file():
        return list(labels)
    classes = read_json_object(path).get("classes")
    if (not isinstance(classes, list) or len(classes) != len(labels)
            or [_label_name(value, str(path)) for value in classes] != list(labels)):
        raise UserError(f"{path}: 'classes' must list the adapter's {len(labels)} labels in its order "
                        f"({', '.join(labels)})")
    return classes


def _is_pairs(texts: Sequence[Any]) -> bool:
    if isinstance(texts, str):
        raise UserError("texts must be a list of strings (or of (text, text_pair) tuples), not one string")
    if not len(texts):
        raise UserError("texts is empty")
    pairs = isinstance(texts[0], tuple | list)
    for i, text in enumerate(texts):
        if pairs:
            ok = isinstance(text, tuple | list) and len(text) == 2 and all(isinstance(t, str) for t in text)
        else:
            ok = isinstance(text, str)
        if not ok:
            raise UserError(f"texts[{i}]: expected {'a (text, text_pair) tuple of strings' if pairs else 'a string'}"
                            f" like texts[0], got {text!r}")
        check_texts(dict(zip((TEXT_FIELD, PAIR_FIELD), text, strict=True)) if pairs else {TEXT_FIELD: text},
                     f"texts[{i}]")
    return pairs


def _fields(texts: Sequence[Any], pairs: bool, names: tuple[str, ...] = (TEXT_FIELD, PAIR_FIELD)) -> list[dict[str, str]]:
    if pairs:
        return [{names[0]: first, names[1]: second} for first, second in texts]
    return [{names[0]: text} for text in texts]


def _label_name(label: object, where: str) -> str:
    if label is None or (isinstance(label, float) and label != label):
        raise UserError(f"{where}: label is missing (None or NaN)")
    if not isinstance(label, Hashable):
        raise UserError(f"{where}: label {label!r} is not hashable")
    name = str(label).strip()
    if not name:
        raise UserError(f"{where}: label {label!r} is blank")
    return name


def _label_names(labels: Sequence[Hashable]) -> list[str]:
    names = [_label_name(label, f"labels[{i}]") for i, label in enumerate(labels)]
    seen: dict[str, Hashable] = {}
    for i, (name, label) in enumerate(zip(names, labels, strict=True)):
        first = seen.setdefault(name, label)
        if first != label or type(first) is not type(label):
            raise UserError(f"labels[{i}]: {label!r} and {first!r} have the same string form {name!r}; "
                            f"give labels that differ as text")
    if len(seen) < 2:
        raise UserError(f"labels hold {len(seen)} class(es); a classifier needs at least 2")
    return names
