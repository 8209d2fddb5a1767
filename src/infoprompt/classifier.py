"""``Classifier``: a scikit-learn estimator (fit / predict / predict_proba / score / save / load) on in-memory
texts and labels, for every method.

A thin layer over the library's one path per verb: :func:`~infoprompt.kinds.make_classifier` builds the model
for a task made from the labels given to :meth:`Classifier.fit` (no registration), :func:`~infoprompt.kinds.train`
trains it with its kind's own fit, :func:`~infoprompt.training.inference.predict_encoded` gives the class
probabilities and :func:`~infoprompt.kinds.load_adapter` reads a saved one back, in any process.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.exceptions import NotFittedError as SklearnNotFittedError

from infoprompt.errors import UserError
from infoprompt.gate import check_texts
from infoprompt.progress import is_terminal, library_bars
from infoprompt.recommended import RECOMMENDED_METHOD
from infoprompt.tasks.base import Example
from infoprompt.tasks.files import PAIR_FIELD, TEXT_FIELD, FileColumns
from infoprompt.tasks.multilabel import encode_label_set

LABELS_NAME = "classifier_labels.json"
TASK_NAME = "classifier"
# predict draws its default bar from this many texts on: below it a call takes seconds and a bar is noise.
PREDICT_BAR_MIN_TEXTS = 1000
# ClassifierConfig fields that Classifier sets itself (seed is an option of its own).
_MANAGED = {"task", "task_spec", "method", "backbone", "options", "labels", "init_seed", "backbone_fingerprint"}
_JSON_SCALARS = (str, int, float, bool)
# The parameters the constructor names; every other parameter is an option given as a keyword.
_NAMED = ("method", "backbone", "seed", "threads")
_DEFAULTS = {"method": RECOMMENDED_METHOD, "backbone": "minilm", "seed": 1, "threads": None}
# DataFrame columns read as texts, by name: the library's own field names (those of Hugging Face tokenizers and
# of the file readers' defaults), then those of the GLUE files and of Hugging Face's GLUE datasets.
PAIR_COLUMNS = ((TEXT_FIELD, PAIR_FIELD), ("sentence1", "sentence2"), ("question1", "question2"),
                ("premise", "hypothesis"), ("question", "sentence"))
TEXT_COLUMNS = (TEXT_FIELD, "sentence")


class NotFittedError(UserError, SklearnNotFittedError):
    """A :class:`Classifier` used before :meth:`~Classifier.fit` or :meth:`~Classifier.load`: scikit-learn's
    ``NotFittedError`` (so ``except NotFittedError`` and scikit-learn's own checks catch it), and a
    :class:`~infoprompt.errors.UserError` (one line, a ``ValueError``)."""


@dataclasses.dataclass(frozen=True)
class _Settings:
    """A classifier's parameters checked and split the way fit and predict read them."""

    kind: Any
    seed: int
    threads: int | None
    model_options: dict[str, Any]
    train_options: dict[str, Any]
    task_name: str = TASK_NAME


class Classifier(ClassifierMixin, BaseEstimator):
    """A few-shot text classifier in the style of scikit-learn and SetFit, and a scikit-learn estimator:
    ``clone``, ``get_params`` / ``set_params``, ``score``, ``cross_val_score``, ``GridSearchCV`` and ``Pipeline``
    work with it.

    ``Classifier(method=RECOMMENDED_METHOD, backbone="minilm", *, seed=1, threads=None, **options)``:
    ``method`` is any row of ``infoprompt methods`` (default :data:`~infoprompt.recommended.RECOMMENDED_METHOD`,
    ``top-lora-siamese``, which needs ``pip install 'infoprompt[setfit]'``); ``backbone`` a name, path or a loaded
    :class:`~infoprompt.backbones.Backbone` (a loaded one is shared, never copied, by every clone: give one to
    load the encoder once for all the folds of a cross-validation); ``seed`` seeds both the initialisation and
    training; ``threads`` sets torch's CPU threads for :meth:`fit` and :meth:`predict` (default: the CPUs this
    process may use, see :func:`~infoprompt.threads.use_threads`, which leaves a count the calling program set
    with ``torch.set_num_threads`` alone). ``options`` are the shared
    :class:`~infoprompt.kinds.config.ClassifierConfig` fields (``max_length``, ...), the options of the method's
    kind (``n_prompts``, ``beta``, ``lora_rank``, ...) and the :class:`~infoprompt.training.TrainConfig` fields
    its fit reads (``epochs``, ``lr``, ``device``, ...). Progress: by default a bar where a person sees it (a
    terminal, or a notebook's widget) for :meth:`fit` and for :meth:`predict` on large inputs, and nothing
    when stderr is a file or a pipe; ``progress=False`` turns it off, ``progress=True`` draws it anywhere (plain
    lines in a file, as the command line writes them).
    ``task_name`` (any method) names the task :meth:`fit` makes from the labels, as the saved adapter and its
    model card call it (default ``"classifier"``).

    Parameters: ``get_params()`` gives ``method``, ``backbone``, ``seed``, ``threads`` and every option given,
    each also an attribute (``clf.epochs``); ``set_params(epochs=3)`` sets them. Unlike scikit-learn's own
    estimators, the constructor and :meth:`set_params` check the parameters at once (the method decides which
    options exist, so they are keywords, not a fixed signature): an unknown option, or one the method's kind does
    not have or read, is a one-line error, and a failed ``set_params`` changes nothing. :meth:`fit` checks them
    again, so an attribute assigned directly is checked too.

    Texts (``X``): a list (or array, or pandas Series) of strings, of ``(text, text_pair)`` tuples for sentence
    pairs, a 2-D array with one or two columns, or a DataFrame: its columns ``text`` and ``text_pair`` (or
    ``sentence1`` / ``sentence2``, ``question1`` / ``question2``, ``premise`` / ``hypothesis``, ``question`` /
    ``sentence``) are read as pairs, else ``text`` or ``sentence`` as single texts, other columns ignored; a
    DataFrame of one column is read whatever its name.

    Labels (``y``) may be any hashable values. Inside, a class is named by the label's string form (``3`` ->
    ``"3"``), so two labels with the same string form (``1`` and ``"1"``) are an error. After fitting,
    ``classes_`` is a NumPy array of the classes (ordered by their string forms; an object array when the labels
    mix types) and :meth:`predict` returns a list of the values given to :meth:`fit` (NumPy scalars as their
    Python values); after :meth:`save` and :meth:`load`, strings, ints, floats and booleans come back as
    themselves and any other value as its string form. Errors from bad arguments are one-line
    :class:`~infoprompt.errors.UserError`, a ``ValueError``; a classifier used before it is fitted raises
    :class:`NotFittedError`, scikit-learn's.
    """

    def __init__(self, method: str = RECOMMENDED_METHOD, backbone: Any = "minilm", *, seed: int = 1,
                 threads: int | None = None, **options: Any) -> None:
        _check_backbone(backbone)
        _settings(method, seed, threads, options)  # a bad parameter fails here, not at fit
        # Only the parameters, stored as given: clone and get_params read them back unchanged.
        self.method = method
        self.backbone = backbone
        self.seed = seed
        self.threads = threads
        for name, value in options.items():
            setattr(self, name, value)

    # -- scikit-learn's parameter protocol ------------------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters (``method``, ``backbone``, ``seed``, ``threads``) and every option."""
        params = {name: getattr(self, name) for name in _NAMED}
        params.update((name, getattr(self, name)) for name in self._option_names())
        return params

    def set_params(self, **params: Any) -> Classifier:
        """Set parameters (named ones and options, new options included), checked as the constructor checks
        them before any is changed; returns the classifier."""
        if not params:
            return self
        nested = sorted(name for name in params if "__" in name)
        if nested:
            raise UserError(f"Classifier has no nested parameters: {', '.join(nested)}")
        _settings_of({**self.get_params(deep=False), **params})
        for name, value in params.items():
            setattr(self, name, value)
        return self

    def __sklearn_clone__(self) -> Classifier:
        # scikit-learn's clone deep-copies every parameter that is not an estimator, a loaded backbone included
        # (its whole encoder, once per fold); the backbone is frozen and meant to be shared, so clones share it.
        params = self.get_params(deep=False)
        backbone = params.pop("backbone")
        twin = type(self)(backbone=backbone, **{name: clone(value, safe=False) for name, value in params.items()})
        if hasattr(self, "_metadata_request"):  # what set_fit_request and the like asked for, as clone keeps it
            twin._metadata_request = clone(self._metadata_request, safe=False)
        return twin

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "model_")

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True  # texts, not numbers
        tags.input_tags.one_d_array = True  # a list of texts
        tags.input_tags.two_d_array = False  # no numeric features (a 2-D array holds texts and their pairs)
        return tags

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:  # noqa: N803 - BaseEstimator's signature
        # The method and backbone always, then the parameters that differ from their defaults in the order
        # given (scikit-learn's own repr sorts them by name, which puts the backbone before the method).
        params = self.get_params(deep=False)
        shown = [f"method={params.pop('method')!r}", f"backbone={params.pop('backbone')!r}"]
        shown += [f"{name}={value!r}" for name, value in params.items()
                  if name not in _DEFAULTS or value != _DEFAULTS[name]]
        text = f"{type(self).__name__}({', '.join(shown)})"
        return text if len(text) <= N_CHAR_MAX else text[:N_CHAR_MAX - 4] + "...)"

    def _option_names(self) -> list[str]:
        # The options are the public attributes besides the named parameters and the fitted ones (ending "_"),
        # in the order given; an option assigned directly (clf.epochs = 3) counts, and fit checks it.
        return [name for name in vars(self)
                if not name.startswith("_") and not name.endswith("_") and name not in _NAMED]

    def _settings(self) -> _Settings:
        return _settings_of(self.get_params(deep=False))

    # -- fit --------------------------------------------------------------------------------------------------
    def fit(self, texts: Any, labels: Any) -> Classifier:
        """Train on ``texts`` (``X``: strings, ``(text, text_pair)`` tuples, an array or a DataFrame; see the
        class) and their ``labels`` (``y``: at least two distinct values); returns the classifier. Every example
        trains; nothing is held out unless the method's epoch selection holds out part of them.

        Multi-label (the linear probe and the prompt methods): give each text a list, tuple or set of labels
        (empty when none applies); :meth:`predict` then returns lists, and :meth:`predict_proba` each label's
        own probability (rows need not sum to 1).
        """
        from infoprompt.kinds import make_classifier, train
        from infoprompt.kinds.model_card import card_examples
        from infoprompt.pipeline import label_counts
        from infoprompt.tasks.user_task import user_task
        from infoprompt.threads import use_threads
        from infoprompt.training.config import TrainConfig
        from infoprompt.training.data import report_truncation

        settings = self._settings()
        try:
            settings.kind.trainer()  # checks the kind's optional extra before the backbone loads
        except UserError as error:
            raise UserError(f"method {self.method}: {error}") from None
        use_threads(settings.threads)
        texts, pairs, where = _read_texts(texts)
        labels = _read_labels(labels)
        if len(texts) != len(labels):
            raise UserError(f"fit got {len(texts)} texts but {len(labels)} labels")
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
        task = user_task(settings.task_name, columns, sorted(values))
        examples = [Example(fields=fields, label=target, source=where(i))
                    for i, (fields, target) in enumerate(zip(_fields(texts, pairs), targets, strict=True))]
        train_options = {"progress": _progress_shown(), **settings.train_options}
        with library_bars(train_options["progress"]):
            model = make_classifier(self._backbone(), task, self.method, seed=settings.seed,
                                    **settings.model_options)
            self.fit_result_ = train(model, examples, None, TrainConfig(seed=settings.seed, **train_options))
        self.fit_summary_ = {"source": "Classifier.fit", "n_train": len(examples), "seed": settings.seed,
                             "train_label_counts": label_counts(task, examples), "steps": self.fit_result_.steps,
                             "lr": self.fit_result_.lr, "timings": self.fit_result_.timings,
                             "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                             "examples": list(card_examples(examples))}
        report_truncation(self.fit_result_.truncated_train, len(examples), "training texts", model.config.max_length)
        self._set_model(model, [values[name] for name in model.config.labels])
        return self

    # -- predict ----------------------------------------------------------------------------------------------
    def predict_proba(self, texts: Any, batch_size: int = 64) -> np.ndarray:
        """Class probabilities, a NumPy array (n, n_classes) whose columns follow :attr:`classes_`; rows sum to 1
        (multi-label: each label's own probability)."""
        from infoprompt.threads import use_threads
        from infoprompt.training.data import encode_examples, report_truncation
        from infoprompt.training.inference import predict_encoded

        model = self._fitted()
        settings = self._settings()
        use_threads(settings.threads)
        texts, pairs, where = _read_texts(texts, empty_ok=True)
        if not len(texts):
            return np.zeros((0, len(self.classes_)))
        if pairs != (len(model.task.fields) == 2):
            raise UserError(f"this classifier reads {'sentence pairs' if not pairs else 'one text'} per example, "
                            f"got {'pairs' if pairs else 'single texts'}")
        # Keyed by the adapter's own field names: one that train or another program saved (an SST-2 adapter
        # reads "sentence") loads here too.
        examples = [Example(fields=fields, source=where(i))
                    for i, fields in enumerate(_fields(texts, pairs, tuple(model.task.fields)))]
        precision = settings.train_options.get("precision", "fp32")
        encoded = encode_examples(model, examples)
        report_truncation(sum(p.truncated for p in encoded.pairs), len(encoded), "texts", model.config.max_length)
        progress = settings.train_options.get("progress", len(encoded) >= PREDICT_BAR_MIN_TEXTS and _progress_shown())
        return predict_encoded(model, encoded, batch_size, progress, precision=precision).double().numpy()

    def predict(self, texts: Any, batch_size: int = 64) -> list[Any]:
        """The most probable label of each text, a list of values as given to :meth:`fit` (multi-label: the
        list of labels whose probability reaches the threshold picked at fit)."""
        from infoprompt.tasks import is_multi_label
        from infoprompt.training.inference import threshold_of

        probabilities = self.predict_proba(texts, batch_size)
        classes = self.classes_.tolist()  # Python values, not NumPy scalars
        if is_multi_label(self._fitted().task):
            threshold = threshold_of(self.model_)
            return [[label for label, p in zip(classes, row, strict=True) if p >= threshold]
                    for row in probabilities]
        return [classes[int(row.argmax())] for row in probabilities]

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy of :meth:`predict` on ``X`` against ``y`` (multi-label: the share of texts whose
        predicted label set is exactly the true one, scikit-learn's subset accuracy)."""
        from infoprompt.tasks import is_multi_label

        if not is_multi_label(self._fitted().task):
            return float(super().score(X, y, sample_weight))
        truth = _read_labels(y)
        predicted = self.predict(X)
        if len(truth) != len(predicted):
            raise UserError(f"score got {len(predicted)} texts but {len(truth)} labels")
        hits = [{_label_name(label, f"labels[{i}]") for label in group} == {_label_name(label, "") for label in row}
                for i, (group, row) in enumerate(zip(truth, predicted, strict=True))]
        return float(np.average(hits, weights=sample_weight))

    # -- save / load ------------------------------------------------------------------------------------------
    def save(self, directory: str | Path, overwrite: bool = False) -> None:
        """Write the adapter (its own files, the task included, and its model card) and the label values to
        ``directory``, whole or not at all. A non-empty ``directory`` is refused unless ``overwrite=True``, which
        replaces only a saved adapter (as ``infoprompt train`` refuses an existing run directory without
        ``--overwrite``)."""
        from infoprompt.io_utils import atomic_write_json, staged_save_directory
        from infoprompt.kinds.model_card import CardFacts, card_facts, given_path

        model = self._fitted()
        values = [_json_value(label) for label in self.classes_.tolist()]
        summary = getattr(self, "fit_summary_", None)
        facts = CardFacts(summary, given_path(directory), tuple((summary or {}).get("examples", ())))
        with staged_save_directory(directory, overwrite) as staging:
            atomic_write_json(staging / LABELS_NAME, {"classes": values})  # first: the card lists it
            with card_facts(facts):  # the save's one card: the final path as given, the examples fit was given
                model.save_pretrained(staging)

    @classmethod
    def load(cls, directory: str | Path, backbone: Any = None, **options: Any) -> Classifier:
        """A classifier saved by :meth:`save` (or any adapter directory, whose labels are then its class names);
        ``backbone``: a loaded backbone to share (default: the saved one's name); ``options`` as for the
        constructor (``device``, ``precision``, ``eval_batch_size``...). Its parameters are the saved method, the
        backbone and these options; the saved model's own settings (``max_length``, the kind's options) are in
        ``model_.config``, not parameters, so a clone that is fitted again starts from the method's defaults."""
        from infoprompt.kinds import load_adapter
        from infoprompt.kinds.config import read_adapter_config

        if backbone is not None:
            _check_backbone(backbone)
        directory = Path(directory)
        config = read_adapter_config(directory)
        progress = options.get("progress")
        with library_bars(_progress_shown() if progress is None else bool(progress)):
            loaded = backbone if backbone is None or not isinstance(backbone, str) else _load_backbone(backbone)
            model = load_adapter(directory, backbone=loaded, config=config)
        classifier = cls(config.method, backbone=model.backbone, **options)
        classifier._set_model(model, _saved_classes(directory, config.labels))
        return classifier

    # -- internals --------------------------------------------------------------------------------------------
    def _set_model(self, model: Any, classes: list[Hashable]) -> None:
        self.model_, self.classes_ = model, _class_array(classes)

    def _backbone(self) -> Any:
        """The loaded backbone to train on; ``self.backbone`` stays as given (fit changes no parameter)."""
        if not isinstance(self.backbone, str):
            return self.backbone
        last = getattr(self, "model_", None)
        if last is not None and last.backbone.name == self.backbone:
            return last.backbone  # a refit reuses the encoder the last fit loaded
        return _load_backbone(self.backbone)

    def _fitted(self) -> Any:
        if not hasattr(self, "model_"):
            raise NotFittedError("this Classifier is not fitted yet: call fit(texts, labels) or "
                                 "Classifier.load(directory)")
        return self.model_


def _settings_of(params: dict[str, Any]) -> _Settings:
    """:func:`_settings` of a classifier's parameters as ``get_params`` gives them."""
    options = {name: value for name, value in params.items() if name not in _NAMED}
    _check_backbone(params["backbone"])
    return _settings(params["method"], params["seed"], params["threads"], options)


def _check_backbone(backbone: Any) -> None:
    """A backbone parameter is a name or path (a non-empty string) or a loaded backbone."""
    if isinstance(backbone, str) and backbone.strip():
        return
    if not isinstance(backbone, str) and hasattr(backbone, "tokenizer") and hasattr(backbone, "name"):
        return  # a loaded Backbone (duck-typed: its module loads torch)
    shown = repr(backbone) if len(repr(backbone)) <= 40 else repr(backbone)[:40] + "…"
    raise UserError(f"backbone must be a name or path (minilm, mpnet, a Hugging Face id, a local directory) or a "
                    f"loaded Backbone, got {type(backbone).__name__} {shown}")


def _settings(method: str, seed: Any, threads: Any, options: dict[str, Any]) -> _Settings:
    """Check a classifier's parameters and split its options into the model's and the training's."""
    from infoprompt.kinds.config import ClassifierConfig
    from infoprompt.kinds.registry import KINDS, kind_of
    from infoprompt.tasks.user_task import check_task_name
    from infoprompt.training.config import TrainConfig
    from infoprompt.validation import nonnegative_int, positive_int

    if not isinstance(method, str):
        raise UserError(f"method must be a method name (a string; see infoprompt methods), got "
                        f"{type(method).__name__} {method!r}"[:200])
    kind = kind_of(method)  # an unknown method fails here, not at fit
    options = dict(options)
    # The name of the task fit makes from the labels (what the adapter and its model card call it): an option of
    # Classifier itself, whatever the method.
    task_name = options.pop("task_name", None)
    task_name = TASK_NAME if task_name is None else check_task_name(task_name, "task_name")
    shared = {f.name for f in dataclasses.fields(ClassifierConfig)} - _MANAGED
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"seed"}
    anywhere = shared | train_fields | {name for other in KINDS.values() for name in other.own_options()}
    unknown = sorted(set(options) - anywhere)
    if unknown:
        known = shared | set(kind.own_options()) | train_fields | {"seed", "threads", "task_name"}
        raise UserError(f"unknown Classifier option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    # An option is an attribute of the classifier: one named like a method of it would hide that method.
    clashes = sorted(name for name in options if hasattr(Classifier, name))
    if clashes:
        raise UserError(f"option(s) {', '.join(clashes)} of method {method} clash with Classifier's own "
                        "attributes and cannot be set here; train through infoprompt.train instead")
    seed = nonnegative_int(seed, "seed")
    threads = None if threads is None else positive_int(threads, "threads")
    kind_options, train_options = kind.split(method, {name: value for name, value in options.items()
                                                      if name not in shared})
    model_options = {**{name: value for name, value in options.items() if name in shared}, **kind_options}
    if train_options.get("progress", True) is None:
        del train_options["progress"]  # None is the default: decided where the output goes, at each call
    TrainConfig(seed=seed, **train_options)  # bad values fail here, not at fit
    # The model's options, checked by the checks fit's model config runs (its kind's options included).
    ClassifierConfig.create(task=TASK_NAME, method=method, backbone="-", **model_options)
    return _Settings(kind, seed, threads, model_options, train_options, task_name)


def _progress_shown() -> bool:
    """The default progress: a bar only where a person sees it, a terminal or a notebook (the ``sys.stderr`` of
    the moment, so a redirected one is the one judged)."""
    return is_terminal(sys.stderr)


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


def _read_texts(texts: Any, *, empty_ok: bool = False) -> tuple[list[Any], bool, Callable[[int], str]]:
    """``texts`` as a list of strings or of ``(text, text_pair)`` tuples, whether they are pairs, and how an
    error names row ``i``; every text checked (a string, not blank, no lone surrogate)."""
    if isinstance(texts, str | bytes):
        raise UserError("texts must be a list of strings (or of (text, text_pair) tuples), not one string")
    if type(texts).__module__.startswith("scipy.sparse"):  # numeric features, as scikit-learn's vectorisers give
        raise UserError("texts is a sparse matrix, which is not supported: give the texts themselves (strings)")
    if hasattr(texts, "columns"):  # a DataFrame (pandas or alike: duck-typed, pandas is no dependency)
        return _frame_texts(texts, empty_ok)
    shape = getattr(texts, "shape", None)
    if shape is not None and len(shape) != 1:
        if len(shape) != 2 or shape[1] not in (1, 2):
            raise UserError(f"texts is an array of shape {tuple(shape)}; give one text per row: a 1-D array, or "
                            "a 2-D one with 1 column (texts) or 2 (text, text_pair)")
        rows = [row[0] if shape[1] == 1 else tuple(row) for row in texts]
    else:
        try:
            rows = list(texts)
        except TypeError:
            raise UserError(f"texts must be a list of strings (or of (text, text_pair) tuples), got "
                            f"{type(texts).__name__}") from None
    if not rows:
        if empty_ok:
            return [], False, _position
        raise UserError("texts is empty")
    pairs = isinstance(rows[0], tuple | list)
    for i, text in enumerate(rows):
        if pairs:
            ok = isinstance(text, tuple | list) and len(text) == 2 and all(isinstance(t, str) for t in text)
        else:
            ok = isinstance(text, str)
        if not ok:
            raise UserError(f"texts[{i}]: expected {'a (text, text_pair) tuple of strings' if pairs else 'a string'}"
                            f" like texts[0], got {text!r}")
        check_texts(dict(zip((TEXT_FIELD, PAIR_FIELD), text, strict=True)) if pairs else {TEXT_FIELD: text},
                    _position(i))
    # str() turns NumPy's strings into Python's: the tokenizers get exactly what a list of strings gives them.
    return [tuple(map(str, text)) if pairs else str(text) for text in rows], pairs, _position


def _position(i: int) -> str:
    return f"texts[{i}]"


def _frame_texts(frame: Any, empty_ok: bool) -> tuple[list[Any], bool, Callable[[int], str]]:
    """The texts of a DataFrame, read from its columns by name (see :data:`PAIR_COLUMNS`)."""
    names = [str(column) for column in frame.columns]
    if len(set(names)) != len(names):
        raise UserError(f"texts is a DataFrame with repeated column names ({', '.join(map(repr, names))})")
    layouts = [columns for columns in PAIR_COLUMNS if set(columns) <= set(names)]
    # A single-text column is a layout of its own only when no pair layout uses it.
    layouts += [(column,) for column in TEXT_COLUMNS
                if column in names and not any(column in layout for layout in layouts)]
    if len(layouts) > 1:
        raise UserError(f"texts is a DataFrame whose columns fit more than one layout "
                        f"({'; '.join(' + '.join(layout) for layout in layouts)}); select the columns to read, "
                        f"e.g. X[{list(layouts[0])!r}]")
    if layouts:
        chosen = layouts[0]
    elif len(names) == 1:
        chosen = (names[0],)
    else:
        # Two unnamed columns are not taken for a pair: a label column passed along would be read as text.
        raise UserError(f"texts is a DataFrame with columns {', '.join(map(repr, names)) or 'none'}: name the text "
                        f"column {TEXT_FIELD!r} (and a pair's second text {PAIR_FIELD!r}), e.g. "
                        f"X.rename(columns={{...}}), or pass one column (X['...'])")
    by_name = dict(zip(names, frame.columns, strict=True))
    cells = [list(frame[by_name[column]]) for column in chosen]
    index = list(getattr(frame, "index", range(len(cells[0]))))

    def where(i: int) -> str:
        label = index[i] if i < len(index) else i
        return f"texts row {i}" + (f" (index {label!r})" if label != i else "")

    rows = list(zip(*cells, strict=True))
    if not rows:
        if empty_ok:
            return [], len(chosen) == 2, where
        raise UserError("texts is an empty DataFrame")
    for i, row in enumerate(rows):
        # Keyed by the frame's own column names, so that an error names the column to fix.
        check_texts(dict(zip(chosen, row, strict=True)), where(i))
    texts = [tuple(map(str, row)) if len(chosen) == 2 else str(row[0]) for row in rows]
    return texts, len(chosen) == 2, where


def _read_labels(labels: Any) -> list[Any]:
    """``labels`` (``y``) as a list: a list, array, Series, or a DataFrame or 2-D array of one column."""
    if isinstance(labels, str | bytes):
        raise UserError("labels must be a list of labels, one per text, not one string")
    if hasattr(labels, "columns"):
        columns = list(labels.columns)
        if len(columns) != 1:
            raise UserError(f"labels is a DataFrame with {len(columns)} columns; give one column of labels "
                            "(multi-label: a list or set of labels per text)")
        labels = labels[columns[0]]
    shape = getattr(labels, "shape", None)
    if shape is not None and len(shape) == 2 and shape[1] == 1:
        labels = [row[0] for row in labels]
    elif shape is not None and len(shape) != 1:
        raise UserError(f"labels is an array of shape {tuple(shape)}; give one label per text (multi-label: "
                        "a list or set of labels per text)")
    try:
        return list(labels)
    except TypeError:
        raise UserError(f"labels must be a list of labels, one per text, got {type(labels).__name__}") from None


def _class_array(classes: Sequence[Hashable]) -> np.ndarray:
    """``classes_`` as scikit-learn's classifiers give it: a NumPy array of NumPy's own dtype when the labels
    share one scalar type (scikit-learn's scorers read it so), else an object array holding the values."""
    types = {type(label) for label in classes}
    if len(types) == 1 and issubclass(types.pop(), str | int | float | bool | np.generic):
        return np.asarray(classes)
    array = np.empty(len(classes), dtype=object)
    for i, label in enumerate(classes):  # one by one: a tuple label must not become a row
        array[i] = label
    return array


def _fields(texts: Sequence[Any], pairs: bool, names: tuple[str, ...] = (TEXT_FIELD, PAIR_FIELD)) -> list[dict[str, str]]:
    if pairs:
        return [{names[0]: first, names[1]: second} for first, second in texts]
    return [{names[0]: text} for text in texts]


def _label_name(label: object, where: str) -> str:
    # None, NaN, and pandas' NA and NaT (whose comparisons give NA, not a bool).
    if label is None or (isinstance(label, float) and label != label) or type(label).__name__ in ("NAType", "NaTType"):
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
