"""The rules a claim is decided by: one dataclass per kind, and ``RULES``, the one table of them.

Every rule has one shape, stated before the runs: **what it measures per seed** (a value ``v``,
paired across the arms it compares: seed ``i`` gives every arm the same data order and, where
the shapes agree, the same initial weights), then the statistic and the decision of
``normlab.lab.study.stats``. A timing claim is the same contrast over interleaved timing rounds
of the serial phase instead of seeds.

A new kind of rule is a dataclass here and a row of ``RULES``: the spec loader builds it from its
fields (a field's ``metadata["spec"]`` names how its TOML value is checked, see ``spec.py``), and
the report, plots and pilot read it through the ``Rule`` protocol only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

from normlab.lab.study.measures import H_TEXT, MEASURES, TIMINGS
from normlab.lab.study.stats import (
    BOUND_TEXT,
    EXPECT,
    FAILS,
    HOLDS,
    LEVEL,
    UNSURE,
    UNTESTABLE,
    Estimate,
    Results,
    Seeds,
    Verdict,
    controls_text,
    decide,
    decide_rows,
    holm,
    pick,
    with_controls,
)
from normlab.lab.study.sweeps import init_loss, sensitivity, sweep_name

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


@dataclass(frozen=True)
class Context:
    """What a rule is decided with besides the runs."""

    plateau_h: float | None = None  # H: Corpus.unigram_val_xent(), for the rules that read it
    timings: Mapping[str, Any] = field(default_factory=dict)  # arm -> what -> rounds
    level: float = LEVEL  # of every interval
    nominal_level: float | None = None  # the controls' level, under a Holm-corrected part

    def at(self, level: float) -> Context:
        return replace(self, level=level)

    def nominal(self) -> Context:
        return self.at(self.level if self.nominal_level is None else self.nominal_level)


class Rule(Protocol):
    """What the study, the report, the plots and the pilot read of a rule."""

    seeds: int  # how many seeds each of its arms is trained on
    delta: float  # the smallest effect that matters (0 for a compound's own decision)
    timed: bool  # decided on the serial timing rounds, not on seeds

    def arms(self) -> tuple[str, ...]: ...
    def parts(self) -> tuple[tuple[str, Rule], ...]: ...
    def describe(self) -> str: ...
    def decide(self, results: Results, ctx: Context) -> Verdict: ...


class Single:
    """A rule of one part (itself, labelled "")."""

    timed: ClassVar[bool] = False

    def parts(self) -> tuple[tuple[str, Any], ...]:
        return (("", self),)


def _check(expect: str, seeds: int, delta: float) -> None:
    if expect not in EXPECT:
        raise ValueError(f"expect must be one of {tuple(EXPECT)}, got {expect!r}")
    if seeds < 1 or not delta >= 0:
        raise ValueError(f"seeds must be >= 1 and delta >= 0, got {seeds}, {delta}")


@dataclass(frozen=True)
class Contrast(Single):
    """Per seed: ``v = const + const_h·H + Σ coef · measure(arm)``; decided by ``expect``."""

    terms: tuple[tuple[float, str, str], ...] = field(metadata=TERMS)  # (coef, arm, measure)
    expect: str = field(metadata=EXPECT_KEY)
    delta: float = field(metadata=DELTA)
    seeds: int = field(metadata=SEEDS)
    const: float = 0.0
    const_h: float = 0.0
    matrix: str | None = field(default=None, metadata=NAME)  # of the gradient measures
    # > 0: the trimmed mean with Yuen's interval, for measures whose seeds have heavy tails
    # (one blown-up model moves a plain mean's interval past any δ); fixed before the runs.
    trim: float = 0.0
    CONTROL: ClassVar[bool] = True  # may state a control of its own

    def __post_init__(self) -> None:
        for _, _, m in self.terms:
            if m not in MEASURES:
                raise ValueError(f"unknown measure {m!r}; known: {sorted(MEASURES)}")
        _check(self.expect, self.seeds, self.delta)
        if not 0 <= self.trim < 0.5:
            raise ValueError(f"trim must be in [0, 0.5), got {self.trim!r}")

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
        stat = (
            f"{self.trim:.0%} trimmed mean of v over {self.seeds} paired seeds, Yuen's "
            f"{LEVEL:.0%} interval"
            if self.trim
            else f"mean of v over {self.seeds} paired seeds, {LEVEL:.0%} Student-t interval"
        )
        return (
            f"per seed, v = {self.formula()} ({measures}{h}); {stat}; {BOUND_TEXT}; "
            f"{EXPECT[self.expect]} (δ = {self.delta:.3g})."
        )

    def _measure(self, results: Results, arm: str, i: int, m: str) -> float | None:
        return MEASURES[m][1](results[arm][i], self.matrix)

    def rows(self, results: Results, ctx: Context) -> tuple[list, Seeds]:
        """Per paired seed the range ``(lo, hi)`` of ``v`` (equal unless a measure is undefined),
        and what became of the seeds."""
        paired = Seeds.of(results, self.arms()).paired
        observed: dict[str, list[float]] = {}
        for m in dict.fromkeys(t[2] for t in self.terms):
            xs = (self._measure(results, a, i, m) for a in self.arms() for i in paired)
            observed[m] = [x for x in xs if x is not None]
        rows, bounded = [], []
        if self.const_h and ctx.plateau_h is None:
            raise ValueError("this rule reads H: decide it with a Context(plateau_h=...)")
        base = self.const + (self.const_h * ctx.plateau_h if self.const_h else 0.0)
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
class Trains(Single):
    """``arm`` trains: mean final loss below H − ``margin``."""

    arm: str = field(metadata=ARM)
    seeds: int = field(metadata=SEEDS)
    margin: float = 0.3
    delta: ClassVar[float] = 0.0
    SIGN: ClassVar[int] = -1  # v = SIGN·(loss − H + margin)

    def contrast(self) -> Contrast:
        s = self.SIGN
        terms = ((s, self.arm, "final_val_loss"),)
        return Contrast(terms, ">0", 0.0, self.seeds, const=s * self.margin, const_h=-s)

    def __getattr__(self, name: str) -> Any:
        """terms, const, const_h, expect, formula(): a Trains reads as its contrast."""
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
class Timing(Single):
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

    def units(self, timings: Mapping[str, Any]) -> list[float]:
        """``v`` per process (the median of its rounds), or per round without process ids."""
        a, b = (timings.get(arm, {}).get(self.what) or [] for arm in (self.fast, self.slow))
        v = [1 - x / y if y > 0 else math.nan for x, y in zip(a, b, strict=False)]
        procs = timings.get(self.fast, {}).get("process")
        if not procs:
            return [x for x in v if not math.isnan(x)]
        by: dict[int, list[float]] = {}
        for p, x in zip(procs, v, strict=False):
            if not math.isnan(x):
                by.setdefault(p, []).append(x)
        return [statistics.median(xs) for _, xs in sorted(by.items())]

    def decide(self, results: Results, ctx: Context) -> Verdict:
        timings = ctx.timings or {}
        est = Estimate.trimmed(self.units(timings), ctx.level)
        status, why = decide(">0", est, self.delta)
        means: dict[str, float | None] = {}
        for arm in (self.fast, self.slow):
            t = timings.get(arm, {})
            beside = "norm_ms" if self.what == "torch_norm_ms" else "torch_norm_ms"
            for key in (self.what, beside, "step_ms"):
                xs = t.get(key) or []
                means[f"{key}[{arm}]"] = statistics.median(xs) if xs else None
            if t.get("norm_ms") and t.get("step_ms"):  # the norms' share of a training step
                means[f"norm share[{arm}]"] = statistics.median(
                    n / s for n, s in zip(t["norm_ms"], t["step_ms"], strict=True)
                )
        return Verdict(status, why, est, means=means)


@dataclass(frozen=True)
class LRSensitivity(Single):
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
        _check(self.expect, self.seeds, self.delta)

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
        loss = MEASURES["final_val_loss"][1]
        out = {}
        for i in Seeds.of(results, self.arms()).paired:
            losses = [loss(results[a][i], None) for a in sweep]
            cap = init_loss([results[a][i] for a in sweep])
            known = [x for x in losses if x is not None]
            best = min(known) if known else cap
            lo = sensitivity([best if x is None else x for x in losses], cap)
            out[i] = (lo, sensitivity([cap if x is None else x for x in losses], cap), best)
        return out

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
class Controlled(Single):
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

    def decide(self, results: Results, ctx: Context) -> Verdict:
        return self.rule.decide(results, ctx)  # the controls are applied by the compound


@dataclass(frozen=True)
class AllOf:
    """A compound claim: holds iff every part holds (each at 95 %: an intersection-union test),
    does not hold iff a part does not after Holm's correction across the parts."""

    members: tuple[tuple[str, Any], ...] = field(metadata=PARTS)  # (label, rule)
    timed: ClassVar[bool] = False
    delta: ClassVar[float] = 0.0
    # the parameters a compound claim passes to the parts that do not set them
    SHARED: ClassVar[tuple[str, ...]] = ("seeds", "expect", "delta", "matrix", "margin")
    TARGET: ClassVar[str] = FAILS  # the decision Holm corrects
    RULE: ClassVar[str] = (
        "Holds iff every part holds (each at 95 %: all must hold, which needs no correction); "
        "does not hold iff some part does not hold after Holm's step-down across the k parts "
        "(the part with the strongest evidence against it tested at 1 − 5 %/k, the next at "
        "1 − 5 %/(k−1), …; family-wise 5 %); a part whose control fails is not testable here."
    )

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
        target, level, k = self.TARGET, ctx.level, len(self.members)
        sub = replace(ctx, nominal_level=ctx.nominal().level)
        rules = [rule for _, rule in self.members]
        plain = [rule.decide(results, sub.at(level)) for rule in rules]
        decide_at = lambda j, lvl: rules[j].decide(results, sub.at(lvl)).status  # noqa: E731
        confirmed, m = holm([v.status for v in plain], decide_at, target, level)
        verdicts = []
        for j, v in enumerate(plain):
            if v.status == target and j in confirmed:
                v = replace(v, correction=f"confirmed by Holm at {confirmed[j]:.4g}")
            elif v.status == target:
                note = (
                    f"'{target}' alone at {level:.0%} ({v.why}), but not after Holm's correction "
                    f"across the {k} parts (needed its interval at {1 - (1 - level) / m:.4g})"
                )
                v = replace(v, status=UNSURE, why=note, correction=note)
            verdicts.append(with_controls(v, getattr(rules[j], "controls", ()), results, sub))
        correction = (
            f"Holm step-down over the {k} parts for '{target}' (family-wise {1 - level:.0%}): "
            f"{len(confirmed)} confirmed"
        )
        parts = tuple((name, v) for (name, _), v in zip(self.members, verdicts, strict=True))
        why = "; ".join(f"{name}: {v.status}" for name, v in parts)
        means = {key: x for _, v in parts for key, x in v.means.items()}
        seeds = None
        for _, v in parts:
            seeds = v.seeds.merge(seeds) if v.seeds else seeds
        status = self.combine([v.status for _, v in parts])
        return Verdict(status, why, None, parts, means, seeds, correction)

    def combine(self, statuses: list[str]) -> str:
        """``TARGET`` if some part reached it; the other decision if every part did; else not
        testable here if every other part is, inconclusive if not."""
        other = HOLDS if self.TARGET == FAILS else FAILS
        if self.TARGET in statuses:
            return self.TARGET
        if all(s == other for s in statuses):
            return other
        rest = [s for s in statuses if s != other]
        return UNTESTABLE if all(s == UNTESTABLE for s in rest) else UNSURE


@dataclass(frozen=True)
class AnyOf(AllOf):
    """A compound claim: holds iff some part holds after Holm's correction across the parts,
    does not hold iff every part does not (each at 95 %)."""

    TARGET: ClassVar[str] = HOLDS
    RULE: ClassVar[str] = (
        "Holds iff some part holds after Holm's step-down across the k parts (the part with "
        "the strongest evidence tested at 1 − 5 %/k, the next at 1 − 5 %/(k−1), …; family-wise "
        "5 %); does not hold iff every part does not (each at 95 %, which needs no correction); "
        "a part whose control fails is not testable here."
    )


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
