"""Compound claims and controls: Holm's step-down over the parts of an ``all_of``/``any_of``
claim, and a claim's controls.

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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from normlab.lab.study.stats import (
    FAILS,
    HOLDS,
    LEVEL,
    UNSURE,
    UNTESTABLE,
    Results,
    Verdict,
)


def holm(
    plain: list[str], decide_at: Callable[[int, float], str], target: str, level: float
) -> tuple[dict[int, float], int]:
    """Holm's step-down for ``target`` over parts whose plain decisions (at ``level``) are
    ``plain``; ``decide_at(j, lvl)`` decides part ``j`` at ``lvl``. Returns part -> the level
    it was confirmed at, and how many parts were left unconfirmed at the last look."""
    alpha, m = 1 - level, len(plain)
    confirmed: dict[int, float] = {}
    left = [j for j, s in enumerate(plain) if s == target]  # monotone: no other part can
    while left:
        lvl = 1 - alpha / m
        hits = [j for j in left if decide_at(j, lvl) == target]
        if not hits:
            break
        confirmed.update((j, lvl) for j in hits)
        left = [j for j in left if j not in hits]
        m -= len(hits)
    return confirmed, m


def controls_text(controls) -> str:
    if not controls:
        return ""
    names = ", ".join(f"'{label}'" for label, _ in controls)
    return (
        f" Controls: {names} (each decided as its rule at {LEVEL:.0%}); if a control does not "
        f"hold, the verdict is '{UNTESTABLE}' with the control's result as the reason."
    )


def with_controls(v: Verdict, controls, results: Results, ctx) -> Verdict:
    """``v``, or "not testable here" where a control (``(label, rule)``, decided at the
    context's nominal level) does not show what it must."""
    if not controls:
        return v
    shown = tuple((label, rule.decide(results, ctx.nominal())) for label, rule in controls)
    bad = [(label, c) for label, c in shown if c.status != HOLDS]
    if not bad:
        return dataclasses.replace(v, controls=shown)
    why = "; ".join(f"control '{label}' {c.status}: {c.why}" for label, c in bad)
    why += f" — the setting cannot show the claim (its own result, not decided on: {v.status})"
    return dataclasses.replace(v, status=UNTESTABLE, why=why, controls=shown)


# A compound's decision (``decide_parts``) in words, for each target.
ALL_OF_TEXT = (
    "Holds iff every part holds (each at 95 %: all must hold, which needs no correction); "
    "does not hold iff some part does not hold after Holm's step-down across the k parts "
    "(the part with the strongest evidence against it tested at 1 − 5 %/k, the next at "
    "1 − 5 %/(k−1), …; family-wise 5 %); a part whose control fails is not testable here."
)
ANY_OF_TEXT = (
    "Holds iff some part holds after Holm's step-down across the k parts (the part with "
    "the strongest evidence tested at 1 − 5 %/k, the next at 1 − 5 %/(k−1), …; family-wise "
    "5 %); does not hold iff every part does not (each at 95 %, which needs no correction); "
    "a part whose control fails is not testable here."
)


def decide_parts(members, target: str, results: Results, ctx) -> Verdict:
    """A compound claim's verdict from its ``(label, rule)`` parts: each decided at the
    context's level, Holm's step-down over the parts for ``target`` (the decision one part
    suffices for is the other's: all must reach it), then each part's own controls."""
    level, k = ctx.level, len(members)
    sub = dataclasses.replace(ctx, nominal_level=ctx.nominal().level)
    rules = [rule for _, rule in members]
    plain = [rule.decide(results, sub.at(level)) for rule in rules]
    decide_at = lambda j, lvl: rules[j].decide(results, sub.at(lvl)).status  # noqa: E731
    confirmed, m = holm([v.status for v in plain], decide_at, target, level)
    verdicts = []
    for j, v in enumerate(plain):
        if v.status == target and j in confirmed:
            v = dataclasses.replace(v, correction=f"confirmed by Holm at {confirmed[j]:.4g}")
        elif v.status == target:
            note = (
                f"'{target}' alone at {level:.0%} ({v.why}), but not after Holm's correction "
                f"across the {k} parts (needed its interval at {1 - (1 - level) / m:.4g})"
            )
            v = dataclasses.replace(v, status=UNSURE, why=note, correction=note)
        verdicts.append(with_controls(v, rules[j].controls, results, sub))
    correction = (
        f"Holm step-down over the {k} parts for '{target}' (family-wise {1 - level:.0%}): "
        f"{len(confirmed)} confirmed"
    )
    parts = tuple((name, v) for (name, _), v in zip(members, verdicts, strict=True))
    why = "; ".join(f"{name}: {v.status}" for name, v in parts)
    means = {key: x for _, v in parts for key, x in v.means.items()}
    seeds = None
    for _, v in parts:
        seeds = v.seeds.merge(seeds) if v.seeds else seeds
    status = combine_parts(target, [v.status for _, v in parts])
    return Verdict(status, why, None, parts, means, seeds, correction)


def combine_parts(target: str, statuses: list[str]) -> str:
    """``target`` if some part reached it; the other decision if every part did; else not
    testable here if every other part is, inconclusive if not."""
    other = HOLDS if target == FAILS else FAILS
    if target in statuses:
        return target
    if all(s == other for s in statuses):
        return other
    rest = [s for s in statuses if s != other]
    return UNTESTABLE if all(s == UNTESTABLE for s in rest) else UNSURE
