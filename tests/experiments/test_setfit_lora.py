"""setfit-lora: SetFit's pair training of LoRA weights only; the shared encoder is untouched, the adapter is the
LoRA weights and the head, and it reloads onto the shared encoder to identical predictions."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

pytest.importorskip("setfit", reason="the setfit extra is not installed: pip install 'infoprompt[setfit]'")

from infoprompt.backbones import load_backbone  # noqa: E402
from infoprompt.errors import UserError  # noqa: E402
from infoprompt.kinds import load_adapter  # noqa: E402
from infoprompt.kinds.setfit_lora import SetFitLoraClassifier, SetFitLoraSettings, structure_copy  # noqa: E402
from infoprompt.pipeline import RunSpec, build_classifier, read_split, run_training  # noqa: E402
from infoprompt.tasks import (
    Example,  # noqa: E402
    get_task,  # noqa: E402
)
from infoprompt.training import TrainConfig, encode_examples, evaluate, predict_encoded  # noqa: E402
from infoprompt.training.data import prompted_batch  # noqa: E402


def spec_for(toy_task, backbone_dir, seed=1, **training):
    task, data_dir = toy_task
    config = TrainConfig(**{"seed": seed, "progress": False, "max_steps": 6, **training})
    return RunSpec(task=task, method="setfit-lora", shots=8, seed=seed, backbone=str(backbone_dir),
                   data_dir=str(data_dir), classifier={"max_length": 32}, training=config)


def test_structure_copy_shares_every_tensor_and_owns_its_modules(bert_backbone):
    copied = structure_copy(bert_backbone.model)
    assert copied is not bert_backbone.model
    for (name, mine), (_, theirs) in zip(copied.named_parameters(), bert_backbone.model.named_parameters(), strict=True):
        assert mine is theirs, name
    assert next(copied.modules()) is not next(bert_backbone.model.modules())


def test_setfit_lora_trains_only_lora_and_reloads_identically(toy_task, tiny_bert_dir, tmp_path):
    backbone = load_backbone(str(tiny_bert_dir))
    snapshot = {name: t.clone() for name, t in backbone.model.state_dict().items()}
    modules_before = {name for name, _ in backbone.model.named_modules()}
    out = tmp_path / "run"
    record = run_training(spec_for(toy_task, tiny_bert_dir), out, backbone=backbone)
    assert record["method"] == "setfit-lora" and record["steps"] == 6 and record["lr"] == 5e-4
    for name, tensor in backbone.model.state_dict().items():
        assert torch.equal(tensor, snapshot[name]), name  # the shared encoder is never changed...
    assert {name for name, _ in backbone.model.named_modules()} == modules_before  # ...nor rewired
    saved = json.loads((out / "setfit_lora_config.json").read_text())
    assert saved["settings"]["rank"] == 8 and saved["fitted"] is True
    from safetensors.torch import load_file

    assert set(load_file(str(out / "adapter_model.safetensors"))) == {"head.weight", "head.bias"}
    weights = load_file(str(out / "peft" / "adapter_model.safetensors"))  # peft's own LoRA layout
    lora = [n for n in weights if "lora_" in n]
    assert lora and lora == list(weights) and all(("query" in n or "value" in n) for n in lora)
    # LoRA's B starts at zero: trained weights are not (the body that runs is the LoRA one).
    assert any(weights[n].abs().sum() > 0 for n in lora if "lora_B" in n)
    parameters = record["parameters"]
    assert parameters["trainable"] < 0.2 * parameters["frozen"]

    loaded = load_adapter(out, backbone=backbone)
    assert isinstance(loaded, SetFitLoraClassifier)
    examples = read_split(get_task(toy_task[0]), "dev", str(toy_task[1]), "files")
    assert evaluate(loaded, examples) == record["metrics"]
    probabilities = predict_encoded(loaded, encode_examples(loaded, examples))
    theirs = loaded.setfit.predict_proba(loaded.texts(examples))
    assert torch.allclose(torch.as_tensor(theirs, dtype=torch.float32), probabilities, atol=1e-5)
    fresh = build_classifier(spec_for(toy_task, tiny_bert_dir), backbone)
    assert not torch.allclose(predict_encoded(fresh, encode_examples(fresh, examples)), probabilities)


def test_bad_lora_settings_are_one_line_errors():
    with pytest.raises(UserError, match="rank must be a positive integer"):
        SetFitLoraSettings(rank=0)
    with pytest.raises(UserError, match="lora_dropout"):
        SetFitLoraSettings(lora_dropout=1.5)


def test_the_lora_weights_load_in_peft_itself(tmp_path, tiny_bert_dir):
    """peft alone (no infoprompt) puts the saved LoRA on the encoder and gives the body's embeddings."""
    import subprocess
    import sys

    backbone = load_backbone(str(tiny_bert_dir))
    model = build_classifier(spec_for(("sst2", None), tiny_bert_dir), backbone)
    with torch.no_grad():
        for name, parameter in model.body.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)  # a LoRA update that changes what the encoder computes
    model.save_pretrained(tmp_path / "adapter")
    examples = [Example(fields={"sentence": "a great movie"}, source="x")]
    ours = model.embed(prompted_batch(model, encode_examples(model, examples), [0])).detach()
    script = f"""
import sys, torch
from peft import PeftModel
from transformers import AutoModel, AutoTokenizer
assert not any(name.startswith("infoprompt") for name in sys.modules)
encoder = PeftModel.from_pretrained(AutoModel.from_pretrained({str(tiny_bert_dir)!r}), {str(tmp_path / "adapter" / "peft")!r})
tokens = AutoTokenizer.from_pretrained({str(tiny_bert_dir)!r})(["a great movie"], return_tensors="pt")
with torch.no_grad():
    states = encoder(**tokens).last_hidden_state
mask = tokens["attention_mask"].unsqueeze(-1).float()
pooled = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
print(" ".join(f"{{v:.7f}}" for v in pooled[0].tolist()))
"""
    printed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    theirs = torch.tensor([float(v) for v in printed.split()])
    assert torch.allclose(theirs, ours[0], atol=1e-5)


def test_pairs_rank_alpha_and_targets_are_options_that_reach_setfit_and_peft(toy_task, tiny_bert_dir, tmp_path):
    backbone = load_backbone(str(tiny_bert_dir))
    spec = spec_for(toy_task, tiny_bert_dir)
    options = {"max_length": 32, "pair_iterations": 2, "lora_rank": 4, "lora_alpha": 8, "lora_targets": ["key"]}
    spec = dataclasses.replace(spec, classifier=options, training=dataclasses.replace(spec.training, max_steps=None))
    out = tmp_path / "run"
    record = run_training(spec, out, backbone=backbone)
    # 8 examples x 2 iterations x 2 polarities = 32 pairs, batch 16: two steps (SetFit's default 20 would be 20).
    assert record["steps"] == 2
    saved = json.loads((out / "setfit_lora_config.json").read_text())["settings"]
    assert (saved["num_iterations"], saved["rank"], saved["alpha"], saved["targets"]) == (2, 4, 8, ["key"])
    from safetensors.torch import load_file

    weights = load_file(str(out / "peft" / "adapter_model.safetensors"))
    assert weights and all(".key." in name for name in weights)
    assert {tuple(t.shape)[0] for name, t in weights.items() if "lora_A" in name} == {4}
    loaded = load_adapter(out, backbone=backbone)
    assert loaded.settings == SetFitLoraSettings(num_iterations=2, rank=4, alpha=8, targets=("key",),
                                                 max_steps=loaded.settings.max_steps)
    assert loaded.config.options.lora_targets == ("key",) and loaded.config.options.pair_iterations == 2


def adapted_modules(model: SetFitLoraClassifier) -> set[str]:
    """The encoder modules peft put LoRA weights on, as their last two name parts (``intermediate.dense``)."""
    names = {name.split(".lora_", 1)[0] for name in model.lora_state()}
    return {".".join(name.split(".")[-2:]) for name in names}


def test_setfit_lora_all_adapts_every_linear_layer_of_each_block_and_options_still_win(bert_backbone):
    import infoprompt

    def built(method, **options):
        return infoprompt.make_classifier(bert_backbone, task="sst2", method=method, seed=1, max_length=32, **options)

    plain, every = built("setfit-lora"), built("setfit-lora-all")
    assert (plain.settings.rank, plain.settings.layers) == (8, "attention-qv")
    assert {n.split(".")[-1] for n in adapted_modules(plain)} == {"query", "value"}
    assert (every.settings.rank, every.settings.alpha, every.settings.layers) == (4, 8, "all-linear")
    # BERT's block: q/k/v, the attention output projection, and the feed-forward pair; never the pooler.
    assert adapted_modules(every) == {"self.query", "self.key", "self.value", "output.dense", "intermediate.dense"}
    assert not any("pooler" in name for name in every.lora_state())
    assert sum(t.numel() for t in every.lora_state().values()) > sum(t.numel() for t in plain.lora_state().values())
    chosen = built("setfit-lora-all", lora_rank=2, lora_targets=["key"])
    assert chosen.settings.rank == 2 and adapted_modules(chosen) == {"self.key"}
    with pytest.raises(UserError, match="layers must be one of attention-qv, all-linear"):
        SetFitLoraSettings(layers="everything")


def test_the_cli_trains_setfit_lora_all_with_a_picked_head_c_and_refuses_bad_head_options(tiny_model_dirs, tmp_path,
                                                                                        capsys):
    from test_feature_store import ROWS, write_split

    from infoprompt.cli import main
    from infoprompt.io_utils import adapter_config_file
    from infoprompt.kinds.setfit import HEAD_C_GRID

    assert main(["train", "--help"]) == 0
    usage = capsys.readouterr().out
    assert "--head-c" in usage and "--select-head-c" in usage
    assert main(["methods"]) == 0 and "setfit-lora-all" in capsys.readouterr().out
    write_split(tmp_path / "data", ROWS)
    train = ["train", "--task", "sst2", "--shots", "8", "--max-steps", "2", "--quiet", "--backbone",
             str(tiny_model_dirs["bert"]), "--max-length", "48", "--data-dir", str(tmp_path / "data")]
    out = tmp_path / "a"
    assert main([*train, "--method", "setfit-lora-all", "--select-head-c", "--out", str(out)]) == 0
    assert json.loads(adapter_config_file(out).read_text())["options"]["select_head_c"] is True
    settings = json.loads((out / "setfit_lora_config.json").read_text())["settings"]
    assert settings["layers"] == "all-linear" and settings["rank"] == 4 and settings["head_c"] in HEAD_C_GRID
    for bad in (["--method", "setfit-lora", "--head-c", "0"],
                ["--method", "setfit-lora", "--head-c", "10", "--select-head-c"],
                ["--method", "lora-ce", "--select-head-c"]):
        capsys.readouterr()
        assert main([*train, *bad, "--out", str(tmp_path / "x")]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and "head_c" in error[0].replace("-", "_")
        assert not (tmp_path / "x").exists()


def test_wrapping_the_encoder_in_lora_shows_no_warning_about_peft_internals(bert_backbone):
    import warnings

    import infoprompt

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        infoprompt.make_classifier(bert_backbone, task="sst2", method="setfit-lora", seed=1, max_length=32)
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]
