"""The validation loss per norm and batch, with its 95 % interval over the seeds, at the shared
learning rate and at each rate check's."""

from __future__ import annotations

import math

from normlab.lab.kit import render
from normlab.lab.verdict import statistic
from normlab.lab.vision.cnn_findings import loss
from normlab.lab.vision.net import NORMS, Arm


def loss_plot(runs, plan) -> bytes:
    """One panel per batch: each norm's mean validation loss against the rate factor (log
    axis), its 95 % Student-t interval over the seeds as a bar (a linear loss axis: an
    interval of a mean may reach below 0 where one seed's loss stands far above the rest)."""
    seeds = sorted({s for _, s in runs})
    batches = sorted({a.batch for a, _ in runs}, reverse=True)
    factors = sorted({1.0, *plan.factors})
    fig, axes = render.figure(1, len(batches), figsize=(7.2, 3.2), squeeze=False)
    for ax, batch in zip(axes[0], batches, strict=True):
        for k, norm in enumerate(NORMS):
            xs, ys, lo, hi = [], [], [], []
            for r in factors:
                if (Arm(norm, batch, r), seeds[0]) not in runs:
                    continue
                est = statistic(0).estimate([loss(runs[Arm(norm, batch, r), s]) for s in seeds])
                xs.append(r * (1 + 0.06 * (k - 1)))  # side by side, not on top of each other
                ys.append(est.effect)
                lo.append(est.effect - est.lo if math.isfinite(est.lo) else 0)
                hi.append(est.hi - est.effect if math.isfinite(est.hi) else 0)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=norm)
        ax.set_xscale("log")
        ax.set_xticks(factors, [f"×{r:g}" for r in factors])
        ax.set_xticks([], minor=True)
        ax.axhline(0, color="0.7", lw=0.8)
        ax.set_xlabel("learning rate (× the shared rate)")
        ax.set_title(f"batch {batch}", fontsize=render.FONT + 1)
    axes[0][0].set_ylabel("validation loss after eval()")
    render.legend(axes[0][-1], title="norm", among=list(axes[0]))
    return render.png(fig)
