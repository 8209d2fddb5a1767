"""SetFit peer method: trained by the real setfit library, saved without pickle, reloaded to identical predictions."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")

from setfit import SetFitModel  # noqa: E402

from infoprompt.backbones import load_backbone  # noqa: E402
from infoprompt.cli import main  # noqa: E402
from infoprompt.errors import UserError  # noqa: E402
from infoprompt.kinds import kind_of, load_adapter  # noqa: E402
from infoprompt.kinds.common import plain_template  # noqa: E402
from infoprompt.kinds.config import ClassifierConfig  # noqa: E402
from infoprompt.kinds.setfit import SetFitClassifier, SetFitSettings, fit_setfit, render_text  # noqa: E402
from infoprompt.pipeline import RunSpec, build_classifier, read_split, run_training  # noqa: E402
from infoprompt.tasks import get_task  # noqa: E402
from infoprompt.templates import Template  # noqa: E402
from infoprompt.training import TrainConfig, encode_examples, predict_encoded  # noqa: E402

SAFE_SUFFIXES = (".json", ".jsonl", ".safetensors", ".md")  # .md: the model card


def spec_for(toy_task, backbone_dir, seed=1, **training):
    task, data_dir = toy_task
    config = TrainConfig(**{"seed": seed, "progress": False, **training})
    return RunSpec(task=task, method="setfit", shots=8, seed=seed, backbone=str(backbone_dir), data_dir=str(data_dir),
                   classifier={"max_length": 32}, training=config)


def dev_examples(toy_task):
    task, data_dir = toy_task
    return read_split(get_task(task), "dev", str(data_dir), "files")


def predictions(model, examples):
    return predict_encoded(model, encode_examples(model, examples))


def test_setfit_trains_saves_without_pickle_and_reloads_identically(toy_task, tiny_bert_dir, tmp_path):
    backbone = load_backbone(str(tiny_bert_dir))
    snapshot = {name: t.clone() for name, t in backbone.model.state_dict().items()}
    out = tmp_path / "run"
    record = run_training(spec_for(toy_task, tiny_bert_dir), out, backbone=backbone)
    assert record["method"] == "setfit" and record["n_train"] == 8
    # 8 examples x 20 iterations x 2 polarities = 320 pairs, batch 16: SetFit's defaults, 20 steps.
    assert record["steps"] == 20 and record["lr"] == 2e-5 and set(record["metrics"]) == {"accuracy", "f1"}
    for name, tensor in backbone.model.state_dict().items():
        assert torch.equal(tensor, snapshot[name]), name  # the body is a fine-tuned copy
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    # setfit's and sentence-transformers' own layout (SetFitModel.from_pretrained reads it), and ours.
    native = ["1_Pooling/config.json", "2_Normalize/config.json", "config.json", "config_sentence_transformers.json",
              "config_setfit.json", "model.safetensors", "modules.json", "sentence_bert_config.json",
              "tokenizer.json", "tokenizer_config.json"]
    ours = ["README.md", "adapter_model.safetensors", "infoprompt_adapter.json", "metrics.json", "setfit_config.json",
            "setfit_head.safetensors", "train_log.jsonl"]
    assert files == sorted(native + ours)
    assert all(name.endswith(SAFE_SUFFIXES) for name in files)  # no joblib / pickle anywhere
    saved = json.loads((out / "setfit_config.json").read_text())
    assert saved["settings"] == SetFitSettings().to_json() and saved["fitted"] is True
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert log[0]["type"] == "setfit" and log[0]["num_iterations"] == 20
    assert [r["step"] for r in log if r["type"] == "step"] == list(range(1, 21))

    loaded = load_adapter(out, backbone=backbone)
    assert isinstance(loaded, SetFitClassifier) and isinstance(loaded.setfit, SetFitModel)
    examples = dev_examples(toy_task)
    probabilities = predictions(loaded, examples)
    from infoprompt.training import evaluate

    assert evaluate(loaded, examples) == record["metrics"]
    # The library's own model, rebuilt from safetensors, predicts the same from text.
    theirs = loaded.setfit.predict_proba(loaded.texts(examples))
    assert torch.allclose(torch.as_tensor(theirs, dtype=torch.float32), probabilities, atol=1e-5)
    # What training changed is in the adapter: an untrained model predicts differently.
    fresh = build_classifier(spec_for(toy_task, tiny_bert_dir), backbone)
    assert not torch.allclose(predictions(fresh, examples), probabilities)
    fresh_body = fresh.body[0].auto_model.state_dict()
    assert any(not torch.equal(t, fresh_body[n]) for n, t in loaded.body[0].auto_model.state_dict().items())


def test_same_seed_same_predictions(toy_task, tiny_bert_dir):
    backbone = load_backbone(str(tiny_bert_dir))
    examples = dev_examples(toy_task)
    runs = []
    for _ in range(2):
        spec = spec_for(toy_task, tiny_bert_dir, seed=3)
        model = build_classifier(spec, backbone)
        sample = read_split(get_task(spec.task), "train", spec.data_dir, "files")[:8]
        result = kind_of("setfit").trainer()(model, sample, examples, spec.training)
        runs.append((result.last_losses, predictions(model, examples)))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])


def test_lr_and_max_steps_override_setfit_settings(toy_task, tiny_bert_dir):
    backbone = load_backbone(str(tiny_bert_dir))
    record = run_training(spec_for(toy_task, tiny_bert_dir, max_steps=3, lr=1e-4), backbone=backbone)
    assert record["steps"] == 3 and record["lr"] == 1e-4



def test_callbacks_see_every_body_step(toy_task, tiny_bert_dir):
    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        def __init__(self):
            self.begun, self.ended = 0, 0

        def on_step_begin(self, args, state, control, **kwargs):
            self.begun += 1

        def on_step_end(self, args, state, control, **kwargs):
            self.ended += 1

    spec = spec_for(toy_task, tiny_bert_dir, max_steps=2)
    model = build_classifier(spec, load_backbone(str(tiny_bert_dir)))
    task, data_dir = toy_task
    counter = Steps()
    result = fit_setfit(model, read_split(get_task(task), "train", str(data_dir), "files")[:8], None, spec.training,
                        callbacks=[counter])
    assert result.steps == 2 and (counter.begun, counter.ended) == (2, 2)

def test_record_schema_matches_the_other_kinds(toy_task, tiny_bert_dir):
    backbone = load_backbone(str(tiny_bert_dir))
    task, data_dir = toy_task
    probe = RunSpec(task=task, method="linear-probe", shots=8, backbone=str(tiny_bert_dir), data_dir=str(data_dir),
                    classifier={"max_length": 32}, training=TrainConfig(progress=False))
    assert set(run_training(probe, backbone=backbone)) == set(run_training(
        spec_for(toy_task, tiny_bert_dir, max_steps=1), backbone=backbone))


@pytest.mark.parametrize("arch", ["roberta", "mpnet"])
def test_other_architectures_reload_and_agree_with_setfit(arch, toy_task, tiny_model_dirs, tmp_path):
    backbone = load_backbone(str(tiny_model_dirs[arch]))
    out = tmp_path / arch
    run_training(spec_for(toy_task, tiny_model_dirs[arch], max_steps=2), out, backbone=backbone)
    loaded = load_adapter(out, backbone=backbone)
    examples = dev_examples(toy_task)
    ours = predictions(loaded, examples)
    theirs = torch.as_tensor(loaded.setfit.predict_proba(loaded.texts(examples)), dtype=torch.float32)
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_pairs_enter_setfit_with_the_tokenizers_separator(tiny_bert_dir):
    backbone = load_backbone(str(tiny_bert_dir))
    model = SetFitClassifier(backbone, ClassifierConfig.create(task="mrpc", method="setfit", backbone="x", max_length=32))
    [pair] = model.template_encoder.encode_many([{"sentence1": "great movie", "sentence2": "bad film"}])
    ids = pair.plain.input_ids
    sep = backbone.tokenizer.sep_token_id
    first = backbone.tokenizer("great movie", add_special_tokens=False)["input_ids"]
    second = backbone.tokenizer("bad film", add_special_tokens=False)["input_ids"]
    start = ids.index(first[0])
    assert ids[start : start + len(first) + 1 + len(second)] == [*first, sep, *second]


def test_texts_for_single_pair_and_span_tasks():
    sep = "[SEP]"
    sst2 = Template.parse(plain_template(get_task("sst2")))
    assert render_text(sst2, {"sentence": " a fine film "}, sep) == "a fine film"
    mrpc = Template.parse(plain_template(get_task("mrpc")))
    assert render_text(mrpc, {"sentence1": "he ran", "sentence2": "she sat"}, sep) == "he ran [SEP] she sat"
    semeval = get_task("semeval")
    fields = dict.fromkeys(semeval.fields, "")
    fields.update({"first": "@ dog @", "between": "chased", "second": "# cat #", "head": "dog", "tail": "cat"})
    text = render_text(Template.parse(plain_template(semeval)), fields, sep)
    assert text == "@ dog @ chased # cat # dog [SEP] cat"


def test_long_inputs_keep_entity_mentions_or_are_refused(toy_task, tiny_bert_dir):
    backbone = load_backbone(str(tiny_bert_dir))
    task, _ = toy_task
    template = "<cls> {sentence:cut-end} <sep>"
    model = SetFitClassifier(backbone, ClassifierConfig.create(task=task, method="setfit", backbone="x", max_length=8,
                                                        template=template))
    text, truncated = model.template_encoder.text({"sentence": "the movie was very very very good and funny"}, "row 1")
    assert truncated and len(model.template_encoder.token_ids([text])[0]) <= 8
    strict = SetFitClassifier(backbone, ClassifierConfig.create(task=task, method="setfit", backbone="x", max_length=8,
                                                         template=template, truncate=False))
    with pytest.raises(UserError, match="row 1: input has"):
        strict.template_encoder.text({"sentence": "the movie was very very very good and funny"}, "row 1")


@pytest.mark.slow  # the packaged MiniLM's tokenizer
def test_counting_the_tokens_of_a_long_text_logs_no_length_warning(caplog):
    from transformers import AutoTokenizer

    from infoprompt.backbones import minilm_path
    from infoprompt.kinds.setfit import SetFitTextEncoder

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path()))  # the packaged MiniLM's, which does warn
    encoder = SetFitTextEncoder(None, tokenizer, Template.parse("<cls> {sentence:cut-end} <sep>"), 16, True)
    caplog.clear()
    _, truncated = encoder.text({"sentence": "a very long review " * 200}, "row 1")
    assert truncated and "Token indices sequence length" not in caplog.text


def test_missing_extra_is_a_one_line_error(monkeypatch, capsys, tmp_path, data_dir):
    monkeypatch.setitem(sys.modules, "setfit", None)  # import setfit now raises ImportError
    with pytest.raises(UserError, match=r"pip install 'infoprompt\[setfit\]'"):
        kind_of("setfit").trainer()
    out = tmp_path / "run"
    assert main(["train", "--task", "sst2", "--method", "setfit", "--data-dir", str(data_dir), "--out", str(out),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'infoprompt[setfit]'" in err and err.count("\n") == 1 and not out.exists()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infoprompt.cli", *args], capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_setfit_on_minilm_through_the_cli(tmp_path, data_dir):
    out = tmp_path / "run"
    trained = run_cli("train", "--task", "sst2", "--method", "setfit", "--shots", "16", "--seed", "1",
                      "--backbone", "minilm", "--data-dir", str(data_dir), "--out", str(out), "--max-steps", "8",
                      "--quiet")
    assert trained.returncode == 0, trained.stderr
    record = json.loads((out / "metrics.json").read_text())
    assert record["method"] == "setfit" and record["n_train"] == 16 and record["steps"] == 8
    assert record["n_eval"] == 872 and 0.0 <= record["metrics"]["accuracy"] <= 1.0
    assert all(p.name.endswith(SAFE_SUFFIXES) for p in out.rglob("*") if p.is_file())

    evaluated = run_cli("eval", "--adapter", str(out), "--data-dir", str(data_dir), "--quiet")
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["metrics"] == record["metrics"]

    inputs = tmp_path / "in.jsonl"
    sentences = ["a gorgeous , witty film", "dull and lifeless"]
    inputs.write_text("".join(json.dumps({"sentence": s}) + "\n" for s in sentences))
    predicted = run_cli("predict", "--adapter", str(out), "--input", str(inputs))
    assert predicted.returncode == 0, predicted.stderr
    rows = [json.loads(line) for line in predicted.stdout.splitlines()]
    again = run_cli("predict", "--adapter", str(out), "--input", str(inputs))
    assert [json.loads(line) for line in again.stdout.splitlines()] == rows
    # The saved model read back by setfit's own SetFitModel agrees with the CLI.
    model = load_adapter(out)
    theirs = model.setfit.predict_proba(sentences)
    for row, probabilities in zip(rows, theirs, strict=True):
        assert row["probabilities"]["positive"] == pytest.approx(float(probabilities[1]), abs=1e-5)


def test_select_head_c_prefers_the_c_with_the_lowest_held_out_log_loss():
    from infoprompt.kinds.setfit import HEAD_C_GRID, select_head_c

    rng = np.random.default_rng(0)
    # 19 well-separated classes of 3 rows on the unit sphere (SetFit's embeddings), one class with a single row:
    # C = 1 shrinks the head towards the class prior there, a larger C separates the classes.
    centres = rng.normal(size=(19, 32))
    labels = np.concatenate([np.repeat(np.arange(18), 3), [18]])
    features = centres[labels] + 0.05 * rng.normal(size=(len(labels), 32))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    chosen, losses = select_head_c(features, labels, HEAD_C_GRID, 100, seed=1)
    assert set(losses) == {f"{c:g}" for c in HEAD_C_GRID} and chosen > 1.0
    assert losses[f"{chosen:g}"] == min(losses.values()) < losses["1"]
    assert select_head_c(features, labels, HEAD_C_GRID, 100, seed=1) == (chosen, losses)  # deterministic
    # Pure noise: no C predicts held-out rows, so the most regularised fit (the class prior) wins.
    noise = rng.normal(size=(40, 32))
    assert select_head_c(noise, np.arange(40) % 2, HEAD_C_GRID, 100, seed=1)[0] == min(HEAD_C_GRID)


def test_head_c_options_reach_the_fit_the_record_and_the_saved_adapter(toy_task, tiny_bert_dir, tmp_path):
    from infoprompt.kinds.setfit import HEAD_C_GRID

    backbone = load_backbone(str(tiny_bert_dir))
    spec = spec_for(toy_task, tiny_bert_dir, max_steps=2)
    picked = dataclasses.replace(spec, classifier={"max_length": 32, "select_head_c": True})
    record = run_training(picked, tmp_path / "picked", backbone=backbone)
    chosen = record["selection"]["head_c"]
    assert chosen in HEAD_C_GRID and set(record["selection"]["head_c_log_loss"]) == {f"{c:g}" for c in HEAD_C_GRID}
    saved = json.loads((tmp_path / "picked" / "setfit_config.json").read_text())["settings"]
    assert saved["head_c"] == chosen and saved["head_c_choices"] == list(HEAD_C_GRID)
    loaded = load_adapter(tmp_path / "picked", backbone=backbone)
    assert loaded.config.options.select_head_c is True and loaded.settings.head_c == chosen
    assert chosen == loaded.setfit.model_head.C
    from infoprompt.training import evaluate

    assert evaluate(loaded, dev_examples(toy_task)) == record["metrics"]
    fixed = dataclasses.replace(spec, classifier={"max_length": 32, "head_c": 100.0})
    record = run_training(fixed, tmp_path / "fixed", backbone=backbone)
    assert record.get("selection") is None
    assert json.loads((tmp_path / "fixed" / "setfit_config.json").read_text())["settings"]["head_c"] == 100.0
    for bad, message in (({"head_c": 1.0, "select_head_c": True}, "give one of them"),
                         ({"head_c": 0.0}, "head_c must be"),):
        with pytest.raises(UserError, match=message):
            build_classifier(dataclasses.replace(spec, classifier={"max_length": 32, **bad}), backbone)
    with pytest.raises(UserError, match=r"\(kind [a-z-]+\) has no option head_c"):
        build_classifier(dataclasses.replace(spec, method="warp", classifier={"head_c": 10.0, "max_length": 32}), backbone)
