"""The compound kinds: ``AllOf`` and ``AnyOf`` (a claim of several parts, decided with Holm's
correction by ``normlab.lab.study.decide.compound``) and ``Controlled`` (a part with its own
controls)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from normlab.lab import verdict
from normlab.lab.study.decide import compound
from normlab.lab.study.decide.rules_protocol import PARTS, OnePartRule
from normlab.lab.study.decide.stats import Context, Results
from normlab.lab.verdict import Verdict, Word


@dataclass(frozen=True)
class Controlled:
    """A part of a compound claim with its own controls: ``rule`` decided (``decide()`` is the
    rule's: the compound applies the controls), then ``controls``; read as its rule otherwise
    (so not a ``OnePartRule``, whose defaults would hide the rule's)."""

    rule: Any
    controls: tuple[tuple[str, Any], ...]
    timed: ClassVar[bool] = False
    parts = OnePartRule.parts

    def __getattr__(self, name: str) -> Any:  # delta, matrix, expect, seeds, ...: the rule's
        if name.startswith("_") or "rule" not in self.__dict__:  # copy and pickle probe first
            raise AttributeError(name)
        return getattr(self.__dict__["rule"], name)

    def arms(self) -> tuple[str, ...]:
        return compound.control_arms(self.rule, self.controls)

    def describe(self) -> str:
        return self.rule.describe() + compound.controls_text(self.controls)


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

    def reads(self) -> tuple[tuple[str, str], ...]:
        return ()  # its parts read

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
