"""Claims are data: a statement, where it comes from, the rule that decides it, and its plots.

Every rule has one shape, stated before the runs:

- **what it measures per seed**: a value ``v_i = c + c_H·H + Σ coef · measure(arm, seed i)``,
  paired across the arms it compares (seed ``i`` gives every arm the same data order and, where
  the shapes agree, the same initial weights); H is the plateau bar: the unigram cross-entropy
  of the validation bytes under the training bytes' frequencies (``Corpus.unigram_val_xent``),
  the validation loss of a model that learned only byte frequencies;
- **the statistic**: the mean of ``v`` over ``n`` seeds with a Student-t interval
  (``scipy.stats``) and the minimal effect detectable at that ``n`` (80 % power);
- **the decision** against δ, the smallest effect that matters, fixed before the runs: holds,
  does not hold, inconclusive, or *not testable here* when a control of the claim (an arm that
  must train in the same setting) does not show what it must.

No seed is left out silently. A seed index that some arm of a rule lacks is *unpaired*: it
enters neither the values nor the displayed means, and is counted. A run whose measure is
undefined (a diverged run has no end-of-training probe) stays in: its measure is bounded by the
range that measure takes over the rule's paired runs, and the rule decides "holds" on the least
favourable end of that range and "does not hold" on the most favourable one, so an unstable
seed helps neither verdict. Every verdict says how many of its seeds diverged or stalled.

Compound claims correct their looks. ``any_of`` holds if *some* part holds, ``all_of`` does not
hold if *some* part does not: each is a union of k tests, decided by Holm's step-down over the
parts: with m parts not yet confirmed, every such part is tested with its interval at level
1 − α/m (α = 1 − 0.95); the parts that reach the decision there are confirmed, m shrinks, and the
rest are tested again, until none is confirmed. This is Holm's procedure with each part's p-value
the smallest α' at which its interval reaches the decision (the interval decisions are monotone
in the level), so the family-wise error of that decision is at most α. A part that reaches it
alone at 95 % but is not confirmed is inconclusive, and says so. The other direction ("all_of
holds": every part holds; "any_of does not hold": no part holds) is an intersection-union test:
each part at the plain 95 % already bounds the error by α, and needs no correction.

A timing claim is the same contrast over interleaved timing rounds of the serial phase instead
of seeds. Results are ``RunResult.to_dict()`` dicts, grouped ``arm -> {seed index: result}``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from normlab.lab.study.measures import MEASURES

HOLDS, FAILS, UNSURE = "holds", "does not hold", "inconclusive"
UNTESTABLE = "not testable here"
VERDICTS = (HOLDS, FAILS, UNSURE, UNTESTABLE)
LEVEL = 0.95  # confidence of every interval
POWER = 0.8  # for the minimal detectable effect
# What H is, as the rule texts say it.
H_TEXT = (
    "H = the unigram cross-entropy of the validation bytes under the training bytes' "
    "frequencies (add-one smoothed): the validation loss of a model that learned only byte "
    "frequencies"
)

# arm -> seed index -> RunResult dict
Results = Mapping[str, Mapping[int, dict[str, Any]]]


# --------------------------------------------------------------------------------------------
# the statistic


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
        one such round widens the plain mean's interval past any δ. Under 5 values: the mean."""
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


def _pick(expect: str, lo: float, hi: float, for_holds: bool) -> float:
    """The end of a seed's range ``[lo, hi]`` least favourable to the decision (``for_holds``:
    to "holds"; else to "does not hold")."""
    if lo == hi:
        return lo
    near0 = min(max(0.0, lo), hi)
    far = lo if abs(lo) > abs(hi) else hi
    worst = {">0": (lo, hi), "<0": (hi, lo), "≈0": (far, near0), "≠0": (near0, far)}[expect]
    return worst[0] if for_holds else worst[1]


def decide_rows(
    expect: str, rows: list[tuple[float, float]], delta: float, level: float
) -> tuple[str, str, Estimate]:
    """Decide on per-seed ranges ``(lo, hi)`` (equal where the value is known): "holds" on the
    ends least favourable to it, "does not hold" on the ends least favourable to that."""
    est_h = Estimate.of([_pick(expect, lo, hi, True) for lo, hi in rows], level)
    status, why = decide(expect, est_h, delta)
    if status == HOLDS or all(lo == hi for lo, hi in rows):
        return status, why, est_h
    est_f = Estimate.of([_pick(expect, lo, hi, False) for lo, hi in rows], level)
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


# --------------------------------------------------------------------------------------------
# rules


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
        h = f"; {H_TEXT}" if self.const_h else ""
        return (
            f"per seed, v = {self.formula()} ({measures}{h}); mean of v over {self.seeds} "
            f"paired seeds, {LEVEL:.0%} Student-t interval; {BOUND_TEXT}; {EXPECT[self.expect]} "
            f"(δ = {self.delta:.3g})."
        )

    def _measure(self, results: Results, arm: str, i: int, m: str) -> float | None:
        return MEASURES[m][1](results[arm][i], self.matrix)

    def rows(self, results: Results, ctx: Mapping[str, Any]) -> tuple[list, Seeds]:
        """Per paired seed the range ``(lo, hi)`` of ``v`` (equal unless a measure is undefined),
        and what became of the seeds."""
        paired = Seeds.of(results, self.arms()).paired
        observed: dict[str, list[float]] = {}
        for m in dict.fromkeys(t[2] for t in self.terms):
            xs = (self._measure(results, a, i, m) for a in self.arms() for i in paired)
            observed[m] = [x for x in xs if x is not None]
        rows, bounded = [], []
        # H is read only by the rules that use it (a missing H there is a KeyError, not 0).
        base = self.const + (self.const_h * ctx["plateau_h"] if self.const_h else 0.0)
        for i in paired:
            lo = hi = base
            for c, a, m in self.terms:
                x = self._measure(results, a, i, m)
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
        return rows, Seeds.of(results, self.arms(), sorted(set(bounded)))

    def values(self, results: Results, ctx: Mapping[str, Any]) -> list[float]:
        """Per paired seed, ``v`` (an undefined measure at the end least favourable to holds)."""
        return [_pick(self.expect, lo, hi, True) for lo, hi in self.rows(results, ctx)[0]]

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        rows, seeds = self.rows(results, ctx)
        status, why, est = decide_rows(self.expect, rows, self.delta, ctx.get("level", LEVEL))
        means = {}
        for _, a, m in self.terms:
            xs = [self._measure(results, a, i, m) for i in seeds.paired]
            xs = [x for x in xs if x is not None]
            means[f"{m}[{a}]"] = sum(xs) / len(xs) if xs else None
        return Verdict(status, why, est, means=means, seeds=seeds)


# --------------------------------------------------------------------------------------------
# controls: what must show in the same setting for a claim to be testable there


def control(
    arm: str | tuple[str, ...], expect: str = "trains", *, seeds: int, margin: float | None = None
):
    """A control: ``(label, rule)``, the rule ``trains(arm)`` or ``fails(arm)``; for a tuple of
    arms, that *one of them* does (an ``any_of``, Holm-corrected): e.g. "some arm of a grid
    trains", without which the grid cannot show what changes training."""
    if expect not in ("trains", "fails"):
        raise ValueError(f"a control expects 'trains' or 'fails', got {expect!r}")
    make = trains if expect == "trains" else fails
    kw = {} if margin is None else {"margin": margin}
    if isinstance(arm, str):
        return (f"{arm} {expect}", make(arm, seeds=seeds, **kw))
    parts = tuple((f"{a} {expect}", make(a, seeds=seeds, **kw)) for a in arm)
    return (f"one of {len(arm)} arms ({arm[0]}, …) {expect}", AnyOf(parts))


def controls_text(controls) -> str:
    if not controls:
        return ""
    names = ", ".join(f"'{label}'" for label, _ in controls)
    return (
        f" Controls: {names} (each decided as its rule at {LEVEL:.0%}); if a control does not "
        f"hold, the verdict is '{UNTESTABLE}' with the control's result as the reason."
    )


def with_controls(v: Verdict, controls, results: Results, ctx: Mapping[str, Any]) -> Verdict:
    """``v``, or "not testable here" where a control does not show what it must."""
    if not controls:
        return v
    nominal = {**ctx, "level": ctx.get("nominal_level", ctx.get("level", LEVEL))}
    shown = tuple((label, rule.decide(results, nominal)) for label, rule in controls)
    bad = [(label, c) for label, c in shown if c.status != HOLDS]
    if not bad:
        return dataclasses.replace(v, controls=shown)
    why = "; ".join(f"control '{label}' {c.status}: {c.why}" for label, c in bad)
    why += f" — the setting cannot show the claim (its own result, not decided on: {v.status})"
    return dataclasses.replace(v, status=UNTESTABLE, why=why, controls=shown)


# --------------------------------------------------------------------------------------------
# compound claims


def holm(parts, target: str, results: Results, ctx: Mapping[str, Any]) -> tuple[list, str]:
    """Every part decided, ``target`` (the decision one part suffices for) confirmed by Holm's
    step-down over the parts; the rest at the plain level. Returns the verdicts and the text
    saying how each ``target`` was reached."""
    level = ctx.get("level", LEVEL)
    alpha, k = 1 - level, len(parts)
    sub = {**ctx, "nominal_level": ctx.get("nominal_level", level)}
    plain = [rule.decide(results, {**sub, "level": level}) for _, rule in parts]
    confirmed: dict[int, float] = {}  # part -> the level it was confirmed at
    left = [j for j, v in enumerate(plain) if v.status == target]  # monotone: no other can
    m = k
    while left:
        lvl = 1 - alpha / m
        hits = [
            j for j in left if parts[j][1].decide(results, {**sub, "level": lvl}).status == target
        ]
        if not hits:
            break
        confirmed.update((j, lvl) for j in hits)
        left = [j for j in left if j not in hits]
        m -= len(hits)
    out = []
    for j, v in enumerate(plain):
        if v.status == target and j in confirmed:
            note = f"confirmed by Holm at {confirmed[j]:.4g}"
            v = dataclasses.replace(v, correction=note)
        elif v.status == target:
            note = (
                f"'{target}' alone at {level:.0%} ({v.why}), but not after Holm's correction "
                f"across the {k} parts (needed its interval at {1 - alpha / m:.4g})"
            )
            v = dataclasses.replace(v, status=UNSURE, why=note, correction=note)
        out.append(with_controls(v, _part_controls(parts[j][1]), results, sub))
    text = (
        f"Holm step-down over the {k} parts for '{target}' (family-wise {alpha:.0%}): "
        f"{len(confirmed)} confirmed"
    )
    return out, text


def _part_controls(rule) -> tuple:
    return getattr(rule, "controls", ())


@dataclass(frozen=True)
class Controlled:
    """A part of a compound claim with its own controls: ``rule`` decided, then ``controls``."""

    rule: Any
    controls: tuple[tuple[str, Any], ...]

    def __getattr__(self, name: str) -> Any:  # delta, matrix, expect, seeds: the rule's
        if name.startswith("_") or "rule" not in self.__dict__:  # copy and pickle probe first
            raise AttributeError(name)
        return getattr(self.__dict__["rule"], name)

    def arms(self) -> tuple[str, ...]:
        return tuple(
            dict.fromkeys(self.rule.arms() + tuple(a for _, c in self.controls for a in c.arms()))
        )

    def describe(self) -> str:
        return self.rule.describe() + controls_text(self.controls)

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        return self.rule.decide(results, ctx)  # the controls are applied by the compound


@dataclass(frozen=True)
class AllOf:
    """A compound claim: holds iff every part holds (each at 95 %: an intersection-union test),
    does not hold iff a part does not after Holm's correction across the parts."""

    parts: tuple[tuple[str, Any], ...]

    @property
    def seeds(self) -> int:
        return max(p.seeds for _, p in self.parts)

    def arms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for _, p in self.parts for a in p.arms()))

    # how ``combine`` decides and the decision Holm corrects (class attributes, not fields)
    TARGET = FAILS
    RULE = (
        "Holds iff every part holds (each at 95 %: all must hold, which needs no correction); "
        "does not hold iff some part does not hold after Holm's step-down across the k parts "
        "(the part with the strongest evidence against it tested at 1 − 5 %/k, the next at "
        "1 − 5 %/(k−1), …; family-wise 5 %); a part whose control fails is not testable here."
    )

    def describe(self) -> str:
        return " ".join(f"[{name}] {p.describe()}" for name, p in self.parts) + " " + self.RULE

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        verdicts, correction = holm(self.parts, self.TARGET, results, ctx)
        parts = tuple((name, v) for (name, _), v in zip(self.parts, verdicts, strict=True))
        why = "; ".join(f"{name}: {v.status}" for name, v in parts)
        means = {k: x for _, v in parts for k, x in v.means.items()}
        seeds = None
        for _, v in parts:
            seeds = v.seeds.merge(seeds) if v.seeds else seeds
        status = self.combine([v.status for _, v in parts])
        return Verdict(status, why, None, parts, means, seeds, correction)

    @staticmethod
    def combine(statuses: list[str]) -> str:
        if FAILS in statuses:
            return FAILS
        if all(s == HOLDS for s in statuses):
            return HOLDS
        rest = [s for s in statuses if s != HOLDS]
        return UNTESTABLE if all(s == UNTESTABLE for s in rest) else UNSURE


@dataclass(frozen=True)
class AnyOf(AllOf):
    """A compound claim: holds iff some part holds after Holm's correction across the parts,
    does not hold iff every part does not (each at 95 %)."""

    TARGET = HOLDS
    RULE = (
        "Holds iff some part holds after Holm's step-down across the k parts (the part with "
        "the strongest evidence tested at 1 − 5 %/k, the next at 1 − 5 %/(k−1), …; family-wise "
        "5 %); does not hold iff every part does not (each at 95 %, which needs no correction); "
        "a part whose control fails is not testable here."
    )

    @staticmethod
    def combine(statuses: list[str]) -> str:
        if HOLDS in statuses:
            return HOLDS
        if all(s == FAILS for s in statuses):
            return FAILS
        rest = [s for s in statuses if s != FAILS]
        return UNTESTABLE if all(s == UNTESTABLE for s in rest) else UNSURE


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
            f"interleaved), v = 1 − {self.what}[{self.fast}] / {self.what}[{self.slow}]; 20 % "
            f"trimmed mean over rounds with Yuen's {LEVEL:.0%} interval (a round stalled by "
            f"the machine moves neither); {EXPECT['>0']} (δ = {self.delta:.3g})."
        )

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        timings = ctx.get("timings") or {}
        a, b = (timings.get(arm, {}).get(self.what) or [] for arm in (self.fast, self.slow))
        values = [1 - x / y for x, y in zip(a, b, strict=False) if y > 0]
        est = Estimate.trimmed(values, ctx.get("level", LEVEL))
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
    # (label, rule): what must hold in the same setting for the claim to be testable there
    controls: tuple[tuple[str, Any], ...] = ()

    @property
    def arms(self) -> tuple[str, ...]:
        extra = tuple(a for _, c in self.controls for a in c.arms())
        return tuple(dict.fromkeys(self.rule.arms() + extra))

    @property
    def seeds(self) -> int:
        return self.rule.seeds

    @property
    def timed(self) -> bool:
        return isinstance(self.rule, Timing)

    def describe(self) -> str:
        """The rule as the report states it, with the claim's controls."""
        return self.rule.describe() + controls_text(self.controls)

    def decide(self, results: Results, ctx: Mapping[str, Any]) -> Verdict:
        return with_controls(self.rule.decide(results, ctx), self.controls, results, ctx)


def decide_all(study, results: Results, plateau_h: float, timings: dict | None = None):
    """Every claim of ``study`` decided on ``results``: ``[(claim, verdict), ...]``; ``plateau_h``
    is H (``Corpus.unigram_val_xent()``: the validation bytes' unigram cross-entropy)."""
    ctx = {"plateau_h": plateau_h, "timings": timings or {}}
    return [(c, c.decide(results, ctx)) for c in study.claims]
