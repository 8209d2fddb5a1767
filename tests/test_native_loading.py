"""Saved adapters load in their own libraries: each is read in a fresh process by peft or setfit alone (no
infoprompt import) and must predict what ``infoprompt predict`` predicts, label names included."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from infoprompt.cli import main
from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.tasks import Example
from infoprompt.training import encode_examples, predict_encoded

FIXTURES = Path(__file__).parent / "fixtures" / "adapters"
TEXTS = ["a great film", "the plot was dull and boring", "quite funny , not bad", "she said it was terrible", "lovely",
         "not a good movie"]
TOLERANCE = 1e-5

# Each script prints {"labels": [...], "probabilities": [[...], ...]} for the texts given on its command line
# and checks that it ran without this library.
PEFT_SCRIPT = """
import json, sys
import torch
from peft import PeftConfig, PeftModel
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
adapter, texts = sys.argv[1], json.loads(sys.argv[2])
base_path = PeftConfig.from_pretrained(adapter).base_model_name_or_path
base = AutoModelForSequenceClassification.from_pretrained(base_path, config=AutoConfig.from_pretrained(adapter))
model = PeftModel.from_pretrained(base, adapter).eval()
tokenizer = AutoTokenizer.from_pretrained(base_path)
if tokenizer.num_special_tokens_to_add() == 0:  # the tests' tiny tokenizer: add [CLS]/[SEP] as BERT's does
    texts = [f"{tokenizer.cls_token} {text} {tokenizer.sep_token}" for text in texts]
tokens = tokenizer(texts, padding=True, return_tensors="pt")
with torch.no_grad():
    probabilities = model(**tokens).logits.softmax(-1)
labels = [model.config.id2label[int(i)] for i in probabilities.argmax(-1)]
assert not any(name.startswith("infoprompt") for name in sys.modules)
print(json.dumps({"labels": labels, "probabilities": probabilities.tolist()}))
"""

SETFIT_SCRIPT = """
import json, sys
from safetensors.numpy import load_file
from setfit import SetFitModel
adapter, texts = sys.argv[1], json.loads(sys.argv[2])
model = SetFitModel.from_pretrained(adapter)
model.model_head.__dict__.update(load_file(f"{adapter}/setfit_head.safetensors"))  # the README's one line
labels = model.predict(texts)
probabilities = model.predict_proba(texts, as_numpy=True)
assert not any(name.startswith("infoprompt") for name in sys.modules)
print(json.dumps({"labels": list(labels), "probabilities": probabilities.tolist()}))
"""


def run_natively(script: str, adapter: Path, cwd: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", script, str(adapter), json.dumps(TEXTS)], cwd=cwd,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


def infoprompt_predict(adapter: Path, workdir: Path, capsys) -> dict:
    inputs = workdir / "inputs.jsonl"
    inputs.write_text("".join(json.dumps({"sentence": text}) + "\n" for text in TEXTS), encoding="utf-8")
    capsys.readouterr()
    assert main(["predict", "--adapter", str(adapter), "--input", str(inputs), "--quiet"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    names = list(records[0]["probabilities"])
    return {"labels": [r["label"] for r in records], "names": names,
            "probabilities": [[r["probabilities"][name] for name in names] for r in records]}


def assert_same_predictions(native: dict, ours: dict, native_names: list[str]) -> None:
    assert native["labels"] == ours["labels"]
    assert native_names == ours["names"]
    assert torch.allclose(torch.tensor(native["probabilities"], dtype=torch.float64),
                          torch.tensor(ours["probabilities"], dtype=torch.float64), atol=TOLERANCE, rtol=0)


def spread_predictions(model, head: torch.nn.Linear) -> None:
    """A random tiny encoder gives every text nearly one logit: scale the head up and centre its margin, so
    that half the texts fall in each class and a swapped label name would show."""
    examples = [Example(fields={"sentence": text}, source=f"text {i + 1}") for i, text in enumerate(TEXTS)]
    with torch.no_grad():
        head.weight.mul_(20)
        margins = predict_encoded(model, encode_examples(model, examples)).log().diff(dim=1).squeeze(1)
        head.bias[1] -= margins.sort().values[len(TEXTS) // 2 - 1 : len(TEXTS) // 2 + 1].mean()


def test_a_peft_adapter_loads_in_peft_with_its_label_names(bert_backbone, tmp_path, capsys):
    spec = RunSpec(task="sst2", method="peft-prompt-tuning", n_prompts=2, seed=3, backbone=bert_backbone.name,
                   classifier={"max_length": 32})
    model = build_classifier(spec, bert_backbone).eval()
    spread_predictions(model, model.peft.base_model.classifier.modules_to_save["default"])
    model.save_pretrained(tmp_path / "run")
    native = run_natively(PEFT_SCRIPT, tmp_path / "run" / "peft", tmp_path)
    ours = infoprompt_predict(tmp_path / "run", tmp_path, capsys)
    assert sorted(native["labels"]) == ["negative"] * 3 + ["positive"] * 3  # not LABEL_0 / LABEL_1
    assert_same_predictions(native, ours, ["negative", "positive"])


@pytest.fixture
def setfit_adapter(tiny_model_dirs, tmp_path, monkeypatch):
    """The committed (legacy-layout) SetFit adapter, loaded and saved again in today's layout, in a working
    directory where its backbone ``tiny-bert`` exists."""
    pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")
    from infoprompt.kinds import load_adapter

    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    monkeypatch.chdir(tmp_path)
    load_adapter(FIXTURES / "setfit").save_pretrained(tmp_path / "setfit-run")
    return tmp_path / "setfit-run"


def test_a_setfit_adapter_loads_in_setfit_and_predicts_the_same(setfit_adapter, tmp_path, capsys):
    assert not list(setfit_adapter.rglob("*.pkl"))
    native = run_natively(SETFIT_SCRIPT, setfit_adapter, tmp_path)
    ours = infoprompt_predict(setfit_adapter, tmp_path, capsys)
    assert_same_predictions(native, ours, json.loads((setfit_adapter / "config_setfit.json").read_text())["labels"])
    legacy = infoprompt_predict(FIXTURES / "setfit", tmp_path, capsys)
    assert legacy == ours  # saving again in the new layout changed no prediction


def test_the_setfit_body_loads_in_sentence_transformers(setfit_adapter, tmp_path):
    script = """
import json, sys
from sentence_transformers import SentenceTransformer
print(json.dumps({"embeddings": SentenceTransformer(sys.argv[1]).encode(json.loads(sys.argv[2])).tolist()}))
"""
    from infoprompt.kinds import load_adapter

    native = run_natively(script, setfit_adapter, tmp_path)
    ours = load_adapter(setfit_adapter).body.encode(TEXTS, convert_to_tensor=True).cpu()
    assert torch.allclose(torch.tensor(native["embeddings"]), ours, atol=1e-6)
