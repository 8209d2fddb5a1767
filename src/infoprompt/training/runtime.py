"""Where a run executes: its device, bfloat16 autocast, and the processes of ``accelerate launch``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn
from tqdm.auto import tqdm

from infoprompt.errors import UserError
from infoprompt.progress import bar_disabled
from infoprompt.training.config import PRECISIONS

if TYPE_CHECKING:
    from accelerate import Accelerator, PartialState


def resolve_device(name: str) -> torch.device:
    """The torch device for ``TrainConfig.device``; each process of a multi-GPU launch takes its local GPU."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {name!r}; valid: auto, cpu, cuda, cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {name!r} asked for, but this torch {torch.__version__} sees no CUDA GPU; use --device cpu")
        if device.index is None:
            device = torch.device("cuda", local % torch.cuda.device_count())
        elif device.index >= torch.cuda.device_count():
            raise UserError(f"device {name!r} asked for, but only {torch.cuda.device_count()} CUDA GPU(s) are visible")
    elif device.type != "cpu":
        raise UserError(f"device {name!r} is not supported; valid: auto, cpu, cuda, cuda:N")
    return device


def run_device(name: str, accelerator: Accelerator) -> torch.device:
    """The device of a training run: :func:`resolve_device`, except that under ``accelerate launch`` ``auto`` is
    the device accelerate gives this process, and any other choice must be that one (DDP's place for it)."""
    if accelerator.num_processes == 1:
        return resolve_device(name)
    device = accelerator.device if name == "auto" else resolve_device(name)
    if device.type != accelerator.device.type or (device.type != "cpu" and device != accelerator.device):  # cpu is cpu:0
        raise UserError(f"device {name!r} is {device}, but accelerate launch gave this process {accelerator.device}; "
                        "use --device auto under a launcher")
    return device


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@contextlib.contextmanager
def autocast(device: torch.device, precision: str) -> Iterator[None]:
    """bfloat16 autocast for ``precision="bf16"``, nothing for ``fp32``."""
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    if precision == "fp32":
        yield
        return
    with torch.autocast(device.type, dtype=torch.bfloat16):
        yield


def process_state() -> PartialState:
    """This process's place among the processes of ``accelerate launch`` (or ``torchrun``): accelerate's
    ``PartialState`` (``is_main_process``, ``num_processes``). A plain process is the main and only one."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    # PartialState reads ACCELERATE_USE_CPU only when told to (Accelerator does it itself); without it,
    # processes launched on a machine with no GPU would each believe they run alone.
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and state.num_processes != launched:
        raise UserError(f"this process is one of {launched} (WORLD_SIZE), but accelerate set up {state.num_processes}; "
                        "on CPUs launch with ACCELERATE_USE_CPU=true (see README, Multi-process training)")
    return state


def start_accelerator(precision: str) -> Accelerator:
    """The accelerator a training run goes through: with one process it changes nothing; under ``accelerate
    launch`` it joins the process group (gloo on CPUs, NCCL on GPUs) and wraps the training pass in DDP."""
    from accelerate import Accelerator, DistributedDataParallelKwargs
    from accelerate.utils import DistributedType

    process_state()  # joins the process group, or refuses a launch accelerate did not see
    accelerator = Accelerator(
        # --device places the model (resolve_device, LOCAL_RANK's GPU under a launcher), alike for 1 or N processes.
        device_placement=False,
        dynamo_backend="no",
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],  # see LossPass
    )
    kind = accelerator.distributed_type
    if kind != DistributedType.NO and not (accelerator.multi_device or kind == DistributedType.MULTI_CPU):
        # FSDP, DeepSpeed and the like shard the parameters; an adapter of a few hundred kilobytes has nothing
        # worth sharding, and the prediction passes run on the unwrapped model.
        raise UserError(f"infoprompt trains with data parallelism (DDP) only; accelerate is set up for {kind.value}: "
                        "launch with --multi_gpu (and ACCELERATE_USE_CPU=true for CPU processes)")
    if accelerator.mixed_precision not in ("no", precision):
        raise UserError(f"accelerate launch --mixed_precision {accelerator.mixed_precision} does not apply to infoprompt: "
                        f"launch with --mixed_precision no and pass --precision bf16 to train for bfloat16 autocast")
    return accelerator


class LossPass(nn.Module):
    """A model's training pass (``model.losses``) as a module's ``forward``.

    DDP reduces the gradients of what runs through the wrapped module's ``forward``, so this module, not the
    model, is what ``accelerator.prepare`` wraps. It holds the frozen backbone too: the prompts enter the
    encoder's input and the head reads its output, so the trainable parts cannot run outside it. DDP
    reduces only parameters that require gradients, so the frozen encoder costs one broadcast when the
    wrapper is built (which also starts every process from the main process's weights) and no gradient
    traffic. The accelerator sets DDP's ``find_unused_parameters``: a loss does not always reach every
    trainable parameter (fine-tuning trains the encoder's pooler, which the last-layer states never reach; a
    registered kind may have more), and DDP would otherwise fail at the next step. It costs a walk of the
    autograd graph per step, little next to an encoder pass (and a warning, once per run and process, where
    every parameter is used). DDP's ``static_graph`` would spare the walk, but under it the processes'
    bottleneck adapters drifted apart (``benchmarks/ddp_check.py`` compares every process's parameters).
    Every process runs the pass at every step; one with no example in a batch runs a zero-weighted one.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch, labels: torch.Tensor, pooled: torch.Tensor | None, z_plain: torch.Tensor | None,
                generator: torch.Generator | None):
        return self.model.losses(batch, labels, pooled, z_plain, generator)


def map_chunks(
    accelerator: Accelerator | None,
    chunks: list[list[int]],
    n: int,
    widths: Sequence[int],
    compute: Callable[[list[int]], Sequence[torch.Tensor]],
    device: torch.device,
    desc: str,
    progress: bool = False,
) -> tuple[torch.Tensor, ...]:
    """``compute(chunk)`` over every chunk of example indices, as float32 tensors of rows ``(n, width)`` in
    example order.

    With several processes each computes a contiguous share of the chunks and the rows are gathered
    (``gather_for_metrics``), so every process ends with every row. An example is computed in the same batch
    either way, so its numbers do not depend on the number of processes.
    """
    outputs = tuple(torch.zeros(n, width, device=device) for width in widths)
    if accelerator is None or accelerator.num_processes == 1:
        for chunk in tqdm(chunks, desc=desc, disable=bar_disabled(progress), leave=False):
            for out, rows in zip(outputs, compute(chunk), strict=True):
                out[chunk] = rows.float()
        return outputs
    with accelerator.split_between_processes(chunks) as mine:
        index = torch.tensor([i for chunk in mine for i in chunk], dtype=torch.long, device=device)
        parts = [compute(chunk) for chunk in tqdm(mine, desc=desc, disable=bar_disabled(progress), leave=False)]
    rows = tuple(
        torch.cat([part[k].float() for part in parts]) if parts else torch.zeros(0, width, device=device)
        for k, width in enumerate(widths)
    )
    # Shares differ in length: pad them to the longest (index -1 marks padding), gather, drop the padding.
    index, rows = accelerator.gather_for_metrics(
        (accelerator.pad_across_processes(index, pad_index=-1), accelerator.pad_across_processes(rows))
    )
    kept = index >= 0
    for out, gathered in zip(outputs, rows, strict=True):
        out[index[kept]] = gathered[kept]
    return outputs
