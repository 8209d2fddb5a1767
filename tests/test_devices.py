"""Device and precision settings: resolution, clear errors, bf16 autocast, and CPU draws on every device."""

from __future__ import annotations

import pytest
import torch

from infoprompt.backbones import Backbone, load_backbone
from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.kinds import load_adapter
from infoprompt.kinds.prompt.objectives import sample_context_negatives, standard_normal
from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.training import TrainConfig, encode_examples, predict_encoded, resolve_device, train

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")


def test_auto_and_cpu_resolve():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected


@pytest.mark.parametrize("name", ["tpu", "not a device", "mps"])
def test_unknown_devices_are_user_errors(name):
    with pytest.raises(UserError, match="valid: auto, cpu, cuda"):
        resolve_device(name)


@needs_no_cuda
def test_cuda_without_a_gpu_says_so():
    with pytest.raises(UserError, match="sees no CUDA GPU; use --device cpu"):
        resolve_device("cuda:1")


@needs_no_cuda
def test_cli_refuses_cuda_without_a_gpu_and_writes_nothing(tmp_path, capsys, data_dir):
    out = tmp_path / "run"
    code = main(["train", "--task", "sst2", "--method", "warp", "--shots", "8", "--epochs", "1", "--device", "cuda",
                 "--data-dir", str(data_dir), "--backbone", "minilm", "--out", str(out), "--quiet"])
    assert code == 2 and "no CUDA GPU" in capsys.readouterr().err
    assert not out.exists() and not any(tmp_path.iterdir())


def test_unknown_precision_is_a_user_error(bert_backbone, toy_examples):
    model = build_classifier(RunSpec(task="sst2", method="warp", classifier={"max_length": 48}), bert_backbone)
    with pytest.raises(UserError, match="unknown precision 'fp8'"):
        train(model, toy_examples, None, TrainConfig(epochs=1, progress=False, precision="fp8"))
    changed_later = TrainConfig(epochs=1, progress=False)
    changed_later.precision = "fp8"  # past the config's own check: the autocast refuses it
    with pytest.raises(UserError, match="unknown precision 'fp8'"):
        train(model, toy_examples, None, changed_later)


def test_bf16_trains_and_stays_close_to_fp32(bert_backbone, toy_examples):
    results = {}
    for precision in ("fp32", "bf16"):
        model = build_classifier(RunSpec(task="sst2", method="infoprompt", seed=2, classifier={"max_length": 48}),
                                 bert_backbone)
        result = train(model, toy_examples, toy_examples[:8],
                       TrainConfig(epochs=1, batch_size=4, seed=2, progress=False, precision=precision))
        probabilities = predict_encoded(model, encode_examples(model, toy_examples[:8]), precision=precision)
        results[precision] = (result, probabilities)
        # The trained parameters stay float32 whatever the precision of the passes.
        assert all(p.dtype == torch.float32 for p in model.parameters())
    fp32, bf16 = results["fp32"], results["bf16"]
    assert all(torch.isfinite(torch.tensor(v)) for v in bf16[0].last_losses.values())
    assert bf16[1].dtype == torch.float32 and torch.allclose(bf16[1].sum(-1), torch.ones(8))
    assert torch.allclose(fp32[1], bf16[1], atol=0.05)
    assert fp32[0].last_losses["pred"] != bf16[0].last_losses["pred"]  # bf16 really ran


def test_random_draws_come_from_the_generator_not_the_device():
    """Noise and negatives are drawn where the (CPU) generator lives: same seed, same draws on any device."""
    like = torch.zeros(3, dtype=torch.float32)
    first = standard_normal((2, 3), torch.Generator().manual_seed(5), like)
    second = standard_normal((2, 3), torch.Generator().manual_seed(5), like)
    assert torch.equal(first, second) and first.device == like.device
    embeddings = torch.nn.Embedding(10, 4)
    ids = torch.tensor([[1, 2, 3, 4]])
    positions = torch.tensor([[1, 2]])
    mask = torch.tensor([[True, True]])
    a = sample_context_negatives(embeddings, ids, positions, mask, 6, torch.Generator().manual_seed(1))
    b = sample_context_negatives(embeddings, ids, positions, mask, 6, torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == (1, 6, 4)


@pytest.mark.parametrize("method", ["infoprompt", "warp", "linear-probe", "adapter", "finetune"])
@pytest.mark.filterwarnings("ignore:for .*meta parameter in the current model")
def test_built_and_loaded_models_move_to_their_backbones_device(method, tiny_model_dirs, tmp_path, monkeypatch):
    """A training run leaves the shared encoder on its device (a GPU); a model built or loaded on that backbone
    afterwards must be all there, not new parameters on the CPU beside it. Here the backbones say they are on
    the meta device (which stands in for a GPU; the weights are read before the move, as on a GPU)."""
    spec = RunSpec(task="sst2", method=method, backbone=str(tiny_model_dirs["bert"]), classifier={"max_length": 48})
    build_classifier(spec, load_backbone(spec.backbone)).save_pretrained(tmp_path / "adapter")
    monkeypatch.setattr(Backbone, "device", property(lambda self: torch.device("meta")))
    built = build_classifier(spec, load_backbone(spec.backbone))
    loaded = load_adapter(tmp_path / "adapter", backbone=load_backbone(spec.backbone))
    for model in (built, loaded):
        assert {parameter.device.type for parameter in model.parameters()} == {"meta"}
