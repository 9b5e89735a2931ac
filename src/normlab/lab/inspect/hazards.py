"""What each norm layer's recorded inputs say about precision, without running anything in low
precision but the overflow test itself.

Per layer: the largest ``|x|``; the share of rows whose naive ``x²`` overflows (some square is
inf when computed in the format, as the articles' RMSNorm computes it) and whose statistic (σ²
for LayerNorm, ``mean(x²)`` for RMSNorm) lies beyond the format's range; eps as each format
holds it; near-constant rows (statistic below ``NEAR_CONSTANT``·eps, where eps decides the
output); the mean's share ``|mean| / RMS`` per row (what re-centering removes); the gain's
distribution; massive activations (the largest ``|x|`` over the median ``|x|``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from normlab.lab.inspect.load import NormSite
from normlab.lab.numerics.sentences import LOW

NEAR_CONSTANT = 100.0  # a row whose statistic is below this many eps is near-constant
GAIN_NEAR_ZERO = 0.01  # |gain| below this: the feature is (almost) switched off


@dataclass
class LayerStats:
    layer: str
    cls: str
    kind: str  # "layernorm" | "rmsnorm"
    eps: float
    rows: int
    width: int
    max_abs: float
    square_overflow: dict[str, float]  # format -> share of rows
    stat_overflow: dict[str, float]  # format -> share of rows
    eps_held: dict[str, float]  # format -> eps as the format rounds it (0: flushed)
    min_stat: float  # the smallest row statistic (σ² or mean(x²))
    near_constant: float  # share of rows with statistic < NEAR_CONSTANT·eps
    mean_share_median: float  # |mean| / RMS per row
    mean_share_p90: float
    mean_share_max: float
    massive: float  # max|x| / median|x|
    gain_min: float | None
    gain_median: float | None
    gain_max: float | None
    gain_std: float | None
    gain_near_zero: float | None  # share of features with |gain| < GAIN_NEAR_ZERO


def _q(t: Tensor, q: float) -> float:
    t = t.flatten()
    if t.numel() > 1 << 24:  # torch.quantile's limit; a fixed stride keeps it exact enough
        t = t[:: t.numel() // (1 << 23)]
    return float(torch.quantile(t, q))


def layer_stats(site: NormSite, module, x: Tensor) -> LayerStats:
    """The layer's numbers from its inputs ``x`` (chunks, rows, d) and its parameters."""
    rows = x.reshape(-1, x.shape[-1]).double()
    ms = rows.pow(2).mean(-1)
    stat = rows.var(-1, unbiased=False) if site.kind == "layernorm" else ms
    share = rows.mean(-1).abs() / ms.sqrt().clamp_min(torch.finfo(torch.float64).tiny)
    a = rows.abs()
    square, over, held = {}, {}, {}
    for dt, short in LOW.items():
        dtype = getattr(torch, dt)
        square[short] = float(torch.isinf(rows.to(dtype).pow(2)).any(-1).double().mean())
        over[short] = float((stat > torch.finfo(dtype).max).double().mean())
        held[short] = float(torch.tensor(site.eps, dtype=dtype))
    w = getattr(module, "weight", None)
    g = None if w is None else (site.offset + w.detach().double()).flatten()
    return LayerStats(
        layer=site.name,
        cls=site.cls,
        kind=site.kind,
        eps=site.eps,
        rows=rows.shape[0],
        width=rows.shape[1],
        max_abs=float(a.max()),
        square_overflow=square,
        stat_overflow=over,
        eps_held=held,
        min_stat=float(stat.min()),
        near_constant=float((stat < NEAR_CONSTANT * site.eps).double().mean()),
        mean_share_median=_q(share, 0.5),
        mean_share_p90=_q(share, 0.9),
        mean_share_max=float(share.max()),
        massive=float(a.max() / max(_q(a, 0.5), torch.finfo(torch.float64).tiny)),
        gain_min=None if g is None else float(g.min()),
        gain_median=None if g is None else _q(g, 0.5),
        gain_max=None if g is None else float(g.max()),
        gain_std=None if g is None else float(g.std()) if g.numel() > 1 else 0.0,
        gain_near_zero=None if g is None else float((g.abs() < GAIN_NEAR_ZERO).double().mean()),
    )
