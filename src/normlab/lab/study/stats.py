"""The statistics every rule shares: estimates with their intervals, decisions against δ, and
what became of the seeds (compound claims and controls are decided in ``compound``).

- **the statistic**: the mean of per-seed values ``v`` over ``n`` seeds with a Student-t
  interval (``scipy.stats``) and the minimal effect detectable at that ``n`` (80 % power);
- **the decision** against δ, the smallest effect that matters, fixed before the runs: holds,
  does not hold, inconclusive, or *not testable here* when a control of the claim (an arm that
  must train in the same setting) does not show what it must, or when the study runs too few
  seeds for any interval of its statistic (one; a median under 6), so that no outcome of its
  runs could decide it (``Study.without_interval``).

No seed is left out silently. A seed index that some arm of a rule lacks is *unpaired*: it
enters neither the values nor the displayed means, and is counted. A run whose measure is
undefined (a diverged run has no end-of-training probe) stays in: its value is a range, and the
rule decides "holds" on the least favourable end of that range and "does not hold" on the most
favourable one, so an unstable seed helps neither verdict.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

HOLDS, FAILS, UNSURE = "holds", "does not hold", "inconclusive"
UNTESTABLE = "not testable here"
VERDICTS = (HOLDS, FAILS, UNSURE, UNTESTABLE)
LEVEL = 0.95  # confidence of every interval
POWER = 0.8  # for the minimal detectable effect
MEDIAN = 0.5  # the trim whose limit is the median: a rule with trim = MEDIAN decides on it

# arm -> seed index -> RunResult dict (``RunResult.to_dict()``)
Results = Mapping[str, Mapping[int, dict[str, Any]]]


# --------------------------------------------------------------------------------------------
# the statistic


def seeds_for_interval(trim: float, level: float = LEVEL) -> int:
    """The fewest seeds whose statistic has a bounded interval at ``level``: 2 for a mean (a
    trimmed mean is the mean under 5 values); for the median the n at which the sign test's
    outermost order statistics cover ``level``, 2 · 0.5ⁿ ≤ 1 − level (6 at 95 %)."""
    if trim >= MEDIAN:
        return math.ceil(math.log2(2 / (1 - level)))
    return 2


def detectable(sd: float, n: int, level: float = LEVEL, power: float = POWER) -> float:
    """The smallest true effect ``n`` paired values with spread ``sd`` find with ``power`` at
    ``level``: ``(t_{1-α/2, n-1} + t_{power, n-1}) · sd / √n``."""
    from scipy import stats

    t = stats.t.ppf(1 - (1 - level) / 2, n - 1) + stats.t.ppf(power, n - 1)
    return t * sd / math.sqrt(n)


@dataclass(frozen=True)
class Estimate:
    """The mean of per-seed (or per-round) values with its interval at ``level``."""

    effect: float | None
    lo: float | None
    hi: float | None
    n: int
    mde: float | None  # the smallest true effect this n finds with POWER at this level
    level: float = LEVEL
    values: tuple[float, ...] = ()

    @classmethod
    def of(cls, values: list[float], level: float = LEVEL) -> Estimate:
        from scipy import stats

        n = len(values)
        if n == 0 or not all(math.isfinite(v) for v in values):  # unbounded: no interval
            return cls(None, None, None, n, None, level)
        mean = sum(values) / n
        if n == 1:
            return cls(mean, -math.inf, math.inf, 1, None, level, tuple(values))
        sd = statistics.stdev(values)
        se = sd / math.sqrt(n)
        t = stats.t.ppf(1 - (1 - level) / 2, n - 1)
        mde = detectable(sd, n, level)
        return cls(mean, mean - t * se, mean + t * se, n, mde, level, tuple(values))

    @classmethod
    def trimmed(cls, values: list[float], level: float = LEVEL, trim: float = 0.2) -> Estimate:
        """The ``trim``-trimmed mean with Yuen's interval (``scipy.stats.mstats``: the
        winsorized variance, Student t on ``n - 2g - 1`` degrees of freedom, ``g = ⌊trim·n⌋``
        values cut at each end): a stalled round moves neither the mean nor the interval, where
        one such round widens the plain mean's interval past any δ. Under 5 values: the mean.
        ``trim = 0.5`` is the limit, the median (``Estimate.median``)."""
        if trim >= MEDIAN:
            return cls.median(values, level)
        import numpy as np
        from scipy import stats
        from scipy.stats import mstats

        n = len(values)
        g = int(trim * n)
        if g == 0 or not all(math.isfinite(v) for v in values):
            return cls.of(values, level)
        df = n - 2 * g - 1
        mean = float(stats.trim_mean(values, trim))
        se = float(mstats.trimmed_stde(np.asarray(values, dtype=float), limits=(trim, trim)))
        t = stats.t.ppf(1 - (1 - level) / 2, df)
        mde = (t + stats.t.ppf(POWER, df)) * se
        return cls(mean, mean - t * se, mean + t * se, n, mde, level, tuple(values))

    @classmethod
    def median(cls, values: list[float], level: float = LEVEL) -> Estimate:
        """The median with its distribution-free interval: the order statistics the sign test
        inverts (``scipy.stats.quantile_test``), so it holds whatever the tails, where even a
        trimmed mean's interval is widened by two blown-up seeds of eight. Too few values for
        an interval at ``level`` (under 6 at 95 %): unbounded. No detectable effect: the sign
        test's power depends on the whole distribution, not on one spread."""
        import numpy as np
        from scipy import stats

        n = len(values)
        if n == 0 or not all(math.isfinite(v) for v in values):
            return cls(None, None, None, n, None, level)
        med = float(np.median(values))
        ci = stats.quantile_test(values, p=0.5).confidence_interval(level)  # not q's p-value
        lo = float(ci.low) if math.isfinite(ci.low) else -math.inf
        hi = float(ci.high) if math.isfinite(ci.high) else math.inf
        return cls(med, lo, hi, n, None, level, tuple(values))

    @staticmethod
    def spread(values: list[float], trim: float = 0.0) -> float:
        """The per-value spread behind the interval: the standard deviation; for a trimmed
        mean the winsorized one over ``1 − 2·trim`` (its standard error times √n); for the
        median √(π/2) times the MAD's normal-consistent σ (its large-sample standard error
        times √n)."""
        if trim >= MEDIAN:
            from scipy import stats

            mad = stats.median_abs_deviation(values, scale="normal")
            return float(math.sqrt(math.pi / 2) * mad)
        if int(trim * len(values)) == 0:
            return statistics.stdev(values)
        import numpy as np
        from scipy.stats import mstats

        winsorized = mstats.winsorize(np.asarray(values, dtype=float), limits=(trim, trim))
        return float(np.std(winsorized, ddof=1)) / (1 - 2 * trim)

    def text(self, digits: int = 3) -> str:
        if self.effect is None:
            return f"no data, n={self.n}"
        f = lambda x: f"{x:+.{digits}f}" if math.isfinite(x) else ("−∞" if x < 0 else "+∞")  # noqa: E731
        return f"{f(self.effect)} [{f(self.lo)}, {f(self.hi)}], n={self.n}"

    def to_dict(self) -> dict[str, Any]:
        fin = lambda x: x if x is None or math.isfinite(x) else None  # noqa: E731
        return {
            "effect": self.effect,
            "lo": fin(self.lo),
            "hi": fin(self.hi),
            "n": self.n,
            "level": self.level,
            "mde": self.mde,
            "values": list(self.values),
        }


def statistic_text(trim: float, over: str) -> str:
    """The statistic a rule with ``trim`` decides on, in words, ``over`` its units."""
    if trim >= MEDIAN:
        return (
            f"median of v over {over}, its distribution-free {LEVEL:.0%} interval (the order "
            "statistics the sign test inverts)"
        )
    if trim:
        return f"{trim:.0%} trimmed mean of v over {over}, Yuen's {LEVEL:.0%} interval"
    return f"mean of v over {over}, {LEVEL:.0%} Student-t interval"


# expect -> (the decision in words, the rule)
EXPECT = {
    ">0": "holds if the interval is above 0 and the effect ≥ δ; does not hold if the interval is "
    "below 0 or lies inside ±δ (no difference that matters); otherwise inconclusive",
    "<0": "holds if the interval is below 0 and the effect ≤ −δ; does not hold if the interval is "
    "above 0 or lies inside ±δ; otherwise inconclusive",
    "≠0": "holds if the interval excludes 0 and |effect| ≥ δ; does not hold if the interval lies "
    "inside ±δ; otherwise inconclusive",
    "≈0": "holds if the interval lies inside ±δ; does not hold if it excludes 0 with |effect| ≥ δ; "
    "otherwise inconclusive",
}

# How a seed whose measure is undefined is scored, as the rule texts say it.
BOUND_TEXT = (
    "a seed index some arm lacks is unpaired: left out of v and of the means, and counted; a "
    "run whose measure is undefined (e.g. diverged) stays in, its measure bounded by the range "
    "that measure takes over the paired runs: 'holds' is decided on the least favourable end, "
    "'does not hold' on the most favourable"
)


def decide(expect: str, est: Estimate, delta: float) -> tuple[str, str]:
    """(status, why) of ``est`` under the decision ``expect`` with minimum effect ``delta``."""
    if est.effect is None and est.n >= 2:
        return UNSURE, f"n={est.n}: a seed's value is unbounded (its measure is undefined in "
        "every paired run)"
    if est.effect is None or est.n < 2:
        return UNSURE, f"n={est.n}: too few seeds for an interval"
    m, lo, hi = est.effect, est.lo, est.hi
    if expect == "<0":
        m, lo, hi = -m, -hi, -lo
    within = -delta < lo and hi < delta
    excludes_zero = lo > 0 or hi < 0
    ci = est.text()
    if expect in (">0", "<0"):
        if lo > 0 and m >= delta:
            return HOLDS, f"{ci}: above 0, and the effect reaches δ={delta:.3g}"
        if hi < 0:
            return FAILS, f"{ci}: the effect has the other sign"
        if within:
            return FAILS, f"{ci}: inside ±δ={delta:.3g}, no difference that matters"
    elif expect == "≠0":
        if excludes_zero and abs(m) >= delta:
            return HOLDS, f"{ci}: excludes 0, |effect| ≥ δ={delta:.3g}"
        if within:
            return FAILS, f"{ci}: inside ±δ={delta:.3g}"
    elif expect == "≈0":
        if within:
            return HOLDS, f"{ci}: inside ±δ={delta:.3g}"
        if excludes_zero and abs(m) >= delta:
            return FAILS, f"{ci}: a difference of at least δ={delta:.3g}"
    else:
        raise ValueError(f"expect must be one of {tuple(EXPECT)}, got {expect!r}")
    mde = f"; detectable at this n: {est.mde:.3g}" if est.mde is not None else ""
    return UNSURE, f"{ci}: not decided at δ={delta:.3g}{mde}"


def pick(expect: str, lo: float, hi: float, for_holds: bool) -> float:
    """The end of a seed's range ``[lo, hi]`` least favourable to the decision (``for_holds``:
    to "holds"; else to "does not hold")."""
    if lo == hi:
        return lo
    near0 = min(max(0.0, lo), hi)
    far = lo if abs(lo) > abs(hi) else hi
    worst = {">0": (lo, hi), "<0": (hi, lo), "≈0": (far, near0), "≠0": (near0, far)}[expect]
    return worst[0] if for_holds else worst[1]


def term_rows(
    terms, value: Callable[[str, int, str], float | None], paired: list[int], base: float
) -> tuple[list[tuple[float, float]], list[int]]:
    """Per seed of ``paired`` the range ``(lo, hi)`` of ``base + Σ coef · value(arm, i, m)``
    over ``terms`` ``(coef, arm, m)`` (equal ends unless a value is undefined, None: then
    anywhere from the smallest to the largest ``m`` seen in the terms' arms, ±∞ if none), and
    the seeds with an undefined value."""
    arms = dict.fromkeys(a for _, a, _ in terms)
    observed: dict[str, list[float]] = {}
    for m in dict.fromkeys(t[2] for t in terms):
        xs = (value(a, i, m) for a in arms for i in paired)
        observed[m] = [x for x in xs if x is not None]
    rows, bounded = [], []
    for i in paired:
        lo = hi = base
        for c, a, m in terms:
            x = value(a, i, m)
            if x is None:
                bounded.append(i)
                if not observed[m]:
                    lo, hi = -math.inf, math.inf
                    continue
                ends = (c * min(observed[m]), c * max(observed[m]))
                lo, hi = lo + min(ends), hi + max(ends)
            else:
                lo, hi = lo + c * x, hi + c * x
        rows.append((lo, hi))
    return rows, sorted(set(bounded))


def check_rule(expect: str, seeds: int, delta: float) -> None:
    """A rule's ``expect``, ``seeds`` and ``delta``, or ValueError."""
    if expect not in EXPECT:
        raise ValueError(f"expect must be one of {tuple(EXPECT)}, got {expect!r}")
    if seeds < 1 or not delta >= 0:
        raise ValueError(f"seeds must be >= 1 and delta >= 0, got {seeds}, {delta}")


def decide_rows(
    expect: str, rows: list[tuple[float, float]], delta: float, level: float, trim: float = 0.0
) -> tuple[str, str, Estimate]:
    """Decide on per-seed ranges ``(lo, hi)`` (equal where the value is known): "holds" on the
    ends least favourable to it, "does not hold" on the ends least favourable to that. With
    ``trim`` > 0 the statistic is the trimmed mean with Yuen's interval (``Estimate.trimmed``)."""
    est_h = Estimate.trimmed([pick(expect, lo, hi, True) for lo, hi in rows], level, trim)
    status, why = decide(expect, est_h, delta)
    if status == HOLDS or all(lo == hi for lo, hi in rows):
        return status, why, est_h
    est_f = Estimate.trimmed([pick(expect, lo, hi, False) for lo, hi in rows], level, trim)
    status_f, why_f = decide(expect, est_f, delta)
    if status_f == FAILS:
        return FAILS, why_f + " (the bounded seeds at their most favourable value)", est_f
    if status == FAILS:  # only at the end least favourable to holding: not decided
        why = f"{why_f}: not decided with the bounded seeds at their most favourable value"
        return UNSURE, why, est_f
    return status, why + " (the bounded seeds at their least favourable value)", est_h


# --------------------------------------------------------------------------------------------
# what became of the seeds


def _state(res: Mapping[str, Any]) -> str:
    if res.get("status") == "diverged":
        return "diverged"
    return "stalled" if res.get("stopped_step") else "ok"


@dataclass(frozen=True)
class Seeds:
    """The seeds a rule was decided on, and what became of them: none is left out silently."""

    paired: tuple[int, ...] = ()  # seed indices every arm of the rule has a run under
    diverged: tuple[int, ...] = ()  # of them, those where some arm's run diverged
    stalled: tuple[int, ...] = ()  # ... where some arm's run was stopped by the stall rule
    bounded: tuple[int, ...] = ()  # ... whose value needed a bound: a measure was undefined
    unpaired: tuple[int, ...] = ()  # seed indices some arm lacks: in no value and no mean

    @classmethod
    def of(cls, results: Results, arms: tuple[str, ...], bounded=()) -> Seeds:
        have = [set(results.get(a, {})) for a in arms]
        paired = sorted(set.intersection(*have)) if have else []
        unpaired = sorted(set.union(*have) - set(paired)) if have else []

        def where(state: str) -> tuple[int, ...]:
            return tuple(i for i in paired if any(_state(results[a][i]) == state for a in arms))

        return cls(
            tuple(paired), where("diverged"), where("stalled"), tuple(bounded), tuple(unpaired)
        )

    def merge(self, other: Seeds | None) -> Seeds:
        if other is None:
            return self
        u = lambda a, b: tuple(sorted(set(a) | set(b)))  # noqa: E731
        f = dataclasses.fields(self)
        return Seeds(*(u(getattr(self, x.name), getattr(other, x.name)) for x in f))

    @property
    def n(self) -> int:
        return len(self.paired)

    def text(self) -> str:
        """ "1 of 3 seeds diverged, 0 stalled" and what else a reader must know."""
        n = self.n
        out = f"{len(self.diverged)} of {n} seeds diverged, {len(self.stalled)} stalled"
        if self.bounded:
            out += f"; {len(self.bounded)} with an undefined measure, bounded"
        if self.unpaired:
            out += f"; {len(self.unpaired)} unpaired, left out"
        return out

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"n": self.n}
        for f in dataclasses.fields(self)[1:]:
            d[f.name] = len(getattr(self, f.name))
            d[f"{f.name}_seeds"] = list(getattr(self, f.name))
        return d | {"text": self.text()}


@dataclass(frozen=True)
class Verdict:
    status: str  # HOLDS | FAILS | UNSURE | UNTESTABLE
    why: str
    estimate: Estimate | None = None
    parts: tuple[tuple[str, Verdict], ...] = ()
    means: dict[str, float | None] = field(default_factory=dict)  # per-term means, to show
    seeds: Seeds | None = None  # None: not decided over seeds (a timing claim)
    correction: str = ""  # how the looks of a compound claim were corrected
    controls: tuple[tuple[str, Verdict], ...] = ()  # what the controls showed

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.status,
            "why": self.why,
            **(self.estimate.to_dict() if self.estimate else {}),
            "means": self.means,
            "seed_outcomes": self.seeds.to_dict() if self.seeds else None,
            "correction": self.correction,
            "controls": [
                {
                    "control": name,
                    "verdict": v.status,
                    "why": v.why,
                    "seed_outcomes": v.seeds.to_dict() if v.seeds else None,
                }
                for name, v in self.controls
            ],
            "parts": [{"part": name, **v.to_dict()} for name, v in self.parts],
        }


# --------------------------------------------------------------------------------------------
# timings and the context of a decision


@dataclass(frozen=True)
class Context:
    """What a rule is decided with besides the runs."""

    plateau_h: float | None = None  # H: Corpus.unigram_val_xent(), for the rules that read it
    timings: Mapping[str, Any] = field(default_factory=dict)  # arm -> what -> rounds
    level: float = LEVEL  # of every interval
    nominal_level: float | None = None  # the controls' level, under a Holm-corrected part

    def at(self, level: float) -> Context:
        return dataclasses.replace(self, level=level)

    def nominal(self) -> Context:
        return self.at(self.level if self.nominal_level is None else self.nominal_level)


def saved_per_process(timings: Mapping[str, Any], what: str, fast: str, slow: str) -> list[float]:
    """``1 − what[fast] / what[slow]`` per timing process (the median of its rounds), or per
    round where the timings do not say which process timed it."""
    a, b = (timings.get(arm, {}).get(what) or [] for arm in (fast, slow))
    v = [1 - x / y if y > 0 else math.nan for x, y in zip(a, b, strict=False)]
    procs = timings.get(fast, {}).get("process")
    if not procs:
        return [x for x in v if not math.isnan(x)]
    by: dict[int, list[float]] = {}
    for p, x in zip(procs, v, strict=False):
        if not math.isnan(x):
            by.setdefault(p, []).append(x)
    return [statistics.median(xs) for _, xs in sorted(by.items())]


def timing_medians(timings: Mapping[str, Any], what: str, arms) -> dict[str, float | None]:
    """Per arm the median round of ``what``, of the other norm timing and of the step, and the
    norms' share of a training step."""
    means: dict[str, float | None] = {}
    for arm in arms:
        t = timings.get(arm, {})
        beside = "norm_ms" if what == "torch_norm_ms" else "torch_norm_ms"
        for key in (what, beside, "step_ms"):
            xs = t.get(key) or []
            means[f"{key}[{arm}]"] = statistics.median(xs) if xs else None
        if t.get("norm_ms") and t.get("step_ms"):  # the norms' share of a training step
            means[f"norm share[{arm}]"] = statistics.median(
                n / s for n, s in zip(t["norm_ms"], t["step_ms"], strict=True)
            )
    return means
