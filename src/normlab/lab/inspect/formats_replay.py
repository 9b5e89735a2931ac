"""The recorded norm inputs replayed through each implementation, against float64.

Each layer's inputs (FP32, as recorded) are rounded to FP16, BF16 and FP32 and run through:

- ``naive``: the articles' code, every step in the input's dtype
  (:mod:`normlab.lab.numerics.naive`);
- ``FP32 statistics``: normlab's reference with the layer's own cast order
  (:mod:`normlab.reference`);
- ``normlab``: normlab's kernels (``normlab.functional``, backend ``auto``: Numba on the CPU);

each against the float64 truth of the same rounded input and weights, and both through the
layer's own norm and its variant (LayerNorm's inputs through RMSNorm with the same gain, and
back). A row's error is numerics' normwise one, ``max|y − t| / max|t|`` over the row; a row
*fails* visibly when an output is inf/NaN where the truth is finite, is flushed to 0 where
``|t|`` is at least 1 % of the row's largest, or is off by 10 % (``sentences.FAIL_REL``); a
failing row's error counts as 1 (``measuring.capped_error``).

The gradient replay (for the small-eps findings) runs the naive code's backward with a seeded
Gaussian upstream gradient and counts the wrong entries of ``dx`` as numerics does
(``measuring.wrong_entries``); the truth's gradient is in closed form.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

import normlab
from normlab import reference
from normlab.lab.inspect.load import NormSite
from normlab.lab.numerics.measuring import NAIVE, wrong_entries
from normlab.lab.numerics.naive import forward
from normlab.lab.numerics.sentences import DTYPE_SHORT, FAIL_REL

IMPLS = ("naive", "FP32 statistics", "normlab")
FLOOR = 1e-8  # an error below this counts as this (an exact row: no log of 0)
ZEROED = 0.01  # an output flushed to 0 where |t| is at least this share of the row's largest


@dataclass(frozen=True)
class Op:
    """One norm computation over a layer's inputs (``weight``: the stored parameter, the gain
    being ``offset + weight``)."""

    name: str  # "LayerNorm" | "RMSNorm"
    weight: Tensor | None
    bias: Tensor | None
    eps: float
    offset: float = 0.0
    casting: str = "llama"

    def gain(self, dtype: torch.dtype, exact: bool = False) -> Tensor | None:
        """The gain ``offset + weight``, the weight stored in ``dtype``: the sum in ``dtype`` as
        the naive code forms it, or ``exact`` in float64 (the truth's)."""
        if self.weight is None:
            return None
        stored = self.weight.to(dtype)
        return self.offset + (stored.double() if exact else stored)


def ops_of(site: NormSite, module) -> tuple[Op, Op]:
    """The layer's own op and its variant, on the layer's parameters (float64 copies)."""
    w, b = (getattr(module, k, None) for k in ("weight", "bias"))
    w, b = (None if t is None else t.detach().double() for t in (w, b))
    if site.kind == "layernorm":
        return Op("LayerNorm", w, b, site.eps), Op("RMSNorm", w, None, site.eps)
    own = Op("RMSNorm", w, None, site.eps, site.offset, site.casting)
    return own, Op("LayerNorm", None if w is None else site.offset + w, None, site.eps)


def _naive(op: Op, x: Tensor) -> tuple[str, Tensor, Tensor | None]:
    """The articles' code of ``op`` (its key in ``measuring.NAIVE``) and its gain and bias in
    ``x``'s dtype: ones where the layer has no weight, zeros where a LayerNorm has no bias."""
    dt, d = x.dtype, x.shape[-1]
    gain = torch.ones(d, dtype=dt) if op.weight is None else op.gain(dt)
    if op.name == "RMSNorm":
        return "rms_norm", gain, None
    return "layer_norm", gain, torch.zeros(d, dtype=dt) if op.bias is None else op.bias.to(dt)


def run_op(op: Op, impl: str, x: Tensor) -> Tensor:
    """``op`` on ``x`` (rows, d) by ``impl`` (``IMPLS`` or ``"truth"``: float64 of ``x`` and of
    the weights rounded to ``x``'s dtype)."""
    dt = x.dtype
    w = None if op.weight is None else op.weight.to(dt)
    b = None if op.bias is None else op.bias.to(dt)
    if impl == "truth":
        gain, bias = op.gain(dt, exact=True), None if b is None else b.double()
        x = x.double()
        if op.name == "LayerNorm":
            return reference.layer_norm(x, gain, bias, op.eps)
        return reference.rms_norm(x, gain, op.eps, casting="gemma")
    if impl == "naive":
        key, gain, bias = _naive(op, x)
        return NAIVE[key](x, gain, bias, op.eps)
    fn = reference if impl == "FP32 statistics" else normlab
    if op.name == "LayerNorm":
        return fn.layer_norm(x, w, b, op.eps)
    return fn.rms_norm(x, w, op.eps, offset=op.offset, casting=op.casting)


def row_errors(y: Tensor, truth: Tensor, row_max: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per row of ``y`` against ``truth`` (float64; ``row_max``: its rows' largest ``|t|``, if
    known): the normwise error ``max|y − t| / max|t|`` (a row whose truth is all 0: the
    absolute error) and whether the row fails visibly."""
    if row_max is None:
        row_max = truth.abs().amax(-1)
    err = (y.double() - truth).abs_().amax(-1)  # inf/NaN where some output is (truth: finite)
    nonfinite = ~torch.isfinite(err)
    err = torch.where(nonfinite, 0.0, err) / torch.where(row_max > 0, row_max, 1.0)
    fails = nonfinite | (err >= FAIL_REL)
    zeros = (y == 0).any(-1)  # rare: only those rows are searched for flushed outputs
    if zeros.any():
        t, z = truth[zeros], y[zeros] == 0
        flushed = z & (t != 0) & (t.abs() >= ZEROED * row_max[zeros].unsqueeze(-1))
        fails[zeros] |= flushed.any(-1)
    return err, fails


def capped(err: Tensor, fails: Tensor) -> Tensor:
    """The error in [FLOOR, 1], a failing row's 1."""
    return torch.where(fails, torch.ones_like(err), err.clamp(FLOOR, 1.0))


@dataclass
class LayerReplay:
    """One layer × op × format × implementation."""

    layer: str
    op: str
    own: bool  # the layer's own norm (else its variant)
    format: str
    impl: str
    worst: float | None  # the largest row error among the rows that do not fail
    median: float | None
    failures: int  # rows that fail visibly
    rows: int


@dataclass
class Replay:
    layers: list[LayerReplay] = field(default_factory=list)
    # (op, format, impl) -> per chunk, the worst capped row error over every layer's rows
    chunk_error: dict[tuple[str, str, str], Tensor] = field(default_factory=dict)
    # (op, "small" | "default") -> per chunk, the truth's largest |dx| over every layer's rows
    chunk_dx: dict[tuple[str, str], Tensor] = field(default_factory=dict)
    # (op, format) -> per chunk, wrong dx entries of the naive code, and entries
    chunk_wrong: dict[tuple[str, str], Tensor] = field(default_factory=dict)
    chunk_entries: Tensor | None = None


def _merge(store: dict, key, value: Tensor, how=torch.maximum) -> None:
    store[key] = value if key not in store else how(store[key], value)


def replay_layer(out: Replay, site: NormSite, module, x: Tensor) -> None:
    """Replay one layer's inputs ``x`` (chunks, rows, d) forward, into ``out``."""
    chunks = x.shape[0]
    flat = x.reshape(-1, x.shape[-1])
    for k, op in enumerate(ops_of(site, module)):
        for dt, short in DTYPE_SHORT.items():
            xd = flat.to(getattr(torch, dt))
            truth = run_op(op, "truth", xd)
            row_max = truth.abs().amax(-1)
            for impl in IMPLS:
                err, fails = row_errors(run_op(op, impl, xd), truth, row_max)
                ok = err[~fails]
                out.layers.append(
                    LayerReplay(
                        site.name,
                        op.name,
                        k == 0,
                        short,
                        impl,
                        float(ok.max()) if ok.numel() else None,
                        float(ok.median()) if ok.numel() else None,
                        int(fails.sum()),
                        int(fails.numel()),
                    )
                )
                per_chunk = capped(err, fails).reshape(chunks, -1).amax(-1)
                _merge(out.chunk_error, (op.name, short, impl), per_chunk)


def replay_grads(
    out: Replay, site: NormSite, module, x: Tensor, eps_small: float, eps_default: float, seed: int
) -> None:
    """The gradient replay of one layer: the truth's largest ``|dx|`` at ``eps_small`` and at
    ``eps_default`` (float64 of the FP32 inputs), and the naive code's wrong ``dx`` entries at
    ``eps_small`` per format, per chunk, into ``out``."""
    chunks, rows, d = x.shape
    g = torch.Generator().manual_seed(seed)
    dy = torch.randn(chunks * rows, d, generator=g, dtype=torch.float64)
    flat = x.reshape(-1, d)
    for op in ops_of(site, module):
        for label, eps in (("small", eps_small), ("default", eps_default)):
            dx = true_dx(op, flat.double(), dy, eps, torch.float32)  # the model's FP32 weights
            _merge(out.chunk_dx, (op.name, label), dx.abs().reshape(chunks, -1).amax(-1))
        for dt, short in DTYPE_SHORT.items():
            dtype = getattr(torch, dt)
            xd, dyd = flat.to(dtype), dy.to(dtype)
            truth = true_dx(op, xd.double(), dyd.double(), eps_small, dtype)
            wrong = wrong_entries(naive_dx(op, xd, dyd, eps_small), truth)
            _merge(out.chunk_wrong, (op.name, short), wrong.reshape(chunks, -1).sum(-1), torch.add)
    entries = torch.full((chunks,), float(rows * d), dtype=torch.float64)
    out.chunk_entries = entries if out.chunk_entries is None else out.chunk_entries + entries


def true_dx(
    op: Op, x: Tensor, dy: Tensor, eps: float, stored: torch.dtype = torch.float64
) -> Tensor:
    """The float64 ``dx`` of ``op`` at ``eps`` for the upstream gradient ``dy`` (``x`` float64,
    holding the rounded inputs; the weights as stored in ``stored``), in closed form::

        LayerNorm: dx = r·(g·dy − mean(g·dy) − x̂·mean(g·dy·x̂)),  x̂ = (x − μ)·r, r = 1/√(σ² + ε)
        RMSNorm:   dx = r·(g·dy − x̂·mean(g·dy·x̂)),              x̂ = x·r,       r = 1/√(mean(x²) + ε)
    """
    gain = op.gain(stored, exact=True)
    gdy = dy if gain is None else dy * gain
    centered = op.name == "LayerNorm"
    xc = x - x.mean(-1, keepdim=True) if centered else x
    r = torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    xhat = xc * r
    mean_gdy = gdy.mean(-1, keepdim=True) if centered else 0.0  # RMSNorm subtracts no mean
    return r * (gdy - mean_gdy - xhat * (gdy * xhat).mean(-1, keepdim=True))


def naive_dx(op: Op, x: Tensor, dy: Tensor, eps: float) -> Tensor:
    """``dx`` of the articles' code in ``x``'s dtype (autograd through its every step)."""
    key, gain, bias = _naive(op, x)
    y, leaves = forward(NAIVE[key], key, x, gain, bias, eps)
    (dx,) = torch.autograd.grad(y, leaves[:1], dy)
    return dx
