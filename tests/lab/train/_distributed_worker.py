"""Run by test_distributed.py under ``torchrun --nproc_per_node 2``; not a test module.

``_distributed_worker.py checks OUT_DIR [ARGS...]``: each rank computes its share of the BatchNorm
and the FSDP2 cases and saves what it saw to ``OUT_DIR/checks.rank{r}.pt``; the test recomputes
them in one process (the inputs come from :func:`bn_inputs` / :func:`norm_inputs`) and compares.
Then ``normlab train ARGS`` runs in the same job, if ARGS are given.
``_distributed_worker.py crash STEP ARGS...``: ``normlab train ARGS`` with rank 1 killed.
"""

from __future__ import annotations

import os
import signal
import sys

import torch
import torch.distributed as dist
from torch import nn

from normlab import BatchNorm, LayerNorm, RMSNorm
from normlab.lab.train import distributed as D

BN_STEPS, BN_C = 3, 6
# A mean 5000x the spread: FP32 statistics that cancel would differ across ranks by whole units.
BN_FAR = 1e4
# case -> (BatchNorm's keywords, the data's offset)
BN_CASES = {
    "bn": ({}, 0.0),
    "bn_far": ({}, BN_FAR),
    "bn_causal": ({"causal": True, "max_positions": 8, "min_tokens": 8}, BN_FAR),
}


def bn_inputs(step: int, offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Global batch (4, 8, C) with a large mean (``5 + offset``), uneven padding (rows 0-1 mostly
    padded: they go to rank 0), and the loss weights."""
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(4, 8, BN_C, generator=g) * 2 + 5 + offset
    lengths = torch.tensor([2, 5, 8, 7]) if step % 2 == 0 else torch.tensor([3, 1, 6, 8])
    mask = torch.arange(8) < lengths[:, None]  # (4, 8)
    w = torch.randn(4, 8, BN_C, generator=g)
    return x, mask, w


def run_bn(bn: BatchNorm, rows: slice, offset: float = 0.0) -> dict:
    """A few training steps on ``rows`` of every global batch; what each rank (or the single
    process, with every row) records."""
    out: dict = {"y": [], "x_grad": []}
    for step in range(BN_STEPS):
        x, mask, w = (t[rows] for t in bn_inputs(step, offset))
        x.requires_grad_(True)
        y = bn(x, mask=mask)
        (y * w * mask[..., None]).sum().backward()
        out["y"].append(y.detach())
        out["x_grad"].append(x.grad)
    out["weight_grad"], out["bias_grad"] = bn.weight.grad, bn.bias.grad
    out.update({k: v.clone() for k, v in bn.state_dict().items()})
    return out


NORM_BACKENDS = ("reference", "auto", "numba")
NORM_D, NORM_B = 16, 8


def numba_ready() -> bool:
    """Whether the Numba backend imports here (without importing every other backend)."""
    from normlab.functional import get_backend

    try:
        get_backend("numba")
    except RuntimeError:
        return False
    return True


def norm_model(backend: str) -> nn.Sequential:
    """Blocks whose norms run ``backend``'s kernels; FSDP2 shards each block's (16,) weights."""
    torch.manual_seed(0)

    def block():
        return nn.Sequential(
            nn.Linear(NORM_D, NORM_D), RMSNorm(NORM_D, backend=backend), nn.Linear(NORM_D, NORM_D),
            LayerNorm(NORM_D, backend=backend),
        )  # fmt: skip

    model = nn.Sequential(block(), block())
    with torch.no_grad():  # weights away from their init, so their gradients are not symmetric
        for m in model.modules():
            if isinstance(m, (RMSNorm, LayerNorm)):
                m.weight.uniform_(0.5, 1.5)
    return model


# A global batch of SPLIT_B sequences of SPLIT_T bytes for the per-rank statistics step.
SPLIT_B, SPLIT_T = 8, 16


def split_model() -> nn.Module:
    """A BatchNorm Transformer whose statistics stay on each rank (``sync=False``); min_tokens 2,
    so no position borrows the running statistics as a prior (a prior is what accumulation and
    DDP take from different places: the other micro-batch's update, rank 0's previous step)."""
    from normlab.models import Transformer, TransformerConfig

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(256, 32, 2, 2, norm="batchnorm", max_seq_len=SPLIT_T))
    for m in model.modules():
        if isinstance(m, BatchNorm):
            m.sync, m.min_tokens = False, 2
    return model


def split_tokens() -> torch.Tensor:
    return torch.randint(0, 256, (SPLIT_B, SPLIT_T + 1), generator=torch.Generator().manual_seed(3))


def split_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])  # (B, T, V)
    return nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


def run_split_step(rank: int, world: int) -> dict:
    """One DDP step of :func:`split_model` on this rank's share: the gradients DDP averaged."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = split_model()
    ddp = DDP(model)  # kept alive through backward: its hooks do the all-reduce
    n = SPLIT_B // world
    split_loss(ddp, split_tokens()[rank * n : (rank + 1) * n]).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def norm_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(NORM_B, NORM_D, generator=g), torch.randn(NORM_B, NORM_D, generator=g)


def norm_loss(model: nn.Module, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (model(x) * w).mean()


def run_norm_grads(rank: int, world: int) -> dict:
    """FSDP2 per block + root; gradients of every norm weight, gathered after the reduce."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    out = {}
    n = NORM_B // world
    x, w = (t[rank * n : (rank + 1) * n] for t in norm_inputs())
    for backend in NORM_BACKENDS:
        if backend == "numba" and not numba_ready():
            continue
        model = norm_model(backend)
        for block in model:
            fully_shard(block)
        fully_shard(model)
        norm_loss(model, x, w).backward()
        for name, p in model.named_parameters():
            if not isinstance(p.grad, DTensor):
                raise AssertionError(f"{name}: FSDP2 left a {type(p.grad).__name__} gradient")
            out[f"{backend}/{name}"] = p.grad.full_tensor()  # a collective: every rank calls it
    return out


def crash_train(at_step: int, argv: list[str]) -> None:
    """``normlab train argv`` whose rank 1 is SIGKILLed right after step ``at_step`` (1-based):
    a machine lost mid-run, at a step that does not depend on timing."""
    from normlab.lab.cli import main as cli_main
    from normlab.lab.train.dist_trainer import DistributedTrainer

    log = DistributedTrainer.log

    def log_then_die(self, step, record):
        log(self, step, record)
        if step + 1 == at_step and self.info.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)

    DistributedTrainer.log = log_then_die
    sys.exit(cli_main(argv))


def main() -> None:
    case = sys.argv[1]
    if case == "crash":
        crash_train(int(sys.argv[2]), sys.argv[3:])
    if case != "checks":
        raise ValueError(f"unknown case {case!r}")
    out_dir, train_argv = sys.argv[2], sys.argv[3:]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    n = 4 // world
    rows = slice(rank * n, (rank + 1) * n)
    result = {
        **{k: run_bn(BatchNorm(BN_C, **kw), rows, off) for k, (kw, off) in BN_CASES.items()},
        "bn_local": run_bn(BatchNorm(BN_C, sync=False), rows),
        "split_grads": run_split_step(rank, world),
        "norm_grads": run_norm_grads(rank, world),
    }
    torch.save(result, os.path.join(out_dir, f"checks.rank{rank}.pt"))
    if train_argv:  # a run in the same job and process group (saves a job's start-up)
        from normlab.lab.cli import main as cli_main

        cli_main(train_argv)
    D.teardown(D.DistInfo(rank, world, owns_group=True))


if __name__ == "__main__":
    main()
