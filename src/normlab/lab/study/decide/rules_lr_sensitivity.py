"""``LRSensitivity``: two learning-rate sweeps compared by their LR sensitivity S
(``normlab.lab.study.decide.sweeps``)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import ClassVar

from normlab.lab.study.decide.rules_protocol import DELTA, EXPECT_KEY, SEEDS, SWEEP, OnePartRule
from normlab.lab.study.decide.stats import Context, Results
from normlab.lab.study.decide.sweeps import S_TEXT, sweep_name, sweep_ranges
from normlab.lab.verdict import EXPECT, LEVEL, Seeds, Verdict, check_rule, decide_rows


@dataclass(frozen=True)
class LRSensitivity(OnePartRule):
    """Per seed: ``v = S(unstable) − S(stable)``, the sensitivity the ``stable`` recipe saves
    (S: ``sweeps.sensitivity``, Wortsman et al. 2023)."""

    stable: tuple[str, ...] = field(metadata=SWEEP)
    unstable: tuple[str, ...] = field(metadata=SWEEP)
    delta: float = field(metadata=DELTA)
    seeds: int = field(metadata=SEEDS)
    expect: str = field(default=">0", metadata=EXPECT_KEY)
    rate: ClassVar[str] = "swept"  # each arm over a registered grid of rates: the rate is the claim

    def __post_init__(self) -> None:
        if len(self.stable) < 2 or len(self.unstable) < 2:
            raise ValueError("a sweep needs at least two learning rates")
        check_rule(self.expect, self.seeds, self.delta)

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

    def subject(self) -> str:
        return f"LR sensitivity S({sweep_name(self.unstable)}) − S({sweep_name(self.stable)})"

    def formula_words(self) -> str:
        return f"S({', '.join(self.unstable)}) − S({', '.join(self.stable)}) per seed"

    def measure_words(self) -> list[str]:
        return [S_TEXT]

    def per_seed(self, results: Results, sweep: tuple[str, ...]) -> dict[int, tuple[float, float]]:
        """Seed index -> (S, best final loss) of ``sweep``, for the seeds every arm has (a run
        without a final loss scored ℓ0)."""
        return {i: (hi, best) for i, (_, hi, best) in self._ranges(results, sweep).items()}

    def _ranges(self, results: Results, sweep: tuple[str, ...]) -> dict:
        return sweep_ranges(results, sweep, Seeds.of(results, self.arms()).paired)

    def decide(self, results: Results, ctx: Context) -> Verdict:
        s, u = self._ranges(results, self.stable), self._ranges(results, self.unstable)
        rows = [(u[i][0] - s[i][1], u[i][1] - s[i][0]) for i in sorted(s)]
        status, why, est = decide_rows(self.expect, rows, self.delta, ctx.interval_level)
        bounded = [i for i in sorted(s) if s[i][0] != s[i][1] or u[i][0] != u[i][1]]
        # S is relative to the sweep's own best: a recipe that trains at no learning rate has a
        # small S too, so the best loss is shown beside it.
        means: dict[str, float | None] = {}
        for sweep, per in ((self.stable, s), (self.unstable, u)):
            for key, j in (("S", 1), ("best loss", 2)):
                xs = [x[j] for x in per.values()]
                means[f"{key}[{sweep_name(sweep)}]"] = statistics.fmean(xs) if xs else None
        return Verdict(status, why, est, means=means, seeds=Seeds.of(results, self.arms(), bounded))
