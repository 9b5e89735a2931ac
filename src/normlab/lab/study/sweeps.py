"""Stability as learning-rate sensitivity (Wortsman et al. 2023, "Small-scale proxies for
large-scale Transformer training instabilities").

A *sweep* is a list of arms that differ in the learning rate only. Its LR sensitivity is

    S = mean over the sweep's learning rates of  min(ℓ(lr), ℓ0) − min over lr' of ℓ(lr'),

with ℓ the final validation loss and ℓ0 the loss at init (Wortsman et al.'s cap: a run that
ends worse than it started, or diverges, scores ℓ0 whatever its loss), the training loss of
the sweep's first step (every arm of a sweep starts from the same weights and batch under one
seed), or ln V, a uniform guess's loss, where that is lower or the run has no history. S is 0
for a recipe that reaches its best loss at every learning rate of the sweep.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from normlab.lab.study.claims import EXPECT, LEVEL, Results, Seeds, Verdict, decide_rows
from normlab.lab.study.measures import MEASURES

_LOSS = MEASURES["final_val_loss"][1]


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
    cap = math.log(runs[0]["config"]["model"]["vocab_size"])
    for r in runs:  # the first run with a finite first loss: every arm's is the same
        loss = ((r.get("history") or {}).get("loss") or [None])[0]
        if isinstance(loss, int | float) and math.isfinite(loss):
            return min(cap, loss)
    return cap


@dataclass(frozen=True)
class LRSensitivity:
    """Per seed: ``v = S(unstable) − S(stable)``, the sensitivity the ``stable`` recipe saves."""

    stable: tuple[str, ...]
    unstable: tuple[str, ...]
    delta: float
    seeds: int
    expect: str = ">0"

    def __post_init__(self) -> None:
        if self.expect not in EXPECT:
            raise ValueError(f"expect must be one of {tuple(EXPECT)}, got {self.expect!r}")
        if len(self.stable) < 2 or len(self.unstable) < 2:
            raise ValueError("a sweep needs at least two learning rates")
        if self.seeds < 1 or not self.delta >= 0:
            raise ValueError(f"seeds must be >= 1 and delta >= 0, got {self.seeds}, {self.delta}")

    def arms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.stable + self.unstable))

    def describe(self) -> str:
        return (
            f"per seed, v = S({', '.join(self.unstable)}) − S({', '.join(self.stable)}), "
            "S = the LR sensitivity of a learning-rate sweep (mean over its learning rates of "
            "min(final val loss, ℓ0) − the sweep's best final val loss, ℓ0 the loss at init: "
            "the first step's training loss, at most ln V; a diverged run scores ℓ0); mean over "
            f"{self.seeds} paired seeds, {LEVEL:.0%} Student-t interval; a seed "
            "index some arm of either sweep lacks is unpaired: left out of v and of the means, "
            "and counted; a run without a final loss is bounded (its loss anywhere from the "
            "sweep's best to ℓ0): 'holds' is decided on the end least favourable to it, 'does "
            f"not hold' on the most favourable; {EXPECT[self.expect]} (δ = {self.delta:.3g})."
        )

    def per_seed(self, results: Results, sweep: tuple[str, ...]) -> dict[int, tuple[float, float]]:
        """Seed index -> (S, best final loss) of ``sweep``, for the seeds every arm has (a run
        without a final loss scored ℓ0)."""
        return {i: (hi, best) for i, (_, hi, best) in self._ranges(results, sweep).items()}

    def _ranges(self, results: Results, sweep: tuple[str, ...]) -> dict:
        """Seed index -> (S low, S high, best final loss) of ``sweep`` over the seeds every arm
        of both sweeps has; S's range covers a missing final loss anywhere in [best, ℓ0]."""
        paired = Seeds.of(results, self.arms()).paired
        out = {}
        for i in paired:
            losses = [_LOSS(results[a][i], None) for a in sweep]
            cap = init_loss([results[a][i] for a in sweep])
            known = [x for x in losses if x is not None]
            best = min(known) if known else cap
            lo = sensitivity([best if x is None else x for x in losses], cap)
            out[i] = (lo, sensitivity([cap if x is None else x for x in losses], cap), best)
        return out

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        s, u = self._ranges(results, self.stable), self._ranges(results, self.unstable)
        rows = [(u[i][0] - s[i][1], u[i][1] - s[i][0]) for i in sorted(s)]
        level = ctx.get("level", LEVEL)
        status, why, est = decide_rows(self.expect, rows, self.delta, level)
        bounded = [i for i in sorted(s) if s[i][0] != s[i][1] or u[i][0] != u[i][1]]
        # S is relative to the sweep's own best: a recipe that trains at no learning rate has a
        # small S too, so the best loss is shown beside it.
        means: dict[str, float | None] = {}
        for sweep, per in ((self.stable, s), (self.unstable, u)):
            name = sweep_name(sweep)
            means[f"S[{name}]"] = statistics.fmean(x[1] for x in per.values()) if per else None
            means[f"best loss[{name}]"] = (
                statistics.fmean(x[2] for x in per.values()) if per else None
            )
        seeds = Seeds.of(results, self.arms(), bounded)
        return Verdict(status, why, est, means=means, seeds=seeds)
