"""The articles' statements about precision, decided: ``normlab numerics``'s findings.

Each statement is a :class:`~normlab.lab.verdict.finding.Finding` whose rules are fixed in code,
before any measurement; its measure draws the inputs (one repetition = one seeded draw of
``ROWS`` rows of ``HIDDEN``, :mod:`normlab.lab.numerics.measuring`) and computes every part's
value per draw, and :func:`decide_all` decides them. The findings live by family: 000 §7.2's
stability on inputs inside the range (:mod:`~normlab.lab.numerics.stability`), where the naive
FP16 code leaves it and 000 §7.1's fix (:mod:`~normlab.lab.numerics.overflow`), the small eps
(:mod:`~normlab.lab.numerics.eps`), and here FP32 statistics and 001's sphere.

The draws come from a seed block (``measuring.seeds_of``, as a study's): a design registered
before a block's data is decided on that block's draws, and every published verdict names its
block, its draws and its design (``Finding.design``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from normlab import reference
from normlab.lab.kit.io import utc
from normlab.lab.kit.threads import using_threads
from normlab.lab.numerics import eps as eps_findings
from normlab.lab.numerics import overflow, stability
from normlab.lab.numerics.measuring import (
    EPS,
    FP32_STATS,
    HIDDEN,
    NAIVE,
    SCALES,
    append,
    capped_error,
    draw,
    part,
    registered,
    run,
    seeds_of,
)
from normlab.lab.numerics.sentences import LOW, OPS
from normlab.lab.verdict.finding import Finding

SEEDS = 8  # input draws per finding

# --------------------------------------------------------------------------------------------
# the statements and their rules, fixed before the runs

FP32_NEEDED = Finding(
    "fp32-statistics-needed",
    "Under FP16/BF16 the statistics must be computed in FP32.",
    "000 §7.1, 001",
    tuple(
        part(
            f"{name} {short}",
            "log10(E_naive / E_fp32), E = the worst forward max relative error over input "
            f"scales {', '.join(f'{s:g}' for s in SCALES)} (inf/NaN or flushed outputs count "
            "as 1)",
        )
        for name in OPS.values()
        for short in LOW.values()
    ),
)

SPHERE = Finding(
    "rmsnorm-on-sphere",
    "Before its gain, RMSNorm's output lies on the sphere of radius √d; with eps a "
    "little inside it.",
    "001",
    (
        part(
            "on the sphere",
            f"max over rows of |‖x̂‖/√d − 1|, FP32, ordinary rows of scale 1, eps={EPS:g}",
            "≈0",
            1e-3,
            why="0.1 % of the radius: FP32 rounding leaves ~1e-5, a shrinkage that matters is "
            "larger",
        ),
        part(
            "inside with eps",
            f"mean over rows of 1 − ‖x̂‖/√d, FP32, rows with mean(x²) = 100·eps (eps={EPS:g})",
            delta=1e-3,
            why="0.1 % of the radius, as 'on the sphere': eps at 100× under mean(x²) shrinks it "
            "by ~0.5 %",
        ),
    ),
)

FINDINGS: dict[str, Finding] = {
    f.name: f
    for f in (
        stability.MORE_STABLE,
        overflow.SQUARES,
        *eps_findings.FINDINGS,
        FP32_NEEDED,
        overflow.STABLE,
        overflow.PARITY,
        SPHERE,
    )
}

# --------------------------------------------------------------------------------------------
# measurement


def _fp32_stats(seeds: range, record: dict) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {p: [] for p, _ in FINDINGS["fp32-statistics-needed"].parts}
    curves: dict[str, list[list[float]]] = {}  # per draw, per scale
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
                    append(record, f"{name} {short} {impl} worst error", worst[impl])
                    append(curves, f"{name} {short} {impl}", errs)
                ratio = worst["naive"] / worst["FP32 statistics"]
                vals[f"{name} {short}"].append(math.log10(ratio))
    record["scales"] = list(SCALES)
    # per scale, the worst over the draws
    record["curves"] = {k: [max(c) for c in zip(*errs, strict=True)] for k, errs in curves.items()}
    return vals


def _sphere(seeds: range, record: dict) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {"on the sphere": [], "inside with eps": []}
    for s in seeds:
        x, *_ = draw(s, torch.float32)
        r = reference.rms_norm(x, None, EPS).norm(dim=-1) / math.sqrt(HIDDEN)
        vals["on the sphere"].append(float((r - 1).abs().max()))
        ms = x.double().pow(2).mean(-1, keepdim=True)
        small = (x.double() * torch.sqrt(100 * EPS / ms)).float()  # mean(x²) = 100·eps
        r = reference.rms_norm(small, None, EPS).norm(dim=-1).double() / math.sqrt(HIDDEN)
        vals["inside with eps"].append(float((1 - r).mean()))
    record["predicted 1 − ‖x̂‖/√d at mean(x²) = 100·eps"] = 1 - math.sqrt(100 / 101)
    return vals


Measure = Callable[[range], dict[str, tuple[dict[str, list[float]], dict]]]


def _alone(f: Finding, fn: Callable[[range, dict], dict[str, list[float]]]):
    """The group of one finding ``f``, measured by ``fn(seeds, record) -> values``."""

    def measure(seeds: range) -> dict:
        record: dict = {}
        return {f.name: (fn(seeds, record), record)}

    return (f.name,), measure


# Each group of findings is measured in one pass (the small-eps findings share their runs).
GROUPS: tuple[tuple[tuple[str, ...], Measure], ...] = (
    _alone(stability.MORE_STABLE, stability.measure_more_stable),
    _alone(overflow.SQUARES, overflow.measure_squares),
    ((overflow.STABLE.name, overflow.PARITY.name), overflow.measure_fixes),
    (tuple(f.name for f in eps_findings.FINDINGS), eps_findings.measure),
    _alone(FP32_NEEDED, _fp32_stats),
    _alone(SPHERE, _sphere),
)


def _summary(record: dict) -> dict:
    """What a verdict shows beside its parts: means of the per-draw raw numbers."""
    out = {}
    for k, v in record.items():
        numbers = isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v)
        if numbers and k not in ("eps", "scales"):
            out[f"mean {k}"] = sum(v) / len(v)
        elif isinstance(v, float):
            out[k] = v
    return out


def decide_all(
    seeds: int = SEEDS, names=None, progress: bool = False, seed_block: int = 0
) -> list[dict]:
    """Measure and decide every finding (or those ``names``), in ``FINDINGS``' order, on the
    first ``seeds`` draws of ``seed_block``; each dict is the verdict with the raw values per
    draw (``values``), what its plot needs (``record``), and its registration: the design it was
    decided under (``design``), the block and the draws (``seed_block``, ``seeds``) and when the
    measurement began (``began``, UTC)."""
    from tqdm.auto import tqdm

    draws = seeds_of(seed_block, seeds)
    stamp = {"seed_block": seed_block, "began": utc(), "seeds": list(draws)}
    wanted = [n for n in FINDINGS if names is None or n in names]
    out: dict[str, dict] = {}
    with using_threads(1):  # thousands of tiny ops: thread barriers cost more than the work
        groups = [(g, fn) for g, fn in GROUPS if set(g) & set(wanted)]
        for _, fn in tqdm(groups, desc="findings", disable=not progress, leave=False):
            for name, (values, record) in fn(draws).items():
                finding = FINDINGS[name]
                out[name] = registered(finding, values, record, means=_summary(record), **stamp)
    return [out[n] for n in wanted]
