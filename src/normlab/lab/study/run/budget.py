"""What a study with a sequential design costs, for ``--list``: the worst case (every claim runs
to its cap: ``Study.runs``) and the expected cost under a stated assumption.

The assumption: each claim's true effect and seed-to-seed spread are what a finished study
measured — a pilot's or a published block's ``claims.json`` (``Assumption``; ``normlab study
--list`` assumes a preset's latest published block under ``docs/data``). Under the normal model the
running mean of a part at look k is ``θ + σ·S_k/n_k`` (S a sum of standard normal draws, one a
seed); each look's interval is the statistic's at the look's nominal level, read by the verdict
engine's rule (``verdict.decide``); a compound claim stops when its parts settle it (``all of``:
one part does not hold, or all hold; ``any of``: the mirror). Holm's correction, the controls
and the rate checks are left out: they can keep a claim open longer or end it sooner, so the
expected cost is an estimate under this model, the worst case the bound. A claim the
assumption has no values for runs to its cap. Each arm then needs
the most seeds any of its claims stopped at; the expected cost is the mean over simulated
studies of the arms' runs at their estimated cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from normlab.lab.study.run.pilot import part_values
from normlab.lab.verdict import DECIDED, Estimate, Word, combine, decide, statistic

SIMULATED = 400  # studies


@dataclass(frozen=True)
class Budget:
    worst: float  # every claim at its cap
    expected: float  # the mean over the simulated studies
    runs_worst: int
    runs_expected: float
    assumed: int  # claims with values in the assumption
    unassumed: int  # seeded claims without: at their cap
    source: str  # where the assumption came from


@dataclass(frozen=True)
class Assumption:
    """What the expected cost assumes: per claim name, its entry in a finished study's
    ``claims.json`` (its parts' values), and where that came from, in words."""

    entries: dict[str, dict]
    source: str


NONE = Assumption({}, "")


def _moments(claim, entry: dict) -> list[tuple[object, float, float]] | None:
    """(rule, effect, seed-to-seed spread) of each part of ``claim``, from the values of its
    entry; None where some part has fewer than two, or one that is not finite."""
    parts = part_values(claim, entry)
    if any(len(v) < 2 or not all(map(math.isfinite, v)) for _, _, v in parts):
        return None
    stats = [(rule, statistic(rule.trim), v) for _, rule, v in parts]
    return [(rule, stat.estimate(v).effect, stat.spread(v)) for rule, stat, v in stats]


def _quantiles(ns, levels) -> list[float]:
    """Student t's quantile at each look (n seeds, its nominal level)."""
    from scipy import stats

    return [
        stats.t.ppf((1 + lvl) / 2, n - 1) if n > 1 else math.inf
        for n, lvl in zip(ns, levels, strict=True)
    ]


def _stops(claim, ns, quantiles, moments, rng) -> int:
    """The seeds one simulated run of ``claim`` stops at."""
    words = []
    for rule, theta, sd in moments:
        sums = rng.standard_normal(ns[-1]).cumsum()
        row = []
        for n, q in zip(ns, quantiles, strict=True):
            mean, half = theta + sd * sums[n - 1] / n, q * sd / math.sqrt(n)
            est = Estimate(mean, mean - half, mean + half, n, None)
            row.append(decide(rule.expect, est, rule.delta)[0])
        words.append(row)
    target = getattr(claim.rule, "TARGET", Word.DOES_NOT_HOLD)
    settled = (n for k, n in enumerate(ns) if combine(target, [w[k] for w in words]) in DECIDED)
    return next(settled, ns[-1])  # the first look that settles the claim's word, else its cap


def budget(study, cost, assume: Assumption = NONE, sims: int = SIMULATED, seed: int = 0) -> Budget:
    """The worst and the expected cost of ``study`` (``cost(config)``: one run's), under the
    assumption ``assume``."""
    import numpy as np

    entries = assume.entries
    configs = {a.name: a.config for a in study.arms}
    runs_worst = {a.name: study.seeds(a.name) for a in study.arms}
    worst = sum(n * cost(configs[a]) for a, n in runs_worst.items())
    rng = np.random.default_rng(seed)
    plans, assumed, unassumed = [], 0, 0
    for c in study.claims:
        if c.timed:
            continue
        ns = study.sequential.looks(c.seeds)
        moments = _moments(c, entries[c.name]) if c.name in entries else None
        assumed, unassumed = assumed + (moments is not None), unassumed + (moments is None)
        plans.append((c, ns, _quantiles(ns, study.sequential.levels(c.seeds)), moments))
    total, runs = 0.0, 0.0
    for _ in range(sims):
        need = dict.fromkeys(configs, 1)
        for c, ns, quantiles, moments in plans:
            n = ns[-1] if moments is None else _stops(c, ns, quantiles, moments, rng)
            for a in c.arms:
                need[a] = max(need[a], n)
        total += sum(n * cost(configs[a]) for a, n in need.items())
        runs += sum(need.values())
    return Budget(
        worst,
        total / sims,
        sum(runs_worst.values()),
        runs / sims,
        assumed,
        unassumed,
        assume.source if assumed else "",
    )


def words(b: Budget, unit: str = "CPU s") -> str:
    """The budget in a line or two, for ``--list``."""
    out = f"worst case {b.worst:.0f} {unit} ({b.runs_worst} runs: every claim to its cap); "
    if not b.source:
        return out + "expected: nothing to assume it from (no published block of this study)"
    rest = f", {b.unassumed} without values there at their cap" if b.unassumed else ""
    claims = f"{b.assumed} claim" + "s" * (b.assumed != 1)
    return out + (
        f"expected {b.expected:.0f} {unit} ({b.runs_expected:.0f} runs), assuming each claim's "
        f"effect and spread are those of {b.source} ({claims}{rest}; normal model, "
        f"{SIMULATED} simulated studies)"
    )
