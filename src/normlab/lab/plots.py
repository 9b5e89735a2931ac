"""The report's plots: one function per plot kind, each ``(results, runs) -> PNG bytes | None``,
and the chart of ``normlab bench`` (:func:`bench_chart`).

``results`` maps run name -> ``RunResult.to_dict()``; a plot returns None when none of its runs
has the data it draws. matplotlib runs headless (Agg) and is imported only here.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

Results = Mapping[str, dict]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _smooth(xs: Sequence[float], k: int) -> list[float]:
    out, acc = [], 0.0
    for i, x in enumerate(xs):  # trailing mean over k steps: keeps the curve causal
        acc += x
        if i >= k:
            acc -= xs[i - k]
        out.append(acc / min(i + 1, k))
    return out


def loss_curves(results: Results, runs: Sequence[str]) -> bytes | None:
    trained = [r for r in runs if r in results and results[r]["history"].get("loss")]
    if not trained:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name in trained:
        h = results[name]["history"]
        k = max(1, len(h["loss"]) // 15)
        label = name + (" (diverged)" if results[name]["status"] == "diverged" else "")
        (line,) = ax.plot(h["step"], _smooth(h["loss"], k), label=label, lw=1.4)
        val = [e for e in results[name]["evals"] if e.get("val_loss") is not None]
        if val:
            ax.scatter([e["step"] for e in val], [e["val_loss"] for e in val], s=14,
                       color=line.get_color())  # fmt: skip
    ax.set_xlabel("step")
    ax.set_ylabel("train loss (nats/byte); dots: validation")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


def _probe_lines(results, runs, key: str, *, logy: bool, ylabel: str, matrix: str | None = None):
    have = []
    for name in runs:
        probes = results.get(name, {}).get("probes") or {}
        for step, probe in sorted(probes.items(), key=lambda kv: int(kv[0])):
            vals = probe.get(key)
            if isinstance(vals, dict):
                vals = vals.get(matrix) if matrix else None
            if vals:
                have.append((name, int(step), vals))
    if not have:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, step, vals in have:
        ys = [float("nan") if v is None else v for v in vals]
        ax.plot(range(len(ys)), ys, label=f"{name} @ step {step}", lw=1.3,
                ls="-" if step == 0 else "--", marker="." if len(ys) <= 24 else None)  # fmt: skip
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("block (0 = nearest the input)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6, ncol=2)
    return _png(fig)


def grad_blocks(results: Results, runs: Sequence[str], matrix: str | None = None) -> bytes | None:
    if matrix:
        return _probe_lines(results, runs, "grad_norm", logy=True, matrix=matrix,
                            ylabel=f"‖∇ {matrix}‖ per block (log)")  # fmt: skip
    return _probe_lines(results, runs, "grad_norm_block", logy=True,
                        ylabel="block gradient norm (log)")  # fmt: skip


def residual_rms(results: Results, runs: Sequence[str]) -> bytes | None:
    return _probe_lines(results, runs, "residual_rms", logy=True, ylabel="residual-stream RMS")


def residual_cos(results: Results, runs: Sequence[str]) -> bytes | None:
    return _probe_lines(results, runs, "residual_cos", logy=False,
                        ylabel="cosine(block input, block output)")  # fmt: skip


def speed(results: Results, runs: Sequence[str]) -> bytes | None:
    rows = [(r, results[r]["summary"]) for r in runs if r in results]
    rows = [(r, s) for r, s in rows if s.get("tokens_per_s")]
    if not rows:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(6.4, 3.0))
    names = [r for r, _ in rows]
    a.barh(names, [s["tokens_per_s"] for _, s in rows], color="tab:blue")
    a.set_xlabel("tokens/s (median step)")
    b.barh(names, [s.get("norm_ms") or 0 for _, s in rows], color="tab:orange", label="norms")
    b.barh(names, [(s.get("fwd_ms") or 0) - (s.get("norm_ms") or 0) for _, s in rows],
           left=[s.get("norm_ms") or 0 for _, s in rows], color="tab:gray", alpha=0.5,
           label="rest of forward")  # fmt: skip
    b.set_xlabel("forward ms per step")
    b.set_yticks([])
    b.legend(fontsize=7)
    return _png(fig)


PLOTS: dict[str, tuple[str, Callable[..., bytes | None]]] = {
    "loss": ("Loss curves", loss_curves),
    "grad_blocks": ("Gradient norm per block", grad_blocks),
    "residual_rms": ("Residual RMS per block", residual_rms),
    "residual_cos": ("Cosine similarity between blocks", residual_cos),
    "speed": ("Throughput and time in norms", speed),
}


_OP_LABEL = {"rms_norm": "RMSNorm", "layer_norm": "LayerNorm", "fused_add_rms_norm": "add+RMSNorm"}


def bench_chart(rows: Sequence[Mapping]) -> bytes | None:
    """``normlab bench`` rows (``Result`` as dicts) as two bar charts per dtype: the percentage of
    the ``copy_`` bandwidth limit, and the speed-up over torch eager (and ``torch.compile`` where
    measured) on a log scale with the break-even line at 1."""
    if not rows:
        return None
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    most = max(sum(r["dtype"] == d for r in rows) for d in dtypes)
    fig, axes = plt.subplots(
        len(dtypes), 2, figsize=(10, 0.6 + 0.2 * most * len(dtypes)), squeeze=False
    )
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
            b.barh([i - 0.2 for i in y], [r.get("x_compile") or 0 for r in sub], height=0.4,
                   label="x torch.compile")  # fmt: skip
        b.axvline(1, color="k", lw=0.8)
        b.set_xscale("log")
        b.set_yticks([])
        b.set_xlabel("speed-up (log; > 1: normlab faster)")
        b.legend(fontsize=6)
    return _png(fig)
