"""Where the naive FP16 code leaves its range, and 000 §7.1's fix, as findings: the caveat of
computing x² in FP16 (the naive RMSNorm breaks before the naive LayerNorm), §7.1 as the article
claims it (FP32 statistics fix the FP16 overflow of the statistics), and a comparison neither
article makes (000's ``stable_rmsnorm`` against 001's all-FP32 ``rms_norm``). The rules are fixed
here, before any measurement (see :mod:`normlab.lab.numerics.findings`).
"""

from __future__ import annotations

import math

import torch

from normlab.lab.numerics.measuring import (
    EPS,
    FP32_STATS,
    NAIVE,
    NEAR_ZERO,
    RANGE_WHY,
    SCALE_RANGE,
    append,
    capped_error,
    draw,
    overflow_scale,
    part,
    run,
    threshold,
    visibly_fails,
)
from normlab.lab.numerics.naive import fp32_rms_norm, stable_rms_norm
from normlab.lab.numerics.sentences import LOW, OPS, failure
from normlab.lab.verdict.finding import Finding

EPS_RANGE = (1e-12, 1e-2)
_SCALE = (
    "s = the smallest input scale (largest |x| of a row, searched over 1 … 6e4 to 1 %; 6e4 if "
    "none) at which the FP16 op visibly fails (inf/NaN, outputs flushed to 0, or max rel. "
    "error ≥ 10 %)"
)

SQUARES = Finding(
    "fp16-squares-overflow",
    "Computed the articles' naive way (x², its mean and rsqrt in FP16), FP16 RMSNorm breaks "
    "before FP16 LayerNorm: x² overflows FP16 for |x| > 256, at a smaller input than "
    "LayerNorm's variance does, and on near-zero rows rsqrt's gradient, "
    "(mean(x²) + ε)^(−3/2), overflows at a larger eps.",
    "a caveat to 000 §7 (the naive code of 000 §4)",
    (
        part(
            "FP16 overflow scale",
            f"log10(s_LayerNorm / s_RMSNorm), {_SCALE} in its forward output; naive code",
            why=RANGE_WHY,
        ),
        part(
            "FP16 near-zero rows",
            "log10(e_RMSNorm / e_LayerNorm), e = the largest eps (searched over 1e-12 … 1e-2 to "
            f"1 %) at which the naive FP16 op visibly fails in y or dx on rows peaking at "
            f"{NEAR_ZERO:g} (every x² under half FP16's smallest subnormal: the statistic is 0)",
            why=RANGE_WHY,
        ),
    ),
)

STABLE = Finding(
    "stable-rmsnorm",
    "Computing the statistics in FP32 fixes their FP16 overflow: 000 §7.1's stable_rmsnorm "
    "(statistics in FP32, the scale cast back, the last multiply in the input's precision) "
    "against the naive RMSNorm, and LayerNorm's mean and variance in FP32 against the naive "
    "LayerNorm.",
    "000 §7.1",
    (
        part(
            "RMSNorm FP16 overflow: stable vs naive",
            f"log10(s_stable_rmsnorm / s_naive), {_SCALE} in y or dx",
            why=RANGE_WHY,
        ),
        part(
            "LayerNorm FP16 overflow: FP32 statistics vs naive",
            f"log10(s_FP32-statistics / s_naive), {_SCALE} in y or dx; FP32 statistics = "
            "normlab's float32 reference LayerNorm",
            why=RANGE_WHY,
        ),
    ),
)

PARITY = Finding(
    "stable-rmsnorm-parity",
    "000 §7.1's stable_rmsnorm matches 001's all-FP32 rms_norm: it overflows no sooner in FP16 "
    "and is as precise in FP16 and BF16.",
    "000 §7.1 and 001 (a comparison neither article makes)",
    (
        part(
            "FP16 overflow: stable vs all-FP32",
            f"log10(s_all-FP32 / s_stable), {_SCALE} in y or dx",
            "≈0",
            why=RANGE_WHY,
        ),
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

FINDINGS = (SQUARES, STABLE, PARITY)


def _failing_eps(op: str, seed: int) -> float:
    """The largest eps in ``EPS_RANGE`` (to 1 %) at which the naive FP16 ``op`` visibly fails in
    y or dx on the draw's rows peaking at ``NEAR_ZERO``."""

    def fails(e: float) -> bool:
        return visibly_fails(NAIVE[op], op, seed, torch.float16, scale=NEAR_ZERO, eps=e, grad=True)

    return threshold(fails, *EPS_RANGE, rising=False)


def measure_squares(seeds: range, record: dict) -> dict[str, list[float]]:
    vals: dict[str, list[float]] = {p: [] for p, _ in SQUARES.parts}
    for s in seeds:
        scale = {op: overflow_scale(NAIVE[op], op, s, torch.float16, grad=False) for op in OPS}
        eps = {op: _failing_eps(op, s) for op in OPS}
        vals["FP16 overflow scale"].append(math.log10(scale["layer_norm"] / scale["rms_norm"]))
        vals["FP16 near-zero rows"].append(math.log10(eps["rms_norm"] / eps["layer_norm"]))
        for op, name in OPS.items():
            append(record, f"{name} overflow scale", scale[op])
            append(record, f"{name} largest failing eps", eps[op])
    return vals


RMS_FNS = {"naive": NAIVE["rms_norm"], "stable": stable_rms_norm, "all-FP32": fp32_rms_norm}
LN_FNS = {"naive": NAIVE["layer_norm"], "FP32 statistics": FP32_STATS["layer_norm"]}


def _scales(fns: dict, op: str, seed: int) -> dict[str, float]:
    return {k: overflow_scale(fn, op, seed, torch.float16, grad=True) for k, fn in fns.items()}


def _log_ratio(values: dict[str, list[float]], label: str, num: float, den: float) -> None:
    values[label].append(math.log10(num / den))


def measure_fixes(seeds: range) -> dict[str, tuple[dict[str, list[float]], dict]]:
    """``stable-rmsnorm`` and ``stable-rmsnorm-parity`` from one pass (they share the overflow
    scales): name -> (values per part, record)."""
    fix, par = ({p: [] for p, _ in f.parts} for f in (STABLE, PARITY))
    rec_fix, rec_par = {}, {}
    for s in seeds:
        rms, ln = _scales(RMS_FNS, "rms_norm", s), _scales(LN_FNS, "layer_norm", s)
        _log_ratio(fix, "RMSNorm FP16 overflow: stable vs naive", rms["stable"], rms["naive"])
        label = "LayerNorm FP16 overflow: FP32 statistics vs naive"
        _log_ratio(fix, label, ln["FP32 statistics"], ln["naive"])
        _log_ratio(par, "FP16 overflow: stable vs all-FP32", rms["all-FP32"], rms["stable"])
        for op, scales in (("RMSNorm", rms), ("LayerNorm", ln)):
            for k, v in scales.items():
                append(rec_fix, f"{op} {k} FP16 overflow scale", v)
        for k in ("stable", "all-FP32"):
            append(rec_par, f"{k} FP16 overflow scale", rms[k])
        forward = overflow_scale(stable_rms_norm, "rms_norm", s, torch.float16, grad=False)
        append(rec_fix, "RMSNorm stable FP16 overflow scale, forward alone", forward)
        # at its threshold, does stable_rmsnorm's forward fail, or only its gradient (1.0)
        if rms["stable"] < SCALE_RANGE[1]:
            x = draw(s, torch.float16, rms["stable"])
            m = run(stable_rms_norm, "rms_norm", x, EPS, grad=True)
            append(rec_fix, "stable FP16 fails first in dx only", float(failure(m["y"]) is None))
        for dt, short in LOW.items():
            inputs = draw(s, getattr(torch, dt))
            err = {}
            for k in ("stable", "all-FP32"):
                err[k] = capped_error(run(RMS_FNS[k], "rms_norm", inputs, EPS)["y"])
                append(rec_par, f"{k} {short} error at scale 1", err[k])
            _log_ratio(par, f"{short} error: stable vs all-FP32", err["stable"], err["all-FP32"])
    return {STABLE.name: (fix, rec_fix), PARITY.name: (par, rec_par)}
