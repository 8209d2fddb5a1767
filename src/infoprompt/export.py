"""``infoprompt export --onnx``: an adapter whose inference is one encoder pass and a linear head, as an ONNX graph
from the tokenizer's inputs to class probabilities, with the tokenizer and the label names beside it."""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infoprompt.errors import UserError
from infoprompt.io_utils import atomic_write_json, check_run_target, staged_directory

if TYPE_CHECKING:  # the CLI imports this module at start, before any command needs torch
    import numpy as np
    import torch
    from torch import nn

    from infoprompt.kinds.config import ClassifierConfig

ONNX_NAME = "model.onnx"
LABELS_NAME = "labels.json"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "probabilities"
INSTALL_HINT = "pip install 'infoprompt[onnx]'"
OPSET = 18
# onnxruntime and PyTorch differ by float rounding only; more than this means the graph is wrong.
PARITY_TOLERANCE = 1e-4
# Inputs the export is traced and checked on: texts of several lengths, so that no length is taken as fixed.
SAMPLE_TEXTS = ("a short one", "a somewhat longer sentence to read", "yes",
                "the longest of the sample sentences has quite a few more words than the others")


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote and how closely onnxruntime reproduced PyTorch on the sample inputs."""

    directory: Path
    onnx_bytes: int
    max_difference: float
    n_checked: int


def export_refusal(config: ClassifierConfig) -> str | None:
    """Why the adapter cannot be exported as one encoder pass plus a head, or ``None`` when it can: its kind
    has the ONNX-export capability and its options keep it."""
    from infoprompt.kinds.registry import ONNX_EXPORT, kinds_with
    from infoprompt.templates import Template

    pairs = config.template is not None and len(Template.parse(config.template).fields) == 2
    reason = config.kind.refusal(ONNX_EXPORT, config.options, pairs=pairs)
    if reason is None:
        return None
    return (f"method {config.method} cannot be exported to ONNX: {reason} (exportable kinds: "
            f"{', '.join(kinds_with(ONNX_EXPORT))})")


def require_onnx() -> None:
    """Fail with one line when the optional ``onnx`` extra (onnx, onnxscript, onnxruntime) is missing."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as error:
        raise UserError(f"ONNX export needs the onnx extra ({error.name} is missing): {INSTALL_HINT}") from None


def probability_graph(model: nn.Module) -> nn.Module:
    """The adapter's prediction as a module of the tokenizer's two tensors: (B, L) ids and mask -> (B, C)."""
    from torch import nn

    class ProbabilityGraph(nn.Module):
        def __init__(self, model: nn.Module):
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            # Kinds with the ONNX-export capability read nothing of a batch but these two tensors.
            batch = types.SimpleNamespace(input_ids=input_ids, attention_mask=attention_mask)
            scores, _, _ = self.model(batch)
            return scores.float().softmax(-1)  # the softmax of logits, or of log-probabilities, alike

    return ProbabilityGraph(model).eval()


def sample_batch(model: Any, texts: tuple[str, ...] = SAMPLE_TEXTS) -> tuple[torch.Tensor, torch.Tensor]:
    """The ids and mask the adapter's own encoder gives ``texts`` (each task field filled with the text)."""
    from infoprompt.tasks import Example
    from infoprompt.training import encode_examples
    from infoprompt.training.data import prompted_batch

    examples = [Example(fields={name: text for name in model.task.fields}, source=f"sample {i + 1}")
                for i, text in enumerate(texts)]
    batch = prompted_batch(model, encode_examples(model, examples), list(range(len(examples))))
    return batch.input_ids.cpu(), batch.attention_mask.cpu()


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """The exporter prints its progress, logs that torchvision's operators are not registered, and warns that
    the batch and sequence axes share constraints (they do: ids and mask have one shape) and about its own use
    of a deprecated pytree class; none of it is the user's concern."""
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.filterwarnings("ignore", message=".*will not be used, since it shares the same shape.*")
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            yield
    finally:
        exporter_log.setLevel(level)


def write_onnx(graph: nn.Module, inputs: tuple[torch.Tensor, torch.Tensor], path: Path) -> None:
    import torch

    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    axes = {name: {0: batch, 1: sequence} for name in INPUT_NAMES}
    with quiet_exporter(), torch.no_grad():
        torch.onnx.export(graph, inputs, str(path), input_names=list(INPUT_NAMES), output_names=[OUTPUT_NAME],
                          dynamic_shapes=axes, opset_version=OPSET, dynamo=True, external_data=False)


def onnx_probabilities(path: Path, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> np.ndarray:
    """Run the exported graph with onnxruntime on one thread."""
    import numpy as np
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {"input_ids": input_ids.numpy().astype(np.int64), "attention_mask": attention_mask.numpy().astype(np.int64)}
    return session.run([OUTPUT_NAME], feed)[0]


def export_onnx(adapter: Path, out: Path, cache_dir: str | None = None) -> ExportResult:
    """Export the adapter in ``adapter`` to ``out`` (a new directory): ``model.onnx``, the tokenizer's files and
    ``labels.json``; the graph is checked against PyTorch with onnxruntime before the directory appears."""
    import numpy as np
    import torch

    from infoprompt.kinds import load_adapter
    from infoprompt.kinds.config import read_adapter_config

    config = read_adapter_config(adapter)
    refusal = export_refusal(config)
    if refusal:
        raise UserError(refusal)
    require_onnx()
    if out.exists():
        raise UserError(f"output directory {out} already exists; remove it or name a new one")
    check_run_target(out)
    model = load_adapter(adapter, config=config, cache_dir=cache_dir).cpu().eval()
    graph = probability_graph(model)
    input_ids, attention_mask = sample_batch(model)
    with staged_directory(out) as staging:
        write_onnx(graph, (input_ids, attention_mask), staging / ONNX_NAME)
        with torch.no_grad():
            expected = graph(input_ids, attention_mask).numpy()
        difference = float(np.abs(onnx_probabilities(staging / ONNX_NAME, input_ids, attention_mask) - expected).max())
        if not difference <= PARITY_TOLERANCE:
            raise UserError(f"the exported graph disagrees with PyTorch by {difference:.2e} (> {PARITY_TOLERANCE})")
        model.backbone.tokenizer.save_pretrained(str(staging))
        atomic_write_json(staging / LABELS_NAME, export_description(model.config))
        size = (staging / ONNX_NAME).stat().st_size
    return ExportResult(out, size, difference, len(input_ids))


def export_description(config: ClassifierConfig) -> dict[str, object]:
    """``labels.json``: the class names in output order and how the inputs are made."""
    return {
        "labels": list(config.labels),
        "inputs": list(INPUT_NAMES),
        "output": OUTPUT_NAME,
        "method": config.method,
        "task": config.task,
        "backbone": config.backbone,
        "template": config.template,
        "max_length": config.max_length,
    }


def cmd_export(args: argparse.Namespace) -> int:
    if not args.onnx:
        raise UserError("name the format to export to: --onnx (the only one so far)")
    result = export_onnx(Path(args.adapter), Path(args.out), args.cache_dir)
    print(f"exported {args.adapter} to {result.directory / ONNX_NAME} ({result.onnx_bytes / 1e6:.1f} MB) with the "
          f"tokenizer and {LABELS_NAME}; onnxruntime matches PyTorch within {result.max_difference:.1e} on "
          f"{result.n_checked} inputs")
    return 0


def add_export_command(commands: Any) -> None:
    """Register ``infoprompt export`` on the CLI's subcommands."""
    export = commands.add_parser("export", help="export an adapter for serving outside Python (ONNX)")
    export.add_argument("--onnx", action="store_true", help="write model.onnx (needs the onnx extra)")
    export.add_argument("--adapter", required=True, help="a run directory of a linear-probe or setfit adapter")
    export.add_argument("--out", required=True, help="a new directory for model.onnx, the tokenizer and labels.json")
    export.add_argument("--cache-dir", help="where packaged backbones are extracted (default ~/.cache/infoprompt)")
    export.add_argument("--quiet", action="store_true", help="no progress bars or notices")
    export.set_defaults(handler=cmd_export)
