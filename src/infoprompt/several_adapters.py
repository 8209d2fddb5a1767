"""``infoprompt predict`` with several adapters on one input file: each backbone loaded once, the LoRA adapters of
one backbone predicted in mixed batches (:mod:`infoprompt.kinds.mixed_lora`: the blocks below their LoRA run once
per text), the others one after the other; one output column set per adapter."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError


def adapter_names(paths: Sequence[str]) -> list[str]:
    """Each adapter's name in the output: its directory's name, or the path as given where two share a name."""
    names = [Path(path).resolve().name or path for path in paths]
    return [name if names.count(name) == 1 else path for name, path in zip(names, paths, strict=True)]


def read_configs(paths: Sequence[str]) -> tuple[list[Any], Any]:
    """The adapters' configs and the task whose fields the input file must have: every adapter must read the same
    text fields."""
    from infoprompt.kinds.config import config_task, read_adapter_config

    duplicates = sorted({path for path in paths if list(map(str, map(Path, paths))).count(str(Path(path))) > 1})
    if duplicates:
        raise UserError(f"argument --adapter: {duplicates[0]} is given more than once")
    configs = [read_adapter_config(Path(path)) for path in paths]
    tasks = [config_task(config) for config in configs]
    for path, task in zip(paths[1:], tasks[1:], strict=True):
        if tuple(task.fields) != tuple(tasks[0].fields):
            raise UserError(f"--adapter {path} reads the fields {', '.join(task.fields)}, but --adapter {paths[0]} "
                            f"reads {', '.join(tasks[0].fields)}: adapters that share an input file read the same fields")
    return configs, tasks[0]


def load_models(paths: Sequence[str], configs: Sequence[Any], cache_dir: str | None, device: Any) -> list[Any]:
    """The adapters, each backbone (by the name their configs give) loaded once and shared."""
    from infoprompt.backbones import load_backbone
    from infoprompt.kinds import load_adapter

    backbones: dict[str, Any] = {}
    models = []
    for path, config in zip(paths, configs, strict=True):
        local = Path(config.backbone).expanduser()
        key = str(local.resolve()) if local.exists() else config.backbone  # a directory by its real path
        if key not in backbones:
            backbones[key] = load_backbone(config.backbone, cache_dir=cache_dir, from_file=True)
        models.append(load_adapter(path, backbone=backbones[key], config=config).to(device))
    return models


def predict_several(models: Sequence[Any], rows: Sequence[dict[str, str]], sources: Sequence[str], batch_size: int,
                    precision: str) -> list[list[dict[str, object]]]:
    """Each model's records of ``rows``, as :func:`~infoprompt.training.inference.predict` gives them; the LoRA
    adapters of one backbone together (in fp32; another precision runs each adapter alone, under autocast)."""
    from infoprompt.kinds.mixed_lora import keep_mixed_parts_only, predict_mixed
    from infoprompt.training.inference import predict

    records: list[list[dict[str, object]] | None] = [None] * len(models)
    groups: dict[int, list[int]] = {}
    for index, model in enumerate(models):
        # A LoRA adapter predicts in mixed batches only, chunk after chunk: its LoRA is read out once, as the
        # server does.
        if precision == "fp32" and keep_mixed_parts_only(model) is not None:
            groups.setdefault(id(model.backbone), []).append(index)
        else:
            records[index] = predict(model, rows, batch_size, precision, sources)
    for members in groups.values():
        mixed = predict_mixed([(models[i], rows, sources) for i in members], batch_size)
        for index, result in zip(members, mixed.records, strict=True):
            records[index] = result
    return records  # type: ignore[return-value]
