"""000 §7.2's "RMSNorm, computing no mean, is numerically more stable" as the article argues it,
on inputs inside each format's range. The rules are fixed here, before any measurement (see
:mod:`normlab.lab.numerics.findings`); where the naive FP16 code leaves its range (x² past 65504,
near-zero rows) is a finding of its own, :mod:`normlab.lab.numerics.overflow`.

The article's mechanism: LayerNorm subtracts the row's mean, so on rows whose values lie close
together far from 0 its ``x − mean`` and its variance cancel (the mean, rounded to the dtype, is
off by up to half a gap, a large share of ``x − mean``), and where σ² + ε is small its scale
1/√(σ² + ε) and so its gradient are large; RMSNorm's statistic, mean(x²), keeps the mean² and
stays large. Measured on two row families, drawn per input draw:

- *large-mean rows* (:func:`~normlab.lab.numerics.measuring.draw_shifted`): mean m, standard
  deviation k gaps of the dtype at m (a spread under one gap rounds the row to a constant). In
  FP16 m ≤ 100 keeps every |x| under 128, so x² ≤ 16384 (a quarter of FP16's 65504) and both
  statistics (mean(x²), σ²) are normal FP16 numbers; BF16 has FP32's range and takes the
  old grid's 1e3 and 1e4 besides;
- *near-constant rows* (:func:`~normlab.lab.numerics.measuring.draw_near_constant`): mean 1,
  σ = 1e-3 (σ² = eps = 1e-6): the article's "σ² + ε very small".
"""

from __future__ import annotations

import math

import torch

from normlab.lab.numerics.measuring import (
    EPS,
    NAIVE,
    ORDER_OF_MAGNITUDE,
    ORDER_WHY,
    append,
    draw,
    draw_near_constant,
    draw_shifted,
    in_range_error,
    part,
    run,
)
from normlab.lab.numerics.sentences import LOW, OPS
from normlab.lab.verdict.finding import Finding

MEANS = {"FP16": (10.0, 30.0, 100.0), "BF16": (10.0, 30.0, 100.0, 1e3, 1e4)}
SPREADS = (2.0, 4.0, 8.0)  # the rows' standard deviation, in gaps of the dtype at the mean
NEAR_CONSTANT = {"mean": 1.0, "sd": 1e-3}  # σ² = 1e-6 = EPS


def _grid(short: str) -> str:
    return (
        f"rows of mean {', '.join(f'{m:g}' for m in MEANS[short])} and standard deviation "
        f"{', '.join(f'{k:g}' for k in SPREADS)} gaps of {short} at the mean"
    )


def _error_part(short: str, output: str, what: str) -> tuple:
    return part(
        f"{short} {output} error, large-mean rows",
        f"log10(E_LayerNorm / E_RMSNorm), E = the naive {short} op's {what} max relative error "
        f"against float64 (normwise per row; inf/NaN counts as 1), the worst over {_grid(short)}"
        f", eps={EPS:g}",
    )


MORE_STABLE = Finding(
    "rmsnorm-more-stable",
    "RMSNorm, computing no mean, is numerically more stable than LayerNorm: on rows with a "
    "large mean and a small spread (where x − mean and the variance cancel) and on "
    "near-constant rows (where σ² + ε is small), inside each format's range.",
    "000 §7.2",
    tuple(
        p
        for short in LOW.values()
        for p in (
            _error_part(short, "forward", "output's"),
            _error_part(short, "gradient", "dx's (autograd of the naive code, random dy)"),
            part(
                f"{short} gradient size, near-constant rows",
                "log10(max|dx|_LayerNorm / max|dx|_RMSNorm), the float64 truth on rows of mean "
                f"{NEAR_CONSTANT['mean']:g} and standard deviation {NEAR_CONSTANT['sd']:g} "
                f"rounded to {short}, eps={EPS:g}",
                delta=ORDER_OF_MAGNITUDE,
                why=ORDER_WHY,
            ),
        )
    ),
)


def large_mean_rows(seed: int, dtype: torch.dtype) -> list[tuple[float, float, tuple]]:
    """``(mean, spread, inputs)`` of the draw's large-mean rows in ``dtype``, the grid in
    order (means × spreads)."""
    short = LOW[str(dtype).removeprefix("torch.")]
    return [(m, k, draw_shifted(seed, dtype, m, k)) for m in MEANS[short] for k in SPREADS]


def near_constant_rows(seed: int, dtype: torch.dtype) -> tuple:
    return draw_near_constant(seed, dtype, NEAR_CONSTANT["mean"], NEAR_CONSTANT["sd"])


def _large_mean(seed: int, dt: str, vals: dict, record: dict, curves: dict) -> None:
    """The two error parts of one format on one draw; ``curves``: per op and output, this
    draw's worst error per mean (over the spreads), for the plot."""
    short, n = LOW[dt], len(SPREADS)
    errs: dict[tuple[str, str], list[float]] = {}  # (output, op) -> per cell
    cells = large_mean_rows(seed, getattr(torch, dt))
    for op in OPS:
        ms = [run(NAIVE[op], op, inputs, EPS, grad=True) for _, _, inputs in cells]
        for output in ("y", "dx"):
            errs[output, op] = [in_range_error(m[output]) for m in ms]
    for output, what in (("y", "forward"), ("dx", "gradient")):
        worst = {op: max(errs[output, op]) for op in OPS}
        ratio = worst["layer_norm"] / worst["rms_norm"]
        vals[f"{short} {what} error, large-mean rows"].append(math.log10(ratio))
        for op, name in OPS.items():
            append(record, f"{name} {short} {what} worst error, large-mean rows", worst[op])
            e = errs[output, op]
            per_mean = [max(e[i * n : (i + 1) * n]) for i in range(len(MEANS[short]))]
            append(curves, f"{name} {short} {what}", per_mean)


def measure_more_stable(seeds: range, record: dict) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {p: [] for p, _ in MORE_STABLE.parts}
    curves: dict[str, list[list[float]]] = {}
    for s in seeds:
        for dt, short in LOW.items():
            _large_mean(s, dt, vals, record, curves)
            inputs = near_constant_rows(s, getattr(torch, dt))
            ms = {op: run(NAIVE[op], op, inputs, EPS, grad=True) for op in OPS}
            size = {op: m["dx_max"] for op, m in ms.items()}
            ratio = size["layer_norm"] / size["rms_norm"]
            vals[f"{short} gradient size, near-constant rows"].append(math.log10(ratio))
            # beside the parts: the naive code's own max|dx| (finite entries) on these rows, and
            # both ops' forward error on ordinary rows (zero mean, where nothing cancels)
            ordinary = draw(s, getattr(torch, dt))
            for op, name in OPS.items():
                append(record, f"{name} {short} true max|dx|, near-constant rows", size[op])
                naive_max = ms[op]["dx"]["max_abs"]
                append(record, f"{name} {short} naive max|dx|, near-constant rows", naive_max)
                err = in_range_error(run(NAIVE[op], op, ordinary, EPS)["y"])
                append(record, f"{name} {short} forward error, ordinary rows of scale 1", err)
    means = {k: list(v) for k, v in MEANS.items()}
    record["large-mean grid"] = {"means": means, "spreads": list(SPREADS)}
    # per mean, the worst over the spreads and the draws
    record["curves"] = {k: [max(c) for c in zip(*v, strict=True)] for k, v in curves.items()}
    return vals
