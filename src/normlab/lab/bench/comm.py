"""Collectives and bytes per training step, BatchNorm against LayerNorm, for the finding
``batchnorm-communication`` of ``normlab bench --findings``.

:func:`launch` starts ``torchrun --standalone --nproc_per_node 2`` (gloo) on this module; each
rank trains the same small Transformer under DDP, once with ``norm="batchnorm"`` (normlab's
BatchNorm, whose statistics are summed over the ranks) and once with ``norm="layernorm"``, and
counts every collective it issues in each step, with its bytes:

- ``gradients``: DDP's gradient buckets (counted in a comm hook that calls DDP's default
  all-reduce hook, so the traffic is DDP's own);
- ``buffers``: DDP's broadcast of the module's buffers from rank 0 before each forward;
- ``other``: every other collective, here the norms' statistics (forward and backward).

Counted by wrapping ``torch.distributed``'s Python collectives, which DDP and
``torch.distributed.nn`` call through the module at call time. The first step is left out: DDP
rebuilds its buckets after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

KINDS = ("gradients", "buffers", "other")
STEPS = 6  # counted steps per norm (after one uncounted warm-up step)
NORMS = ("batchnorm", "layernorm")
TIMEOUT_S = 300
MODEL = (
    "Transformer(vocab 256, d=64, 2 pre-norm blocks, 4 heads; 5 norms, BatchNorm causal as the "
    "lab's default), 8 sequences x 64 tokens per rank, AdamW, DDP"
)


class Counter:
    """Collectives and bytes per kind since the last :meth:`reset`."""

    def __init__(self) -> None:
        self.in_hook = False
        self.reset()

    def reset(self) -> None:
        self.calls = dict.fromkeys(KINDS, 0)
        self.bytes = dict.fromkeys(KINDS, 0)

    def add(self, kind: str, tensors) -> None:
        self.calls[kind] += 1
        self.bytes[kind] += sum(t.numel() * t.element_size() for t in tensors)

    def snapshot(self) -> dict:
        return {"calls": dict(self.calls), "bytes": dict(self.bytes)}


def install(counter: Counter) -> None:
    """Wrap the collectives of ``torch.distributed`` so that every call is counted."""
    import torch.distributed as dist

    def wrap(name: str, kind: str | None, tensors_of):
        orig = getattr(dist, name)

        def counted(*args, **kwargs):
            k = kind or ("gradients" if counter.in_hook else "other")
            counter.add(k, tensors_of(*args, **kwargs))
            return orig(*args, **kwargs)

        setattr(dist, name, counted)

    for name in ("all_reduce", "broadcast", "reduce"):
        wrap(name, None, lambda t, *a, **k: [t])
    for name in ("all_gather", "all_gather_into_tensor", "reduce_scatter_tensor"):
        wrap(name, None, lambda out, t, *a, **k: [t])
    wrap("_broadcast_coalesced", "buffers", lambda pg, ts, *a, **k: list(ts))


def _train(norm: str, info, counter: Counter, steps: int) -> list[dict]:
    import torch.nn.functional as F
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from normlab.lab.train import distributed as D
    from normlab.models import Transformer, TransformerConfig

    def hook(state, bucket):  # DDP's own all-reduce, its collectives counted as gradients
        counter.in_hook = True
        try:
            return default_hooks.allreduce_hook(state, bucket)
        finally:
            counter.in_hook = False

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(256, 64, 2, 4, norm=norm, max_seq_len=64))
    ddp = D.wrap(model, info, fsdp=False, blocks=model.blocks)
    ddp.register_comm_hook(None, hook)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1000 + info.rank)
    per_step = []
    for step in range(steps + 1):
        tokens = torch.randint(0, 256, (8, 65), generator=g)  # (B, T + 1) per rank
        counter.reset()
        logits = ddp(tokens[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step:  # the first step is DDP's warm-up (bucket rebuild)
            per_step.append(counter.snapshot())
    return per_step


def main(argv: list[str]) -> int:
    """Under torchrun: ``comm.py OUT_JSON [STEPS]``; rank 0 writes the counts."""
    from normlab.lab.kit.io import write_json
    from normlab.lab.train import distributed as D

    out, steps = Path(argv[0]), int(argv[1]) if len(argv) > 1 else STEPS
    info = D.setup("cpu")
    counter = Counter()
    install(counter)
    try:
        result = {"world_size": info.world_size, "backend": "gloo", "steps": steps, "model": MODEL}
        result["norms"] = {norm: _train(norm, info, counter, steps) for norm in NORMS}
        if info.rank == 0:
            write_json(out, result, indent=1)
    finally:
        D.teardown(info)
    return 0


def launch(out: Path, steps: int = STEPS, nproc: int = 2) -> dict:
    """Run :func:`main` under ``torchrun`` (gloo, ``nproc`` processes on this machine) and
    return rank 0's counts; ``RuntimeError`` with the log's tail if the job fails."""
    out = Path(out)
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "--monitor-interval=0.1",
           "-m", "normlab.lab.bench.comm", str(out), str(steps)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, check=False
    )
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"torchrun exited {proc.returncode}:\n{tail}")
    return json.loads(out.read_text())


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # The counts are written and the group is ended: skip the interpreter's finalization, where
    # what is left of torch.distributed's C++ objects now and then aborts a gloo rank after
    # teardown ("terminate called without an active exception"), failing a finished job.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
