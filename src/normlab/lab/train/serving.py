"""Serving-time measures (``TrainConfig.eval_serving``): what a trained model does when it is
served rather than validated, where a norm with batch statistics (BatchNorm) makes one
request's output depend on the rest of its batch.

All are read on one probe set, the first ``n`` validation sequences (``probe_set``), in batches
of the run's batch size; each in train mode (batch statistics) and in eval mode (running
statistics), none moving the running statistics (``buffers_restored``):

- ``batchmate_shift_{train,eval}``: every probe is evaluated twice, in its own batch (layout A)
  and in a batch of other mates (layout B: each block of B² probes transposed, so a probe shares
  no mate between the two); the mean over probes and positions of ‖Δlogits‖₂ / ‖logits‖₂;
- ``forgot_eval_gap``: the loss at batch 1 in train mode (a model served without
  ``model.eval()``) minus the loss in eval mode, on the same bytes (the first
  :data:`BATCH1_SEQUENCES` probes);
- ``padding_gap_{train,eval}``: in each batch one probe kept whole and its mates cut to random
  shorter lengths (fixed seed) and right-padded with byte 0, the padding masked out of the
  statistics (``Transformer(mask=...)``); the probe's loss padded minus unpadded.

A batch-free norm (LayerNorm, RMSNorm) gives 0 for all of them, up to rounding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

SERVING_SEQUENCES = 256  # probes: enough that their mean's own noise is small against δ
# forgot_eval_gap's probes, the first of them: batch-1 forwards cost per call, not per byte, and
# the gap is paired (the same bytes in both modes), so 4096 bytes already pin it down.
BATCH1_SEQUENCES = 64
PAD_BYTE = 0


@contextlib.contextmanager
def buffers_restored(model: nn.Module):
    """Measurements in train mode (probes, train-mode validation, serving) must not move
    BatchNorm's running statistics: they would learn from the validation batches."""
    saved = {k: b.clone() for k, b in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for k, b in model.named_buffers():
                b.copy_(saved[k])


def probe_set(batches: list[tuple[Tensor, Tensor]], batch_size: int) -> tuple[Tensor, Tensor]:
    """The first ``n_probes`` validation sequences: whole blocks of ``batch_size²`` (layout B
    transposes them), up to :data:`SERVING_SEQUENCES`; ``TrainConfig`` checks there is one."""
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])  # (N, T)
    n = n_probes(len(x), batch_size)
    if n == 0:
        raise ValueError(
            f"eval_serving needs at least batch_size² = {batch_size**2} validation sequences, "
            f"the validation set has {len(x)}"
        )
    return x[:n], y[:n]


def n_probes(n_val: int, batch_size: int) -> int:
    """How many of ``n_val`` validation sequences ``probe_set`` takes (one block of B² even
    where that is more than :data:`SERVING_SEQUENCES`; 0 where the set is smaller)."""
    block = batch_size * batch_size
    return 0 if n_val < block else block * max(1, min(SERVING_SEQUENCES, n_val) // block)


def layout_b(n: int, batch_size: int) -> Tensor:
    """The order of layout B: each block of B² probes (B batches of B) transposed, so slot j of
    batch i goes to slot i of batch j and no two probes share a batch in both layouts."""
    b = batch_size
    return torch.arange(n).view(n // (b * b), b, b).transpose(1, 2).reshape(n)


@torch.no_grad()
def serving_measures(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    batch_size: int,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[str, float]:
    """The measures of the module docstring on probes ``x``, targets ``y`` (both (n, T)); the
    padded mates' lengths drawn with seed 0. Leaves the model in train mode, its buffers as
    they were."""
    n, t = x.shape
    perm = layout_b(n, batch_size)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, t, (n,), generator=gen).to(x.device)  # 1 ... T-1
    lengths[::batch_size] = t  # slot 0 of every batch: the probe, kept whole
    keep = torch.arange(t, device=x.device) < lengths[:, None]  # (n, T) True = real token
    padded = x.masked_fill(~keep, PAD_BYTE)
    probes = torch.arange(0, n, batch_size, device=x.device)

    def logits(tokens: Tensor, train: bool, mask: Tensor | None = None, size=batch_size) -> Tensor:
        """The model's logits on ``tokens`` (``mask``: their real tokens) in batches of ``size``."""
        model.train(train)
        chunks = tokens.split(size)
        masks = [None] * len(chunks) if mask is None else mask.split(size)
        with autocast():
            return torch.cat([model(b, mask=m).float() for b, m in zip(chunks, masks, strict=True)])

    def loss(lg: Tensor, target: Tensor) -> float:
        return float(F.cross_entropy(lg.flatten(0, 1), target.flatten()))

    out: dict[str, float] = {}
    with buffers_restored(model):
        for mode, train in (("train", True), ("eval", False)):
            a = logits(x, train)
            b = torch.empty_like(a)
            b[perm] = logits(x[perm], train)
            shift = (a - b).norm(dim=-1) / a.norm(dim=-1)  # (n, T)
            out[f"batchmate_shift_{mode}"] = float(shift.mean())
            p = logits(padded, train, keep)[probes]
            out[f"padding_gap_{mode}"] = loss(p, y[probes]) - loss(a[probes], y[probes])
            if not train:
                k = min(n, BATCH1_SEQUENCES)
                b1 = logits(x[:k], train=True, size=1)
                out["forgot_eval_gap"] = loss(b1, y[:k]) - loss(a[:k], y[:k])
    model.train()
    return out
