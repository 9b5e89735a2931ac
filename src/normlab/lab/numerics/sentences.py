"""The generated sentences of ``normlab numerics``'s "what this shows", the FP32-statistics
guarantee, and what they read of the records (``select``, ``failure``, ``fmt``).

Every sentence is computed from the records, so a run where the naive code does not fail says so
instead of repeating the articles' claim.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

FAIL_REL = 0.1  # a 10 % relative error in some output counts as visibly wrong
OPS = {"rms_norm": "RMSNorm", "layer_norm": "LayerNorm"}
DTYPE_SHORT = {"float16": "FP16", "bfloat16": "BF16", "float32": "FP32"}
LOW = {dt: DTYPE_SHORT[dt] for dt in ("float16", "bfloat16")}  # the low precisions
GUARANTEED_CASTINGS = ("llama", "gemma", "")  # "" is LayerNorm, which has one cast order
FP32_SLACK_ULP = 4.0  # FP32 outputs: row_ulp within the reference's + this (see guarantee)


def fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.1e}" if v and (v >= 1e4 or v < 1e-2) else f"{v:.3g}"


def max_of(vals: Iterable[float | None]) -> float | None:
    return max((v for v in vals if v is not None), default=None)


def failure(m: dict | None) -> str | None:
    """Why metrics ``m`` count as a visible failure, or None."""
    if m is None:
        return None
    if m["nonfinite"]:
        return f"{m['nonfinite']} inf/NaN outputs"
    if m["zeroed"]:
        return f"{m['zeroed']} outputs flushed to 0"
    if m["max_rel"] is not None and m["max_rel"] >= FAIL_REL:
        return f"max relative error {fmt(m['max_rel'])}"
    return None


def _list(vals: Iterable[float]) -> str:
    return ", ".join(f"{v:g}" for v in vals)


def case_key(r: dict) -> tuple:
    return (r["dtype"], r["scale"], r["hidden"], r["shape"], r["eps"], r["rows"])


def _where(r: dict) -> str:
    return f"{r['dtype']} scale={r['scale']:g} N={r['hidden']} {r['shape']} eps={r['eps']:g}"


def select(records, *, axis: str, **fields) -> list[dict]:
    """The records of ``axis``'s sweep whose ``fields`` (op, impl, dtype, shape) are these, in
    the order of ``axis``."""
    rows = [r for r in records if axis in r["axes"] and all(r[k] == v for k, v in fields.items())]
    return sorted(rows, key=lambda r: r[axis])


# --------------------------------------------------------------------------------------------
# the guarantee: normlab's FP32-statistics backends never overflow and are within 1 ulp of the
# reference with the same cast order


@dataclass
class Guarantee:
    checked: list[str]  # "RMSNorm numba/llama", ...
    violations: list[str]
    n: int  # records checked
    fp32_strict_misses: list[str]  # FP32 records over reference + 1 ulp but within the slack


def guarantee(result) -> Guarantee:
    """Check every normlab backend (not the naive code, not torch's ops) with casting
    llama/gemma, and LayerNorm, against the reference with the same cast order.

    A record passes when its forward output has no inf/NaN where the truth is representable and
    its error is at most the reference's + 1 ulp, in FP16/BF16 both as ``row_ulp`` (ulps at the
    row's scale) and elementwise ``max_ulp``. In FP32 output the statistics are no more precise
    than the output, so two correct FP32 implementations differ by their summation order and
    ``rsqrt`` rounding: a few ulps at the row's scale (a blocked sum: +0.9; ``1/sqrt``: +1.5),
    and thousands of elementwise ulps at outputs that cancel to ~0 in ``x̂·w + b``. There
    ``row_ulp`` may exceed the reference's by ``FP32_SLACK_ULP``; misses of the strict +1 are
    listed, not failed.
    """
    ref = {
        (case_key(r), r["op"], r["casting"]): r
        for r in result.records
        if r["backend"] == "reference"
    }
    g = Guarantee([], [], 0, [])
    for r in result.records:
        if r["backend"] in ("naive", "torch") or r["casting"] not in GUARANTEED_CASTINGS:
            continue
        g.checked.append(f"{OPS[r['op']]} {r['impl']}")
        g.n += 1
        name = f"{OPS[r['op']]} {r['impl']} at {_where(r)}"
        if r["error"]:
            g.violations.append(f"{name}: raised {r['error']}")
            continue
        m, m0 = r["y"], ref[(case_key(r), r["op"], r["casting"])]["y"]
        if m["nonfinite"]:
            g.violations.append(f"{name}: {m['nonfinite']} inf/NaN where the truth is finite")
        fp32 = r["dtype"] == "float32"
        for k in ("row_ulp",) if fp32 else ("row_ulp", "max_ulp"):
            got, bound = m[k] or 0.0, (m0[k] or 0.0) + 1
            msg = f"{name}: {k} {got:.2f} > reference {bound - 1:.2f} + 1"
            if got > bound + (FP32_SLACK_ULP - 1 if fp32 else 0):
                g.violations.append(msg)
            elif got > bound:
                g.fp32_strict_misses.append(msg)
    g.checked = sorted(set(g.checked))
    return g


# --------------------------------------------------------------------------------------------
# the sentences


def _naive_scale_sentence(records, op: str, dtype: str) -> str:
    rows = select(records, op=op, impl="naive", dtype=dtype, axis="scale")
    name = f"Naive {DTYPE_SHORT[dtype]} {OPS[op]}"
    if not rows:
        return f"{name}: not measured in this run."
    # the reference with the cast order closest to the naive one (llama for RMSNorm)
    ref_impl = "reference/llama" if op == "rms_norm" else "reference"
    refs = {r["scale"]: r for r in select(records, op=op, impl=ref_impl, dtype=dtype, axis="scale")}
    bad = [(r, failure(r.get("y"))) for r in rows if failure(r.get("y"))]
    inf = [r for r in rows if r.get("y") and r["y"]["nonfinite"]]
    worst = max(rows, key=lambda r: (r.get("y") or {}).get("max_rel") or 0.0)
    if not bad:
        return (
            f"{name} does not visibly fail anywhere in the scale sweep "
            f"({rows[0]['scale']:g} … {rows[-1]['scale']:g}): its worst max relative error "
            f"is {fmt(worst['y']['max_rel'])} (at scale {worst['scale']:g})."
        )
    large = [(r, why) for r, why in bad if r["scale"] >= 1.0]
    small = [r for r, _ in bad if r["scale"] < 1.0]
    n_large = sum(x["scale"] >= 1.0 for x in rows)
    if large:
        r, why = large[0]
        ref = refs.get(r["scale"])
        ref_err = fmt(ref["y"]["max_rel"]) if ref and ref.get("y") else "–"
        text = (
            f"{name} first visibly fails at input scale {r['scale']:g} ({why}), where the "
            f"FP32-statistics reference's max relative error is {ref_err}; it is wrong at "
            f"{len(large)} of the {n_large} scales ≥ 1."
        )
    else:
        text = f"{name} does not visibly fail at any scale ≥ 1 ({n_large} measured)."
    if small:
        text += f" At small scales it fails at {_list(x['scale'] for x in small)} ({bad[0][1]})."
    if inf:
        text += f" Its forward pass returns inf/NaN first at scale {inf[0]['scale']:g}."
    elif large:
        text += " It never returns inf/NaN in the forward pass: the overflow shows as wrong "
        text += "finite outputs instead."
    if dx_inf := [x for x in rows if x.get("dx") and x["dx"]["nonfinite"]]:
        text += f" Its dx has inf/NaN at scales {_list(x['scale'] for x in dx_inf)}."
    return text


def _guarantee_sentence(result) -> str:
    g = guarantee(result)
    if not g.n:
        return "No normlab backend was checked against the FP32-statistics guarantee."
    if g.violations:
        return (
            f"The guarantee FAILS in {len(g.violations)} of {g.n} checks, e.g. {g.violations[0]}."
        )
    text = (
        f"Guarantee holds for {', '.join(g.checked)} ({g.n} checks): no inf/NaN where the "
        "float64 truth is representable, and forward error within the same-cast-order "
        "FP32-statistics reference's + 1 ulp in FP16/BF16"
    )
    if not g.fp32_strict_misses:
        return text + " and FP32."
    return (
        text + f"; in FP32 within + {FP32_SLACK_ULP:g} ulp, with {len(g.fp32_strict_misses)} "
        f"case(s) over + 1 ulp, e.g. {g.fp32_strict_misses[0]}."
    )


def _eps_sentence(records, op: str) -> str | None:
    rows = select(records, op=op, impl="naive", dtype="float32", axis="eps", shape="near_zero")
    rows = [r for r in rows if r.get("dx")]
    if len(rows) < 2:
        return None
    lo, hi = rows[0], rows[-1]
    text = (
        f"{OPS[op]} on near-zero rows: the true max |dx| grows from "
        f"{fmt(hi['dx']['truth_max_abs'])} at eps={hi['eps']:g} to "
        f"{fmt(lo['dx']['truth_max_abs'])} at eps={lo['eps']:g}."
    )
    h16 = select(records, op=op, impl="naive", dtype="float16", axis="eps", shape="near_zero")
    if over := [r for r in h16 if r.get("dx") and r["dx"]["unrepresentable"]]:
        text += (
            f" In FP16 some true dx exceed {torch.finfo(torch.float16).max:g} "
            f"for eps ≤ {max(r['eps'] for r in over):g}."
        )
    broke = [r for r in h16 if failure(r.get("y")) or (r.get("dx") and r["dx"]["nonfinite"])]
    if broke:
        r = broke[0]
        why = failure(r.get("y")) or f"{r['dx']['nonfinite']} inf/NaN in dx"
        text += (
            f" Naive FP16 fails on these rows at eps = {_list(x['eps'] for x in broke)} "
            f"(at eps={r['eps']:g}: {why})."
        )
    elif h16:
        text += " Naive FP16 stays finite and within 10 % on these rows at every eps."
    return text


def _torch_sentence(result) -> str | None:
    parts = []
    for op in OPS:
        mine = [r for r in result.records if r["op"] == op and r["backend"] == "torch"]
        if not mine:
            continue
        refs = [r for r in result.records if r["op"] == op and r["backend"] == "reference"]
        worst = max((r for r in mine if r.get("y")), key=lambda r: r["y"]["row_ulp"] or 0.0)
        worst_ref = max_of(r["y"]["row_ulp"] for r in refs if r.get("y"))
        bad = sum(1 for r in mine if r["error"] or failure(r.get("y")))
        dx_inf = sum(r["dx"]["nonfinite"] for r in mine if r.get("dx"))
        parts.append(
            f"{OPS[op]} worst forward error {fmt(worst['y']['row_ulp'])} ulp at the row's scale "
            f"({worst['dtype']} {worst['shape']} rows, scale {worst['scale']:g}; normlab "
            f"reference worst {fmt(worst_ref)}), {bad} visibly failing cases, {dx_inf} inf/NaN "
            "in dx where the truth is representable"
        )
    return ("PyTorch's own ops: " + "; ".join(parts) + ".") if parts else None


def sentences(result) -> list[str]:
    """The generated "what this shows" bullets."""
    out = [_naive_scale_sentence(result.records, op, dt) for dt in LOW for op in OPS]
    out.append(_guarantee_sentence(result))
    out += [_eps_sentence(result.records, op) for op in OPS] + [_torch_sentence(result)]
    return [t for t in out if t]
