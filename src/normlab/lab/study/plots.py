"""The report's plots: one function per plot kind, each ``(results, runs) -> PNG bytes | None``,
drawn headless (:func:`normlab.lab.render.figure`).

``results`` maps run name -> ``RunResult.to_dict()``; a plot returns None when none of its runs
has the data it draws.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from normlab.lab.render import figure, png

Results = Mapping[str, dict]


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
    fig, ax = figure()
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
    return png(fig)


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
    fig, ax = figure()
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
    return png(fig)


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
    fig, (a, b) = figure(1, 2, figsize=(6.4, 3.0))
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
    return png(fig)


PLOTS: dict[str, tuple[str, Callable[..., bytes | None]]] = {
    "loss": ("Loss curves", loss_curves),
    "grad_blocks": ("Gradient norm per block", grad_blocks),
    "residual_rms": ("Residual RMS per block", residual_rms),
    "residual_cos": ("Cosine similarity between blocks", residual_cos),
    "speed": ("Throughput and time in norms", speed),
}
