"""What every numerics finding measures with: the seeded input draws, one implementation's errors
against the float64 truth, and the threshold search. The findings themselves (their rules and
measures) are in :mod:`normlab.lab.numerics.findings` and the modules it gathers.

"naive" is the articles' code, every step in the input dtype; "FP32 statistics" is normlab's
float32 reference (RMSNorm with LLaMA's cast order, the closest to the naive one).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from normlab import reference
from normlab.lab.numerics.metrics import error_metrics
from normlab.lab.numerics.naive import forward, naive_layer_norm, naive_rms_norm, truth_of
from normlab.lab.numerics.sentences import failure
from normlab.lab.verdict.finding import Finding, Part

ROWS, HIDDEN = 16, 1024
Inputs = tuple[Tensor, Tensor, Tensor, Tensor]  # (x, w, b, dy): what an implementation is run on
NEAR_ZERO = 1e-4  # the peak |x| of a near-zero row: its statistic is ~1e-9, far below eps
EPS = 1e-6  # the eps of the scale and FP32-statistics measurements (LLaMA's, the articles')
SCALES = (1e-2, 1.0, 10.0, 100.0, 300.0, 1e3, 3e3, 1e4, 6e4)  # largest |x| of a row
SCALE_RANGE = (1.0, 6e4)  # where the overflow threshold is searched (6e4 still fits in FP16)
FACTOR_2 = math.log10(2)  # δ of the log10 ratios: a factor of 2 matters
FACTOR_2_WHY = (
    "a factor 2 in error (log10 2): one rounding's error moves within a factor 2 with where a "
    "value falls in its binade; less is no difference in precision"
)
RANGE_WHY = (
    "a factor 2 in the threshold (log10 2): it is searched to 1 %, and a range within a factor "
    "2 of another is the same range for a user; less is no difference in where the code breaks"
)
ORDER_OF_MAGNITUDE = 1.0  # δ of a log10 ratio that must be an order of magnitude
ORDER_WHY = (
    "an order of magnitude (log10 10): 'explodes' names growth by orders of magnitude; less "
    "than 10× is no explosion"
)
# Seed blocks, as a study's (``SEED_STRIDE · block + i``): a block's draws share none with
# another block's at any --seeds up to the stride, so a design can be confirmed on fresh draws.
SEED_STRIDE = 10_000

NAIVE: dict[str, Callable] = {"rms_norm": naive_rms_norm, "layer_norm": naive_layer_norm}
FP32_STATS: dict[str, Callable] = {
    "rms_norm": lambda x, w, b, eps: reference.rms_norm(x, w, eps, casting="llama"),
    "layer_norm": lambda x, w, b, eps: reference.layer_norm(x, w, b, eps),
}


def part(
    label: str,
    what: str,
    expect: str = ">0",
    delta: float = FACTOR_2,
    trim: float = 0.0,
    why: str | None = None,
) -> tuple[str, Part]:
    """A finding's part ``label``: per repetition ``v`` = ``what``, decided as ``expect`` against
    ``delta`` (by default: a log10 ratio that must exceed a factor of 2, for ``FACTOR_2_WHY``)
    on the statistic ``trim`` names (``Part``); ``why``: why that δ."""
    if why is None:
        why = FACTOR_2_WHY if delta == FACTOR_2 else ""
    return label, Part(what, expect, delta, trim, why)


def registered(
    f: Finding, values, record: dict | None = None, *, means=None, why: str = "", **stamp
) -> dict:
    """``f`` decided from ``values`` (every part not testable here for ``why``, if given), with
    what every findings file publishes beside a verdict: ``record`` (what its plots read), the
    design it was decided under and ``stamp`` (its seed block, draws, ``kit.io.utc()`` of its
    start)."""
    untestable = dict.fromkeys((label for label, _ in f.parts), why) if why else None
    beside = ({} if record is None else {"record": record}) | {"design": f.design()}
    return f.decide(values, means=means, untestable=untestable) | beside | stamp


def append(record: dict, key: str, value) -> None:
    """Add ``value`` to the list ``record[key]`` (a per-draw series of a finding's record)."""
    record.setdefault(key, []).append(value)


def seeds_of(block: int, n: int) -> range:
    """The ``n`` draws of seed block ``block``."""
    if block < 0 or not 0 <= n <= SEED_STRIDE:
        raise ValueError(f"seed block must be >= 0 and draws in [0, {SEED_STRIDE}]: {block}, {n}")
    return range(SEED_STRIDE * block, SEED_STRIDE * block + n)


def draw(seed: int, dtype: torch.dtype, scale: float = 1.0) -> Inputs:
    """``(x, w, b, dy)`` in ``dtype``: Gaussian rows whose largest ``|x|`` is ``scale``; the
    same rows (rescaled) for every scale and dtype of one ``seed``."""
    g = torch.Generator().manual_seed(7919 + seed)
    z = torch.randn(ROWS, HIDDEN, generator=g, dtype=torch.float64)
    x = z / z.abs().amax(-1, keepdim=True) * scale
    w = 1.0 + 0.1 * torch.randn(HIDDEN, generator=g, dtype=torch.float64)
    b = 0.1 * torch.randn(HIDDEN, generator=g, dtype=torch.float64)
    dy = torch.randn(ROWS, HIDDEN, generator=g, dtype=torch.float64)
    return tuple(t.to(dtype) for t in (x, w, b, dy))


def _standardized(seed: int) -> Inputs:
    """:func:`draw`'s float64 rows at zero mean and unit standard deviation, with its w, b, dy."""
    x, w, b, dy = draw(seed, torch.float64)
    z = (x - x.mean(-1, keepdim=True)) / x.std(-1, unbiased=False, keepdim=True)
    return z, w, b, dy


def spacing(v: float, dtype: torch.dtype) -> float:
    """The gap between ``dtype``'s neighbours at ``v`` > 0 (a normal number): ``2^floor(log2 v)
    · eps``."""
    return math.ldexp(torch.finfo(dtype).eps, math.frexp(v)[1] - 1)


def draw_shifted(seed: int, dtype: torch.dtype, mean: float, spread_ulps: float) -> Inputs:
    """:func:`draw`'s rows moved to ``x = mean + u·g + σ·z`` (z: the draw's rows at unit
    standard deviation, g the gap of ``dtype`` at ``mean``, σ = ``spread_ulps``·g, u uniform in
    [0, 1) per row): rows whose values lie close together far from 0, the case where
    LayerNorm's ``x − mean`` cancels. σ is counted in gaps because a spread below one gap
    rounds the row to a constant (then the truth is LayerNorm's β and nothing cancels); u puts
    each row's mean off the dtype's grid, as a data row's mean almost always is (a mean the
    dtype holds exactly, such as 1e3 in FP16, is not rounded and so does not cancel)."""
    z, w, b, dy = _standardized(seed)
    u = torch.rand(z.shape[0], 1, generator=torch.Generator().manual_seed(104729 + seed))
    gap = spacing(mean, dtype)
    x = mean + u.double() * gap + spread_ulps * gap * z
    return tuple(t.to(dtype) for t in (x, w, b, dy))


def draw_near_constant(seed: int, dtype: torch.dtype, mean: float, sd: float) -> Inputs:
    """:func:`draw`'s rows as ``x = mean + sd·z`` (z at unit standard deviation), rounded to
    ``dtype``: near-constant rows, where σ² + ε is small and the mean is not."""
    z, w, b, dy = _standardized(seed)
    return tuple(t.to(dtype) for t in (mean + sd * z, w, b, dy))


def run(fn: Callable, op: str, inputs, eps: float, *, grad: bool = False) -> dict:
    """``fn``'s metrics against the float64 truth: ``{"y": ..., "dx": ...}`` (dx when ``grad``),
    and the truth's ``dx_max``."""
    truth = truth_of(op, *inputs, eps)
    x, w, b, dy = inputs
    y, leaves = forward(fn, op, x, w, b, eps)
    out = {"y": error_metrics(y, truth["y"]), "dx_max": float(truth["dx"].abs().max())}
    if grad:
        (dx,) = torch.autograd.grad(y, leaves[:1], dy)
        out["dx"] = error_metrics(dx, truth["dx"])
        out["dx_wrong"] = wrong_fraction(dx, truth["dx"])
    return out


def wrong_entries(actual: Tensor, truth: Tensor) -> Tensor:
    """Per row, the entries that are inf/NaN or off by ≥ 10 % of the row's max ``|truth|``
    (``truth``: float64; a truth beyond the dtype's range counts: its entry is then inf or
    wrong). A NaN difference is never ≥, so the nonfinite entries are counted apart."""
    scale = truth.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    diff = (actual.double() - truth).abs_()
    return ((diff >= 0.1 * scale) | diff.isnan()).sum(-1).double()


def wrong_fraction(actual: Tensor, truth: Tensor) -> float:
    """The fraction of the entries that are wrong (:func:`wrong_entries`)."""
    return float(wrong_entries(actual, truth).sum() / actual.numel())


def capped_error(m: dict) -> float:
    """A forward's max relative error in [1e-8, 1]: a visible failure counts as 1."""
    return 1.0 if m["zeroed"] else in_range_error(m)


def in_range_error(m: dict) -> float:
    """The max relative error in [1e-8, 1] of an output whose inputs lie inside the dtype's
    range: inf/NaN counts as 1; an output flushed to 0 counts by its error (``|t| / max|t|`` of
    its row), as any other, since inside the range a 0 is a rounding, not an overflow."""
    return 1.0 if m["nonfinite"] or m["max_rel"] is None else min(max(m["max_rel"], 1e-8), 1.0)


def threshold(fails: Callable[[float], bool], lo: float, hi: float, rising: bool) -> float:
    """Where ``fails`` switches on ``[lo, hi]``, bisected in log space to 1 %: for ``rising``
    the smallest value that fails, else the largest. Clamped to the range when it does not
    switch inside it."""
    if fails(lo) == rising:
        return lo
    if fails(hi) != rising:
        return hi
    while hi / lo > 1.01:
        mid = math.sqrt(lo * hi)
        if fails(mid) == rising:
            hi = mid
        else:
            lo = mid
    return hi if rising else lo


def visibly_fails(
    fn: Callable, op: str, seed: int, dtype: torch.dtype, *, scale: float, eps: float, grad: bool
) -> bool:
    """Whether ``fn`` visibly fails (``sentences.failure``) on the draw at ``scale``: in ``y``,
    or in ``y`` or ``dx`` when ``grad``."""
    m = run(fn, op, draw(seed, dtype, scale), eps, grad=grad)
    return failure(m["y"]) is not None or (grad and failure(m["dx"]) is not None)


def overflow_scale(fn: Callable, op: str, seed: int, dtype: torch.dtype, *, grad: bool) -> float:
    """The smallest input scale in ``SCALE_RANGE`` (to 1 %) at which ``fn`` visibly fails at
    eps ``EPS``; the range's top, 6e4 (FP16's largest round input), when it never does."""
    return threshold(
        lambda s: visibly_fails(fn, op, seed, dtype, scale=s, eps=EPS, grad=grad),
        *SCALE_RANGE,
        rising=True,
    )
