"""The ``Rule`` protocol every rule kind follows, ``OnePartRule`` (its defaults: what a kind need
not say), and the marks that tell the spec loader how to check a kind's fields."""

from __future__ import annotations

from dataclasses import field
from typing import Any, ClassVar, Protocol

from normlab.lab.study.decide.stats import Context, Results
from normlab.lab.verdict import Verdict, Word

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
    rate: str  # why the learning rate does not enter its comparison ("timed", "swept") or ""

    def arms(self) -> tuple[str, ...]: ...
    def rival_arms(self) -> tuple[str, ...]: ...  # the arms whose measures it compares
    def reads(self) -> tuple[tuple[str, str], ...]: ...  # (arm, measure) of its own terms
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
    def offset(self) -> float: ...  # a margin folded into v, shown apart from the difference


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
    rate: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A kind's bare ``delta: float`` must stay a required field: a dataclass would take the
        # default above for its default.
        super().__init_subclass__(**kwargs)
        for name in cls.__dict__.get("__annotations__", {}):
            if name in OnePartRule.__annotations__ and name not in cls.__dict__:
                setattr(cls, name, field())

    def parts(self) -> tuple[tuple[str, Any], ...]:
        return (("", self),)

    def rival_arms(self) -> tuple[str, ...]:
        return ()  # one arm against a bar: no rival

    def reads(self) -> tuple[tuple[str, str], ...]:
        return ()  # the final loss (sweeps) or the timing rounds: no measure of MEASURES

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

    def offset(self) -> float:
        return 0.0  # v is the difference itself


def compound_parts(rule) -> tuple[tuple[tuple[str, Any], ...], bool] | None:
    """``(parts, any_of)`` of a compound rule: its ``(label, rule)`` parts (``Rule.parts()``),
    and whether one part holding suffices (``any_of``: Holm corrects the decision "holds"; else
    every part must). None for a rule of one part (itself)."""
    parts = rule.parts()
    if len(parts) == 1 and parts[0][1] is rule:
        return None
    return parts, rule.TARGET == Word.HOLDS
