"""000 §7's stability statements as findings: "RMSNorm is numerically more stable because it
computes no mean" (7.2) and §7.1's ``stable_rmsnorm`` as the fix, against 001's all-FP32 version.
The rules are fixed here, before any measurement (see :mod:`normlab.lab.numerics.findings`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from normlab.lab.numerics.measuring import (
    EPS,
    FP32_STATS,
    LOW,
    NAIVE,
    NEAR_ZERO,
    SCALE_RANGE,
    capped_error,
    draw,
    draw_shifted,
    overflow_scale,
    part,
    run,
    threshold,
    visibly_fails,
)
from normlab.lab.numerics.naive import fp32_rms_norm, stable_rms_norm
from normlab.lab.numerics.sentences import OPS, failure
from normlab.lab.verdict.finding import Finding

EPS_RANGE = (1e-12, 1e-2)
# Rows with a large mean and a small spread, the case 000 §7.2's argument is about: LayerNorm
# subtracts a mean rounded to the dtype from values that differ by a few of its gaps, so the
# rounding of the mean (up to half a gap) is a large share of x − mean; RMSNorm has no mean. The
# spread is counted in the dtype's gaps at the mean (a spread under one gap rounds the row to a
# constant). Up to 8 gaps the mean is ≥ 15 standard deviations from 0 in BF16 (≥ 150 in FP16);
# the rounding of the mean, up to half a gap, is predicted to cost most at 2 gaps.
LARGE_MEANS = (1e3, 1e4)
SPREADS = (2.0, 4.0, 8.0)  # the rows' standard deviation, in gaps of the dtype at the mean
_GRID = (
    f"rows of mean {', '.join(f'{m:g}' for m in LARGE_MEANS)} and standard deviation "
    f"{', '.join(f'{s:g}' for s in SPREADS)} gaps of the dtype at the mean"
)

MORE_STABLE = Finding(
    "rmsnorm-more-stable",
    "RMSNorm is numerically more stable than LayerNorm because it computes no mean.",
    "000 §7.2",
    (
        part(
            "FP16 overflow scale",
            "log10(s_RMSNorm / s_LayerNorm), s = the smallest input scale (largest |x| of a row, "
            "searched over 1 … 6e4 to 1 %) at which the naive FP16 op visibly fails (inf/NaN, "
            "outputs flushed to 0, or max rel. error ≥ 10 %)",
        ),
        part(
            "FP16 near-zero rows",
            "log10(e_LayerNorm / e_RMSNorm), e = the largest eps (searched over 1e-12 … 1e-2 to "
            f"1 %) at which the naive FP16 op visibly fails in y or dx on rows peaking at "
            f"{NEAR_ZERO:g}",
        ),
        part(
            "FP16 error at scale 1",
            "log10(err_LayerNorm / err_RMSNorm), err = the naive FP16 forward's max relative "
            "error on ordinary rows of scale 1",
        ),
        *(
            part(
                f"{short} large-mean rows",
                f"log10(E_LayerNorm / E_RMSNorm), E = the naive {short} forward's max relative "
                f"error (a visible failure counts as 1), the worst over {_GRID}",
            )
            for short in LOW.values()
        ),
    ),
)

STABLE = Finding(
    "stable-rmsnorm",
    "000 §7.1's stable_rmsnorm (statistics in FP32, the scale cast back and the last multiply "
    "in the input's precision) fixes the naive FP16 overflow, as well as 001's all-FP32 "
    "version does.",
    "000 §7.1, 001",
    (
        part(
            "FP16 overflow: stable vs naive",
            "log10(s_stable / s_naive), s = the smallest input scale (searched over 1 … 6e4 to "
            "1 %; 6e4 if none) at which the FP16 RMSNorm visibly fails in y or dx",
        ),
        part("FP16 overflow: stable vs all-FP32", "log10(s_all-FP32 / s_stable), s as above", "≈0"),
        *(
            part(
                f"{short} error: stable vs all-FP32",
                f"log10(err_stable / err_all-FP32), err = the {short} forward's max relative "
                "error on ordinary rows of scale 1",
                "≈0",
            )
            for short in LOW.values()
        ),
    ),
)


def large_mean_metrics(
    seed: int, dtype: torch.dtype, fns: dict[str, Callable] = NAIVE
) -> dict[str, list[dict]]:
    """Per op of ``fns`` (default: the naive code), the forward's error metrics on each
    large-mean row set (means × spreads, in that order)."""
    rows = [draw_shifted(seed, dtype, m, k) for m in LARGE_MEANS for k in SPREADS]
    return {op: [run(fn, op, x, EPS)["y"] for x in rows] for op, fn in fns.items()}


def _failing_eps(op: str, seed: int) -> float:
    """The largest eps in ``EPS_RANGE`` (to 1 %) at which the naive FP16 ``op`` visibly fails in
    y or dx on the draw's rows peaking at ``NEAR_ZERO``."""

    def fails(e: float) -> bool:
        return visibly_fails(NAIVE[op], op, seed, torch.float16, scale=NEAR_ZERO, eps=e, grad=True)

    return threshold(fails, *EPS_RANGE, rising=False)


def measure_more_stable(seeds: range, record: dict) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {p: [] for p, _ in MORE_STABLE.parts}
    for s in seeds:
        scale = {op: overflow_scale(NAIVE[op], op, s, torch.float16, grad=False) for op in OPS}
        eps = {op: _failing_eps(op, s) for op in OPS}
        err = {op: capped_error(run(NAIVE[op], op, draw(s, torch.float16), EPS)["y"]) for op in OPS}
        vals["FP16 overflow scale"].append(math.log10(scale["rms_norm"] / scale["layer_norm"]))
        vals["FP16 near-zero rows"].append(math.log10(eps["layer_norm"] / eps["rms_norm"]))
        vals["FP16 error at scale 1"].append(math.log10(err["layer_norm"] / err["rms_norm"]))
        for op, name in OPS.items():
            record.setdefault(f"{name} overflow scale", []).append(scale[op])
            record.setdefault(f"{name} largest failing eps", []).append(eps[op])
            record.setdefault(f"{name} FP16 error at scale 1", []).append(err[op])
        for dt, short in LOW.items():
            dtype = getattr(torch, dt)
            metrics = large_mean_metrics(s, dtype)
            # what LayerNorm's cancellation costs: the same rows with FP32 statistics
            ref = large_mean_metrics(s, dtype, {"layer_norm": FP32_STATS["layer_norm"]})
            key = f"LayerNorm FP32 statistics {short} large-mean worst error"
            record.setdefault(key, []).append(max(capped_error(m) for m in ref["layer_norm"]))
            errs = {op: [capped_error(m) for m in ms] for op, ms in metrics.items()}
            worst = {op: max(e) for op, e in errs.items()}
            vals[f"{short} large-mean rows"].append(
                math.log10(worst["layer_norm"] / worst["rms_norm"])
            )
            for op, name in OPS.items():
                record.setdefault(f"{name} {short} large-mean worst error", []).append(worst[op])
                record.setdefault(f"{name} {short} large-mean errors", []).append(errs[op])
                # beside the capped error: the max relative error itself, and how many outputs
                # are exactly 0 (which the capped error counts as a failure)
                raw = [(m["max_rel"], m["zeroed"]) for m in metrics[op]]
                record.setdefault(f"{name} {short} large-mean max_rel, zeroed", []).append(raw)
    record["large-mean grid"] = {"means": list(LARGE_MEANS), "spreads": list(SPREADS)}
    return vals


STABLE_FNS = {"naive": NAIVE["rms_norm"], "stable": stable_rms_norm, "all-FP32": fp32_rms_norm}


def measure_stable(seeds: range, record: dict) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {p: [] for p, _ in STABLE.parts}
    for s in seeds:
        scale = {
            k: overflow_scale(fn, "rms_norm", s, torch.float16, grad=True)
            for k, fn in STABLE_FNS.items()
        }
        vals["FP16 overflow: stable vs naive"].append(math.log10(scale["stable"] / scale["naive"]))
        vals["FP16 overflow: stable vs all-FP32"].append(
            math.log10(scale["all-FP32"] / scale["stable"])
        )
        for k, v in scale.items():
            record.setdefault(f"{k} FP16 overflow scale", []).append(v)
        forward = overflow_scale(stable_rms_norm, "rms_norm", s, torch.float16, grad=False)
        record.setdefault("stable FP16 overflow scale, forward alone", []).append(forward)
        for dt, short in LOW.items():
            inputs = draw(s, getattr(torch, dt))
            err = {}
            for k in ("stable", "all-FP32"):
                err[k] = capped_error(run(STABLE_FNS[k], "rms_norm", inputs, EPS)["y"])
                record.setdefault(f"{k} {short} error at scale 1", []).append(err[k])
            ratio = err["stable"] / err["all-FP32"]
            vals[f"{short} error: stable vs all-FP32"].append(math.log10(ratio))
        # at its threshold, does stable_rmsnorm's forward fail, or only its gradient (1.0)
        if scale["stable"] < SCALE_RANGE[1]:
            x = draw(s, torch.float16, scale["stable"])
            m = run(stable_rms_norm, "rms_norm", x, EPS, grad=True)
            only_dx = float(failure(m["y"]) is None)
            record.setdefault("stable FP16 fails first in dx only", []).append(only_dx)
    return vals


MEASURES = {MORE_STABLE.name: measure_more_stable, STABLE.name: measure_stable}
