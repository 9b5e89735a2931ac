"""Stability as learning-rate sensitivity (Wortsman et al. 2023, "Small-scale proxies for
large-scale Transformer training instabilities").

A *sweep* is a list of arms that differ in the learning rate only. Its LR sensitivity is

    S = mean over the sweep's learning rates of  min(ℓ(lr), ℓ0) − min over lr' of ℓ(lr'),

with ℓ the final validation loss and ℓ0 = ln V, the loss of a uniform guess (which a diverged
run scores, so a recipe that diverges over much of the range is very sensitive). S is 0 for a
recipe that reaches its best loss at every learning rate of the sweep.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from normlab.lab.study.claims import EXPECT, LEVEL, Estimate, Results, Verdict, decide
from normlab.lab.study.measures import MEASURES

_LOSS = MEASURES["final_val_loss"][1]


def sensitivity(losses: list[float], cap: float) -> float:
    """The LR sensitivity of one sweep's final losses (one per learning rate)."""
    best = min(losses)
    return sum(min(x, cap) - best for x in losses) / len(losses)


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
            "min(final val loss, ln V) − the sweep's best final val loss; a diverged run scores "
            f"ln V); mean over {self.seeds} paired seeds, {LEVEL:.0%} Student-t interval; "
            f"{EXPECT[self.expect]} (δ = {self.delta:.3g})."
        )

    def per_seed(self, results: Results, sweep: tuple[str, ...]) -> dict[int, tuple[float, float]]:
        """Seed index -> (S, best final loss) of ``sweep``, for the seeds every arm has."""
        seeds = set.intersection(*(set(results.get(a, {})) for a in sweep))
        out = {}
        for i in sorted(seeds):
            losses = [_LOSS(results[a][i], None) for a in sweep]
            if None not in losses:
                cap = math.log(results[sweep[0]][i]["config"]["model"]["vocab_size"])
                out[i] = sensitivity(losses, cap), min(losses)
        return out

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        s, u = self.per_seed(results, self.stable), self.per_seed(results, self.unstable)
        values = [u[i][0] - s[i][0] for i in sorted(set(s) & set(u))]
        est = Estimate.of(values, ctx.get("level", LEVEL))
        status, why = decide(self.expect, est, self.delta)
        # S is relative to the sweep's own best: a recipe that trains at no learning rate has a
        # small S too, so the best loss is shown beside it.
        means: dict[str, float | None] = {}
        for sweep, per in ((self.stable, s), (self.unstable, u)):
            name = sweep[0].rsplit("-lr", 1)[0] if "-lr" in sweep[0] else sweep[0] + "…"
            means[f"S[{name}]"] = statistics.fmean(x for x, _ in per.values()) if per else None
            means[f"best loss[{name}]"] = (
                statistics.fmean(b for _, b in per.values()) if per else None
            )
        return Verdict(status, why, est, means=means)
