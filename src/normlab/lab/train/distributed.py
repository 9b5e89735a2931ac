"""Running one training job on N processes: start-up from torchrun's environment, model wrapping
(DDP or FSDP2), batch sharding, agreement between ranks, and full-state checkpoints.

Everything degrades to a no-op for one process, so the trainer calls it unconditionally. The
contract that makes N ranks equal one process: every rank builds the same model from the same
seed and draws the same *global* batch; rank r keeps rows ``[r*B/N, (r+1)*B/N)``. DDP/FSDP then
average the gradients of per-rank mean losses, which is the gradient of the global mean loss.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from normlab.lab.train.device import concrete_device


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job (``world_size == 1``: no process group)."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    owns_group: bool = False  # setup() started the process group, so teardown() ends it

    @property
    def is_main(self) -> bool:
        """Only rank 0 logs and writes files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def backend_for(device: torch.device) -> str:
    """The collective backend for ``device``: NCCL moves CUDA tensors, gloo CPU tensors. Chosen
    from the device the run uses, not from what is installed: a CUDA build training on the CPU
    still needs gloo."""
    return "nccl" if device.type == "cuda" else "gloo"


def setup(device: str = "auto", timeout_s: float = 300.0) -> DistInfo:
    """Join the job torchrun started (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``), or
    describe a lone process. ``timeout_s`` bounds every collective, so a rank that died turns a
    hang into an error on the others."""
    from normlab.lab.kit.io import job_rank

    rank, world = job_rank()  # a RANK left in a shell's environment makes no job of one process
    local = os.environ.get("LOCAL_RANK", "0")
    local_rank = int(local) if local.isdigit() and len(local) < 8 else 0
    dev = torch.device(concrete_device(device))  # each rank gets its own GPU
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device='cuda' but torch.cuda.is_available() is False")
        dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    if world == 1:
        return DistInfo(device=dev)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if dist.is_initialized():  # the caller runs the group (e.g. a test harness)
        return DistInfo(rank, world, dev)
    dist.init_process_group(
        backend_for(dev),
        timeout=timedelta(seconds=timeout_s),
        device_id=dev if dev.type == "cuda" else None,
    )
    return DistInfo(rank, world, dev, owns_group=True)


def teardown(info: DistInfo) -> None:
    """End the process group if :func:`setup` started it.

    A garbage collection first: an FSDP2 model sits in reference cycles that hold the group and
    its last collectives' work objects, and left to the interpreter's exit they are destroyed
    during finalization, where gloo's destructors can abort the process ("terminate called
    without an active exception", seen once in ~40 two-rank runs after training had finished).
    """
    if info.owns_group and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def wrap(model: nn.Module, info: DistInfo, *, fsdp: bool, blocks: Iterable[nn.Module]) -> nn.Module:
    """DDP, or FSDP2 with one ``fully_shard`` unit per block and one for the rest (embeddings,
    final norm, head) at the root. Under FSDP2 the optimizer must be built *after* this call:
    the parameters become sharded DTensors. One process: the model unchanged."""
    if not info.distributed:
        return model
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        for block in blocks:
            fully_shard(block)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [info.device.index] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def mean_over_ranks(value: float, info: DistInfo) -> float:
    """The mean of a per-rank number (a loss) over the ranks, on every rank (in float64): with
    equal shares this is the global batch's loss, the number a single process logs."""
    if not info.distributed:
        return value
    t = torch.tensor(value, dtype=torch.float64, device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)  # gloo has no AVG
    return float(t / info.world_size)


def any_rank(flag: bool, info: DistInfo) -> bool:
    """True on every rank if ``flag`` is true on any: the stop decision (divergence) must be
    the same everywhere, or the ranks that continue wait forever in the next collective."""
    if not info.distributed:
        return flag
    t = torch.tensor([int(flag)], device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def barrier(info: DistInfo) -> None:
    if info.distributed:
        dist.barrier()


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Unsharded, CPU, wrapper-free ``(model, optimizer)`` state dicts keyed by parameter name,
    so a checkpoint from N ranks (DDP or FSDP) loads into any other layout. A collective: every
    rank must call it; under FSDP only rank 0 receives the tensors (the others get ``{}``)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_state_dict(model, optimizer, options=opts)


def load_full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, model_sd: dict, optim_sd: dict
) -> None:
    """Inverse of :func:`full_state`; every rank passes the full dicts and keeps its shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(
        model,
        optimizer,
        model_state_dict=model_sd,
        optim_state_dict=optim_sd,
        options=StateDictOptions(full_state_dict=True),
    )


def save_atomic(obj: dict, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary name, then rename: a process killed mid-write leaves the
    previous checkpoint intact instead of a truncated file."""
    from normlab.lab.kit.io import atomic_writer

    with atomic_writer(path) as f:  # a temp name unique to the process, fsync, rename
        torch.save(obj, f)
