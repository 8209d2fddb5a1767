"""docs/native-loading.md's snippets load adapters without infoprompt, warn falsely of nothing, predict the same."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from infoprompt.cli import main
from infoprompt.kinds import native_snippet
from infoprompt.kinds.model_card import EXAMPLE_TEXTS
from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.tasks import Example
from infoprompt.training import encode_examples, predict_encoded

FIXTURES = Path(__file__).parent / "fixtures" / "adapters"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "native-loading.md"
TEXTS = ["a great film", "the plot was dull and boring", "quite funny , not bad", "she said it was terrible", "lovely",
         "not a good movie"]
TOLERANCE = 1e-5
# The values docs/native-loading.md's snippets are written with.
DOC_BASE = "sentence-transformers/all-MiniLM-L6-v2"
DOC_MAX_LENGTH = 128
DOC_ADAPTERS = {"peft": "runs/sst2-peft/peft", "setfit": "runs/sst2-setfit", "setfit-lora": "runs/sst2-setfit-lora",
                "linear-probe": "runs/sst2-probe"}
# What the libraries print when they build weights that a checkpoint lacks; the snippets load every weight.
FALSE_WARNINGS = re.compile(r"newly initiali[sz]ed|TRAIN|MISSING|random weights|not initiali[sz]ed", re.IGNORECASE)
# Appended to a snippet: its result as one JSON line, and proof that it ran without this library.
REPORT = """
import json as _json, sys as _sys
assert not any(name.startswith("infoprompt") for name in _sys.modules)
print(_json.dumps({"labels": [str(label) for label in labels],
                   "probabilities": [[float(p) for p in row] for row in probabilities]}))
"""


def run_snippet(kind: str, adapter: Path, base: Path, cwd: Path, *, add_specials: bool = False) -> dict:
    """Run ``kind``'s documented snippet on ``adapter`` (``base``: the backbone's directory) in a fresh process;
    its result, with its stderr under ``"stderr"``. ``add_specials``: frame each text by [CLS] ... [SEP], which
    the tests' tiny tokenizer does not add itself (a real one does, as infoprompt's template does)."""
    texts = [f"[CLS] {text} [SEP]" for text in TEXTS] if add_specials else TEXTS
    script = native_snippet(kind, adapter=str(adapter), base=str(base), texts=texts, max_length=32) + REPORT
    result = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return {**json.loads(result.stdout.splitlines()[-1]), "stderr": result.stderr}


def assert_no_false_warning(stderr: str) -> None:
    """No "newly initialised" / "you should TRAIN" report, and no warning at all but peft's own deprecation
    (peft asks transformers 5 for ``is_gradient_checkpointing``; the library silences it in its own calls)."""
    assert not FALSE_WARNINGS.search(stderr), stderr
    warned = [line for line in stderr.splitlines() if re.search(r"warn", line, re.IGNORECASE)]
    assert all("is_gradient_checkpointing" in line or line.strip() == "warnings.warn(" for line in warned), stderr


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


def test_a_peft_adapter_loads_in_peft_with_its_label_names(bert_backbone, tiny_model_dirs, tmp_path, capsys):
    spec = RunSpec(task="sst2", method="peft-prompt-tuning", n_prompts=2, seed=3, backbone=bert_backbone.name,
                   classifier={"max_length": 32})
    model = build_classifier(spec, bert_backbone).eval()
    spread_predictions(model, model.peft.base_model.classifier.modules_to_save["default"])
    model.save_pretrained(tmp_path / "run")
    native = run_snippet("peft", tmp_path / "run" / "peft", tiny_model_dirs["bert"], tmp_path, add_specials=True)
    ours = infoprompt_predict(tmp_path / "run", tmp_path, capsys)
    assert sorted(native["labels"]) == ["negative"] * 3 + ["positive"] * 3  # not LABEL_0 / LABEL_1
    assert_same_predictions(native, ours, ["negative", "positive"])
    assert_no_false_warning(native["stderr"])


def test_loading_peft_from_the_backbone_reports_the_classifier_as_new(bert_backbone, tiny_model_dirs, tmp_path):
    """The cause the peft snippet avoids: built by from_pretrained on the backbone, the sequence-classification
    model lacks its classifier until peft loads it, and transformers says so."""
    spec = RunSpec(task="sst2", method="peft-prompt-tuning", n_prompts=2, seed=3, backbone=bert_backbone.name,
                   classifier={"max_length": 32})
    build_classifier(spec, bert_backbone).save_pretrained(tmp_path / "run")
    script = ("from transformers import AutoConfig, AutoModelForSequenceClassification\n"
              f"AutoModelForSequenceClassification.from_pretrained({str(tiny_model_dirs['bert'])!r}, "
              f"config=AutoConfig.from_pretrained({str(tmp_path / 'run' / 'peft')!r}))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and FALSE_WARNINGS.search(result.stderr), result.stderr[-2000:]


@pytest.fixture
def tiny_bert_here(tiny_model_dirs, tmp_path, monkeypatch) -> Path:
    """A working directory where ``tiny-bert``, the backbone the committed adapters name, exists."""
    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "tiny-bert"


def saved_again(kind: str, tmp_path: Path) -> Path:
    """The committed adapter of ``kind`` loaded and saved again in today's layout (with today's card)."""
    from infoprompt.kinds import load_adapter

    load_adapter(FIXTURES / kind).save_pretrained(tmp_path / f"{kind}-run")
    return tmp_path / f"{kind}-run"


@pytest.fixture
def setfit_adapter(tiny_bert_here, tmp_path):
    """The committed (legacy-layout) SetFit adapter saved again in today's layout."""
    pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")
    return saved_again("setfit", tmp_path)


def test_a_setfit_adapter_loads_in_setfit_and_predicts_the_same(setfit_adapter, tiny_bert_here, tmp_path, capsys):
    assert not list(setfit_adapter.rglob("*.pkl"))
    native = run_snippet("setfit", setfit_adapter, tiny_bert_here, tmp_path)
    ours = infoprompt_predict(setfit_adapter, tmp_path, capsys)
    assert_same_predictions(native, ours, json.loads((setfit_adapter / "config_setfit.json").read_text())["labels"])
    assert_no_false_warning(native["stderr"])
    legacy = infoprompt_predict(FIXTURES / "setfit", tmp_path, capsys)
    assert legacy == ours  # saving again in the new layout changed no prediction


@pytest.mark.parametrize("kind", ["setfit-lora", "top-lora"])
def test_a_lora_adapter_loads_in_peft_with_its_pooling_and_head(kind, tiny_bert_here, tmp_path, capsys):
    pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")
    adapter = saved_again(kind, tmp_path)
    native = run_snippet(kind, adapter, tiny_bert_here, tmp_path)
    ours = infoprompt_predict(adapter, tmp_path, capsys)
    assert_same_predictions(native, ours, ["negative", "positive"])
    assert_no_false_warning(native["stderr"])


def test_a_linear_probe_loads_in_transformers_with_its_pooling_and_head(tiny_bert_here, tmp_path, capsys):
    adapter = saved_again("linear-probe", tmp_path)
    native = run_snippet("linear-probe", adapter, tiny_bert_here, tmp_path, add_specials=True)
    ours = infoprompt_predict(adapter, tmp_path, capsys)
    assert_same_predictions(native, ours, ["negative", "positive"])
    assert_no_false_warning(native["stderr"])


def test_the_setfit_body_loads_in_sentence_transformers(setfit_adapter, tmp_path):
    script = """
import json, sys
from sentence_transformers import SentenceTransformer
print(json.dumps({"embeddings": SentenceTransformer(sys.argv[1]).encode(json.loads(sys.argv[2])).tolist()}))
"""
    from infoprompt.kinds import load_adapter

    result = subprocess.run([sys.executable, "-c", script, str(setfit_adapter), json.dumps(TEXTS)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    native = json.loads(result.stdout.splitlines()[-1])
    ours = load_adapter(setfit_adapter).body.encode(TEXTS, convert_to_tensor=True).cpu()
    assert torch.allclose(torch.tensor(native["embeddings"]), ours, atol=1e-6)


def documented_snippets() -> dict[str, str]:
    text = DOCS.read_text(encoding="utf-8")
    return dict(re.findall(r"<!-- snippet: ([\w-]+) -->\n```python\n(.*?)```", text, flags=re.DOTALL))


def test_the_documented_snippets_are_the_ones_tested():
    """docs/native-loading.md quotes native_snippet exactly (with its example paths), so what the README links to
    is what the tests above run and what the model cards carry."""
    documented = documented_snippets()
    assert sorted(documented) == sorted(DOC_ADAPTERS)
    for kind, code in documented.items():
        assert code == native_snippet(kind, adapter=DOC_ADAPTERS[kind], base=DOC_BASE, texts=list(EXAMPLE_TEXTS),
                                    max_length=DOC_MAX_LENGTH), kind
