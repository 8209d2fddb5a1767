"""``infoprompt export --onnx``: an adapter whose inference is one encoder pass and a head, as ONNX.

A kind whose head reads the plain frozen encoder pass (the shared-plain-pass capability: the linear probe) is
exported as two graphs: the encoder, from the tokenizer's inputs to the pooled features, written once per
backbone and feature options into a shared folder and reused by every adapter exported beside it, and the
adapter's own small graph from those features to the probabilities. :class:`OnnxRunner` chains them. A kind
whose trained weights sit inside the encoder (LoRA) or that fine-tunes its own copy (SetFit) has no frozen pass
to share: it is one graph from the tokenizer's inputs to the probabilities, as before."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
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
HEAD_NAME = "head.onnx"  # the adapter's own graph of a split export: features -> probabilities
ENCODER_NAME = "encoder.onnx"  # the shared encoder graph: input_ids, attention_mask -> features
IDENTITY_NAME = "encoder.json"  # what the shared encoder graph computes: backbone, fingerprint, kind, features
ENCODERS_DIR = "encoders"  # the shared encoder graphs' default folder, beside --out
FEATURES_NAME = "features"
LABELS_NAME = "labels.json"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "probabilities"
INSTALL_HINT = "pip install 'infoprompt[onnx]'"
OPSET = 18
# onnxruntime and PyTorch differ by float rounding only; more than this means the graph is wrong.
PARITY_TOLERANCE = 1e-4
HEAD_LIMIT_BYTES = 1_000_000  # an adapter's own graph of a split export is a head: a larger one is a wrong split
# Inputs the export is traced and checked on: texts of several lengths, so that no length is taken as fixed.
SAMPLE_TEXTS = ("a short one", "a somewhat longer sentence to read", "yes",
                "the longest of the sample sentences has quite a few more words than the others")


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote and how closely onnxruntime reproduced PyTorch on the sample inputs; a split export
    also names its shared encoder graph's folder, its size and whether this export wrote it or found it."""

    directory: Path
    onnx_bytes: int
    max_difference: float
    n_checked: int
    encoder: Path | None = None
    encoder_bytes: int = 0
    encoder_reused: bool = False


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


def token_graph(model: nn.Module, output: str) -> nn.Module:
    """The adapter's forward pass as a module of the tokenizer's two tensors, (B, L) ids and mask, giving
    ``output``: ``probabilities`` (B, C), its prediction; or ``features`` (B, F), the frozen pass that
    ``head_logits`` reads (shared-plain-pass kinds)."""
    from torch import nn

    class TokenGraph(nn.Module):
        def __init__(self, model: nn.Module):
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            # Kinds with the ONNX-export capability read nothing of a batch but these two tensors.
            batch = types.SimpleNamespace(input_ids=input_ids, attention_mask=attention_mask)
            scores, features, _ = self.model(batch)
            if output == "features":
                return features.float()
            return scores.float().softmax(-1)  # the softmax of logits, or of log-probabilities, alike

    return TokenGraph(model).eval()


def probability_graph(model: nn.Module) -> nn.Module:
    """The adapter's prediction as a module of the tokenizer's two tensors: (B, L) ids and mask -> (B, C)."""
    return token_graph(model, "probabilities")


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


def write_onnx(graph: nn.Module, inputs: tuple[torch.Tensor, ...], path: Path,
               input_names: tuple[str, ...] = INPUT_NAMES, output: str = OUTPUT_NAME) -> None:
    """Export ``graph`` on ``inputs``: every input's first axis is the batch; the tokenizer's tensors' second
    axis, the sequence, is free too."""
    import torch

    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    axes = {name: {0: batch, 1: sequence} if name in INPUT_NAMES else {0: batch} for name in input_names}
    with quiet_exporter(), torch.no_grad():
        torch.onnx.export(graph, inputs, str(path), input_names=list(input_names), output_names=[output],
                          dynamic_shapes=axes, opset_version=OPSET, dynamo=True, external_data=False)


def onnx_session(path: Path, threads: int = 1) -> Any:
    """An onnxruntime session of the graph at ``path`` on the CPU."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def token_feed(input_ids: Any, attention_mask: Any) -> dict[str, np.ndarray]:
    import numpy as np

    return {"input_ids": np.asarray(input_ids, dtype=np.int64), "attention_mask": np.asarray(attention_mask, dtype=np.int64)}


def onnx_probabilities(path: Path, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> np.ndarray:
    """Run the exported one-graph model with onnxruntime on one thread."""
    return onnx_session(path).run([OUTPUT_NAME], token_feed(input_ids.numpy(), attention_mask.numpy()))[0]


def chained_probabilities(encoder: Path, head: Path, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> np.ndarray:
    """Run a split export with onnxruntime on one thread: the shared encoder graph, then the adapter's head."""
    features = onnx_session(encoder).run([FEATURES_NAME], token_feed(input_ids.numpy(), attention_mask.numpy()))[0]
    return onnx_session(head).run([OUTPUT_NAME], {FEATURES_NAME: features})[0]


def export_onnx(adapter: Path, out: Path, cache_dir: str | None = None, encoders: Path | None = None) -> ExportResult:
    """Export the adapter in ``adapter`` to ``out`` (a new directory), checked against PyTorch with onnxruntime
    before the directory appears. A kind whose head reads the plain frozen pass (:func:`splits`): ``head.onnx``
    and ``labels.json``, which names the shared encoder graph in ``encoders`` (default: ``encoders`` beside
    ``out``), written there by the first export of its backbone and feature options and reused by the next.
    Other kinds: ``model.onnx``, the tokenizer's files and ``labels.json``."""
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
    encoder_dir = None
    if splits(config):
        encoder_dir = (encoders if encoders is not None else out.parent / ENCODERS_DIR) / encoder_folder(config)
        reusable_encoder(encoder_dir, config)  # a folder of another encoder is refused before any work
    model = load_adapter(adapter, config=config, cache_dir=cache_dir).cpu().eval()
    input_ids, attention_mask = sample_batch(model)
    if encoder_dir is not None:
        return export_split(model, out, encoder_dir, input_ids, attention_mask)
    return export_single(model, out, input_ids, attention_mask)


def export_single(model: Any, out: Path, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> ExportResult:
    """The adapter as one graph from the tokenizer's inputs to the probabilities (``model.onnx``)."""
    import numpy as np
    import torch

    graph = probability_graph(model)
    with staged_directory(out) as staging:
        write_onnx(graph, (input_ids, attention_mask), staging / ONNX_NAME)
        with torch.no_grad():
            expected = graph(input_ids, attention_mask).numpy()
        difference = float(np.abs(onnx_probabilities(staging / ONNX_NAME, input_ids, attention_mask) - expected).max())
        check_parity(difference)
        model.backbone.tokenizer.save_pretrained(str(staging))
        atomic_write_json(staging / LABELS_NAME, export_description(model.config))
        size = (staging / ONNX_NAME).stat().st_size
    return ExportResult(out, size, difference, len(input_ids))


def check_parity(difference: float, what: str = "the exported graph") -> None:
    if not difference <= PARITY_TOLERANCE:
        raise UserError(f"{what} disagrees with PyTorch by {difference:.2e} (> {PARITY_TOLERANCE})")


# -- split exports: a shared encoder graph and the adapter's head ---------------------------------------------------
def splits(config: ClassifierConfig) -> bool:
    """Whether the adapter exports as a shared encoder graph and a head of its own: its kind predicts from
    features of the plain frozen pass (the shared-plain-pass capability), read in one window (not ``chunk``)."""
    from infoprompt.kinds.registry import SHARED_PLAIN_PASS

    return config.kind.refusal(SHARED_PLAIN_PASS, config.options) is None and config.long_text != "chunk"


def encoder_identity(config: ClassifierConfig) -> dict[str, object]:
    """What the shared encoder graph of ``config`` computes: the backbone (by its portable name and fingerprint),
    the kind and the options its features depend on; adapters with equal identities share one graph."""
    from infoprompt.backbones import portable_name

    identity = {"backbone": portable_name(config.backbone), "fingerprint": dict(config.backbone_fingerprint),
                "kind": config.kind.name, "features": dict(config.options.feature_options())}
    return json.loads(json.dumps(identity, sort_keys=True))  # as encoder.json reads back (tuples as lists)


def encoder_folder(config: ClassifierConfig) -> str:
    """The shared encoder graph's folder name: the kind and a digest of :func:`encoder_identity`."""
    digest = hashlib.sha256(json.dumps(encoder_identity(config), sort_keys=True).encode()).hexdigest()[:16]
    return f"{config.kind.name}-{digest}"


def reusable_encoder(directory: Path, config: ClassifierConfig) -> bool:
    """Whether ``directory`` holds the encoder graph of ``config`` already (``False``: none is there yet); a
    directory that holds something else is refused, in one line."""
    if not directory.exists():
        return False
    try:
        found = json.loads((directory / IDENTITY_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        found = None
    if found != encoder_identity(config) or not (directory / ENCODER_NAME).is_file():
        raise UserError(f"{directory} is not the shared encoder graph of this adapter (its {IDENTITY_NAME} names "
                        f"another encoder, or it is incomplete); remove it or give another --encoders")
    return True


def feature_graph(model: nn.Module) -> nn.Module:
    """The adapter's frozen pass as a module of the tokenizer's two tensors: (B, L) ids and mask -> (B, F)."""
    return token_graph(model, "features")


def head_graph(model: nn.Module) -> nn.Module:
    """The adapter's own part as a module of the features: (B, F) -> (B, C) probabilities (a sigmoid per label
    for a multi-label adapter, as prediction gives them)."""
    from torch import nn

    from infoprompt.tasks import is_multi_label

    multi = is_multi_label(model.task)

    class HeadGraph(nn.Module):
        def __init__(self, model: nn.Module):
            super().__init__()
            # Not a submodule: the exporter keeps only the tensors the head reads, not the encoder's weights.
            object.__setattr__(self, "adapter", model)

        def forward(self, features: torch.Tensor) -> torch.Tensor:
            logits = self.adapter.head_logits(features).float()
            return logits.sigmoid() if multi else logits.softmax(-1)

    return HeadGraph(model).eval()


def export_split(model: Any, out: Path, encoder_dir: Path, input_ids: torch.Tensor,
                 attention_mask: torch.Tensor) -> ExportResult:
    """``out/head.onnx`` and ``out/labels.json``, with the shared encoder graph written into ``encoder_dir``
    unless it is there already; the chain of the two is checked against PyTorch."""
    import numpy as np
    import torch

    encoder, head = feature_graph(model), head_graph(model)
    with torch.no_grad():
        features = encoder(input_ids, attention_mask)
        expected = head(features).numpy()
    reused = reusable_encoder(encoder_dir, model.config)
    if not reused:
        with staged_directory(encoder_dir) as staging:
            write_onnx(encoder, (input_ids, attention_mask), staging / ENCODER_NAME, output=FEATURES_NAME)
            exported = onnx_session(staging / ENCODER_NAME).run([FEATURES_NAME], token_feed(input_ids, attention_mask))[0]
            check_parity(float(np.abs(exported - features.numpy()).max()), "the exported encoder graph")
            model.backbone.tokenizer.save_pretrained(str(staging))
            atomic_write_json(staging / IDENTITY_NAME, encoder_identity(model.config))
    with staged_directory(out) as staging:
        write_onnx(head, (features,), staging / HEAD_NAME, input_names=(FEATURES_NAME,))
        chained = chained_probabilities(encoder_dir / ENCODER_NAME, staging / HEAD_NAME, input_ids, attention_mask)
        difference = float(np.abs(chained - expected).max())
        check_parity(difference)
        size = (staging / HEAD_NAME).stat().st_size
        if size > HEAD_LIMIT_BYTES:  # the head graph carries more than the head: a wrong split, not a user error
            raise RuntimeError(f"{HEAD_NAME} is {size:,} bytes, over {HEAD_LIMIT_BYTES:,}: it carries the encoder")
        description = {**export_description(model.config), "inputs": [FEATURES_NAME], "layout": "split",
                       "encoder": Path(os.path.relpath(encoder_dir, out)).as_posix(),
                       "encoder_inputs": list(INPUT_NAMES), "encoder_output": FEATURES_NAME}
        atomic_write_json(staging / LABELS_NAME, description)
    encoder_bytes = (encoder_dir / ENCODER_NAME).stat().st_size
    return ExportResult(out, size, difference, len(input_ids), encoder_dir, encoder_bytes, reused)


class OnnxRunner:
    """Predict with an export of ``infoprompt export --onnx`` with onnxruntime alone (no torch model): the
    tokenizer, then the one graph, or the shared encoder graph and the adapter's head chained.

    ``OnnxRunner("exported/sst2").predict(["a gorgeous film"])``; ``encoder``: the shared encoder graph's folder
    when it is not where ``labels.json`` says (relative to the export); ``threads``: onnxruntime's threads.
    Inputs are tokenized by the tokenizer saved with the encoder (a pair as the tokenizer's text pair), cut at
    the adapter's ``max_length``."""

    def __init__(self, directory: str | Path, encoder: str | Path | None = None, threads: int = 1):
        from transformers import AutoTokenizer

        directory = Path(directory)
        self.description = json.loads((directory / LABELS_NAME).read_text(encoding="utf-8"))
        self.labels: list[str] = list(self.description["labels"])
        self.split = self.description.get("layout") == "split"
        if self.split:
            encoder_dir = Path(encoder) if encoder is not None else directory / self.description["encoder"]
            self.sessions = [onnx_session(encoder_dir / ENCODER_NAME, threads),
                             onnx_session(directory / HEAD_NAME, threads)]
        else:
            encoder_dir = directory
            self.sessions = [onnx_session(directory / ONNX_NAME, threads)]
        self.tokenizer = AutoTokenizer.from_pretrained(str(encoder_dir))

    def predict_proba(self, texts: list[Any]) -> np.ndarray:
        """The probabilities (n, labels), in the order of :attr:`labels`."""
        pairs = bool(texts) and isinstance(texts[0], tuple | list)
        sides = [list(side) for side in zip(*texts, strict=True)] if pairs else [list(texts)]
        tokens = self.tokenizer(*sides, padding=True, truncation=True, max_length=self.description["max_length"],
                                return_tensors="np")
        return self.probabilities(tokens["input_ids"], tokens["attention_mask"])

    def probabilities(self, input_ids: Any, attention_mask: Any) -> np.ndarray:
        """The probabilities of inputs already tokenized."""
        feed = token_feed(input_ids, attention_mask)
        if not self.split:
            return self.sessions[0].run([OUTPUT_NAME], feed)[0]
        features = self.sessions[0].run([FEATURES_NAME], feed)[0]
        return self.sessions[1].run([OUTPUT_NAME], {FEATURES_NAME: features})[0]

    def predict(self, texts: list[Any]) -> list[str]:
        """The most probable label of each input."""
        return [self.labels[int(i)] for i in self.predict_proba(texts).argmax(-1)]


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
    result = export_onnx(Path(args.adapter), Path(args.out), args.cache_dir,
                         Path(args.encoders) if args.encoders else None)
    check = f"onnxruntime matches PyTorch within {result.max_difference:.1e} on {result.n_checked} inputs"
    if result.encoder is None:
        print(f"exported {args.adapter} to {result.directory / ONNX_NAME} ({result.onnx_bytes / 1e6:.1f} MB) with "
              f"the tokenizer and {LABELS_NAME}; {check}")
    else:
        found = "found there, reused" if result.encoder_reused else "written"
        print(f"exported {args.adapter} to {result.directory / HEAD_NAME} ({result.onnx_bytes / 1e3:.1f} kB) and "
              f"{LABELS_NAME}, on the shared encoder graph {result.encoder / ENCODER_NAME} "
              f"({result.encoder_bytes / 1e6:.1f} MB, {found}, with the tokenizer); {check}")
    return 0


def add_export_command(commands: Any) -> None:
    """Register ``infoprompt export`` on the CLI's subcommands."""
    export = commands.add_parser("export", help="export an adapter for serving outside Python (ONNX)")
    export.add_argument("--onnx", action="store_true", help="write ONNX graphs (needs the onnx extra)")
    export.add_argument("--adapter", required=True, help="a run directory of an adapter whose kind exports "
                        "(linear-probe, setfit, setfit-lora, top-lora)")
    export.add_argument("--out", required=True, help="a new directory: a linear-probe's head.onnx and labels.json "
                        "(its encoder graph is shared, see --encoders); else model.onnx, the tokenizer and labels.json")
    export.add_argument("--encoders", help="the folder of the shared encoder graphs a linear-probe's export reads "
                        f"(one per backbone and pooling, written by the first export that needs it; default: "
                        f"{ENCODERS_DIR} beside --out)")
    export.add_argument("--cache-dir", help="where packaged backbones are extracted (default ~/.cache/infoprompt)")
    export.add_argument("--quiet", action="store_true", help="no progress bars or notices")
    export.set_defaults(handler=cmd_export)
