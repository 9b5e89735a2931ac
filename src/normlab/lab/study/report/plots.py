"""The report's plots: one function per plot kind, each
``(results, claim, verdict, timings) -> PNG bytes | None``, drawn headless
(:func:`normlab.lab.kit.render.figure`).

``results`` maps arm -> seed index -> ``RunResult.to_dict()``. Curves and profiles show the mean
over seeds with a band from the lowest to the highest seed; a plot returns None when none of its
arms has the data it draws.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence

from normlab.lab.kit.render import figure, legend, png, whole_ticks
from normlab.lab.study.decide import Claim, Results, sweep_name
from normlab.lab.train.result import RunResult
from normlab.lab.verdict import Verdict


def _literal(text: str) -> str:
    """``text`` as matplotlib shows it literally: a ``$`` would start mathtext (arm names cannot
    hold one, a claim part's label can; bad mathtext fails ``savefig`` after the study ran)."""
    return text.replace("$", r"\$")


def _smooth(xs: Sequence[float], k: int) -> list[float]:
    out, acc = [], 0.0
    for i, x in enumerate(xs):  # trailing mean over k steps: keeps the curve causal
        acc += x
        if i >= k:
            acc -= xs[i - k]
        out.append(acc / min(i + 1, k))
    return out


def _band(rows: list[list[float]]) -> tuple[list[float], list[float], list[float]]:
    """Mean, min and max across ``rows`` column by column (rows cut to the shortest)."""
    cols = [[r[i] for r in rows] for i in range(min(len(r) for r in rows))]
    return [sum(c) / len(c) for c in cols], [min(c) for c in cols], [max(c) for c in cols]


def loss_curves(results: Results, claim: Claim, verdict: Verdict, timings) -> bytes | None:
    arms = [
        a for a in claim.arms if any(r.history.get("loss") for r in results.get(a, {}).values())
    ]
    if not arms:
        return None
    fig, ax = figure()
    for arm in arms:
        runs = [r for r in results[arm].values() if r.history.get("loss")]
        k = max(1, len(runs[0].history["loss"]) // 15)
        mean, lo, hi = _band([_smooth(r.history["loss"], k) for r in runs])
        steps = runs[0].history["step"][: len(mean)]
        div = sum(r.status == "diverged" for r in runs)
        label = _literal(f"{arm} (n={len(runs)}" + (f", {div} diverged)" if div else ")"))
        (line,) = ax.plot(steps, mean, label=label, lw=1.4)
        ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.15, lw=0)
        vals = [e for r in runs for e in r.evals if e.get("val_loss") is not None]
        if vals:
            xy = [e["step"] for e in vals], [e["val_loss"] for e in vals]
            ax.scatter(*xy, s=10, color=line.get_color())
    ax.set_xlabel("step")
    ax.set_ylabel("train loss (nats/byte)")
    ax.set_title("mean and range over seeds; dots: validation loss", fontsize=8)
    ax.grid(alpha=0.3)
    legend(ax)
    return png(fig)


def seeds(results: Results, claim: Claim, verdict: Verdict, timings) -> bytes | None:
    """Each part's per-seed (or per-round) values as points, the mean with its interval, 0 and
    the ±δ band the decision uses."""
    parts = verdict.parts or ((claim.name, verdict),)
    rules = claim.rule.parts()
    rows = [(name, v.estimate, rule) for (name, v), (_, rule) in zip(parts, rules, strict=True)]
    rows = [(n, e, r) for n, e, r in rows if e is not None and e.values]
    if not rows:
        return None
    fig, ax = figure(figsize=(6.4, 0.9 + 0.55 * len(rows)))
    for y, (_, est, rule) in enumerate(rows):
        ax.scatter(est.values, [y] * len(est.values), s=14, color="tab:gray", zorder=3)
        if est.n >= 2 and math.isfinite(est.lo):
            err = [[est.effect - est.lo], [est.hi - est.effect]]
            ax.errorbar(
                [est.effect], [y + 0.2], xerr=err, fmt="o", color="tab:blue", capsize=3, zorder=4
            )
        if rule.delta:
            for d in (-rule.delta, rule.delta):
                ax.plot([d, d], [y - 0.35, y + 0.45], color="tab:orange", ls="--", lw=0.8)
    ax.axvline(0, color="k", lw=0.8)
    if deltas := [r.delta for _, _, r in rows if r.delta]:
        # the ±δ lines the label names always in view, however far the values lie from them
        lo, hi = ax.get_xlim()
        pad = 0.1 * max(deltas)
        ax.set_xlim(min(lo, -max(deltas) - pad), max(hi, max(deltas) + pad))
    ax.set_yticks(range(len(rows)), [_literal(n) for n, _, _ in rows], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.3)
    # the band named where it is drawn: a δ of 0 (a threshold's) has none, the sign decides
    band = "±δ (orange)" if deltas else "δ = 0: the side of 0 decides"
    ax.set_xlabel(f"value per seed (gray), mean and 95 % interval (blue), {band}")
    ax.grid(alpha=0.3, axis="x")
    return png(fig)


def _profiles(results: Results, arm: str, key: str, step: str, matrix: str | None):
    out = []
    for r in results.get(arm, {}).values():
        vals = (r.probes.get(step) or {}).get(key)
        if isinstance(vals, dict):
            vals = vals.get(matrix) if matrix else None
        if vals and all(v is not None for v in vals):
            out.append([float(v) for v in vals])
    return out


def _probe_lines(results, claim, key: str, *, logy: bool, ylabel: str, matrix=None):
    fig, ax = figure()
    for arm in claim.arms:
        steps = sorted({s for r in results.get(arm, {}).values() for s in r.probes}, key=int)
        for step in steps:
            rows = _profiles(results, arm, key, step, matrix)
            if not rows:
                continue
            if logy:  # a geometric mean: ratios, not differences, are what these profiles show
                rows = [[math.log(max(v, 1e-30)) for v in r] for r in rows]
            mean, lo, hi = _band(rows)
            if logy:
                mean, lo, hi = ([math.exp(v) for v in s] for s in (mean, lo, hi))
            xs = range(len(mean))
            label = _literal(f"{arm} @ step {step} (n={len(rows)})")
            (line,) = ax.plot(xs, mean, label=label, lw=1.3, ls="-" if step == "0" else "--")
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.12, lw=0)
    if not ax.lines:  # no arm has the profile
        return None
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("block (0 = nearest the input)")
    whole_ticks(ax.xaxis)  # there is no block 0.5
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    legend(ax)
    return png(fig)


def grad_blocks(results: Results, claim: Claim, verdict: Verdict, timings) -> bytes | None:
    matrix = next((m for _, r in claim.rule.parts() if (m := r.matrix)), None)
    key = "grad_norm" if matrix else "grad_norm_block"
    what = f"‖∇ {matrix}‖ per block" if matrix else "block gradient norm"
    ylabel = f"{what} (geometric mean, log)"
    return _probe_lines(results, claim, key, logy=True, matrix=matrix, ylabel=ylabel)


def residual_rms(results: Results, claim: Claim, verdict: Verdict, timings) -> bytes | None:
    return _probe_lines(results, claim, "residual_rms", logy=True, ylabel="residual-stream RMS")


def residual_cos(results: Results, claim: Claim, verdict: Verdict, timings) -> bytes | None:
    return _probe_lines(
        results, claim, "residual_cos", logy=False, ylabel="cosine(block input, block output)"
    )


def speed(results: Results, claim: Claim, verdict: Verdict, timings) -> bytes | None:
    """The serial phase's timings: the norms per step (normlab and PyTorch's ops) and a whole
    step, median over rounds with the range as whiskers."""
    arms = [a for a in claim.arms if (timings or {}).get(a)]
    if not arms:
        return None
    fig, (a, b) = figure(1, 2, figsize=(6.8, 0.9 + 0.5 * len(arms)))
    y = range(len(arms))
    for ax, keys in ((a, ("norm_ms", "torch_norm_ms")), (b, ("step_ms",))):
        for k, key in enumerate(keys):
            vals = [sorted(timings[arm][key]) for arm in arms]
            med = [v[len(v) // 2] for v in vals]
            err = [
                [m - v[0] for m, v in zip(med, vals, strict=True)],
                [v[-1] - m for m, v in zip(med, vals, strict=True)],
            ]
            off = 0.2 * (k - (len(keys) - 1) / 2) * 2
            label = {"norm_ms": "normlab", "torch_norm_ms": "PyTorch ops", "step_ms": "step"}[key]
            ax.barh([i + off for i in y], med, height=0.35, xerr=err, label=label, capsize=2)
        labels = [_literal(x) for x in arms] if ax is a else [""] * len(arms)
        ax.set_yticks(list(y), labels, fontsize=8)
        legend(ax)
    a.set_xlabel("norms, fwd+bwd ms per step")
    b.set_xlabel("training step ms")
    return png(fig)


def lr_curves(results: Results, claim: Claim, verdict: Verdict, timings) -> bytes | None:
    """Final validation loss against the learning rate, one curve per recipe (the claim's arms
    grouped by everything in their config but the learning rate), mean and range over seeds; a
    diverged run is drawn at ln V, the loss of a uniform guess."""
    from matplotlib.ticker import NullLocator

    groups: dict[str, list[tuple[float, str]]] = {}
    for arm in claim.arms:
        runs = list(results.get(arm, {}).values())
        if runs:
            cfg = {**runs[0].config, "lr": None, "seed": None}
            groups.setdefault(json.dumps(cfg, sort_keys=True), []).append(
                (runs[0].config["lr"], arm)
            )
    curves = [sorted(g) for g in groups.values() if len({lr for lr, _ in g}) >= 2]
    if not curves:
        return None
    fig, ax = figure()
    for curve in curves:
        losses = [[_final_loss(r) for r in results[arm].values()] for _, arm in curve]
        mean, lo, hi = ([f(x) for x in losses] for f in (lambda x: sum(x) / len(x), min, max))
        xs = [lr for lr, _ in curve]
        label = _literal(f"{_curve_name([arm for _, arm in curve])} (n={len(losses[-1])})")
        (line,) = ax.plot(xs, mean, marker="o", lw=1.4, label=label)
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15, lw=0)
    ax.set_xscale("log")
    lrs = sorted({lr for curve in curves for lr, _ in curve})
    ax.set_xticks(lrs, [f"{lr:g}" for lr in lrs])  # the swept rates, not the log axis' own
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("learning rate")
    ax.set_ylabel("final validation loss (nats/byte)")
    ax.set_title("diverged runs drawn at ln V", fontsize=8)
    ax.grid(alpha=0.3, which="both")
    legend(ax)
    return png(fig)


_LR_SUFFIX = re.compile(r"[-.]lr[0-9.e+-]+$")


def _curve_name(arms: list[str]) -> str:
    """A curve's name in the legend: its arms' name without the learning rate, where one name
    remains ("post" of advise's post, post.lr0.0003, post.lr0.003: the recipe's own learning
    rate has no suffix), else ``sweep_name``'s."""
    stems = {_LR_SUFFIX.sub("", a) for a in arms}
    return stems.pop() if len(stems) == 1 else sweep_name(arms)


def _final_loss(res: RunResult) -> float:
    v = res.summary.get("final_val_loss")
    if res.status == "diverged" or v is None:
        return math.log(res.config["model"]["vocab_size"])
    return v


PLOTS: dict[str, tuple[str, Callable[..., bytes | None]]] = {
    "loss": ("Loss curves (mean and range over seeds)", loss_curves),
    "seeds": ("Per-seed values, mean and interval", seeds),
    "grad_blocks": ("Gradient norm per block", grad_blocks),
    "residual_rms": ("Residual RMS per block", residual_rms),
    "residual_cos": ("Cosine similarity between blocks", residual_cos),
    "speed": ("Time in the norms and per step (serial phase)", speed),
    "lr": ("Final loss against the learning rate", lr_curves),
}
