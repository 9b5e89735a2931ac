"""The rules a claim is decided by: one dataclass per kind, and ``RULES``, the one table of them.

Every rule has one shape, stated before the runs: **what it measures per seed** (a value ``v``,
paired across the arms it compares: seed ``i`` gives every arm the same data order and, where
the shapes agree, the same initial weights), then the statistic and the decision of
``normlab.lab.study.stats``. A timing claim is the same contrast over interleaved timing rounds
of the serial phase instead of seeds.

A new kind of rule is a dataclass here and a row of ``RULES``: the spec loader builds it from its
fields (a field's ``metadata["spec"]`` names how its TOML value is checked, see ``spec.py``), and
the report, plots and pilot read it through the ``Rule`` protocol only: a kind says its own
words (``subject()``, ``formula_words()``, ...), ``OnePartRule`` holds what a kind need not say.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from normlab.lab import verdict
from normlab.lab.study import compound, stats
from normlab.lab.study.measures import H_TEXT, MEASURES, TIMINGS
from normlab.lab.study.stats import Context, Results, Seeds, Verdict
from normlab.lab.study.sweeps import S_TEXT, sweep_name, sweep_ranges, sweeps_text
from normlab.lab.verdict import (
    BOUND_TEXT,
    EXPECT,
    LEVEL,
    Word,
    check_rule,
    decide,
    decide_rows,
    pick,
    statistic,
)

# How the spec loader checks a field's TOML value (``field(metadata=...)``); a field without one
# is read by its type, as a config field is.
ARM = {"spec": "arm"}  # an arm of the study
SWEEP = {"spec": "sweep"}  # arm names or glob patterns, two arms or more
TERMS = {"spec": "terms"}  # [coef, arm, measure] lists
EXPECT_KEY = {"spec": "expect"}  # a key of EXPECT (or an ASCII spelling)
SEEDS = {"spec": "count"}  # an int >= 1
DELTA = {"spec": "delta"}  # a number >= 0
NAME = {"spec": "name"}  # a non-empty string
PARTS = {"spec": "parts", "key": "parts"}  # [[claims.parts]]: (label, rule) pairs


class Rule(Protocol):
    """What the study, the report, the plots and the pilot read of a rule."""

    seeds: int  # how many seeds each of its arms is trained on
    delta: float  # the smallest effect that matters (0 for a compound's own decision)
    timed: bool  # decided on the serial timing rounds, not on seeds
    expect: str  # a key of EXPECT: the sign v is decided on
    matrix: str | None  # the gradient measures' matrix it reads, if any
    trim: float  # the trimmed share of its seeds' mean (0: a plain mean)
    processes: int  # fresh processes of the serial timing phase a timed rule needs
    controls: tuple[tuple[str, Rule], ...]  # (label, rule): a part's own controls
    TARGET: Word  # of a compound: the decision Holm corrects (HOLDS: one part suffices)
    unit: str  # what an estimate's n counts, in words

    def arms(self) -> tuple[str, ...]: ...
    def parts(self) -> tuple[tuple[str, Rule], ...]: ...
    def describe(self) -> str: ...
    def decide(self, results: Results, ctx: Context) -> Verdict: ...
    def subject(self) -> str: ...  # what v is about, short
    def formula_words(self) -> str: ...  # v's formula, per unit
    def measure_words(self) -> list[str]: ...  # "name: meaning" of what v reads
    def statistic_words(self) -> str: ...  # the statistic, where it is not the seeds' mean
    def sizes(self, mde: float, delta: float) -> tuple[str, str]: ...  # in v's own unit
    def threshold(self, h: float | None) -> tuple[str, str, float, float | None] | None: ...
    def result_words(self, est: Any) -> str | None: ...  # its own phrase of an effect


class OnePartRule:
    """A rule of one part (itself, labelled ""), and the ``Rule`` protocol's defaults: what a
    kind need not say (a field of the same name in the kind says it instead)."""

    timed: ClassVar[bool] = False
    delta: ClassVar[float] = 0.0
    expect: ClassVar[str] = ">0"
    matrix: ClassVar[str | None] = None
    trim: ClassVar[float] = 0.0
    processes: ClassVar[int] = 1
    controls: ClassVar[tuple] = ()
    TARGET: ClassVar[Word] = Word.DOES_NOT_HOLD
    unit: ClassVar[str] = "seeds"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A kind's bare ``delta: float`` must stay a required field: a dataclass would take the
        # default above for its default.
        super().__init_subclass__(**kwargs)
        for name in cls.__dict__.get("__annotations__", {}):
            if name in OnePartRule.__annotations__ and name not in cls.__dict__:
                setattr(cls, name, field())

    def parts(self) -> tuple[tuple[str, Any], ...]:
        return (("", self),)

    def subject(self) -> str:
        return "v"

    def formula_words(self) -> str:
        return self.describe()  # type: ignore[attr-defined]

    def measure_words(self) -> list[str]:
        return []  # a kind of the user's own: its describe() says

    def statistic_words(self) -> str:
        return ""

    def sizes(self, mde: float, delta: float) -> tuple[str, str]:
        return f"{mde:.2g}", f"{delta:.3g}"

    def threshold(self, h: float | None) -> tuple[str, str, float, float | None] | None:
        return None  # (arm, measure, coef, its value where v = 0) of a one-term rule against H

    def result_words(self, est: Any) -> str | None:
        return None


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
        check_rule(self.expect, self.seeds, self.delta)
        statistic(self.trim)  # ValueError outside [0, MEDIAN]

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

    def subject(self) -> str:
        """ "pre-L6 − post-L6 (final val loss)", "pre: + a − b", else the formula."""
        measures = list(dict.fromkeys(m for _, _, m in self.terms))
        arms = self.arms()
        if len(measures) == 1:
            out = ""
            for c, a, _ in self.terms:
                sign = ("−" if c < 0 else "") if not out else (" − " if c < 0 else " + ")
                out += f"{sign}{'' if abs(c) == 1 else f'{abs(c):g}·'}{a}"
            return f"{out} ({measures[0].replace('_', ' ')})"
        if len(arms) == 1:
            ms = [f"{'−' if c < 0 else '+'} {m.replace('_', ' ')}" for c, _, m in self.terms]
            return f"{arms[0]}: {' '.join(ms).removeprefix('+ ')}"
        return self.formula()

    def formula_words(self) -> str:
        return f"{self.formula()} per seed"

    def measure_words(self) -> list[str]:
        return [f"{m}: {MEASURES[m][0]}" for m in dict.fromkeys(t[2] for t in self.terms)]

    def statistic_words(self) -> str:
        return f" Statistic: the {statistic(self.trim).words('the seeds')}." if self.trim else ""

    def threshold(self, h: float | None) -> tuple[str, str, float, float | None] | None:
        if len(self.terms) != 1 or not self.const_h:
            return None
        coef, arm, m = self.terms[0]
        return arm, m, coef, None if h is None else -(self.const + self.const_h * h) / coef

    def describe(self) -> str:
        measures = "; ".join(self.measure_words())
        h = f"; {H_TEXT}" if self.const_h else ""
        stat = statistic(self.trim).words(f"{self.seeds} paired seeds")
        return (
            f"per seed, v = {self.formula()} ({measures}{h}); {stat}; {BOUND_TEXT}; "
            f"{EXPECT[self.expect]} (δ = {self.delta:.3g})."
        )

    def _measure(self, results: Results, arm: str, i: int, m: str) -> float | None:
        return MEASURES[m][1](results[arm][i], self.matrix)

    def rows(self, results: Results, ctx: Context) -> tuple[list, Seeds]:
        """Per paired seed the range ``(lo, hi)`` of ``v`` (equal unless a measure is undefined),
        and what became of the seeds."""
        if self.const_h and ctx.plateau_h is None:
            raise ValueError("this rule reads H: decide it with a Context(plateau_h=...)")
        base = self.const + (self.const_h * ctx.plateau_h if self.const_h else 0.0)
        paired = Seeds.of(results, self.arms()).paired
        value = lambda a, i, m: self._measure(results, a, i, m)  # noqa: E731
        rows, bounded = stats.term_rows(self.terms, value, paired, base)
        return rows, Seeds.of(results, self.arms(), bounded)

    def values(self, results: Results, ctx: Context) -> list[float]:
        """Per paired seed, ``v`` (an undefined measure at the end least favourable to holds)."""
        return [pick(self.expect, lo, hi, True) for lo, hi in self.rows(results, ctx)[0]]

    def decide(self, results: Results, ctx: Context) -> Verdict:
        rows, seeds = self.rows(results, ctx)
        status, why, est = decide_rows(self.expect, rows, self.delta, ctx.level, self.trim)
        means = {}
        for _, a, m in self.terms:
            xs = [self._measure(results, a, i, m) for i in seeds.paired]
            xs = [x for x in xs if x is not None]
            means[f"{m}[{a}]"] = sum(xs) / len(xs) if xs else None
        return Verdict(status, why, est, means=means, seeds=seeds)


@dataclass(frozen=True)
class Trains:
    """``arm`` trains: mean final loss below H − ``margin``; read as its contrast otherwise (so
    not a ``OnePartRule``, whose defaults would hide the contrast's)."""

    arm: str = field(metadata=ARM)
    seeds: int = field(metadata=SEEDS)
    margin: float = 0.3
    delta: ClassVar[float] = 0.0
    timed: ClassVar[bool] = False
    SIGN: ClassVar[int] = -1  # v = SIGN·(loss − H + margin)
    parts = OnePartRule.parts

    def contrast(self) -> Contrast:
        s = self.SIGN
        terms = ((s, self.arm, "final_val_loss"),)
        return Contrast(terms, ">0", 0.0, self.seeds, const=s * self.margin, const_h=-s)

    def __getattr__(self, name: str) -> Any:
        """terms, expect, formula(), subject(), ...: a Trains reads as its contrast."""
        if name.startswith("_") or "arm" not in self.__dict__:  # copy and pickle probe first
            raise AttributeError(name)
        return getattr(self.contrast(), name)

    def arms(self) -> tuple[str, ...]:
        return (self.arm,)

    def describe(self) -> str:
        return self.contrast().describe()

    def decide(self, results: Results, ctx: Context) -> Verdict:
        return self.contrast().decide(results, ctx)


@dataclass(frozen=True)
class Fails(Trains):
    """``arm`` fails to learn past byte frequencies: mean final loss above H − ``margin``."""

    margin: float = 0.05
    SIGN: ClassVar[int] = 1


@dataclass(frozen=True)
class Timing(OnePartRule):
    """Per unit of the serial timing phase: ``v = 1 − ms[fast] / ms[slow]`` of ``what``
    (``"norm_ms"``: the norms alone at the models' shapes with normlab's kernels, forward+backward
    per step; ``"torch_norm_ms"``: the same with PyTorch's own ops; ``"step_ms"``: a whole
    training step), the fraction of the time ``fast`` saves. The unit is a fresh process (the
    median of its rounds) where the timings say which process timed each round, else a round."""

    fast: str = field(metadata=ARM)
    slow: str = field(metadata=ARM)
    delta: float = field(metadata=DELTA)
    what: str = field(default="norm_ms", metadata={"spec": "choice", "choices": TIMINGS})
    processes: int = 8  # fresh processes of the timing phase: the unit of the interval
    seeds: ClassVar[int] = 1  # the arms are timed, not trained: one run each builds them
    timed: ClassVar[bool] = True
    trim: ClassVar[float] = 0.2  # a stalled process moves neither the estimate nor the interval
    unit: ClassVar[str] = "timing processes"

    def __post_init__(self) -> None:
        if self.what not in TIMINGS:
            raise ValueError(f"what must be one of {tuple(TIMINGS)}, got {self.what!r}")
        if not self.delta >= 0:
            raise ValueError(f"delta must be >= 0, got {self.delta}")
        if isinstance(self.processes, bool) or not (
            isinstance(self.processes, int) and self.processes >= 1
        ):
            raise ValueError(f"processes must be an int >= 1, got {self.processes!r}")

    def arms(self) -> tuple[str, ...]:
        return (self.fast, self.slow)

    def describe(self) -> str:
        return (
            f"per fresh process of the serial timing phase (nothing else of the study running, "
            f"the processes one after the other, the arms interleaved in each), v = 1 − "
            f"{self.what}[{self.fast}] / {self.what}[{self.slow}], the median of the process's "
            f"rounds; 20 % trimmed mean over processes with Yuen's {LEVEL:.0%} interval, so the "
            f"interval covers run-to-run variation and a stalled process moves neither "
            f"(a study timed in one process: over its rounds); {EXPECT['>0']} "
            f"(δ = {self.delta:.3g})."
        )

    def subject(self) -> str:
        return f"{self.fast} vs {self.slow}"

    def formula_words(self) -> str:
        return f"1 − {self.what}[{self.fast}] / {self.what}[{self.slow}] per timing process"

    def measure_words(self) -> list[str]:
        return [f"{self.what}: {TIMINGS[self.what]}"]

    def statistic_words(self) -> str:
        return (
            f" Over fresh processes (each the median of its rounds): the 20 % trimmed mean "
            f"with Yuen's {LEVEL:.0%} interval."
        )

    def sizes(self, mde: float, delta: float) -> tuple[str, str]:
        return f"{mde:.1%}", f"{delta:.0%}"  # a fraction of the time: in per cent

    def result_words(self, est: Any) -> str | None:
        if est is None or est.effect is None:
            return None
        what = TIMINGS[self.what].split(",")[0].split(" at ")[0]
        pct = lambda x: f"{x:+.1%}".replace("-", "−")  # noqa: E731
        return (
            f"{self.fast} saves {pct(est.effect)} [{pct(est.lo)}, {pct(est.hi)}] of "
            f"{self.slow}'s time ({what}), {est.n} timing units"
        )

    def units(self, timings: Mapping[str, Any]) -> list[float]:
        """``v`` per process (the median of its rounds), or per round without process ids."""
        return stats.saved_per_process(timings, self.what, self.fast, self.slow)

    def decide(self, results: Results, ctx: Context) -> Verdict:
        timings = ctx.timings or {}
        est = statistic(self.trim).estimate(self.units(timings), ctx.level)
        status, why = decide(">0", est, self.delta)
        return Verdict(
            status, why, est, means=stats.timing_medians(timings, self.what, self.arms())
        )


@dataclass(frozen=True)
class LRSensitivity(OnePartRule):
    """Per seed: ``v = S(unstable) − S(stable)``, the sensitivity the ``stable`` recipe saves
    (S: ``sweeps.sensitivity``, Wortsman et al. 2023)."""

    stable: tuple[str, ...] = field(metadata=SWEEP)
    unstable: tuple[str, ...] = field(metadata=SWEEP)
    delta: float = field(metadata=DELTA)
    seeds: int = field(metadata=SEEDS)
    expect: str = field(default=">0", metadata=EXPECT_KEY)

    def __post_init__(self) -> None:
        if len(self.stable) < 2 or len(self.unstable) < 2:
            raise ValueError("a sweep needs at least two learning rates")
        check_rule(self.expect, self.seeds, self.delta)

    def arms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.stable + self.unstable))

    def describe(self) -> str:
        text = sweeps_text(self.stable, self.unstable, self.seeds)
        return f"{text}; {EXPECT[self.expect]} (δ = {self.delta:.3g})."

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
        status, why, est = decide_rows(self.expect, rows, self.delta, ctx.level)
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
        return Verdict(status, why, est, means=means, seeds=Seeds.of(results, self.arms(), bounded))


@dataclass(frozen=True)
class Controlled:
    """A part of a compound claim with its own controls: ``rule`` decided, then ``controls``;
    read as its rule otherwise (so not a ``OnePartRule``, whose defaults would hide the rule's)."""

    rule: Any
    controls: tuple[tuple[str, Any], ...]
    timed: ClassVar[bool] = False
    parts = OnePartRule.parts

    def __getattr__(self, name: str) -> Any:  # delta, matrix, expect, seeds, ...: the rule's
        if name.startswith("_") or "rule" not in self.__dict__:  # copy and pickle probe first
            raise AttributeError(name)
        return getattr(self.__dict__["rule"], name)

    def arms(self) -> tuple[str, ...]:
        return tuple(
            dict.fromkeys(self.rule.arms() + tuple(a for _, c in self.controls for a in c.arms()))
        )

    def describe(self) -> str:
        return self.rule.describe() + compound.controls_text(self.controls)

    def decide(self, results: Results, ctx: Context) -> Verdict:
        return self.rule.decide(results, ctx)  # the controls are applied by the compound


@dataclass(frozen=True)
class AllOf:
    """A compound claim: holds iff every part holds (each at 95 %: an intersection-union test),
    does not hold iff a part does not after Holm's correction across the parts."""

    members: tuple[tuple[str, Any], ...] = field(metadata=PARTS)  # (label, rule)
    timed: ClassVar[bool] = False
    delta: ClassVar[float] = 0.0
    controls: ClassVar[tuple] = ()
    # the parameters a compound claim passes to the parts that do not set them
    SHARED: ClassVar[tuple[str, ...]] = ("seeds", "expect", "delta", "matrix", "margin")
    TARGET: ClassVar[Word] = Word.DOES_NOT_HOLD  # the decision Holm corrects
    RULE: ClassVar[str] = verdict.ALL_OF_TEXT

    def parts(self) -> tuple[tuple[str, Any], ...]:
        return self.members

    @property
    def seeds(self) -> int:
        return max(p.seeds for _, p in self.members)

    def arms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for _, p in self.members for a in p.arms()))

    def describe(self) -> str:
        return " ".join(f"[{name}] {p.describe()}" for name, p in self.members) + " " + self.RULE

    def decide(self, results: Results, ctx: Context) -> Verdict:
        return compound.decide_parts(self.members, self.TARGET, results, ctx)


@dataclass(frozen=True)
class AnyOf(AllOf):
    """A compound claim: holds iff some part holds after Holm's correction across the parts,
    does not hold iff every part does not (each at 95 %)."""

    TARGET: ClassVar[Word] = Word.HOLDS
    RULE: ClassVar[str] = verdict.ANY_OF_TEXT


# The kinds a spec's ``rule = "..."`` names, in the order its messages list them.
RULES: dict[str, type] = {
    "contrast": Contrast,
    "all_of": AllOf,
    "any_of": AnyOf,
    "fails": Fails,
    "trains": Trains,
    "timing": Timing,
    "lr_sensitivity": LRSensitivity,
}


def control_kinds() -> list[str]:
    """The kinds of ``RULES`` a control may be stated in."""
    return [k for k, r in RULES.items() if getattr(r, "CONTROL", False)]
