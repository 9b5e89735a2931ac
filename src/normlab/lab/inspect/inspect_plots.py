"""The plots of ``normlab inspect`` (the look is the lab's one, :mod:`normlab.lab.kit.render`)."""

from __future__ import annotations

import math

from normlab.lab.kit import render

FP16_SQUARE = 256.0  # |x| past which x² overflows FP16 (65504 ≈ 256²)
SHORT = 28  # characters of a layer's name on an axis


def short(name: str) -> str:
    """A layer's path cut for a tick label: its tail, where the block number and role are."""
    name = name.replace("encoder.layer.", "").replace("model.layers.", "").replace("layers.", "")
    return name if len(name) <= SHORT else "…" + name[-(SHORT - 1) :]


def _layer_axis(ax, names: list[str]) -> None:
    ax.set_xticks(range(len(names)), [short(n) for n in names], rotation=75, fontsize=7)
    ax.set_xlabel("norm layer, in the order the model runs them")


def _width(n: int) -> float:
    return max(6.4, min(14.0, 0.32 * n + 2.5))


def range_vs_limit(layers) -> bytes:
    """Per layer the largest |x| (and the median row's largest) against 256, where the naive
    FP16 x² overflows."""
    names = [s.layer for s in layers]
    fig, ax = render.figure(figsize=(_width(len(names)), 4.2))
    ax.plot(range(len(names)), [s.max_abs for s in layers], "o-", label="largest |x|")
    ax.plot(
        range(len(names)),
        [s.max_abs / s.massive for s in layers],
        ".:",
        label="median |x|",
    )
    ax.axhline(FP16_SQUARE, color="red", lw=0.9, ls="--", label="256: x² overflows FP16")
    ax.set(yscale="log", ylabel="norm input |x|", title="Norm inputs against FP16's limit")
    _layer_axis(ax, names)
    render.legend(ax)
    return render.png(fig)


def mean_share(layers) -> bytes:
    """Per layer |mean| / RMS of the rows (median and 90th percentile): what re-centering
    removes."""
    names = [s.layer for s in layers]
    fig, ax = render.figure(figsize=(_width(len(names)), 4.2))
    xs = range(len(names))
    ax.plot(xs, [s.mean_share_median for s in layers], "o-", label="median row")
    ax.plot(xs, [s.mean_share_p90 for s in layers], "s--", label="90th percentile row")
    ax.set(yscale="log", ylabel="|mean| / RMS of a row", title="The mean's share of each row")
    _layer_axis(ax, names)
    render.legend(ax)
    return render.png(fig)


def error_by_format(replay) -> bytes:
    """Per layer the worst row error of each implementation of the layer's own norm, and of the
    naive code of its variant, one panel per low format; failing rows are drawn at 1."""
    formats = ("FP16", "BF16")
    fig, axes = render.figure(1, len(formats), figsize=(12.0, 4.4), squeeze=False)
    for ax, fmt in zip(axes[0], formats, strict=True):
        rows = [r for r in replay if r.format == fmt]
        names = list(dict.fromkeys(r.layer for r in rows))
        variant = next((r.op for r in rows if not r.own), "variant")
        lines = (
            ("naive", True, "o-", "naive"),
            ("FP32 statistics", True, "s--", "FP32 statistics"),
            ("normlab", True, "x:", "normlab"),
            ("naive", False, "^-.", f"naive {variant} (the variant)"),
        )
        for impl, own, style, label in lines:
            line = {r.layer: r for r in rows if r.impl == impl and r.own == own}
            ys = [1.0 if r.failures else max(r.worst or 0.0, 1e-8) for r in map(line.get, names)]
            ax.plot(range(len(names)), ys, style, label=label)
        ax.set(yscale="log", ylabel="worst row error vs float64", title=f"{fmt}: error by layer")
        _layer_axis(ax, names)
        render.legend(ax)
    return render.png(fig)


def stream(rms: list[float]) -> bytes:
    """The residual stream's size: the median row RMS of each hidden state."""
    fig, ax = render.figure(figsize=(6.4, 3.6))
    ax.plot(range(len(rms)), rms, "o-")
    ax.set(
        xlabel="hidden state (0: the embeddings, k: after block k)",
        ylabel="median row RMS",
        title="The residual stream's size",
        yscale="log" if max(rms) > 10 * max(min(rms), math.ulp(0.0)) else "linear",
    )
    render.whole_ticks(ax.xaxis)
    return render.png(fig)


PLOTS = {
    "range-vs-fp16": lambda r: range_vs_limit(r.layers),
    "mean-share": lambda r: mean_share(r.layers),
    "error-by-format": lambda r: error_by_format(r.replay),
    "residual-stream": lambda r: stream(r.stream_rms),
}
