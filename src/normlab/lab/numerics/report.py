"""Tables, Markdown and the self-contained HTML page of ``normlab numerics``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from normlab.lab.kit import doc as d
from normlab.lab.numerics import error_plots as ep
from normlab.lab.numerics.sentences import (
    DTYPE_SHORT,
    FAIL_REL,
    OPS,
    case_key,
    failure,
    fmt,
    max_of,
    select,
)

# --------------------------------------------------------------------------------------------
# tables


def _worst(output: str, key: str) -> Callable[[dict], str]:
    return lambda m: fmt(max_of(x[key] for x in m[output]))


def _total(output: str, key: str) -> Callable[[dict], str]:
    return lambda m: str(sum(x[key] for x in m[output]))


def _mean_rel(m: dict) -> str:
    means = [x["mean_rel"] for x in m["y"] if x["mean_rel"] is not None]
    return fmt(sum(means) / len(means) if means else None)


# The summary's metric columns: title -> its cell from the metrics of one (op, impl, dtype),
# each output's over the cases (``{"y": [...], "dx": [...], "dw": [...]}``).
METRIC_COLUMNS: dict[str, Callable[[dict], str]] = {
    "fwd max rel": _worst("y", "max_rel"),
    "fwd mean rel": _mean_rel,
    "fwd max ulp": _worst("y", "max_ulp"),
    "fwd row ulp": _worst("y", "row_ulp"),
    "fwd inf/NaN": _total("y", "nonfinite"),
    "fwd zeroed": _total("y", "zeroed"),
    "dx max rel": _worst("dx", "max_rel"),
    "dx inf/NaN": _total("dx", "nonfinite"),
    "dw max rel": _worst("dw", "max_rel"),
    "dw inf/NaN": _total("dw", "nonfinite"),
}
SUMMARY_HEADER = ["op", "implementation", "dtype", "cases", *METRIC_COLUMNS, "raised"]


def summary_rows(result) -> list[list[str]]:
    """One row per (op, implementation, dtype), worst case over the sweep."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in result.records:
        groups[(r["op"], r["impl"], r["dtype"])].append(r)
    rows = []
    for (op, impl, dt), recs in groups.items():
        m = {k: [r[k] for r in recs if r.get(k)] for k in ("y", "dx", "dw")}
        cells = [cell(m) for cell in METRIC_COLUMNS.values()]
        raised = sum(1 for r in recs if r["error"] or r["grad_error"])
        rows.append([OPS[op], impl, DTYPE_SHORT[dt], str(len(recs)), *cells, str(raised)])
    return rows


def scale_table(result, op: str, dtype: str) -> tuple[list[str], list[list[str]]]:
    """Forward max relative error vs input scale, one column per implementation; a failing
    cell says how (``inf×k``: k inf/NaN outputs, ``0×k``: k outputs flushed to zero)."""
    recs = select(result.records, op=op, dtype=dtype, axis="scale")
    impls = list(dict.fromkeys(r["impl"] for r in recs))
    cells: dict[float, dict[str, str]] = defaultdict(dict)
    for r in recs:
        if (m := r.get("y")) is None:
            cell = "raised"
        elif m["nonfinite"]:
            cell = f"inf×{m['nonfinite']}"
        elif m["zeroed"]:
            cell = f"0×{m['zeroed']} ({fmt(m['max_rel'])})"
        else:
            cell = fmt(m["max_rel"]) + (" ✗" if failure(m) else "")
        cells[r["scale"]][r["impl"]] = cell
    rows = [[f"{s:g}"] + [cells[s].get(i, "") for i in impls] for s in sorted(cells)]
    return ["scale"] + impls, rows


DEFINITIONS = [
    "Truth: normlab.reference evaluated in float64 on the rounded low-precision input (and "
    "weight, bias, upstream gradient), so input rounding is not counted.",
    "Only truth values that are finite and within the dtype's range (|t| ≤ finfo.max, e.g. "
    "65504 in FP16) are scored; the others are counted as unrepresentable.",
    "rel = |a − t| / max|t| over the row (normwise), over finite outputs: an output that cancels "
    "to ~0 in x̂·w + b does not read as a 100 % error.",
    "ulp = |a − t| / spacing(t), elementwise: spacing is 2^floor(log2|t|) · finfo.eps, and for "
    "|t| below the smallest normal (zero included) the subnormal spacing finfo.tiny · finfo.eps. "
    "row ulp = max|a − t| / spacing(max|t|) per row: the error in ulps at the row's scale.",
    "Guarantee (normlab backends, casting llama/gemma, and LayerNorm): no inf/NaN where the "
    "truth is representable; row ulp ≤ the same-cast-order reference's + 1; in FP16/BF16 also "
    "max ulp ≤ reference's + 1 (not in FP32, where elementwise ulps at cancelled outputs "
    "measure the summation order).",
    "inf/NaN: non-finite outputs where the truth is representable; zeroed: outputs exactly 0 "
    f"where the truth is normal. A case fails visibly on inf/NaN, zeroed or rel ≥ {FAIL_REL:g}.",
    "scale is the largest |x| of each row; 'outlier' rows put one element 1000× above the rest; "
    "'near_zero' rows peak at 1e-4 × scale; weights are 1 + 0.1·N(0,1), offset 0.",
]


def _header_text(result) -> list[str]:
    skipped = "; ".join(f"{k}: {v}" for k, v in result.skipped.items()) or "none"
    cases = len({case_key(r) for r in result.records})
    return [
        f"{cases} cases on {result.device} in {result.seconds:.0f} s; "
        f"{result.grid['rows']} rows per case.",
        f"normlab backends measured: {', '.join(result.backends)}. Skipped: {skipped}.",
    ]


# The page's plots: name (the file is numerics-NAME.png) -> (title, what it is drawn from and
# by). The findings' under the statements, each from the record of a finding; the sweep's as
# sections of their own, from the sweep.
FINDING_PLOTS = {
    "more-stable": ("LayerNorm vs RMSNorm inside the range", "rmsnorm-more-stable", ep.more_stable),
    "error-vs-scale": ("Error vs input scale", "fp32-statistics-needed", ep.fp32_statistics),
    "grad-vs-eps": ("Gradient vs eps", "small-eps-explodes", ep.small_eps),
}
SWEEP_PLOTS = {
    "sweep-error-vs-scale": ("Forward error vs input scale", ep.error_vs_scale),
    "sweep-grad-vs-eps": ("Gradient magnitude vs eps, near-zero rows", ep.grad_vs_eps),
}


def plots(result) -> dict[str, bytes]:
    """The plots of :data:`FINDING_PLOTS` and :data:`SWEEP_PLOTS` that have data, by name."""
    records = {v["name"]: v.get("record") for v in result.verdicts}
    pngs = {k: draw(records[f]) for k, (_, f, draw) in FINDING_PLOTS.items() if records.get(f)}
    pngs |= {k: draw(result) for k, (_, draw) in SWEEP_PLOTS.items()}
    return {k: v for k, v in pngs.items() if v}


def document(result, pngs: dict[str, bytes] | None = None) -> d.Document:
    """The page as a ``normlab.lab.kit.doc`` document, as the study report is: the same CSS, tables
    that scroll in their own box, a table of contents, figures with captions; ``pngs``: its
    :func:`plots`, if made already (the Markdown finds them as ``numerics-NAME.png``)."""
    from normlab.lab.numerics import tables
    from normlab.lab.numerics.findings import FINDINGS

    pngs = plots(result) if pngs is None else pngs
    figure = lambda name, title: d.Figure(title, pngs[name], f"numerics-{name}.png")  # noqa: E731
    page = d.Document("normlab numerics")
    page.add(d.Heading(1, page.title), *(d.Paragraph(t) for t in _header_text(result)))
    if result.verdicts:
        page.add(d.Heading(2, "The articles' statements, decided", "statements"))
        page.add(*tables.blocks(result.verdicts, FINDINGS))
        for name, (title, *_) in FINDING_PLOTS.items():
            if name in pngs:
                page.add(d.Heading(3, title), figure(name, title))
    page.add(
        d.Heading(2, "What this shows", "what-this-shows"),
        d.Items(tuple(result.findings)),
        d.Heading(2, "Summary (worst case over the sweep)", "summary"),
        d.dense_table(SUMMARY_HEADER, summary_rows(result)),
    )
    for name, (title, _) in SWEEP_PLOTS.items():
        if name in pngs:
            page.add(d.Heading(2, title, name), figure(name, title))
    for op, dt in ((op, dt) for op in OPS for dt in result.grid["dtypes"]):
        title = f"{OPS[op]} {DTYPE_SHORT[dt]}: forward max relative error vs input scale"
        page.add(d.Heading(2, title), d.dense_table(*scale_table(result, op, dt)))
    page.add(d.Heading(2, "Definitions", "definitions"), d.Items(tuple(DEFINITIONS)))
    return page


def toc_after(result) -> int:
    """Where the HTML's table of contents goes: after the title and :func:`_header_text`."""
    return 1 + len(_header_text(result))
