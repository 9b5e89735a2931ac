"""The plots of ``normlab numerics``: the sweep's, from its records, and the findings', each from
its finding's record; drawn on bare Agg figures (no pyplot state)."""

from __future__ import annotations

from normlab.lab.kit import render
from normlab.lab.numerics.sentences import DTYPE_SHORT, OPS, select

INF_LEVEL = 1e2  # where inf/NaN points are drawn on a log axis of relative errors
STYLES = ("-", "--", ":", "-.")


def _sweep_figure(result, draw_panel, legend_title: str) -> bytes | None:
    """One row of panels per op and one column per dtype, each drawn by ``draw_panel(ax, op,
    dtype)`` (true when it drew a curve), and one legend per row (its implementations are the
    same in every dtype) beside the row's last panel: six legends over the curves hid what they
    label. A PNG, or None when no panel drew a curve."""
    dtypes = result.grid["dtypes"]
    fig, axes = render.figure(
        len(OPS), len(dtypes), figsize=(4.2 * len(dtypes), 7.0), squeeze=False
    )
    panels = [(axes[i][j], op, dt) for i, op in enumerate(OPS) for j, dt in enumerate(dtypes)]
    drawn = [draw_panel(*panel) for panel in panels]
    for row in axes:
        render.legend(row[-1], title=legend_title, among=list(row), inside=0)
    return render.png(fig, dpi=80) if any(drawn) else None


def _log_axes(ax, op: str, dt: str, xlabel: str, ylabel: str) -> None:
    """Log-log axes titled with the panel's op and dtype."""
    title = f"{OPS[op]} {DTYPE_SHORT[dt]}"
    ax.set(xscale="log", yscale="log", title=title, xlabel=xlabel, ylabel=ylabel)


def _curve(ax, k: int, impl: str, xs, ys, bad_xs, bad_ys) -> None:
    """The ``k``-th implementation's line, and its inf/NaN points as crosses in its colour."""
    (line,) = ax.plot(xs, ys, STYLES[k % len(STYLES)], marker=".", label=impl)
    if bad_xs:
        ax.plot(bad_xs, bad_ys, "x", color=line.get_color(), markersize=9)


def error_vs_scale(result) -> bytes | None:
    """Forward max relative error vs input scale, one line per implementation; inf/NaN drawn as
    crosses at ``INF_LEVEL``. Returns a PNG, or None when nothing was swept."""

    def panel(ax, op: str, dt: str) -> bool:
        recs = select(result.records, op=op, dtype=dt, axis="scale")
        impls = list(dict.fromkeys(r["impl"] for r in recs))
        for k, impl in enumerate(impls):
            pts = [r for r in recs if r["impl"] == impl and r.get("y")]
            xs = [r["scale"] for r in pts]
            ys = [
                INF_LEVEL if r["y"]["nonfinite"] else max(r["y"]["max_rel"] or 0, 1e-9) for r in pts
            ]
            bad = [x for x, r in zip(xs, pts, strict=True) if r["y"]["nonfinite"]]
            _curve(ax, k, impl, xs, ys, bad, [INF_LEVEL] * len(bad))
        ax.axhline(INF_LEVEL, color="grey", lw=0.5)
        _log_axes(ax, op, dt, "input scale (max |x| per row)", "forward max rel. error")
        return bool(impls)

    return _sweep_figure(result, panel, f"x at {INF_LEVEL:g} = inf/NaN")


def grad_vs_eps(result) -> bytes | None:
    """max |dx| vs eps on near-zero rows: the float64 truth and every implementation (finite
    values only; inf/NaN drawn as crosses above the truth). Returns a PNG or None."""

    def panel(ax, op: str, dt: str) -> bool:
        recs = select(result.records, op=op, dtype=dt, axis="eps", shape="near_zero")
        recs = [r for r in recs if r.get("dx")]
        impls = list(dict.fromkeys(r["impl"] for r in recs))
        if not impls:
            return False
        first = [r for r in recs if r["impl"] == impls[0]]
        truth = [r["dx"]["truth_max_abs"] or 0 for r in first]
        ax.plot([r["eps"] for r in first], truth, "k-", lw=3, alpha=0.3, label="float64 truth")
        top = 3 * max(truth)
        for k, impl in enumerate(impls):
            pts = [r for r in recs if r["impl"] == impl]
            if ok := [r for r in pts if r["dx"]["max_abs"]]:
                xs, ys = [r["eps"] for r in ok], [r["dx"]["max_abs"] for r in ok]
                bad = [r["eps"] for r in pts if r["dx"]["nonfinite"]]
                _curve(ax, k, impl, xs, ys, bad, [top] * len(bad))
        if dt == "float16":
            ax.axhline(65504, color="red", lw=0.7, ls=":", label="FP16 max")
        _log_axes(ax, op, dt, "eps", "max |dx| (near-zero rows)")
        return True

    return _sweep_figure(result, panel, "x at top = inf/NaN in dx")


# --------------------------------------------------------------------------------------------
# the findings' plots (from the verdicts' records, so they show what was decided)


def fp32_statistics(rec: dict) -> bytes:
    """fp32-statistics-needed's record: the worst forward error over the draws vs input scale,
    naive (in-dtype statistics) against FP32 statistics, one panel per op and dtype."""
    # Two by two, not four in a row: a figure shown at a page's width keeps its type readable.
    fig, axes = render.figure(2, 2, figsize=(9, 6.4), squeeze=False)
    panels = [(o, d) for o in OPS.values() for d in ("FP16", "BF16")]
    flat = [ax for row in axes for ax in row]
    for ax, (op, dt) in zip(flat, panels, strict=True):
        for k, impl in enumerate(("naive", "FP32 statistics")):
            if ys := rec["curves"].get(f"{op} {dt} {impl}"):
                ax.plot(rec["scales"], ys, STYLES[k], marker=".", label=impl)
        ax.axhline(0.1, color="grey", lw=0.6, ls=":", label="10 % (visible failure)")
        ax.set(xscale="log", yscale="log", title=f"{op} {dt}", xlabel="input scale (max |x|)")
        ax.set_ylabel("forward rel. error (failure=1)")
    render.legend(axes[0][-1], among=flat)  # the same three entries in every panel
    return render.png(fig, dpi=80)


def small_eps(rec: dict) -> bytes:
    """small-eps-explodes' record: the true max |dx| on near-zero rows vs eps (left), and the
    fraction of the naive op's dx that is wrong per dtype (right)."""
    fig, (a, b) = render.figure(1, 2, figsize=(10, 3.6))
    for k, op in enumerate(OPS.values()):
        a.plot(rec["eps"], rec["curves"][f"{op} truth"], STYLES[k], marker=".", label=op)
        for j, dt in enumerate(("float32", "float16", "bfloat16")):
            if ys := rec["curves"].get(f"{op} {dt}"):
                label = f"{op} {DTYPE_SHORT[dt]}"
                b.plot(rec["eps"], ys, STYLES[j], marker=".", label=label, alpha=0.8)
    a.axhline(65504, color="red", lw=0.7, ls=":", label="FP16 max")
    a.set(xscale="log", yscale="log", xlabel="eps", ylabel="true max |dx| (float64)")
    a.set_title("near-zero rows: the gradient vs eps", fontsize=9)
    b.set(xscale="log", xlabel="eps", ylabel="fraction of dx wrong (naive op)")
    b.set_title("inf/NaN or off by ≥ 10 % of the row's max", fontsize=9)
    render.legend(a)
    render.legend(b)
    return render.png(fig, dpi=80)


def more_stable(rec: dict) -> bytes:
    """rmsnorm-more-stable's record: the naive ops' worst error on the large-mean rows vs the
    rows' mean, per format and output (the worst over the spreads and the draws), and the true
    max|dx| on near-constant rows (the mean over the draws)."""
    # Three by two, not five in a row (type shrunk to 5 px at a page's width); the sixth
    # place holds the legend.
    fig, axes = render.figure(2, 3, figsize=(11, 6.4), squeeze=False)
    flat = [ax for row in axes for ax in row]
    panels = [(s, w) for s in ("FP16", "BF16") for w in ("forward", "gradient")]
    for ax, (short, what) in zip(flat[:4], panels, strict=True):
        means = rec["large-mean grid"]["means"][short]
        for k, op in enumerate(OPS.values()):
            ax.plot(means, rec["curves"][f"{op} {short} {what}"], STYLES[k], marker=".", label=op)
        ax.set(xscale="log", yscale="log", title=f"{short} {what}, large-mean rows")
        ax.set(xlabel="the rows' mean", ylabel="worst rel. error (inf/NaN=1)")
        ax.set_xticks(means, [f"{m:g}" for m in means])
        ax.set_xticks([], minor=True)
    ax = flat[4]
    for k, op in enumerate(OPS.values()):
        sizes = [rec[f"{op} {s} true max|dx|, near-constant rows"] for s in ("FP16", "BF16")]
        xs = [j + (k - 0.5) * 0.35 for j in range(2)]
        ax.bar(xs, [sum(v) / len(v) for v in sizes], width=0.35, label=op)
    ax.set(yscale="log", xticks=[0, 1], xticklabels=["FP16", "BF16"], ylabel="true max |dx|")
    ax.set_ylim(bottom=1)
    ax.set_title("near-constant rows (mean 1, sd 1e-3)", fontsize=9)
    handles, labels = flat[0].get_legend_handles_labels()  # the same two ops in every panel
    flat[5].axis("off")
    flat[5].legend(handles, labels, loc="center", fontsize=render.FONT + 2, frameon=False)
    return render.png(fig, dpi=80)
