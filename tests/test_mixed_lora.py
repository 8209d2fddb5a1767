"""Rows of different LoRA adapters in one batch (infoprompt.kinds.mixed_lora): every kind with the mixed-lora-batch
capability gives, in a mixed batch, the probabilities it gives alone; the blocks below the adapters' LoRA run once
per text; the shared encoder's weights are never changed."""

from __future__ import annotations

import csv
import io
import itertools
import json
import shutil
from pathlib import Path

import pytest
import torch

from infoprompt.cli import main
from infoprompt.kinds import KINDS, make_classifier, mixed_lora
from infoprompt.kinds.mixed_lora import lora_parts, mixed_encoder, predict_mixed
from infoprompt.kinds.registry import MIXED_LORA, kinds_with
from infoprompt.training.inference import predict

pytestmark = pytest.mark.usefixtures("one_thread")
pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")

TEXTS = ["a great film", "the plot was dull and boring , and far too long for what it says", "lovely",
         "quite funny , not bad at all"]
TOLERANCE = 1e-5
FIXTURES = Path(__file__).parent / "fixtures" / "adapters"


def random_adapter(backbone, kind: str, seed: int, **options: object):
    """A fresh adapter of ``kind`` whose LoRA and head are random (a fresh one's B matrices are zero, and a
    SetFit head zero: every adapter would predict alike)."""
    model = make_classifier(backbone, task="sst2", method=KINDS[kind].methods[0].name, seed=seed, max_length=32,
                            **options)
    return randomise_lora_and_head(model, seed).eval()


def randomise_lora_and_head(model, seed: int):
    """``model`` with its LoRA matrices and linear head drawn at random from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_A" in name or "lora_B" in name or name.startswith("head."):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model


@pytest.fixture(scope="module")
def adapters(bert_backbone) -> dict[str, list]:
    """Two adapters of every mixing kind; top-lora's with LoRA in the top block and in both (two split points)."""
    made = {}
    for kind in kinds_with(MIXED_LORA):
        options = [{"top_layers": 1}, {"top_layers": 2}] if "top_layers" in KINDS[kind].options.names() else [{}, {}]
        made[kind] = [random_adapter(bert_backbone, kind, seed, **option) for seed, option in enumerate(options, 1)]
    return made


def test_every_lora_kind_mixes(adapters):
    assert sorted(adapters) == sorted(kind for kind in KINDS if MIXED_LORA in KINDS[kind].capabilities)
    assert {"lora", "setfit-lora", "top-lora"} <= set(adapters)
    assert all(lora_parts(model) is not None for models in adapters.values() for model in models)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_kind_mixes_exactly_when_its_models_hold_peft_lora(kind, bert_backbone):
    """No LoRA kind is left out of mixed batches by a missing capability, and none claims it without LoRA."""
    from peft.tuners.lora import LoraLayer

    model = make_classifier(bert_backbone, task="sst2", method=KINDS[kind].methods[0].name, n_prompts=2, max_length=32)
    holds_lora = any(isinstance(module, LoraLayer) for module in model.modules())
    assert (MIXED_LORA in KINDS[kind].capabilities) == holds_lora == (lora_parts(model) is not None)


def close(mixed: list[dict], alone: list[dict]) -> bool:
    return len(mixed) == len(alone) and all(
        a["label"] == b["label"] and all(abs(a["probabilities"][k] - b["probabilities"][k]) <= TOLERANCE
                                         for k in b["probabilities"])
        for a, b in zip(mixed, alone, strict=True))


def test_a_batch_of_every_lora_kind_and_length_predicts_as_each_adapter_alone(adapters, bert_backbone):
    weights = {name: t.clone() for name, t in bert_backbone.model.state_dict().items()}
    models = [model for models in adapters.values() for model in models]
    requests = []
    for index, model in enumerate(models):  # each adapter gets different texts, in different orders and counts
        chosen = [TEXTS[(index + step) % len(TEXTS)] for step in range(1 + index % 3)]
        requests.append((model, [{"sentence": text} for text in chosen], [f"r{index}:{i}" for i in range(len(chosen))]))
    mixed = predict_mixed(requests, batch_size=3)  # chunks that cut across adapters
    for (model, rows, sources), records in zip(requests, mixed.records, strict=True):
        assert close(records, predict(model, rows, sources=sources)), model.config.method
    # one lower pass per distinct token sequence (the kinds' templates tokenise a text alike or not)
    assert len(TEXTS) <= mixed.texts < sum(len(rows) for _, rows, _ in requests)
    # no adapter was merged into the shared weights
    assert all(torch.equal(t, weights[name]) for name, t in bert_backbone.model.state_dict().items())
    different = {tuple(r["probabilities"]["positive"] for r in records) for records in mixed.records}
    assert len(different) == len(mixed.records)  # the adapters really differ


@pytest.mark.parametrize("kind", kinds_with(MIXED_LORA))
def test_an_adapter_that_keeps_only_its_mixed_parts_predicts_the_same_without_its_module_tree(kind, bert_backbone):
    """What the server does to every mixing adapter it loads: the peft module tree goes, the LoRA tensors and
    the head stay, and mixed batches give the same records; the adapter's own forward pass says why it cannot."""
    rows = [{"sentence": text} for text in TEXTS]
    sources = [str(i) for i in range(len(TEXTS))]
    model = random_adapter(bert_backbone, kind, 7)
    before = predict_mixed([(model, rows, sources)]).records[0]
    modules = sum(1 for _ in model.modules())
    kept = mixed_lora.keep_mixed_parts_only(model)
    assert lora_parts(model) is kept and sum(1 for _ in model.modules()) < modules / 2
    assert close(predict_mixed([(model, rows, sources)]).records[0], before)
    with pytest.raises(RuntimeError, match="released for mixed LoRA batches"):
        predict(model, rows, sources=sources)


def count_rows(module: torch.nn.Module, seen: list[int]) -> torch.utils.hooks.RemovableHandle:
    return module.register_forward_hook(lambda _, args, kwargs, out: seen.append(
        (kwargs.get("hidden_states", args[0] if args else None)).shape[0]), with_kwargs=True)


@pytest.mark.parametrize("top_layers", [[1, 1, 1], [1, 2, 1]], ids=["one-split", "two-splits"])
def test_the_blocks_below_the_lora_run_once_per_text(bert_backbone, top_layers):
    models = [random_adapter(bert_backbone, "top-lora", seed, top_layers=k) for seed, k in enumerate(top_layers, 10)]
    blocks = mixed_encoder(bert_backbone.model).model.encoder.layer
    seen: dict[int, list[int]] = {0: [], 1: []}
    handles = [count_rows(blocks[index], seen[index]) for index in seen]
    try:
        texts = TEXTS[:3]
        requests = [(model, [{"sentence": text} for text in texts], ["x"] * 3) for model in models]
        mixed = predict_mixed(requests, batch_size=64)
    finally:
        for handle in handles:
            handle.remove()
    fanned = len(texts) * len(models)
    # one split point (block 1): block 0 once per text; two (0 and 1): the lowest common part is below block 0
    assert (sum(seen[0]), sum(seen[1])) == ((len(texts), fanned) if top_layers == [1, 1, 1] else (fanned, fanned))
    for (model, rows, sources), records in zip(requests, mixed.records, strict=True):
        assert close(records, predict(model, rows, sources=sources))


def test_kinds_without_the_capability_do_not_mix(bert_backbone):
    probe = make_classifier(bert_backbone, task="sst2", method="linear-probe", max_length=32)
    assert lora_parts(probe) is None
    lora = random_adapter(bert_backbone, "lora", 3)
    with pytest.raises(ValueError, match="LoRA adapters of one backbone"):
        from infoprompt.kinds.mixed_lora import mixed_probabilities

        mixed_probabilities([lora, probe], [[101, 102]], list(itertools.product([0], [0, 1])))


@pytest.fixture
def saved_adapters(tiny_model_dirs, tmp_path, monkeypatch) -> list[str]:
    """The committed tiny adapters of every LoRA kind and a probe, beside the tiny BERT they name."""
    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    monkeypatch.chdir(tmp_path)
    names = [*kinds_with(MIXED_LORA), "linear-probe"]
    for name in names:
        shutil.copytree(FIXTURES / name, tmp_path / name)
    (tmp_path / "in.txt").write_text("".join(text + "\n" for text in TEXTS), encoding="utf-8")
    return names


def run_predict(capsys, *args: str) -> str:
    assert main(["predict", "--input", "in.txt", "--quiet", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("output", ["jsonl", "csv"])
def test_predict_with_several_adapters_writes_each_adapters_predictions(saved_adapters, capsys, monkeypatch, output):
    calls = []
    original = mixed_lora.predict_mixed
    monkeypatch.setattr(mixed_lora, "predict_mixed", lambda requests, *a: calls.append(len(requests)) or
                        original(requests, *a))
    several = run_predict(capsys, *[a for name in saved_adapters for a in ("--adapter", name)], "--format", output)
    assert calls == [len(saved_adapters) - 1]  # the LoRA adapters in one mixed batch, the probe alone
    alone = {name: run_predict(capsys, "--adapter", name, "--format", output) for name in saved_adapters}
    if output == "jsonl":
        rows = [json.loads(line) for line in several.splitlines()]
        for name in saved_adapters:
            expected = [json.loads(line) for line in alone[name].splitlines()]
            assert [row["line"] for row in rows] == [row["line"] for row in expected]
            assert close([row["adapters"][name] for row in rows], expected)
    else:
        table = list(csv.DictReader(io.StringIO(several)))
        for name in saved_adapters:
            expected = list(csv.DictReader(io.StringIO(alone[name])))
            got = [{"line": row["line"], **{k.split(":", 1)[1]: v for k, v in row.items() if k.startswith(f"{name}:")}}
                   for row in table]
            assert [row.keys() for row in got] == [row.keys() for row in expected]
            for mine, theirs in zip(got, expected, strict=True):
                assert mine["line"] == theirs["line"] and mine["label"] == theirs["label"]
                assert all(abs(float(mine[k]) - float(theirs[k])) <= TOLERANCE for k in theirs if k.startswith("prob"))


def test_keep_columns_with_several_adapters_is_one_line_before_any_model_loads(saved_adapters, capsys):
    """--keep-columns names the columns of one adapter's output; with several it is a usage error (exit 2)."""
    adapters = [a for name in list(saved_adapters)[:2] for a in ("--adapter", name)]
    assert main(["predict", "--input", "in.txt", "--quiet", *adapters, "--keep-columns", "text"]) == 2
    assert "--keep-columns takes one --adapter" in capsys.readouterr().err


def test_predict_refuses_an_adapter_given_twice(saved_adapters, capsys):
    assert main(["predict", "--input", "in.txt", "--adapter", "lora", "--adapter", "./lora"]) == 2
    error = capsys.readouterr().err.strip()
    assert "is given more than once" in error and len(error.splitlines()) == 1
