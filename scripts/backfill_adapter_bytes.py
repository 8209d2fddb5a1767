"""Give sweep records written before ``adapter_bytes`` existed their adapter's size, from an untrained rebuild.

    python scripts/backfill_adapter_bytes.py RESULTS_DIR [RESULTS_DIR ...] [--cache-dir DIR] [--dry-run]

For every finished record lacking ``adapter_bytes``, the adapter of its run spec (backbone, method, task, n_p,
classifier options) is built as the sweep builds a cell, untrained, saved with ``save_pretrained`` to a scratch
directory beside the record, measured and deleted; the record gets ``adapter_bytes`` and
``adapter_bytes_from: "rebuilt"``, written atomically. Each shape is built once. Parameter shapes do not depend
on training, so a rebuilt size is the trained one up to the JSON the adapter carries, with one exception:
the unfitted regression head of ``setfit`` and ``setfit-lora`` is saved as one row, a fitted one as one row
per class on tasks of more than two classes (8·D bytes a row, 55 kB on SemEval with MiniLM, next to the
encoder copy's 90 MB for ``setfit``).
Records that have the field, failed records and records without a run spec are left as they are.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from infoprompt.errors import UserError
from infoprompt.experiments.store import RECORD_GLOB, STATUS_OK, read_record
from infoprompt.experiments.sweep import BackboneCache
from infoprompt.io_utils import atomic_write_json, scratch_directory
from infoprompt.pipeline import RunSpec, build_classifier, save_adapter
from infoprompt.training.config import TrainConfig

SOURCE = "rebuilt"


def run_spec(record: dict[str, Any], path: Path) -> RunSpec:
    """The run spec a record was trained from (fields a later version dropped are ignored)."""
    spec = record.get("spec")
    if not isinstance(spec, dict):
        raise UserError(f"{path}: the record has no run spec to rebuild its adapter from")
    known = {f.name for f in dataclasses.fields(RunSpec)}
    training = spec.get("training") or {}
    settings = {f.name: training[f.name] for f in dataclasses.fields(TrainConfig) if f.name in training}
    return RunSpec(**{**{k: v for k, v in spec.items() if k in known}, "training": TrainConfig(**settings)})


def shape_key(spec: RunSpec) -> tuple[str, str, str | None, int, str, bool]:
    """What an adapter's files depend on; the seed (initial values only) and the training settings are not."""
    return (spec.backbone, spec.method, spec.task, spec.n_prompts, json.dumps(spec.classifier, sort_keys=True),
            spec.keep_training_state)


def measure(spec: RunSpec, beside: Path, backbones: BackboneCache, cache_dir: str | None) -> int:
    """Build the spec's adapter untrained, save it into a scratch directory beside ``beside``, measure it."""
    backbone = backbones.get(spec.backbone, cache_dir or spec.cache_dir)
    model = build_classifier(spec, backbone)
    scratch = scratch_directory(beside, "cannot measure the adapter of")
    try:
        return save_adapter(model, scratch / "adapter", spec.keep_training_state)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def backfill(results_dirs: Sequence[str | Path], *, cache_dir: str | None = None, dry_run: bool = False,
             backbones: BackboneCache | None = None, echo: Callable[[str], None] = print) -> tuple[int, list[str]]:
    """Fill every finished record lacking ``adapter_bytes`` below ``results_dirs``; returns the number of
    records filled (or, with ``dry_run``, to fill) and one line per record left unfilled, with the reason."""
    backbones = backbones or BackboneCache()
    sizes: dict[tuple, int] = {}
    failures: dict[tuple, str] = {}  # shapes that could not be built: not tried again for the next record
    filled, problems = 0, []
    for directory in results_dirs:
        root = Path(directory)
        if not root.is_dir():
            raise UserError(f"results directory {root} does not exist")
        for path in sorted(root.glob(RECORD_GLOB)):
            record = read_record(path)
            if record is None or record.get("status", STATUS_OK) != STATUS_OK or "adapter_bytes" in record:
                continue
            try:
                spec = run_spec(record, path)
            except (UserError, TypeError) as error:
                problems.append(f"{path}: {error}")
                continue
            key = shape_key(spec)
            if dry_run:
                filled += 1
                echo(f"{path}: would rebuild {spec.method} on {spec.backbone} ({spec.task}, n_p={spec.n_prompts})")
                continue
            if key not in sizes and key not in failures:
                try:
                    sizes[key] = measure(spec, path, backbones, cache_dir)
                except (UserError, TypeError, ValueError, OSError) as error:
                    failures[key] = str(error)
            if key in failures:
                problems.append(f"{path}: {failures[key]}")
                continue
            atomic_write_json(path, {**record, "adapter_bytes": sizes[key], "adapter_bytes_from": SOURCE})
            filled += 1
            echo(f"{path}: {sizes[key]} bytes")
    return filled, problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="results directories written by infoprompt sweep")
    parser.add_argument("--cache-dir", help="where packaged backbones (mpnet) are extracted; default: each record's")
    parser.add_argument("--dry-run", action="store_true", help="list the records that lack the field, change nothing")
    args = parser.parse_args(argv)
    try:
        filled, problems = backfill(args.results, cache_dir=args.cache_dir, dry_run=args.dry_run)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for line in problems:
        print(f"not filled: {line}", file=sys.stderr)
    print(f"{'would fill' if args.dry_run else 'filled'} {filled} record(s); {len(problems)} could not be rebuilt")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
