"""000 §7.2 / 003 §十一's "a small eps explodes the gradient, worse in mixed precision" as three
findings: the explosion itself (float64 truth), and "worse" once per low precision, so that FP16
and BF16 each get their own verdict (they differ: BF16 has FP32's exponent range). The rules are
fixed here, before any measurement (see :mod:`normlab.lab.numerics.findings`).
"""

from __future__ import annotations

import math

import torch

from normlab.lab.numerics.measuring import (
    NAIVE,
    NEAR_ZERO,
    ORDER_OF_MAGNITUDE,
    ORDER_WHY,
    append,
    draw,
    part,
    run,
)
from normlab.lab.numerics.sentences import LOW, OPS
from normlab.lab.verdict.finding import Finding

EPS_DEFAULT, EPS_SMALL = 1e-5, 1e-10  # a common default vs a small one
EPSS = (1e-12, 1e-10, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)  # the plotted eps range

EXPLODES = Finding(
    "small-eps-explodes",
    "A small eps makes 1/sqrt(var + eps) and the gradient explode.",
    "000 §7.2, 003 §十一",
    tuple(
        part(
            f"{name}: true max|dx| grows",
            f"log10(max|dx| at eps={EPS_SMALL:g} / at eps={EPS_DEFAULT:g}), float64 truth, rows "
            f"peaking at {NEAR_ZERO:g} (statistic ≈ 1e-9)",
            delta=ORDER_OF_MAGNITUDE,
            why=ORDER_WHY,
        )
        for name in OPS.values()
    ),
)


def _worse(dtype: str) -> Finding:
    short = LOW[dtype]
    return Finding(
        f"small-eps-worse-in-{short.lower()}",
        f"With a small eps the gradient is worse in {short} mixed precision than in FP32.",
        "000 §7.2, 003 §十一",
        tuple(
            part(
                f"{name} {short}: worse than FP32",
                f"W({short}) − W(FP32) at eps={EPS_SMALL:g}, W = the fraction of dx entries of "
                "the naive op that are inf/NaN or off by ≥ 10 % of the row's max |dx| (a true "
                f"dx beyond the dtype's range counts), rows peaking at {NEAR_ZERO:g}",
                delta=0.01,
                why="1 % of the dx entries: one wrong gradient entry in a hundred",
            )
            for name in OPS.values()
        ),
    )


WORSE = {dt: _worse(dt) for dt in LOW}
FINDINGS = (EXPLODES, *WORSE.values())


def measure(seeds: range) -> dict[str, tuple[dict[str, list[float]], dict]]:
    """All three findings from one pass (name -> (values per part, record)): the same naive
    runs give the truth and the wrong fractions per dtype. The plot's curves are in the record
    of ``small-eps-explodes``."""
    vals = {f.name: {p: [] for p, _ in f.parts} for f in FINDINGS}
    records: dict[str, dict] = {f.name: {} for f in FINDINGS}
    curves: dict[str, list[list[float]]] = {}  # "<op> <dtype>" -> per seed, per eps
    for s in seeds:
        wrong: dict[tuple[str, str], dict[float, float]] = {}
        for op, name in OPS.items():
            for dt in ("float32", *LOW):
                inputs = draw(s, getattr(torch, dt), NEAR_ZERO)
                ms = {e: run(NAIVE[op], op, inputs, e, grad=True) for e in EPSS}
                wrong[op, dt] = {e: m["dx_wrong"] for e, m in ms.items()}
                append(curves, f"{name} {dt}", list(wrong[op, dt].values()))
                if dt == "float32":
                    append(curves, f"{name} truth", [m["dx_max"] for m in ms.values()])
                    grow = ms[EPS_SMALL]["dx_max"] / ms[EPS_DEFAULT]["dx_max"]
                    vals[EXPLODES.name][f"{name}: true max|dx| grows"].append(math.log10(grow))
            for dt, short in LOW.items():
                f = WORSE[dt].name
                d = wrong[op, dt][EPS_SMALL] - wrong[op, "float32"][EPS_SMALL]
                vals[f][f"{name} {short}: worse than FP32"].append(d)
                for e in (EPS_DEFAULT, EPS_SMALL):
                    for key, w in ((short, wrong[op, dt][e]), ("FP32", wrong[op, "float32"][e])):
                        append(records[f], f"{name} {key} wrong dx fraction at eps={e:g}", w)
    rec = records[EXPLODES.name]
    rec["eps"] = list(EPSS)
    rec["curves"] = {k: [sum(c) / len(c) for c in zip(*v, strict=True)] for k, v in curves.items()}
    return {name: (vals[name], records[name]) for name in vals}
