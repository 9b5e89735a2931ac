"""The articles' statements about precision, decided: ``normlab numerics``'s findings.

Each statement is a :class:`~normlab.lab.verdict.finding.Finding` whose rules are fixed here,
before any measurement; :func:`measure` draws the inputs (one repetition = one seeded draw of
``ROWS`` rows of ``HIDDEN``), computes every part's value per draw and :func:`decide_all` decides
them. "naive" is the articles' code, every step in the input dtype; "FP32 statistics" is
normlab's float32 reference (RMSNorm with LLaMA's cast order, the closest to the naive one).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from normlab import reference
from normlab.lab.numerics.findings import failure
from normlab.lab.numerics.metrics import error_metrics
from normlab.lab.numerics.naive import forward, naive_layer_norm, naive_rms_norm, truth_of
from normlab.lab.verdict.finding import Finding, Part

OPS = {"rms_norm": "RMSNorm", "layer_norm": "LayerNorm"}
LOW = {"float16": "FP16", "bfloat16": "BF16"}
ROWS, HIDDEN = 16, 1024
SEEDS = 8  # input draws per finding
NEAR_ZERO = 1e-4  # the peak |x| of a near-zero row: its statistic is ~1e-9, far below eps
EPS = 1e-6  # the eps of the scale and FP32-statistics measurements (LLaMA's)
EPS_DEFAULT, EPS_SMALL = 1e-5, 1e-10  # the "small eps" finding: a common default vs a small one
EPSS = (1e-12, 1e-10, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)  # the plotted eps range
SCALES = (1e-2, 1.0, 10.0, 100.0, 300.0, 1e3, 3e3, 1e4, 6e4)  # largest |x| of a row
SCALE_RANGE = (1.0, 6e4)  # where the overflow threshold is searched (6e4 still fits in FP16)
EPS_RANGE = (1e-12, 1e-2)
FACTOR_2 = math.log10(2)  # δ of the log10 ratios: a factor of 2 matters

NAIVE: dict[str, Callable] = {"rms_norm": naive_rms_norm, "layer_norm": naive_layer_norm}
FP32_STATS: dict[str, Callable] = {
    "rms_norm": lambda x, w, b, eps: reference.rms_norm(x, w, eps, casting="llama"),
    "layer_norm": lambda x, w, b, eps: reference.layer_norm(x, w, b, eps),
}

# --------------------------------------------------------------------------------------------
# the statements and their rules, fixed before the runs

FINDINGS: dict[str, Finding] = {
    f.name: f
    for f in (
        Finding(
            "rmsnorm-more-stable",
            "RMSNorm is numerically more stable than LayerNorm because it computes no mean.",
            "000 §7.2",
            (
                (
                    "FP16 overflow scale",
                    Part(
                        "log10(s_RMSNorm / s_LayerNorm), s = the smallest input scale (largest "
                        "|x| of a row, searched over 1 … 6e4 to 1 %) at which the naive FP16 op "
                        "visibly fails (inf/NaN, outputs flushed to 0, or max rel. error ≥ 10 %)",
                        ">0",
                        FACTOR_2,
                    ),
                ),
                (
                    "FP16 near-zero rows",
                    Part(
                        "log10(e_LayerNorm / e_RMSNorm), e = the largest eps (searched over "
                        "1e-12 … 1e-2 to 1 %) at which the naive FP16 op visibly fails in y or dx "
                        f"on rows peaking at {NEAR_ZERO:g}",
                        ">0",
                        FACTOR_2,
                    ),
                ),
                (
                    "FP16 error at scale 1",
                    Part(
                        "log10(err_LayerNorm / err_RMSNorm), err = the naive FP16 forward's max "
                        "relative error on ordinary rows of scale 1",
                        ">0",
                        FACTOR_2,
                    ),
                ),
            ),
        ),
        Finding(
            "small-eps-explodes",
            "A small eps makes 1/sqrt(var + eps) and the gradient explode, worse in mixed "
            "precision.",
            "000 §7.2, 003 §十一",
            tuple(
                (
                    f"{name}: true max|dx| grows",
                    Part(
                        f"log10(max|dx| at eps={EPS_SMALL:g} / at eps={EPS_DEFAULT:g}), float64 "
                        f"truth, rows peaking at {NEAR_ZERO:g} (statistic ≈ 1e-9)",
                        ">0",
                        1.0,
                    ),
                )
                for name in OPS.values()
            )
            + tuple(
                (
                    f"{name} {short}: worse than FP32",
                    Part(
                        f"W({short}) − W(FP32) at eps={EPS_SMALL:g}, W = the fraction of dx "
                        "entries of the naive op that are inf/NaN or off by ≥ 10 % of the row's "
                        "max |dx| (a true dx beyond the dtype's range counts), same rows",
                        ">0",
                        0.01,
                    ),
                )
                for name in OPS.values()
                for short in LOW.values()
            ),
        ),
        Finding(
            "fp32-statistics-needed",
            "Under FP16/BF16 the statistics must be computed in FP32.",
            "000 §7.1, 001",
            tuple(
                (
                    f"{name} {short}",
                    Part(
                        "log10(E_naive / E_fp32), E = the worst forward max relative error over "
                        f"input scales {', '.join(f'{s:g}' for s in SCALES)} (inf/NaN or "
                        "flushed outputs count as 1)",
                        ">0",
                        FACTOR_2,
                    ),
                )
                for name in OPS.values()
                for short in LOW.values()
            ),
        ),
        Finding(
            "rmsnorm-on-sphere",
            "Before its gain, RMSNorm's output lies on the sphere of radius √d; with eps a "
            "little inside it.",
            "001",
            (
                (
                    "on the sphere",
                    Part(
                        "max over rows of |‖x̂‖/√d − 1|, FP32, ordinary rows of scale 1, "
                        f"eps={EPS:g}",
                        "≈0",
                        1e-3,
                    ),
                ),
                (
                    "inside with eps",
                    Part(
                        "mean over rows of 1 − ‖x̂‖/√d, FP32, rows with mean(x²) = 100·eps "
                        f"(eps={EPS:g})",
                        ">0",
                        1e-3,
                    ),
                ),
            ),
        ),
    )
}

# --------------------------------------------------------------------------------------------
# measurement


def draw(
    seed: int, dtype: torch.dtype, scale: float = 1.0, rows: int = ROWS, hidden: int = HIDDEN
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(x, w, b, dy)`` in ``dtype``: Gaussian rows whose largest ``|x|`` is ``scale``; the
    same rows (rescaled) for every scale and dtype of one ``seed``."""
    g = torch.Generator().manual_seed(7919 + seed)
    z = torch.randn(rows, hidden, generator=g, dtype=torch.float64)
    x = z / z.abs().amax(-1, keepdim=True) * scale
    w = 1.0 + 0.1 * torch.randn(hidden, generator=g, dtype=torch.float64)
    b = 0.1 * torch.randn(hidden, generator=g, dtype=torch.float64)
    dy = torch.randn(rows, hidden, generator=g, dtype=torch.float64)
    return tuple(t.to(dtype) for t in (x, w, b, dy))


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


def wrong_fraction(actual: Tensor, truth: Tensor) -> float:
    """The fraction of entries that are inf/NaN or off by ≥ 10 % of their row's max ``|truth|``
    (a truth beyond the dtype's range counts: its entry is then inf or wrong)."""
    a, t = actual.double(), truth.double()
    scale = t.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    bad = ~torch.isfinite(a) | ((a - t).abs() >= 0.1 * scale)
    return float(bad.double().mean())


def capped_error(m: dict) -> float:
    """A forward's max relative error in [1e-8, 1]: a visible failure counts as 1."""
    if m["nonfinite"] or m["zeroed"] or m["max_rel"] is None:
        return 1.0
    return min(max(m["max_rel"], 1e-8), 1.0)


def threshold(fails: Callable[[float], bool], lo: float, hi: float, rising: bool) -> float:
    """Where ``fails`` switches on ``[lo, hi]``, bisected in log space to 1 %: for ``rising``
    the smallest value that fails, else the largest. Clamped to the range when it does not
    switch inside it."""
    if rising and fails(lo) or not rising and not fails(lo):
        return lo
    if rising and not fails(hi) or not rising and fails(hi):
        return hi
    while hi / lo > 1.01:
        mid = math.sqrt(lo * hi)
        if fails(mid) == rising:
            hi = mid
        else:
            lo = mid
    return hi if rising else lo


def _visibly_fails(op: str, seed: int, *, scale: float, eps: float, grad: bool) -> bool:
    m = run(NAIVE[op], op, draw(seed, torch.float16, scale), eps, grad=grad)
    return failure(m["y"]) is not None or (grad and failure(m["dx"]) is not None)


def _more_stable(seeds: range, record: dict) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {p: [] for p, _ in FINDINGS["rmsnorm-more-stable"].parts}
    for s in seeds:
        scale = {
            op: threshold(
                lambda v, op=op, s=s: _visibly_fails(op, s, scale=v, eps=EPS, grad=False),
                *SCALE_RANGE,
                rising=True,
            )
            for op in OPS
        }
        eps = {
            op: threshold(
                lambda e, op=op, s=s: _visibly_fails(op, s, scale=NEAR_ZERO, eps=e, grad=True),
                *EPS_RANGE,
                rising=False,
            )
            for op in OPS
        }
        err = {op: capped_error(run(NAIVE[op], op, draw(s, torch.float16), EPS)["y"]) for op in OPS}
        vals["FP16 overflow scale"].append(math.log10(scale["rms_norm"] / scale["layer_norm"]))
        vals["FP16 near-zero rows"].append(math.log10(eps["layer_norm"] / eps["rms_norm"]))
        vals["FP16 error at scale 1"].append(math.log10(err["layer_norm"] / err["rms_norm"]))
        for op, name in OPS.items():
            record.setdefault(f"{name} overflow scale", []).append(scale[op])
            record.setdefault(f"{name} largest failing eps", []).append(eps[op])
            record.setdefault(f"{name} FP16 error at scale 1", []).append(err[op])
    return vals


def _small_eps(seeds: range, record: dict) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {p: [] for p, _ in FINDINGS["small-eps-explodes"].parts}
    curves: dict[str, list[list[float]]] = {}  # "<op> <dtype>" -> per eps, per seed
    for s in seeds:
        wrong: dict[tuple[str, str], dict[float, float]] = {}
        for op, name in OPS.items():
            for dt in ("float32", *LOW):
                inputs = draw(s, getattr(torch, dt), NEAR_ZERO)
                ms = {e: run(NAIVE[op], op, inputs, e, grad=True) for e in EPSS}
                wrong[op, dt] = {e: m["dx_wrong"] for e, m in ms.items()}
                for i, e in enumerate(EPSS):
                    c = curves.setdefault(f"{name} {dt}", [[] for _ in EPSS])
                    c[i].append(ms[e]["dx_wrong"])
                if dt == "float32":
                    truth = [m["dx_max"] for m in ms.values()]
                    c = curves.setdefault(f"{name} truth", [[] for _ in EPSS])
                    for i, t in enumerate(truth):
                        c[i].append(t)
                    grow = ms[EPS_SMALL]["dx_max"] / ms[EPS_DEFAULT]["dx_max"]
                    vals[f"{name}: true max|dx| grows"].append(math.log10(grow))
            for dt, short in LOW.items():
                d = wrong[op, dt][EPS_SMALL] - wrong[op, "float32"][EPS_SMALL]
                vals[f"{name} {short}: worse than FP32"].append(d)
                for e in (EPS_DEFAULT, EPS_SMALL):
                    key = f"{name} {short} wrong dx fraction at eps={e:g}"
                    record.setdefault(key, []).append(wrong[op, dt][e])
    record["eps"] = list(EPSS)
    record["curves"] = {k: [sum(v) / len(v) for v in c] for k, c in curves.items()}
    return vals


def _fp32_stats(seeds: range, record: dict) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {p: [] for p, _ in FINDINGS["fp32-statistics-needed"].parts}
    curves: dict[str, list[list[float]]] = {}
    for s in seeds:
        for op, name in OPS.items():
            for dt, short in LOW.items():
                worst = {}
                for impl, fns in (("naive", NAIVE), ("FP32 statistics", FP32_STATS)):
                    errs = [
                        capped_error(run(fns[op], op, draw(s, getattr(torch, dt), sc), EPS)["y"])
                        for sc in SCALES
                    ]
                    worst[impl] = max(errs)
                    record.setdefault(f"{name} {short} {impl} worst error", []).append(max(errs))
                    c = curves.setdefault(f"{name} {short} {impl}", [[] for _ in SCALES])
                    for i, e in enumerate(errs):
                        c[i].append(e)
                ratio = worst["naive"] / worst["FP32 statistics"]
                vals[f"{name} {short}"].append(math.log10(ratio))
    record["scales"] = list(SCALES)
    record["curves"] = {k: [max(v) for v in c] for k, c in curves.items()}
    return vals


def _sphere(seeds: range, record: dict) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {"on the sphere": [], "inside with eps": []}
    d = HIDDEN
    for s in seeds:
        x, *_ = draw(s, torch.float32)
        r = reference.rms_norm(x, None, EPS).norm(dim=-1) / math.sqrt(d)
        vals["on the sphere"].append(float((r - 1).abs().max()))
        ms = x.double().pow(2).mean(-1, keepdim=True)
        small = (x.double() * torch.sqrt(100 * EPS / ms)).float()  # mean(x²) = 100·eps
        r = reference.rms_norm(small, None, EPS).norm(dim=-1).double() / math.sqrt(d)
        vals["inside with eps"].append(float((1 - r).mean()))
    record["predicted 1 − ‖x̂‖/√d at mean(x²) = 100·eps"] = 1 - math.sqrt(100 / 101)
    return vals


MEASURES: dict[str, Callable[[range, dict], dict[str, list[float]]]] = {
    "rmsnorm-more-stable": _more_stable,
    "small-eps-explodes": _small_eps,
    "fp32-statistics-needed": _fp32_stats,
    "rmsnorm-on-sphere": _sphere,
}


def _summary(record: dict) -> dict:
    """What a verdict shows beside its parts: means of the per-draw raw values."""
    out = {}
    for k, v in record.items():
        if isinstance(v, list) and v and k not in ("eps", "scales"):
            out[f"mean {k}"] = sum(v) / len(v)
        elif isinstance(v, float):
            out[k] = v
    return out


def decide_all(seeds: int = SEEDS, names=None, progress: bool = False) -> list[dict]:
    """Measure and decide every finding (or those ``names``); each dict is the verdict with the
    raw values per draw (``values``) and what its plot needs (``record``)."""
    from tqdm.auto import tqdm

    out = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny ops: thread barriers cost more than the work
    try:
        for name in tqdm(names or FINDINGS, desc="findings", disable=not progress, leave=False):
            record: dict = {}
            values = MEASURES[name](range(seeds), record)
            verdict = FINDINGS[name].decide(values, means=_summary(record))
            verdict["record"] = record
            out.append(verdict)
    finally:
        torch.set_num_threads(threads)
    return out
