"""Inference speed of an exported adapter: onnxruntime against PyTorch on one thread, side by side.

    python benchmarks/onnx_speed.py --backbone minilm --data-dir ../shared/data

A ``--method`` adapter (linear-probe or setfit; its head is untrained, which costs the same) is built on the
backbone, saved, and exported with ``infoprompt.export.export_onnx``. Both runtimes then see the same SST-2
dev sentences (``--n``; made-up ones when no data directory is found) in the same padded batches
(``--batch-size``, length-sorted as ``predict`` sorts them), one intra-op thread each, timed in interleaved
rounds (``--repeats``; one pass of each runtime per round, so machine load falls on both alike) after a
warm-up; the table reports the median examples/s and the largest probability difference. Not a test:
nothing here asserts.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def dev_sentences(data_dir: Path | None, n: int) -> list[str]:
    path = data_dir / "SST-2" / "dev.tsv" if data_dir else None
    if path and path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()[1:]
        return [line.split("\t")[0] for line in lines][:n]
    words = "the film was a quite good and very long story of an actor who did not like the plot".split()  # noqa: SIM905
    return [" ".join(words[: 3 + i % (len(words) - 3)]) for i in range(n)]


def build_adapter(backbone_name: str, method: str, directory: Path, max_length: int):
    import infoprompt as ip

    backbone = ip.load_backbone(backbone_name)
    model = ip.make_classifier(backbone, task="sst2", method=method, seed=0, max_length=max_length)
    with torch.no_grad():
        model.head.weight.normal_(0, 1)
    model.save_pretrained(directory)
    return model.eval()


def batches(model, texts: list[str], batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    from infoprompt.tasks import Example
    from infoprompt.training import encode_examples
    from infoprompt.training.data import length_sorted, prompted_batch

    encoded = encode_examples(model, [Example(fields={"sentence": t}, source=f"dev:{i + 1}") for i, t in enumerate(texts)])
    order = length_sorted(encoded)
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return [(b.input_ids, b.attention_mask) for b in (prompted_batch(model, encoded, c) for c in chunks)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--method", default="linear-probe", choices=("linear-probe", "setfit"))
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-length", type=int, default=128, help="the adapter's token budget (tiny test models: 32)")
    args = parser.parse_args()

    import onnxruntime

    from infoprompt.export import OnnxRunner, export_onnx, probability_graph

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="onnx-speed-") as scratch:
        model = build_adapter(args.backbone, args.method, Path(scratch) / "adapter", args.max_length)
        export_onnx(Path(scratch) / "adapter", Path(scratch) / "onnx")
        # One graph, or a probe's head graph on its shared encoder graph: the runner chains whichever it finds.
        runner = OnnxRunner(Path(scratch) / "onnx", threads=1)
        graph = probability_graph(model)
        texts = dev_sentences(args.data_dir, args.n)
        work = batches(model, texts, args.batch_size)

        def run_torch() -> list[np.ndarray]:
            with torch.inference_mode():
                return [graph(ids, mask).numpy() for ids, mask in work]

        def run_onnx() -> list[np.ndarray]:
            return [runner.probabilities(ids.numpy(), mask.numpy()) for ids, mask in work]

        runners = {"pytorch": run_torch, "onnxruntime": run_onnx}
        outputs = {name: run() for name, run in runners.items()}  # warm-up, and the outputs compared
        seconds: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(args.repeats):
            for name, run in runners.items():
                started = time.perf_counter()
                run()
                seconds[name].append(time.perf_counter() - started)
    difference = max(float(np.abs(a - b).max()) for a, b in zip(outputs["pytorch"], outputs["onnxruntime"], strict=True))
    rate = {name: len(texts) / statistics.median(times) for name, times in seconds.items()}
    print(f"{args.method} on {args.backbone}: {len(texts)} sentences, batch {args.batch_size}, 1 thread, "
          f"median of {args.repeats} interleaved rounds; torch {torch.__version__}, onnxruntime {onnxruntime.__version__}")
    print("| runtime | examples/s | vs pytorch |\n|---|---|---|")
    for name in runners:
        print(f"| {name} | {rate[name]:.1f} | {rate[name] / rate['pytorch']:.2f}x |")
    print(f"max |probability difference| = {difference:.2e}")


if __name__ == "__main__":
    main()
