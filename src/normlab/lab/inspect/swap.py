"""The model's output under a change, against its output in eval mode, per chunk.

- **swap**: every norm's statistics replaced at inference by its variant's, the gain and bias
  kept: LayerNorm's ``(x − μ)/σ`` becomes ``x / RMS(x)`` (what re-centering contributes), and
  RMSNorm's becomes ``(x − μ)/σ``; computed in FP32 (a forward hook returns the new output);
- **train mode**: ``model.train()``, seeded, so dropout is active (what forgetting ``eval()``
  does).

Per chunk, two measures: the output's direction, ``1 − cos`` (an embedding model's pooled
vector; a language model's last hidden state, averaged over positions), and the task's own
(an embedding model: ``1 − ρ``, Spearman's rank correlation of the chunk's cosine similarities
to the other chunks, the ranking a retrieval reads; a language model: the share of positions
whose top-1 prediction changes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from normlab.lab.inspect.record import Output, hooked, run

STATS_DTYPE = torch.float32


@dataclass
class Change:
    """One change's per-chunk measures (``None``: the change did not touch the output)."""

    name: str  # "swap" | "train"
    direction: list[float]  # 1 − cos per chunk
    task: list[float]  # 1 − ρ, or the share of changed predictions, per chunk
    identical: bool  # the output is bit for bit the eval output (nothing changed)


def swapped(site, module, args, out) -> Tensor:
    """The norm's output with its variant's statistics, its gain and bias kept."""
    layernorm = site.kind == "layernorm"
    xs = args[0].to(STATS_DTYPE)
    # LayerNorm's variant, RMSNorm, does not center; RMSNorm's, LayerNorm, does
    xc = xs if layernorm else xs - xs.mean(-1, keepdim=True)
    y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + site.eps)
    w, b = module.weight, (module.bias if layernorm else None)
    if w is not None:
        y = y * (w.to(STATS_DTYPE) if layernorm else site.offset + w.to(STATS_DTYPE))
    if b is not None:
        y = y + b.to(STATS_DTYPE)
    return y.to(out.dtype)


def with_swap(model, sites, ids: Tensor, kind: str, pooling: str) -> Output:
    by_name = {s.name: (s, m) for s, m in sites}

    def hook(name, module, args, out):
        return swapped(by_name[name][0], module, args, out)

    with hooked({s.name: m for s, m in sites}, hook):
        return run(model, ids, kind, pooling)


def in_train_mode(model, ids: Tensor, kind: str, pooling: str, seed: int) -> Output:
    torch.manual_seed(seed)
    model.train()
    try:
        return run(model, ids, kind, pooling)
    finally:
        model.eval()


def measure(name: str, base: Output, other: Output) -> Change:
    """``other`` against ``base``, per chunk."""
    a, b = base.vectors.double(), other.vectors.double()
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)
    direction = 1 - (cos.mean(-1) if cos.dim() > 1 else cos)
    lm = base.top1 is not None  # a language model's task: its top-1 predictions
    task = (base.top1 != other.top1).double().mean(-1).tolist() if lm else _rank_change(a, b)
    return Change(name, direction.tolist(), task, torch.equal(base.vectors, other.vectors))


def _rank_change(a: Tensor, b: Tensor) -> list[float]:
    """Per chunk ``1 − ρ``: Spearman's correlation between its cosine similarities to the other
    chunks under ``a`` and under ``b`` (``scipy.stats.spearmanr``)."""
    from scipy import stats

    def sims(v: Tensor) -> Tensor:
        u = torch.nn.functional.normalize(v, dim=-1)
        return u @ u.T

    sa, sb = sims(a), sims(b)
    n = sa.shape[0]
    out = []
    for i in range(n):
        keep = [j for j in range(n) if j != i]
        a_i, b_i = sa[i, keep], sb[i, keep]
        same = torch.equal(a_i, b_i)  # the same similarities (constant ones too): nothing moved
        rho = 1.0 if same else float(stats.spearmanr(a_i.numpy(), b_i.numpy()).statistic)
        out.append(1.0 - rho if math.isfinite(rho) else 1.0)  # one side constant: no order kept
    return out
