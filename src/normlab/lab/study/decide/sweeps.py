"""Stability as learning-rate sensitivity (Wortsman et al. 2023, "Small-scale proxies for
large-scale Transformer training instabilities").

A *sweep* is a list of arms that differ in the learning rate only. Its LR sensitivity is

    S = mean over the sweep's learning rates of  min(ℓ(lr), ℓ0) − min over lr' of ℓ(lr'),

with ℓ the final validation loss and ℓ0 the loss at init (Wortsman et al.'s cap: a run that
ends worse than it started, or diverges, scores ℓ0 whatever its loss), the training loss of
the sweep's first step (every arm of a sweep starts from the same weights and batch under one
seed), or ln V, a uniform guess's loss, where that is lower or the run has no history. S is 0
for a recipe that reaches its best loss at every learning rate of the sweep. The rule that
compares two sweeps is ``rules.LRSensitivity``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from normlab.lab.study.decide.measures import MEASURES

S_TEXT = (
    "S: the LR sensitivity of a sweep, the mean over its learning rates of min(final "
    "val loss, ℓ0) − the sweep's best final val loss (ℓ0: the loss at init)"
)


def sensitivity(losses: list[float], cap: float) -> float:
    """The LR sensitivity of one sweep's final losses (one per learning rate)."""
    best = min(losses)
    return sum(min(x, cap) - best for x in losses) / len(losses)


def sweep_name(arms: Sequence[str]) -> str:
    """A sweep's name: its arms' common name without the learning rate ("pre-d64")."""
    stems = {a.rsplit("-lr", 1)[0] for a in arms if "-lr" in a}
    return stems.pop() if len(stems) == 1 and all("-lr" in a for a in arms) else f"{arms[0]} …"


def init_loss(runs: list[dict]) -> float:
    """ℓ0 of one seed's sweep: its first step's training loss, at most ln V."""
    cap = math.log(runs[0].config["model"]["vocab_size"])
    for r in runs:  # the first run with a finite first loss: every arm's is the same
        loss = (r.history.get("loss") or [None])[0]
        if isinstance(loss, int | float) and math.isfinite(loss):
            return min(cap, loss)
    return cap


def sweep_ranges(
    results, sweep: Sequence[str], seeds: Iterable[int]
) -> dict[int, tuple[float, float, float]]:
    """Seed index -> (S low, S high, best final loss) of ``sweep`` over ``seeds`` (each of them
    one every arm has); S's range covers a missing final loss anywhere in [best, ℓ0]."""
    loss = MEASURES["final_val_loss"].read
    out = {}
    for i in seeds:
        losses = [loss(results[a][i], None) for a in sweep]
        cap = init_loss([results[a][i] for a in sweep])
        best = min((x for x in losses if x is not None), default=cap)
        lo = sensitivity([best if x is None else x for x in losses], cap)
        out[i] = (lo, sensitivity([cap if x is None else x for x in losses], cap), best)
    return out
