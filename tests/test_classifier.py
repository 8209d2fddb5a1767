"""``infoprompt.Classifier``: fit / predict / predict_proba / save / load on in-memory data, for every kind."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from infoprompt import Classifier
from infoprompt.errors import UserError

TEXTS = ["a great movie", "this film was brilliant", "lovely story and good actor", "funny and great",
         "a terrible movie", "this film was awful", "boring dull plot", "bad scene and bad story"] * 2
INTS = [1, 1, 1, 1, 0, 0, 0, 0] * 2
# One method per kind (the prompt kind twice: generated and static prompts), on the tiny BERT.
METHODS = {
    "linear-probe": {},
    "infoprompt-plus": {"epochs": 2},
    "warp": {"epochs": 1},
    "peft-prompt-tuning": {"epochs": 1},
    "setfit": {"max_steps": 2},
    "infoprompt-contrastive": {"epochs": 2},
    "lora-ce": {"epochs": 1},
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_fit_predict_save_load_for_every_kind(method, bert_backbone, tmp_path):
    if method == "setfit":
        pytest.importorskip("setfit")
    clf = Classifier(method=method, backbone=bert_backbone, max_length=32, **METHODS[method])
    clf.fit(TEXTS, INTS)
    assert clf.classes_.tolist() == [0, 1] and clf.classes_.dtype.kind == "i"  # scikit-learn's form
    probabilities = clf.predict_proba(TEXTS[:5])
    assert probabilities.shape == (5, 2) and np.allclose(probabilities.sum(1), 1.0)
    predicted = clf.predict(TEXTS[:5])
    assert all(type(label) is int for label in predicted)
    assert predicted == [clf.classes_[i] for i in probabilities.argmax(1)]

    clf.save(tmp_path / "clf")
    loaded = Classifier.load(tmp_path / "clf", backbone=bert_backbone)
    assert loaded.classes_.tolist() == [0, 1] and loaded.method == method
    assert np.allclose(loaded.predict_proba(TEXTS[:5]), probabilities, atol=1e-6)


def test_labels_round_trip_exactly_in_a_fresh_process(bert_backbone, tiny_model_dirs, tmp_path):
    labels = ["très bien ☺" if y else "not good at all" for y in INTS]
    clf = Classifier(method="linear-probe", backbone=bert_backbone, max_length=32).fit(TEXTS, labels)
    assert clf.classes_.tolist() == ["not good at all", "très bien ☺"]
    clf.save(tmp_path / "clf")
    here = clf.predict(["a great movie", "boring dull plot"])
    script = ("import json, sys\nfrom infoprompt import Classifier\n"
              "clf = Classifier.load(sys.argv[1])\n"
              "print(json.dumps([clf.classes_.tolist(), clf.predict(['a great movie', 'boring dull plot']),"
              " clf.predict_proba(['a great movie']).sum(1).tolist()]))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "clf")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    classes, predicted, sums = json.loads(done.stdout)
    assert classes == clf.classes_.tolist() and predicted == here and sums == pytest.approx([1.0])


def test_sentence_pairs_and_mixed_label_types(bert_backbone):
    pairs = [(text, "and so it was") for text in TEXTS]
    labels = [("yes" if y else 2.5) for y in INTS]
    clf = Classifier(method="linear-probe", backbone=bert_backbone, max_length=32).fit(pairs, labels)
    assert sorted(map(str, clf.classes_)) == ["2.5", "yes"]
    assert set(clf.predict(pairs[:4])) <= {"yes", 2.5}
    with pytest.raises(UserError, match="reads sentence pairs per example, got single texts"):
        clf.predict(TEXTS[:2])


@pytest.mark.parametrize("build,message", [
    (lambda b: Classifier(backbone=b, epocs=3), "unknown Classifier option(s) epocs"),
    (lambda b: Classifier(method="wrap", backbone=b), "unknown method 'wrap'"),
    (lambda b: Classifier("infoprompt-plus", backbone=b, epochs=0), "epochs must be"),
    (lambda b: Classifier(method="linear-probe", backbone=b).fit(TEXTS, [1] * len(TEXTS)), "at least 2"),
    (lambda b: Classifier(method="linear-probe", backbone=b).fit(TEXTS, ["1"] + INTS[1:]), "same string form '1'"),
    (lambda b: Classifier(method="linear-probe", backbone=b).fit(TEXTS, [None] + INTS[1:]), "labels[0]: label is missing"),
    (lambda b: Classifier(method="linear-probe", backbone=b).fit(TEXTS[:3], INTS), "3 texts but 16 labels"),
    (lambda b: Classifier(method="linear-probe", backbone=b).fit(["ok", " "] * 8, INTS), "texts[1]: empty text"),
    (lambda b: Classifier(backbone=b).predict(TEXTS), "not fitted yet"),
])
def test_mistakes_are_one_line_errors(build, message, bert_backbone):
    with pytest.raises(UserError) as error:
        build(bert_backbone)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("method,options", [("linear-probe", {}), ("infoprompt-plus", {"epochs": 2})])
def test_multi_label_fit_predict_save_load(method, options, bert_backbone, tmp_path):
    tags = [{"good"} if y else {"bad", 7} for y in INTS]
    tags[0] = set()  # no label applies
    clf = Classifier(method=method, backbone=bert_backbone, max_length=32, **options).fit(TEXTS, tags)
    assert clf.classes_.tolist() == [7, "bad", "good"]  # in the order of their string forms
    assert 0 < clf.model_.config.threshold < 1
    probabilities = clf.predict_proba(TEXTS[:6])
    assert probabilities.shape == (6, 3) and ((probabilities >= 0) & (probabilities <= 1)).all()
    predicted = clf.predict(TEXTS[:6])
    assert all(isinstance(row, list) and set(row) <= {7, "bad", "good"} for row in predicted)
    clf.save(tmp_path / "clf")
    loaded = Classifier.load(tmp_path / "clf", backbone=bert_backbone)
    assert loaded.classes_.tolist() == [7, "bad", "good"] and loaded.predict(TEXTS[:6]) == predicted
