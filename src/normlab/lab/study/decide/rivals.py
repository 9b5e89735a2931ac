"""One standard for rivals: how a claim that compares trained recipes must treat the learning rate,
applied to every claim whatever its outcome favours (docs/study.md#one-standard-for-rivals).

Two recipes are compared at one shared learning rate (the preset's), with a registered check:
the same claim, decided again on the same seeds with every one of its arms at the shared rate
times each factor of ``rate_check`` (``CHECK``: a third and three times, half a decade each way).
The shared-rate verdict stands unless a check decides the opposite (holds where it does not
hold, or the reverse): then the verdict depends on the learning rate and the claim is "not
testable here". A claim that compares trained recipes without the check does not meet the
standard and is "not testable here" for that reason. Claims that need no check say why:
untrained arms (no rate), a timing (the rate does not enter), a sweep over a registered grid of
rates (the rate is the claim), one recipe measured against a bar (no rival).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from normlab.lab.study.decide.stats import Results
from normlab.lab.verdict import Verdict, Word

CHECK = (0.3, 3.0)  # the registered factors of a rate check
ANCHOR = "docs/study.md#one-standard-for-rivals"
OPPOSITE = {Word.HOLDS: Word.DOES_NOT_HOLD, Word.DOES_NOT_HOLD: Word.HOLDS}

# How a claim meets the standard (the rivals table's column), by kind.
UNTRAINED, TIMING, GRID, ONE_RECIPE, CHECKED, UNCHECKED = (
    "untrained arms: no learning rate",
    "a timing: the learning rate does not enter",
    "each arm over a registered grid of rates",
    "one recipe against a bar: no rival",
    "shared rate, checked at ×0.3 and ×3",
    "shared rate, no check: does not meet the standard",
)


@dataclass(frozen=True)
class RateCheck:
    """A claim's arms at the shared learning rate times ``factor``: ``arms`` maps each arm to
    the arm that trains it at that rate (on the same seeds)."""

    factor: float
    arms: tuple[tuple[str, str], ...]

    @property
    def label(self) -> str:
        return f"lr ×{self.factor:g}"

    def results(self, results: Results) -> Results:
        """``results`` with each arm's runs replaced by its runs at this check's rate."""
        return {**results, **{arm: results.get(at, {}) for arm, at in self.arms}}


def checked(v: Verdict, checks: tuple[tuple[str, Verdict], ...]) -> Verdict:
    """``v`` (decided at the shared rate) with its rate checks: "not testable here" where a check
    decides the opposite of ``v``."""
    if not checks:
        return v
    against = [(label, c) for label, c in checks if c.status == OPPOSITE.get(v.status)]
    v = dataclasses.replace(v, rate_checks=checks)
    if not against:
        return v
    shown = "; ".join(f"at {label} {c.status} ({c.why})" for label, c in against)
    why = (
        f"the verdict depends on the learning rate: at the shared rate {v.status} ({v.why}); "
        f"{shown} ({ANCHOR})"
    )
    return dataclasses.replace(v, status=Word.NOT_TESTABLE, why=why)


def standard(study, claim) -> str:
    """How ``claim`` of ``study`` meets the standard for rivals (one of the kinds above)."""
    leaves = [r for _, r in claim.rule.parts()]
    if claim.timed or any(r.rate == "timed" for r in leaves):
        return TIMING
    steps = {a.name: a.config.steps for a in study.arms}
    if all(steps.get(a, 0) == 0 for a in claim.rule.arms()):
        return UNTRAINED
    if any(r.rate == "swept" for r in leaves):
        return GRID
    if not any(steps.get(a, 0) for r in leaves for a in r.rival_arms()):
        return ONE_RECIPE
    return CHECKED if claim.rate_checks else UNCHECKED


def unmet(study, claim, v: Verdict) -> Verdict:
    """``v``, or "not testable here" where ``claim`` compares trained recipes at one shared rate
    without the registered check."""
    if standard(study, claim) != UNCHECKED:
        return v
    why = (
        f"compares trained recipes at one shared learning rate without the registered rate "
        f"check ({ANCHOR}) (its own result, not decided on: {v.status}: {v.why})"
    )
    return dataclasses.replace(v, status=Word.NOT_TESTABLE, why=why)
