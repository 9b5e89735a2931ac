"""The chart of ``normlab bench``: % of the ``copy_`` limit and speed-ups, per dtype."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from normlab.lab.kit.render import figure, legend, png

_OP_LABEL = {"rms_norm": "RMSNorm", "layer_norm": "LayerNorm", "fused_add_rms_norm": "add+RMSNorm"}


def bench_chart(rows: Sequence[Mapping]) -> bytes | None:
    """``normlab bench`` rows (``Result`` as dicts) as two bar charts per dtype: the percentage of
    the ``copy_`` bandwidth limit, and the speed-up over torch eager (and ``torch.compile`` where
    measured) on a log scale with the break-even line at 1."""
    if not rows:
        return None
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    most = max(sum(r["dtype"] == d for r in rows) for d in dtypes)
    # Each dtype's panel: its bars plus room for its title, axis labels and legend (at 0.2 in a
    # bar alone, a two-case chart had its axis label under the legend).
    height = len(dtypes) * (1.2 + 0.2 * most)
    fig, axes = figure(len(dtypes), 2, figsize=(10, height), squeeze=False)
    for (a, b), dtype in zip(axes, dtypes, strict=True):
        sub = [r for r in rows if r["dtype"] == dtype][::-1]  # first case on top
        labels = [f"{_OP_LABEL.get(r['op'], r['op'])} {r['shape']} {r['mode']}" for r in sub]
        y = range(len(sub))
        a.barh(y, [r["pct_of_limit"] for r in sub], color="tab:blue")
        a.axvline(100, color="k", lw=0.8)
        a.set_yticks(list(y), labels, fontsize=6)
        a.set_xlabel("% of the copy_ bandwidth limit")
        a.set_title(dtype, fontsize=9)
        b.barh([i + 0.2 for i in y], [r["x_eager"] for r in sub], height=0.4, label="x eager")
        if any(r.get("x_compile") for r in sub):
            x_compile = [r.get("x_compile") or 0 for r in sub]
            b.barh([i - 0.2 for i in y], x_compile, height=0.4, label="x torch.compile")
        b.axvline(1, color="k", lw=0.8)
        b.set_xscale("log")
        b.set_yticks([])
        b.set_xlabel("speed-up (log; > 1: normlab faster)")
        legend(b, inside=0)  # bars fill the panel: no place inside is free
    return png(fig)
