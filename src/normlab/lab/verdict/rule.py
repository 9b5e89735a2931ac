"""The one rule every verdict is decided by: an interval against δ, symmetric in its two answers.

A claim states where its effect θ lies, against δ, the smallest effect that matters, fixed before
the runs:

- a **superiority** claim (``>0``, ``<0``: "A beats B by at least δ") says θ ≥ δ (for ``<0``,
  −θ ≥ δ); it *holds* when the whole interval lies above δ and *does not hold* when the whole
  interval lies below δ;
- an **equivalence** claim (``≈0``: "A matches B within δ") says |θ| < δ; it *holds* when the
  interval lies inside ±δ and *does not hold* when it lies wholly outside ±δ;
- a **difference** claim (``≠0``: "A differs from B by at least δ") is the equivalence claim's
  mirror: it holds when the interval lies wholly outside ±δ, and does not hold inside ±δ.

Anything else is *inconclusive*: the interval straddles an edge. A verdict thus never rests on
the point estimate, and every sentence the report writes about a bound is true of the interval.
"""

from __future__ import annotations

import math

from normlab.lab.verdict.statistic import Estimate, statistic
from normlab.lab.verdict.words import DECIDED, Word
from normlab.validation import check_choice

# expect -> the decision in words, as the report and the docs state it
EXPECT = {
    ">0": "holds if the interval lies above δ; does not hold if it lies below δ; otherwise "
    "inconclusive",
    "<0": "holds if the interval lies below −δ; does not hold if it lies above −δ; otherwise "
    "inconclusive",
    "≠0": "holds if the interval lies wholly outside ±δ; does not hold if it lies inside ±δ; "
    "otherwise inconclusive",
    "≈0": "holds if the interval lies inside ±δ; does not hold if it lies wholly outside ±δ; "
    "otherwise inconclusive",
}

# How a seed whose measure is undefined is scored, as the rule texts say it.
BOUND_TEXT = (
    "a seed index some arm lacks is unpaired: left out of v and of the means, and counted; a "
    "run whose measure is undefined (e.g. diverged) stays in, its measure bounded by the range "
    "that measure takes over the paired runs: 'holds' is decided on the least favourable end, "
    "'does not hold' on the most favourable"
)


def check_rule(expect: str, seeds: int, delta: float) -> None:
    """A rule's ``expect``, ``seeds`` and ``delta``, or ValueError."""
    check_choice("expect", expect, EXPECT)
    if seeds < 1 or not (delta >= 0 and math.isfinite(delta)):
        raise ValueError(f"seeds must be >= 1 and delta a finite number >= 0, got {seeds}, {delta}")


def decide(expect: str, est: Estimate, delta: float) -> tuple[Word, str]:
    """(word, why) of ``est`` under the claim form ``expect`` with minimum effect ``delta``."""
    check_choice("expect", expect, EXPECT)
    if est.effect is None and est.n >= 2 and est.values:
        return Word.INCONCLUSIVE, f"n={est.n}: the values' statistic leaves float range"
    if est.effect is None and est.n >= 2:
        why = f"n={est.n}: a seed's value is unbounded (its measure is undefined in every run)"
        return Word.INCONCLUSIVE, why
    if est.effect is None or est.n < 2:
        return Word.INCONCLUSIVE, f"n={est.n}: too few seeds for an interval"
    lo, hi, ci, d = est.lo, est.hi, est.text(), f"{delta:.3g}"
    inside = (-delta < lo and hi < delta, f"inside ±δ={d}")
    outside = (lo > delta or hi < -delta, f"wholly outside ±δ={d}")
    # expect -> (where the interval lies when it holds, where when it does not), each tested
    # in that order
    edges = {
        ">0": ((lo > delta, f"above δ={d}"), (hi < delta, f"below δ={d}")),
        "<0": ((hi < -delta, f"below −δ=−{d}"), (lo > -delta, f"above −δ=−{d}")),
        "≈0": (inside, outside),
        "≠0": (outside, inside),
    }
    for word, (lies, where) in zip(DECIDED, edges[expect], strict=True):
        if lies:
            return word, f"{ci}: the interval lies {where}"
    mde = f"; detectable at this n: {est.mde:.3g}" if est.mde is not None else ""
    return Word.INCONCLUSIVE, f"{ci}: the interval straddles an edge at δ={d}{mde}"


def pick(expect: str, lo: float, hi: float, for_holds: bool) -> float:
    """The end of a seed's range ``[lo, hi]`` least favourable to the decision (``for_holds``:
    to "holds"; else to "does not hold")."""
    if lo == hi:
        return lo
    near0 = min(max(0.0, lo), hi)
    far = lo if abs(lo) > abs(hi) else hi
    worst = {">0": (lo, hi), "<0": (hi, lo), "≈0": (far, near0), "≠0": (near0, far)}[expect]
    return worst[0] if for_holds else worst[1]


def decide_rows(
    expect: str, rows: list[tuple[float, float]], delta: float, level: float, trim: float = 0.0
) -> tuple[Word, str, Estimate]:
    """Decide on per-seed ranges ``(lo, hi)`` (equal where the value is known): "holds" on the
    ends least favourable to it, "does not hold" on the ends least favourable to that, with the
    statistic ``trim`` names (``statistic``)."""
    stat = statistic(trim)
    est_h = stat.estimate([pick(expect, lo, hi, True) for lo, hi in rows], level)
    word, why = decide(expect, est_h, delta)
    if word == Word.HOLDS or all(lo == hi for lo, hi in rows):
        return word, why, est_h
    est_f = stat.estimate([pick(expect, lo, hi, False) for lo, hi in rows], level)
    word_f, why_f = decide(expect, est_f, delta)
    if word_f == Word.DOES_NOT_HOLD:
        return word_f, why_f + " (the bounded seeds at their most favourable value)", est_f
    if word == Word.DOES_NOT_HOLD:  # only at the end least favourable to holding: not decided
        why = f"{why_f}: not decided with the bounded seeds at their most favourable value"
        return Word.INCONCLUSIVE, why, est_f
    return word, why + " (the bounded seeds at their least favourable value)", est_h
