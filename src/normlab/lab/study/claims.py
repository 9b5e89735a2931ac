"""Claims are data: a statement, where it comes from, the rule that decides it, and its plots.

Every rule has one shape, stated before the runs:

- **what it measures per seed**: a value ``v_i = c + c_H·H + Σ coef · measure(arm, seed i)``,
  paired across the arms it compares (seed ``i`` gives every arm the same data order and, where
  the shapes agree, the same initial weights); H is the corpus's unigram entropy;
- **the statistic**: the mean of ``v`` over ``n`` seeds with a Student-t interval
  (``scipy.stats``) and the minimal effect detectable at that ``n`` (80 % power);
- **the decision** against δ, the smallest effect that matters, fixed before the runs.

A compound claim holds iff every part holds and does not hold iff a part does not hold. A timing
claim is the same contrast over interleaved timing rounds of the serial phase instead of seeds.
Results are ``RunResult.to_dict()`` dicts, grouped ``arm -> {seed index: result}``; a missing seed
shrinks ``n``, a diverged run is scored as a uniform guess (the rule says so), never a crash.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from normlab.lab.study.measures import MEASURES

HOLDS, FAILS, UNSURE = "holds", "does not hold", "inconclusive"
LEVEL = 0.95  # confidence of every interval
POWER = 0.8  # for the minimal detectable effect

# arm -> seed index -> RunResult dict
Results = Mapping[str, Mapping[int, dict[str, Any]]]


# --------------------------------------------------------------------------------------------
# the statistic


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
        if n == 0:
            return cls(None, None, None, 0, None, level)
        mean = sum(values) / n
        if n == 1:
            return cls(mean, -math.inf, math.inf, 1, None, level, tuple(values))
        sd = statistics.stdev(values)
        se = sd / math.sqrt(n)
        t = stats.t.ppf(1 - (1 - level) / 2, n - 1)
        mde = (t + stats.t.ppf(POWER, n - 1)) * sd / math.sqrt(n)
        return cls(mean, mean - t * se, mean + t * se, n, mde, level, tuple(values))

    def text(self, digits: int = 3) -> str:
        if self.effect is None:
            return f"no data, n={self.n}"
        f = lambda x: f"{x:+.{digits}f}" if math.isfinite(x) else ("−∞" if x < 0 else "+∞")  # noqa: E731
        return f"{f(self.effect)} [{f(self.lo)}, {f(self.hi)}], n={self.n}"

    def to_dict(self) -> dict[str, Any]:
        fin = lambda x: x if x is None or math.isfinite(x) else None  # noqa: E731
        return {
            "effect": self.effect, "lo": fin(self.lo), "hi": fin(self.hi), "n": self.n,
            "level": self.level, "mde": self.mde, "values": list(self.values),
        }  # fmt: skip


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


def decide(expect: str, est: Estimate, delta: float) -> tuple[str, str]:
    """(status, why) of ``est`` under the decision ``expect`` with minimum effect ``delta``."""
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


# --------------------------------------------------------------------------------------------
# rules


@dataclass(frozen=True)
class Verdict:
    status: str  # HOLDS | FAILS | UNSURE
    why: str
    estimate: Estimate | None = None
    parts: tuple[tuple[str, Verdict], ...] = ()
    means: dict[str, float | None] = field(default_factory=dict)  # per-term means, to show

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.status, "why": self.why,
            **(self.estimate.to_dict() if self.estimate else {}),
            "means": self.means,
            "parts": [{"part": name, **v.to_dict()} for name, v in self.parts],
        }  # fmt: skip


@dataclass(frozen=True)
class Contrast:
    """Per seed: ``v = const + const_h·H + Σ coef · measure(arm)``; decided by ``expect``."""

    terms: tuple[tuple[float, str, str], ...]  # (coef, arm, measure)
    expect: str
    delta: float
    seeds: int
    const: float = 0.0
    const_h: float = 0.0
    matrix: str | None = None  # the probed matrix of the gradient measures

    def __post_init__(self) -> None:
        if self.expect not in EXPECT:
            raise ValueError(f"expect must be one of {tuple(EXPECT)}, got {self.expect!r}")
        for _, _, m in self.terms:
            if m not in MEASURES:
                raise ValueError(f"unknown measure {m!r}; known: {sorted(MEASURES)}")
        if self.seeds < 1 or self.delta < 0:
            raise ValueError(f"seeds must be >= 1 and delta >= 0, got {self.seeds}, {self.delta}")

    def arms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for _, a, _ in self.terms))

    def formula(self) -> str:
        terms = [(c, f"{m}[{a}]") for c, a, m in self.terms]
        if self.const_h:
            terms.insert(0, (self.const_h, "H"))
        if self.const:
            terms.append((self.const, ""))
        out = ""
        for c, name in terms:
            mag = f"{abs(c):g}" if not name else ("" if abs(c) == 1 else f"{abs(c):g}·")
            sign = ("−" if c < 0 else "") if not out else (" − " if c < 0 else " + ")
            out += f"{sign}{mag}{name}"
        return out

    def describe(self) -> str:
        measures = "; ".join(
            f"{m}: {MEASURES[m][0]}" for m in dict.fromkeys(t[2] for t in self.terms)
        )
        return (
            f"per seed, v = {self.formula()} ({measures}); mean of v over {self.seeds} "
            f"paired seeds, {LEVEL:.0%} Student-t interval; {EXPECT[self.expect]} (δ = "
            f"{self.delta:.3g})."
        )

    def values(self, results: Results, ctx: Mapping[str, Any]) -> list[float]:
        seeds = set.intersection(*(set(results.get(a, {})) for a in self.arms()))
        out = []
        for i in sorted(seeds):
            v = self.const + self.const_h * ctx.get("unigram_entropy", 0.0)
            for c, a, m in self.terms:
                x = MEASURES[m][1](results[a][i], self.matrix)
                if x is None:
                    break
                v += c * x
            else:
                out.append(v)
        return out

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        est = Estimate.of(self.values(results, ctx), ctx.get("level", LEVEL))
        status, why = decide(self.expect, est, self.delta)
        means = {}
        for _, a, m in self.terms:
            xs = [MEASURES[m][1](r, self.matrix) for r in results.get(a, {}).values()]
            xs = [x for x in xs if x is not None]
            means[f"{m}[{a}]"] = sum(xs) / len(xs) if xs else None
        return Verdict(status, why, est, means=means)


@dataclass(frozen=True)
class AllOf:
    """A compound claim: holds iff every part holds, does not hold iff a part does not."""

    parts: tuple[tuple[str, Contrast], ...]

    @property
    def seeds(self) -> int:
        return max(p.seeds for _, p in self.parts)

    def arms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for _, p in self.parts for a in p.arms()))

    # how ``combine`` decides, as the report states it (a class attribute, not a field)
    RULE = "Holds iff every part holds; does not hold iff a part does not."

    def describe(self) -> str:
        return " ".join(f"[{name}] {p.describe()}" for name, p in self.parts) + " " + self.RULE

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        parts = tuple((name, p.decide(results, ctx)) for name, p in self.parts)
        why = "; ".join(f"{name}: {v.status}" for name, v in parts)
        means = {k: x for _, v in parts for k, x in v.means.items()}
        return Verdict(self.combine([v.status for _, v in parts]), why, None, parts, means)

    @staticmethod
    def combine(statuses: list[str]) -> str:
        if FAILS in statuses:
            return FAILS
        return HOLDS if all(s == HOLDS for s in statuses) else UNSURE


@dataclass(frozen=True)
class AnyOf(AllOf):
    """A compound claim: holds iff some part holds, does not hold iff no part does.

    Each part is one more look at the data, so with k parts the chance that one holds by luck
    is up to k times a single part's: give such a claim the seeds that make its parts decisive.
    """

    RULE = "Holds iff some part holds; does not hold iff every part does not."

    @staticmethod
    def combine(statuses: list[str]) -> str:
        if HOLDS in statuses:
            return HOLDS
        return FAILS if all(s == FAILS for s in statuses) else UNSURE


def fails(arm: str, *, seeds: int, margin: float = 0.05) -> Contrast:
    """``arm`` fails to learn past byte frequencies: mean final loss above H − ``margin``."""
    return Contrast(((1, arm, "final_val_loss"),), ">0", 0.0, seeds, const=margin, const_h=-1.0)


def trains(arm: str, *, seeds: int, margin: float = 0.3) -> Contrast:
    """``arm`` trains: mean final loss below H − ``margin``."""
    return Contrast(((-1, arm, "final_val_loss"),), ">0", 0.0, seeds, const=-margin, const_h=1.0)


# what -> what it is (the serial timing phase, ``normlab.lab.study.timing``)
TIMINGS = {
    "norm_ms": "the norms alone at the models' shapes, forward+backward, ms per step",
    "step_ms": "a whole training step, ms",
    "torch_norm_ms": "PyTorch's own F.rms_norm/F.layer_norm at the same shapes, ms per step",
}


@dataclass(frozen=True)
class Timing:
    """Per interleaved round of the serial timing phase: ``v = 1 − ms[fast] / ms[slow]`` of
    ``what`` (``"norm_ms"``: the norms alone at the models' shapes, forward+backward per step;
    ``"step_ms"``: a whole training step), the fraction of the time ``fast`` saves."""

    fast: str
    slow: str
    delta: float
    what: str = "norm_ms"
    seeds: int = 1  # the arms are timed, not trained: one run each is enough to build them

    def __post_init__(self) -> None:
        if self.what not in TIMINGS:
            raise ValueError(f"what must be one of {tuple(TIMINGS)}, got {self.what!r}")
        if not self.delta >= 0:
            raise ValueError(f"delta must be >= 0, got {self.delta}")

    def arms(self) -> tuple[str, ...]:
        return (self.fast, self.slow)

    def describe(self) -> str:
        return (
            f"per timing round (serial phase, nothing else of the study running, the arms "
            f"interleaved), v = 1 − {self.what}[{self.fast}] / {self.what}[{self.slow}]; mean "
            f"over rounds, {LEVEL:.0%} Student-t interval; {EXPECT['>0']} (δ = {self.delta:.3g})."
        )

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        timings = ctx.get("timings") or {}
        a, b = (timings.get(arm, {}).get(self.what) or [] for arm in (self.fast, self.slow))
        values = [1 - x / y for x, y in zip(a, b, strict=False) if y > 0]
        est = Estimate.of(values, ctx.get("level", LEVEL))
        status, why = decide(">0", est, self.delta)
        means: dict[str, float | None] = {}
        for arm in (self.fast, self.slow):
            t = timings.get(arm, {})
            for key in (self.what, "torch_norm_ms", "step_ms"):
                xs = t.get(key) or []
                means[f"{key}[{arm}]"] = statistics.median(xs) if xs else None
            if t.get("norm_ms") and t.get("step_ms"):  # the norms' share of a training step
                means[f"norm share[{arm}]"] = statistics.median(
                    n / s for n, s in zip(t["norm_ms"], t["step_ms"], strict=True)
                )
        return Verdict(status, why, est, means=means)


@dataclass(frozen=True)
class Claim:
    """One claim of the articles (or of later work), tested by one rule on named arms."""

    name: str
    statement: str
    source: str
    rule: Any  # Contrast | AllOf | Timing | sweeps.LRSensitivity: arms(), seeds, decide()
    plots: tuple[str, ...] = ("loss", "seeds")

    @property
    def arms(self) -> tuple[str, ...]:
        return self.rule.arms()

    @property
    def seeds(self) -> int:
        return self.rule.seeds

    @property
    def timed(self) -> bool:
        return isinstance(self.rule, Timing)

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        return self.rule.decide(results, ctx)


def decide_all(study, results: Results, unigram_entropy: float, timings: dict | None = None):
    """Every claim of ``study`` decided on ``results``: ``[(claim, verdict), ...]``."""
    ctx = {"unigram_entropy": unigram_entropy, "timings": timings or {}}
    return [(c, c.decide(results, ctx)) for c in study.claims]
