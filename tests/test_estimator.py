"""``infoprompt.Classifier`` as a scikit-learn estimator: the parameter protocol (get_params / set_params /
clone / repr), score, cross-validation, Pipeline and GridSearchCV, DataFrame inputs, NotFittedError,
ValueError errors, ``save(overwrite=)``, and the scikit-learn estimator checks that apply to text input.

All on the tiny random BERT with the linear probe, the cheapest method, so that each test takes seconds."""

from __future__ import annotations

import inspect
import sys
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone, is_classifier
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, cross_val_predict, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils import estimator_checks
from sklearn.utils.validation import check_is_fitted

from infoprompt import Classifier
from infoprompt.errors import UserError
from infoprompt.io_utils import ADAPTER_CONFIG_NAME
from infoprompt.recommended import RECOMMENDED_METHOD

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["a great movie", "this film was brilliant", "lovely story and good actor", "funny and great",
         "a terrible movie", "this film was awful", "boring dull plot", "bad scene and bad story"] * 2
INTS = [1, 1, 1, 1, 0, 0, 0, 0] * 2
PAIRS = [(text, "and so it was") for text in TEXTS]


def probe(backbone, **options) -> Classifier:
    return Classifier("linear-probe", backbone=backbone, max_length=32, **options)


@pytest.fixture(scope="module")
def fitted(bert_backbone) -> Classifier:
    return probe(bert_backbone).fit(TEXTS, INTS)


# -- parameters -------------------------------------------------------------------------------------------------
def test_a_scikit_learn_classifier_whose_default_method_is_the_recommended_one():
    assert inspect.signature(Classifier).parameters["method"].default == RECOMMENDED_METHOD
    assert Classifier().get_params()["method"] == RECOMMENDED_METHOD
    assert is_classifier(Classifier()) and isinstance(Classifier(), BaseEstimator)
    estimator_checks.check_mixin_order("Classifier", Classifier())  # ClassifierMixin before BaseEstimator


def test_get_params_gives_the_named_parameters_and_every_option(bert_backbone):
    clf = Classifier("infoprompt-plus", backbone=bert_backbone, seed=3, epochs=2, max_length=32)
    assert clf.get_params() == {"method": "infoprompt-plus", "backbone": bert_backbone, "seed": 3, "threads": None,
                                "epochs": 2, "max_length": 32}
    assert clf.get_params(deep=False) == clf.get_params()
    assert clf.epochs == 2 and clf.max_length == 32  # each parameter is an attribute, as scikit-learn reads them
    # Nothing else is set by the constructor: its attributes are exactly the parameters.
    assert set(vars(clf)) == set(clf.get_params())


def test_clone_builds_an_equal_unfitted_estimator_that_shares_the_backbone(fitted, bert_backbone):
    twin = clone(fitted)
    assert twin is not fitted and twin.get_params() == fitted.get_params()
    assert twin.backbone is bert_backbone  # the frozen encoder is shared, not deep-copied per clone
    with pytest.raises(NotFittedError):
        check_is_fitted(twin)
    check_is_fitted(fitted)  # the original stays fitted
    assert clone(twin).get_params() == fitted.get_params()


def test_set_params_checks_like_the_constructor_and_changes_nothing_on_error(bert_backbone):
    clf = probe(bert_backbone)
    assert clf.set_params(max_length=16, seed=4) is clf
    assert clf.get_params()["max_length"] == 16 and clf.seed == 4
    for bad, message in [({"epocs": 3}, "unknown Classifier option(s) epocs"),
                         ({"method": "setfit", "max_length": 8, "beta": 0.5}, "has no option beta"),
                         ({"seed": -1}, "seed must be an integer >= 0"),
                         ({"threads": 0}, "threads must be a positive integer"),
                         ({"backbone__name": "x"}, "no nested parameters: backbone__name")]:
        before = clf.get_params()
        with pytest.raises(ValueError) as error:
            clf.set_params(**bad)
        assert isinstance(error.value, UserError) and message in str(error.value) and "\n" not in str(error.value)
        assert clf.get_params() == before
    # An option the constructor was not given may be set later, checked against the method.
    clf.set_params(method="infoprompt-plus", epochs=3)
    assert clf.get_params()["epochs"] == 3 and clf.method == "infoprompt-plus"


def test_repr_shows_the_method_the_backbone_and_what_differs_from_the_defaults(bert_backbone):
    assert repr(Classifier(max_steps=3)) == "Classifier(method='top-lora-siamese', backbone='minilm', max_steps=3)"
    assert repr(Classifier("linear-probe", seed=2, threads=1)) == \
        "Classifier(method='linear-probe', backbone='minilm', seed=2, threads=1)"
    # A loaded backbone shows by its name, in one line, not as its encoder's modules.
    assert repr(probe(bert_backbone)) == f"Classifier(method='linear-probe', backbone=Backbone({bert_backbone.name!r}), " \
                                         "max_length=32)"


def test_fit_returns_self_and_leaves_the_parameters_as_given(tiny_model_dirs):
    clf = probe(str(tiny_model_dirs["bert"]))
    before = clf.get_params()
    assert clf.fit(TEXTS, INTS) is clf
    assert clf.get_params() == before and isinstance(clf.backbone, str)  # the loaded backbone is the model's
    encoder = clf.model_.backbone
    assert clf.fit(TEXTS, INTS).model_.backbone is encoder  # a refit does not load it again


def test_an_attribute_assigned_directly_is_checked_at_fit(bert_backbone):
    clf = probe(bert_backbone)
    clf.epocs = 3
    with pytest.raises(UserError, match=r"unknown Classifier option\(s\) epocs"):
        clf.fit(TEXTS, INTS)


# -- fitted behaviour -----------------------------------------------------------------------------------------
def test_classes_score_and_predictions(fitted):
    assert isinstance(fitted.classes_, np.ndarray) and fitted.classes_.tolist() == [0, 1]
    predicted = fitted.predict(TEXTS)
    assert fitted.score(TEXTS, INTS) == pytest.approx(np.mean([p == y for p, y in zip(predicted, INTS, strict=True)]))
    weights = np.arange(len(TEXTS), dtype=float)
    expected = np.average([p == y for p, y in zip(predicted, INTS, strict=True)], weights=weights)
    assert fitted.score(TEXTS, INTS, sample_weight=weights) == pytest.approx(expected)


def test_multi_label_score_is_subset_accuracy(bert_backbone):
    tags = [{"good"} if y else {"bad", "dull"} for y in INTS]
    clf = probe(bert_backbone).fit(TEXTS, tags)
    predicted = clf.predict(TEXTS)
    expected = np.mean([set(row) == truth for row, truth in zip(predicted, tags, strict=True)])
    assert clf.score(TEXTS, tags) == pytest.approx(expected)


def test_cross_validation_works(bert_backbone):
    clf = probe(bert_backbone)
    scores = cross_val_score(clf, TEXTS, INTS, cv=2, error_score="raise")
    assert scores.shape == (2,) and np.isfinite(scores).all()
    # Scorers that read predict_proba find the positive class in classes_ (an array, as scikit-learn's are).
    auc = cross_val_score(clf, TEXTS, INTS, cv=2, scoring="roc_auc", error_score="raise")
    assert np.isfinite(auc).all()
    proba = cross_val_predict(clf, TEXTS, INTS, cv=2, method="predict_proba")
    assert proba.shape == (len(TEXTS), 2) and np.allclose(proba.sum(1), 1.0)
    assert not hasattr(clf, "model_")  # cross-validation fits clones, never the estimator given


def test_pipeline_and_grid_search(bert_backbone):
    pipe = Pipeline([("lower", FunctionTransformer(lambda texts: [text.lower() for text in texts])),
                     ("clf", probe(bert_backbone))])
    pipe.fit([text.upper() for text in TEXTS], INTS)
    assert pipe.predict(TEXTS[:3]) == pipe.named_steps["clf"].predict(TEXTS[:3])
    assert 0.0 <= pipe.score(TEXTS, INTS) <= 1.0
    assert pipe.get_params()["clf__max_length"] == 32
    pipe.set_params(clf__max_length=16, clf__seed=2)
    assert pipe.named_steps["clf"].max_length == 16 and pipe.named_steps["clf"].seed == 2
    with pytest.raises(ValueError, match="epocs"):
        pipe.set_params(clf__epocs=1)

    search = GridSearchCV(probe(bert_backbone), {"max_length": [16, 32]}, cv=2, error_score="raise").fit(TEXTS, INTS)
    assert search.best_params_["max_length"] in (16, 32)
    assert search.best_estimator_.classes_.tolist() == [0, 1]


def test_the_probe_takes_head_c_as_its_regressions_c(bert_backbone, tmp_path):
    """linear-probe's logistic regression takes C like the other logistic heads (#55): a stronger penalty gives a
    smaller head, GridSearchCV searches over it, and the saved adapter records it."""
    strong, weak = probe(bert_backbone, head_c=0.001).fit(TEXTS, INTS), probe(bert_backbone, head_c=1000.0).fit(TEXTS, INTS)
    norms = [float(clf.model_.head.weight.norm()) for clf in (strong, weak)]
    assert norms[0] < norms[1] / 10
    search = GridSearchCV(probe(bert_backbone), {"head_c": [0.01, 100.0]}, cv=2, error_score="raise").fit(TEXTS, INTS)
    assert search.best_params_["head_c"] in (0.01, 100.0) and search.best_estimator_.model_.config.options.head_c in (0.01, 100.0)
    from infoprompt.serving.adapters import feature_group

    # C changes the head, not the features the server shares.
    assert feature_group(strong.model_, "linear-probe") == feature_group(weak.model_, "linear-probe") is not None
    strong.save(tmp_path / "strong")
    assert Classifier.load(tmp_path / "strong", backbone=bert_backbone).model_.config.options.head_c == 0.001
    with pytest.raises(ValueError, match="head_c"):
        probe(bert_backbone, head_c=0).fit(TEXTS, INTS)


# -- inputs -----------------------------------------------------------------------------------------------------
def test_texts_as_arrays_series_and_dataframes(fitted, bert_backbone):
    pd = pytest.importorskip("pandas")
    expected = fitted.predict(TEXTS)
    assert fitted.predict(np.array(TEXTS)) == expected
    assert fitted.predict(np.array(TEXTS, dtype=object).reshape(-1, 1)) == expected
    assert fitted.predict(pd.Series(TEXTS, index=range(100, 100 + len(TEXTS)))) == expected
    assert fitted.predict(pd.DataFrame({"review": TEXTS})) == expected  # one column, whatever its name
    # A frame with the label column still in it: "text" is read, the rest ignored.
    frame = pd.DataFrame({"label": INTS, "text": TEXTS})
    assert fitted.predict(frame) == expected
    assert probe(bert_backbone).fit(frame, frame["label"]).predict(TEXTS) == expected

    pair_fit = probe(bert_backbone).fit(PAIRS, INTS)
    expected_pairs = pair_fit.predict(PAIRS)
    first, second = zip(*PAIRS, strict=True)
    for names in [("text", "text_pair"), ("sentence1", "sentence2"), ("question1", "question2")]:
        pairs_frame = pd.DataFrame({"idx": range(len(PAIRS)), names[1]: second, names[0]: first})
        assert pair_fit.predict(pairs_frame) == expected_pairs, names
    assert pair_fit.predict(np.array(PAIRS)) == expected_pairs
    pairs_frame = pd.DataFrame({"sentence1": first, "sentence2": second, "label": INTS})
    assert probe(bert_backbone).fit(pairs_frame, pairs_frame[["label"]]).predict(PAIRS) == expected_pairs


@pytest.mark.parametrize("make_texts,message", [
    (lambda pd: pd.DataFrame({"q": TEXTS, "a": TEXTS}),
     "texts is a DataFrame with columns 'q', 'a': name the text column 'text' (and a pair's second text "
     "'text_pair')"),
    (lambda pd: pd.DataFrame({"text": TEXTS, "sentence1": TEXTS, "sentence2": TEXTS}),
     "fit more than one layout (sentence1 + sentence2; text)"),
    (lambda pd: pd.DataFrame({"sentence1": TEXTS, "sentence2": [None] + TEXTS[1:]}, index=range(7, 7 + 16)),
     "texts row 0 (index 7): field sentence2 must be text, got float nan"),
    (lambda pd: pd.DataFrame({"text": TEXTS[:15] + [" "]}), "texts row 15: empty text field(s) text"),
    (lambda pd: np.array(TEXTS * 3).reshape(16, 3), "texts is an array of shape (16, 3)"),
    (lambda pd: [[TEXTS]], "texts[0]: expected a (text, text_pair) tuple of strings"),
    (lambda pd: "a great movie", "not one string"),
])
def test_bad_texts_are_one_line_value_errors(make_texts, message, bert_backbone):
    pd = pytest.importorskip("pandas")
    with pytest.raises(ValueError) as error:
        probe(bert_backbone).fit(make_texts(pd), INTS)
    assert isinstance(error.value, UserError) and message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("make_labels,message", [
    (lambda pd: pd.DataFrame({"a": INTS, "b": INTS}), "labels is a DataFrame with 2 columns"),
    (lambda pd: np.eye(16, 2), "labels is an array of shape (16, 2)"),
    (lambda pd: pd.Series([pd.NA] + INTS[1:], dtype="Int64"), "labels[0]: label is missing"),
])
def test_bad_labels_are_one_line_value_errors(make_labels, message, bert_backbone):
    pd = pytest.importorskip("pandas")
    with pytest.raises(ValueError) as error:
        probe(bert_backbone).fit(TEXTS, make_labels(pd))
    assert isinstance(error.value, UserError) and message in str(error.value) and "\n" not in str(error.value)


def test_sparse_features_are_refused_by_name(bert_backbone):
    sparse = pytest.importorskip("scipy.sparse")
    with pytest.raises(ValueError, match="sparse matrix, which is not supported"):
        probe(bert_backbone).fit(sparse.csr_array(np.eye(16)), INTS)


# -- not fitted -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("use", [
    lambda clf, tmp_path: clf.predict(TEXTS),
    lambda clf, tmp_path: clf.predict_proba(TEXTS),
    lambda clf, tmp_path: clf.score(TEXTS, INTS),
    lambda clf, tmp_path: clf.save(tmp_path / "clf"),
])
def test_an_unfitted_classifier_raises_not_fitted_error(use, bert_backbone, tmp_path):
    with pytest.raises(NotFittedError) as error:
        use(probe(bert_backbone), tmp_path)
    assert isinstance(error.value, UserError) and isinstance(error.value, ValueError)
    assert "not fitted yet" in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "clf").exists()


# -- save -------------------------------------------------------------------------------------------------------
def test_save_refuses_a_non_empty_directory_unless_told_to_overwrite(fitted, bert_backbone, tmp_path):
    target = tmp_path / "clf"
    target.mkdir()
    fitted.save(target)  # an empty directory is a place to save
    with pytest.raises(UserError, match="is not empty \\(pass overwrite=True to replace a saved adapter\\)"):
        fitted.save(target)
    (target / "stale.txt").write_text("from an older save")
    other = probe(bert_backbone).fit(TEXTS, ["yes" if y else "no" for y in INTS])
    other.save(target, overwrite=True)
    assert not (target / "stale.txt").exists()  # replaced whole, not merged
    loaded = Classifier.load(target, backbone=bert_backbone)
    assert loaded.classes_.tolist() == ["no", "yes"] and loaded.predict(TEXTS[:4]) == other.predict(TEXTS[:4])
    twin = clone(loaded)  # a loaded one is an estimator too
    assert twin.get_params() == loaded.get_params() and not hasattr(twin, "model_")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["clf"]  # no scratch folder left behind


def test_overwrite_replaces_only_a_saved_adapter(fitted, tmp_path):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "thesis.tex").write_text("keep me")
    with pytest.raises(UserError, match=f"replaces only a saved adapter \\(a directory holding {ADAPTER_CONFIG_NAME}\\)"):
        fitted.save(mine, overwrite=True)
    assert [path.name for path in mine.iterdir()] == ["thesis.tex"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is a file or a symbolic link"):
        fitted.save(tmp_path / "file", overwrite=True)


def test_a_failed_save_leaves_the_previous_one_whole(fitted, bert_backbone, tmp_path, monkeypatch):
    target = tmp_path / "clf"
    fitted.save(target)
    before = sorted(path.name for path in target.iterdir())

    def broken(directory, keep_training_state=False):
        (directory / "half-written").write_text("x")
        raise OSError("disk full")

    other = probe(bert_backbone).fit(TEXTS, INTS)
    monkeypatch.setattr(other.model_, "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        other.save(target, overwrite=True)
    assert sorted(path.name for path in target.iterdir()) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["clf"]


# -- the recommended method's extra -----------------------------------------------------------------------------
def test_a_missing_setfit_extra_names_the_method_and_the_pip_extra(bert_backbone, monkeypatch):
    monkeypatch.setitem(sys.modules, "setfit", None)  # import setfit now fails, as without the extra
    with pytest.raises(UserError) as error:
        Classifier(backbone=bert_backbone).fit(TEXTS, INTS)
    assert str(error.value) == (f"method {RECOMMENDED_METHOD}: the setfit extra is missing (setfit cannot be "
                                "imported): pip install 'infoprompt[setfit]'")


# -- scikit-learn's own estimator checks, those that do not need numeric X -------------------------------------
SKLEARN_CHECKS = ["check_get_params_invariance", "check_set_params", "check_no_attributes_set_in_init",
                  "check_parameters_default_constructible", "check_estimator_repr", "check_estimator_cloneable",
                  "check_valid_tag_types", "check_estimators_unfitted",
                  "check_estimator_sparse_tag"]


@pytest.mark.parametrize("name", SKLEARN_CHECKS)
def test_scikit_learn_estimator_checks_that_apply_to_text(name):
    check = getattr(estimator_checks, name, None)
    if check is None:
        pytest.skip(f"this scikit-learn has no {name}")
    with warnings.catch_warnings():
        # check_set_params recommends checking parameters at fit; this class checks them at once (see its doc).
        warnings.filterwarnings("ignore", message=".*delay parameter validation until fit")
        check("Classifier", Classifier())
