"""One splitter for every face: ``infoprompt train``, ``Classifier`` and a sweep's grid take or refuse a training
value alike for every kind, and a value that names one of the kind's own options (top-lora's epochs) sets it."""

from __future__ import annotations

import pytest

from infoprompt.classifier import Classifier, _settings
from infoprompt.cli import build_parser, classifier_overrides, training_config
from infoprompt.errors import UserError
from infoprompt.experiments.grid import cells_from_config
from infoprompt.kinds import KINDS

NAMES = sorted(KINDS)
# A value per training name the faces share, with its flag.
VALUES = {"epochs": 3, "batch_size": 4, "max_steps": 5, "lr": 0.01, "weight_decay": 0.1, "holdout_fraction": 0.3,
          "patience": 2, "eval_every_epochs": 0}


def method_of(kind: str) -> str:
    return KINDS[kind].methods[0].name


def through_cli(method: str, name: str, value: object) -> tuple[dict, dict]:
    args = build_parser().parse_args(["train", "--task", "sst2", "--out", "x", "--method", method,
                                      f"--{name.replace('_', '-')}", str(value)])
    training = training_config(args, 1)
    return classifier_overrides(args), {name: getattr(training, name)} if hasattr(training, name) else {}


def through_classifier(method: str, name: str, value: object) -> tuple[dict, dict]:
    settings = _settings(method, 1, None, {name: value})
    return settings.model_options, settings.train_options


def through_grid(method: str, name: str, value: object) -> tuple[dict, dict]:
    [cell] = cells_from_config({"tasks": ["sst2"], "methods": [method], "seeds": [1]}, "grid",
                               overrides={"training": {name: value}})
    spec = cell.run_spec()
    return spec.classifier, {name: getattr(spec.training, name)}


def outcome(face, method: str, name: str, value: object) -> str:
    """Where the value went: the kind's option, the training, or refused (naming the kind)."""
    try:
        options, training = face(method, name, value)
    except UserError as error:
        assert f"(kind {KINDS_OF[method]})" in str(error) and "\n" not in str(error)
        return "refused"
    if options.get(name) == value:
        return "option"
    assert training.get(name) == value, (face.__name__, method, name, options, training)
    return "training"


KINDS_OF = {method.name: kind.name for kind in KINDS.values() for method in kind.methods}


@pytest.mark.parametrize("kind", NAMES)
@pytest.mark.parametrize("name", sorted(VALUES))
def test_every_face_takes_or_refuses_a_training_value_alike(kind, name):
    method = method_of(kind)
    outcomes = {face.__name__: outcome(face, method, name, VALUES[name])
                for face in (through_cli, through_classifier, through_grid)}
    assert len(set(outcomes.values())) == 1, outcomes
    expected = ("option" if name in KINDS[kind].own_options()
                else "training" if KINDS[kind].reads(name) else "refused")
    assert set(outcomes.values()) == {expected}


def test_epochs_are_top_loras_own_and_setfit_refuses_them():
    for face in (through_cli, through_classifier, through_grid):
        assert outcome(face, "top-lora", "epochs", 3) == "option"
        assert outcome(face, "setfit", "epochs", 3) == "refused"
    assert Classifier("top-lora", epochs=3).get_params()["epochs"] == 3


def test_a_grid_value_some_methods_read_applies_to_those_and_one_none_read_is_a_warning(capsys):
    cells = cells_from_config({"tasks": ["sst2"], "methods": ["setfit", "top-lora"], "seeds": [1],
                               "training": {"epochs": 3}}, "grid")
    specs = {cell.method: cell.run_spec() for cell in cells}
    assert specs["top-lora"].classifier["epochs"] == 3 and "epochs" not in specs["setfit"].classifier
    assert capsys.readouterr().err == ""
    cells_from_config({"tasks": ["sst2"], "methods": ["setfit"], "seeds": [1], "training": {"epochs": 3}}, "grid")
    assert "training.epochs is read by none of the grid's methods (setfit)" in capsys.readouterr().err
    cells_from_config({"tasks": ["sst2"], "methods": ["setfit", "top-lora"], "seeds": [1], "training": {"epochs": 3}},
                      "grid", overrides={"methods": ["setfit"]})
    assert capsys.readouterr().err == ""  # meant for the grid's other method, which --methods left out
    with pytest.raises(UserError, match=r"method setfit \(kind setfit\) has no option --epochs"):
        cells_from_config({"tasks": ["sst2"], "methods": ["setfit", "linear-probe"], "seeds": [1]}, "grid",
                          overrides={"training": {"epochs": 3}})
