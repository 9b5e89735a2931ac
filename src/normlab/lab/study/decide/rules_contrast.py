"""Contrasts and the thresholds read as one: ``Contrast`` (a signed sum of measures per seed),
``Trains`` and ``Fails`` (an arm's final loss against the plateau bar H)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from normlab.lab.study.decide.measures import H_TEXT, MEASURES
from normlab.lab.study.decide.rules_protocol import (
    ARM,
    DELTA,
    EXPECT_KEY,
    NAME,
    SEEDS,
    TERMS,
    OnePartRule,
)
from normlab.lab.study.decide.stats import Context, Results
from normlab.lab.verdict import (
    BOUND_TEXT,
    EXPECT,
    Seeds,
    Verdict,
    check_rule,
    decide_rows,
    pick,
    statistic,
)
from normlab.models.probes import MATRICES
from normlab.validation import check_real

# A constant, coefficient or margin of a rule: the lab's measures are losses, ratios and
# milliseconds; a constant of 1e308 makes v, and its mean, leave float range.
COEF_MAX = 1e12


@dataclass(frozen=True)
class Contrast(OnePartRule):
    """Per seed: ``v = const + const_h·H + Σ coef · measure(arm)``; decided by ``expect``."""

    terms: tuple[tuple[float, str, str], ...] = field(metadata=TERMS)  # (coef, arm, measure)
    expect: str = field(metadata=EXPECT_KEY)
    delta: float = field(metadata=DELTA)
    seeds: int = field(metadata=SEEDS)
    const: float = 0.0
    const_h: float = 0.0
    matrix: str | None = field(default=None, metadata=NAME)  # of the gradient measures
    # > 0: the trimmed mean with Yuen's interval, for measures whose seeds have heavy tails
    # (one blown-up model moves a plain mean's interval past any δ); 0.5: the median with its
    # order-statistic interval, for tails a trim cannot cut; fixed before the runs.
    trim: float = 0.0
    CONTROL: ClassVar[bool] = True  # may state a control of its own

    def __post_init__(self) -> None:
        for _, _, m in self.terms:
            if m not in MEASURES:
                raise ValueError(f"unknown measure {m!r}; known: {sorted(MEASURES)}")
        coefs = [(f"terms[{i}]: its coefficient", c) for i, (c, _, _) in enumerate(self.terms)]
        for what, x in [("const", self.const), ("const_h", self.const_h), *coefs]:
            check_real(what, x, low=-COEF_MAX, high=COEF_MAX)
        if self.matrix is not None and self.matrix not in MATRICES:  # else v is never defined
            raise ValueError(f"matrix: unknown {self.matrix!r}; known: {', '.join(MATRICES)}")
        check_rule(self.expect, self.seeds, self.delta)
        statistic(self.trim)  # ValueError outside [0, MEDIAN]

    def arms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for _, a, _ in self.terms))

    def rival_arms(self) -> tuple[str, ...]:
        arms = self.arms()
        return arms if len(arms) >= 2 else ()

    def formula(self) -> str:
        h = [(self.const_h, "H")] if self.const_h else []
        const = [(self.const, "")] if self.const else []
        return _signed_sum(h + [(c, f"{m}[{a}]") for c, a, m in self.terms] + const)

    def subject(self) -> str:
        """ "pre-L6 − post-L6 (final val loss)", "pre: + a − b", else the formula."""
        measures = list(dict.fromkeys(m for _, _, m in self.terms))
        if len(measures) == 1:
            out = _signed_sum([(c, a) for c, a, _ in self.terms])
            return f"{out} ({measures[0].replace('_', ' ')})"
        if len(self.arms()) == 1:
            ms = [f"{'−' if c < 0 else '+'} {m.replace('_', ' ')}" for c, _, m in self.terms]
            return f"{self.arms()[0]}: {' '.join(ms).removeprefix('+ ')}"
        return self.formula()

    def formula_words(self) -> str:
        return f"{self.formula()} per seed"

    def measure_words(self) -> list[str]:
        return [f"{m}: {MEASURES[m].text}" for m in dict.fromkeys(t[2] for t in self.terms)]

    def statistic_words(self) -> str:
        return f" Statistic: the {statistic(self.trim).words('the seeds')}." if self.trim else ""

    def threshold(self, h: float | None) -> tuple[str, str, float, float | None] | None:
        if len(self.terms) != 1 or not self.const_h:
            return None
        coef, arm, m = self.terms[0]
        return arm, m, coef, None if h is None else -(self.const + self.const_h * h) / coef

    def offset(self) -> float:
        """The margin ``const`` folded into a difference's v ("at most 0.03 worse": v = 0.03 +
        a − b): a report shows the difference and the margin apart. With one term it is the
        term's bar, and with ``const_h`` part of the bar H (``threshold``): no margin."""
        return self.const if len(self.terms) > 1 and not self.const_h else 0.0

    def describe(self) -> str:
        measures = "; ".join(self.measure_words())
        h = f"; {H_TEXT}" if self.const_h else ""
        stat = statistic(self.trim).words(f"{self.seeds} paired seeds")
        return (
            f"per seed, v = {self.formula()} ({measures}{h}); {stat}; {BOUND_TEXT}; "
            f"{EXPECT[self.expect]} (δ = {self.delta:.3g})."
        )

    def reads(self) -> tuple[tuple[str, str], ...]:
        return tuple((arm, m) for _, arm, m in self.terms)

    def _measure(self, results: Results, arm: str, i: int, m: str) -> float | None:
        return MEASURES[m].read(results[arm][i], self.matrix)

    def rows(self, results: Results, ctx: Context) -> tuple[list, Seeds]:
        """Per paired seed the range ``(lo, hi)`` of ``v`` (equal ends unless a measure is
        undefined: then anywhere from the smallest to the largest value of that measure seen in
        the terms' arms, ±∞ if none), and what became of the seeds."""
        if self.const_h and ctx.plateau_h is None:
            raise ValueError("this rule reads H: decide it with a Context(plateau_h=...)")
        base = self.const + (self.const_h * ctx.plateau_h if self.const_h else 0.0)
        paired = Seeds.of(results, self.arms()).paired
        observed: dict[str, list[float]] = {}
        for m in dict.fromkeys(t[2] for t in self.terms):
            xs = (self._measure(results, a, i, m) for a in self.arms() for i in paired)
            observed[m] = [x for x in xs if x is not None]
        rows, bounded = [], []
        for i in paired:
            lo = hi = base
            for c, a, m in self.terms:
                x = self._measure(results, a, i, m)
                if x is None:
                    bounded.append(i)
                    seen = observed[m]
                    ends = (c * min(seen), c * max(seen)) if seen else (-math.inf, math.inf)
                else:
                    ends = (c * x, c * x)
                lo, hi = lo + min(ends), hi + max(ends)
            rows.append((lo, hi))
        return rows, Seeds.of(results, self.arms(), sorted(set(bounded)))

    def values(self, results: Results, ctx: Context) -> list[float]:
        """Per paired seed, ``v`` (an undefined measure at the end least favourable to holds)."""
        return [pick(self.expect, lo, hi, True) for lo, hi in self.rows(results, ctx)[0]]

    def decide(self, results: Results, ctx: Context) -> Verdict:
        rows, seeds = self.rows(results, ctx)
        status, why, est = decide_rows(self.expect, rows, self.delta, ctx.interval_level, self.trim)
        means = {}
        for _, a, m in self.terms:
            xs = [x for i in seeds.paired if (x := self._measure(results, a, i, m)) is not None]
            means[f"{m}[{a}]"] = sum(xs) / len(xs) if xs else None
        return Verdict(status, why, est, means=means, seeds=seeds)


def _signed_sum(terms: list[tuple[float, str]]) -> str:
    """``(coef, name)`` terms as a reader writes them: "a − 2·b + 0.5", a unit coefficient
    unwritten (a term without a name is a constant)."""
    out = ""
    for c, name in terms:
        mag = f"{abs(c):g}" if not name else ("" if abs(c) == 1 else f"{abs(c):g}·")
        sign = ("−" if c < 0 else "") if not out else (" − " if c < 0 else " + ")
        out += f"{sign}{mag}{name}"
    return out


@dataclass(frozen=True)
class Trains:
    """``arm`` trains: mean final loss below H − ``margin``; read as its contrast otherwise
    (``arms()``, ``describe()``, ``decide()``, ``delta``, ...; so not a ``OnePartRule``, whose
    defaults would hide the contrast's)."""

    arm: str = field(metadata=ARM)
    seeds: int = field(metadata=SEEDS)
    margin: float = 0.3
    SIGN: ClassVar[int] = -1  # v = SIGN·(loss − H + margin)
    parts = OnePartRule.parts

    def __post_init__(self) -> None:
        check_real("margin", self.margin, low=-COEF_MAX, high=COEF_MAX)

    def contrast(self) -> Contrast:
        s = self.SIGN
        terms = ((s, self.arm, "final_val_loss"),)
        return Contrast(terms, ">0", 0.0, self.seeds, const=s * self.margin, const_h=-s)

    def __getattr__(self, name: str) -> Any:
        """terms, expect, formula(), subject(), ...: a Trains reads as its contrast."""
        if name.startswith("_") or "arm" not in self.__dict__:  # copy and pickle probe first
            raise AttributeError(name)
        return getattr(self.contrast(), name)


@dataclass(frozen=True)
class Fails(Trains):
    """``arm`` fails to learn past byte frequencies: mean final loss above H − ``margin``."""

    margin: float = 0.05
    SIGN: ClassVar[int] = 1
