"""The evaluation feature store: a hit gives the same numbers, and any change to the examples or the template
misses."""

from __future__ import annotations

from pathlib import Path

import pytest

from infoprompt.pipeline import RunSpec, build_classifier
from infoprompt.tasks import get_task, load_split
from infoprompt.training import TrainConfig, train

ROWS = ["a great movie\t1", "this film was awful\t0", "lovely story and good actor\t1", "boring dull plot\t0"] * 3


def write_split(data_dir: Path, rows: list[str]) -> None:
    for split in ("train", "dev"):
        path = data_dir / "SST-2" / f"{split}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("sentence\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")


def run(backbone, data_dir: Path, store: Path, template: str | None = None) -> dict:
    task = get_task("sst2")
    classifier = {"max_length": 48, **({"template": template} if template else {})}
    model = build_classifier(RunSpec(task="sst2", method="infoprompt", seed=2, classifier=classifier), backbone)
    config = TrainConfig(epochs=1, batch_size=4, seed=2, progress=False, eval_every_epochs=0, feature_store_dir=str(store))
    examples = load_split(task, "dev", str(data_dir))
    return train(model, load_split(task, "train", str(data_dir)), examples, config)


def test_second_run_hits_with_identical_metrics(bert_backbone, tmp_path):
    write_split(tmp_path / "data", ROWS)
    first = run(bert_backbone, tmp_path / "data", tmp_path / "store")
    second = run(bert_backbone, tmp_path / "data", tmp_path / "store")
    assert (first.eval_feature_store, second.eval_feature_store) == ("miss", "hit")
    assert first.metrics == second.metrics
    assert len(list((tmp_path / "store" / "features").glob("*.safetensors"))) == 1


def test_one_changed_byte_of_the_split_file_misses(bert_backbone, tmp_path):
    write_split(tmp_path / "data", ROWS)
    run(bert_backbone, tmp_path / "data", tmp_path / "store")
    dev = tmp_path / "data" / "SST-2" / "dev.tsv"
    dev.write_bytes(dev.read_bytes().replace(b"awful", b"awfulness", 1).replace(b"awfulness", b"awfuL", 1))
    assert run(bert_backbone, tmp_path / "data", tmp_path / "store").eval_feature_store == "miss"


def test_a_changed_template_misses(bert_backbone, tmp_path):
    write_split(tmp_path / "data", ROWS)
    run(bert_backbone, tmp_path / "data", tmp_path / "store")
    changed = run(bert_backbone, tmp_path / "data", tmp_path / "store", template="<cls> <p> {sentence} <p> it was <mask> <p> <sep>")
    assert changed.eval_feature_store == "miss"


def test_a_damaged_entry_is_recomputed(bert_backbone, tmp_path):
    write_split(tmp_path / "data", ROWS)
    first = run(bert_backbone, tmp_path / "data", tmp_path / "store")
    (entry,) = (tmp_path / "store" / "features").glob("*.safetensors")
    entry.write_bytes(b"not safetensors")
    again = run(bert_backbone, tmp_path / "data", tmp_path / "store")
    assert again.eval_feature_store == "miss" and again.metrics == first.metrics


def _rewrite(entry: Path, change) -> None:
    """Rewrite the entry's tensors as an older version would (no content hash), changed by ``change``."""
    from safetensors.torch import load_file, save_file

    tensors = {name: change(name, tensor) for name, tensor in load_file(str(entry)).items()}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(entry), metadata={"format": "pt"})


def _nan(name, tensor):
    return tensor * float("nan") if name == "pooled" else tensor


def _narrow(name, tensor):
    return tensor[:, :-1] if name == "z_plain" else tensor


def _half(name, tensor):
    return tensor.half()


@pytest.mark.parametrize(("change", "reason"), [(_nan, "holds NaN"), (_narrow, "expected"), (_half, "expected")])
def test_an_entry_of_bad_values_or_shape_is_recomputed_with_one_warning(bert_backbone, tmp_path, capfd, change, reason):
    write_split(tmp_path / "data", ROWS)
    first = run(bert_backbone, tmp_path / "data", tmp_path / "store")
    (entry,) = (tmp_path / "store" / "features").glob("*.safetensors")
    _rewrite(entry, change)
    capfd.readouterr()
    again = run(bert_backbone, tmp_path / "data", tmp_path / "store")
    warnings = [line for line in capfd.readouterr().err.splitlines() if "feature-store entry" in line]
    assert again.eval_feature_store == "miss" and again.metrics == first.metrics
    assert len(warnings) == 1 and reason in warnings[0] and "recomputing it" in warnings[0]
    assert run(bert_backbone, tmp_path / "data", tmp_path / "store").eval_feature_store == "hit"


def test_an_entry_whose_values_do_not_match_its_hash_is_recomputed(bert_backbone, tmp_path, capfd):
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    write_split(tmp_path / "data", ROWS)
    first = run(bert_backbone, tmp_path / "data", tmp_path / "store")
    (entry,) = (tmp_path / "store" / "features").glob("*.safetensors")
    with safe_open(str(entry), "pt") as handle:
        metadata = handle.metadata()
    tensors = load_file(str(entry))
    tensors["pooled"] = tensors["pooled"] + torch.ones_like(tensors["pooled"])
    save_file(tensors, str(entry), metadata=metadata)
    capfd.readouterr()
    again = run(bert_backbone, tmp_path / "data", tmp_path / "store")
    assert again.eval_feature_store == "miss" and again.metrics == first.metrics
    assert "does not match its hash" in capfd.readouterr().err
