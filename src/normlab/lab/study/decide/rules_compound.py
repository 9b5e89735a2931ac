"""The compound kinds: ``AllOf`` and ``AnyOf`` (a claim of several parts, its parts decided and
corrected by the verdict engine's Holm step-down, ``normlab.lab.verdict.holm``) and
``Controlled`` (a part with its own controls); and a claim's controls."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from normlab.lab import verdict
from normlab.lab.study.decide.rules_protocol import PARTS, OnePartRule
from normlab.lab.study.decide.stats import Context, Results
from normlab.lab.verdict import LEVEL, Seeds, Verdict, Word, combine, correct


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
        return control_arms(self.rule, self.controls)

    def describe(self) -> str:
        return self.rule.describe() + controls_text(self.controls)


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
        return decide_parts(self.members, self.TARGET, results, ctx)


@dataclass(frozen=True)
class AnyOf(AllOf):
    """A compound claim: holds iff some part holds after Holm's correction across the parts,
    does not hold iff every part does not (each at 95 %)."""

    TARGET: ClassVar[Word] = Word.HOLDS
    RULE: ClassVar[str] = verdict.ANY_OF_TEXT


def control_arms(rule, controls) -> tuple[str, ...]:
    """``rule``'s arms, then its controls' (each once)."""
    return tuple(dict.fromkeys(rule.arms() + tuple(a for _, c in controls for a in c.arms())))


def controls_text(controls) -> str:
    if not controls:
        return ""
    names = ", ".join(f"'{label}'" for label, _ in controls)
    return (
        f" Controls: {names} (each decided as its rule at {LEVEL:.0%}); if a control does not "
        f"hold, the verdict is '{Word.NOT_TESTABLE}' with the control's result as the reason."
    )


def with_controls(v: Verdict, controls, results: Results, ctx) -> Verdict:
    """``v``, or "not testable here" where a control (``(label, rule)``, decided at the
    context's nominal level) does not show what it must."""
    if not controls:
        return v
    shown = tuple((label, rule.decide(results, ctx.nominal())) for label, rule in controls)
    bad = [(label, c) for label, c in shown if c.status != Word.HOLDS]
    if not bad:
        return replace(v, controls=shown)
    why = "; ".join(f"control '{label}' {c.status}: {c.why}" for label, c in bad)
    why += f" — the setting cannot show the claim (its own result, not decided on: {v.status})"
    return replace(v, status=Word.NOT_TESTABLE, why=why, controls=shown)


def decide_parts(members, target: Word, results: Results, ctx) -> Verdict:
    """A compound claim's verdict from its ``(label, rule)`` parts: each decided at the
    context's level, Holm's step-down over the parts for ``target`` (the decision one part
    suffices for is the other's: all must reach it), then each part's own controls."""
    level, k = ctx.level, len(members)
    sub = replace(ctx, nominal_level=ctx.nominal().level)  # at ``level``
    plain = [rule.decide(results, sub) for _, rule in members]
    decide_at = lambda j, lvl: members[j][1].decide(results, sub.at(lvl)).status  # noqa: E731
    fixed = correct([(v.status, v.why) for v in plain], decide_at, target, level)
    parts = []
    for (name, rule), v, (word, why, note) in zip(members, plain, fixed, strict=True):
        v = replace(v, status=word, why=why, correction=note) if note else v
        parts.append((name, with_controls(v, rule.controls, results, sub)))
    confirmed = sum(note.startswith("confirmed") for _, _, note in fixed)
    correction = (
        f"Holm step-down over the {k} parts for '{target}' (family-wise {1 - level:.0%}): "
        f"{confirmed} confirmed"
    )
    why = "; ".join(f"{name}: {v.status}" for name, v in parts)
    means = {key: x for _, v in parts for key, x in v.means.items()}
    found = [v.seeds for _, v in parts if v.seeds]
    seeds = functools.reduce(Seeds.merge, found) if found else None
    status = combine(target, [v.status for _, v in parts])
    return Verdict(status, why, None, tuple(parts), means, seeds, correction)
