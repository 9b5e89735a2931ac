"""Compound claims and controls: an ``all_of``/``any_of`` claim's parts decided and corrected by
the verdict engine's Holm step-down (``normlab.lab.verdict.holm``), and a claim's controls."""

from __future__ import annotations

import dataclasses
import functools

from normlab.lab.study.decide.stats import Results
from normlab.lab.verdict import LEVEL, Seeds, Verdict, Word, combine, correct


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
        return dataclasses.replace(v, controls=shown)
    why = "; ".join(f"control '{label}' {c.status}: {c.why}" for label, c in bad)
    why += f" — the setting cannot show the claim (its own result, not decided on: {v.status})"
    return dataclasses.replace(v, status=Word.NOT_TESTABLE, why=why, controls=shown)


def decide_parts(members, target: Word, results: Results, ctx) -> Verdict:
    """A compound claim's verdict from its ``(label, rule)`` parts: each decided at the
    context's level, Holm's step-down over the parts for ``target`` (the decision one part
    suffices for is the other's: all must reach it), then each part's own controls."""
    level, k = ctx.level, len(members)
    sub = dataclasses.replace(ctx, nominal_level=ctx.nominal().level)  # at ``level``
    plain = [rule.decide(results, sub) for _, rule in members]
    decide_at = lambda j, lvl: members[j][1].decide(results, sub.at(lvl)).status  # noqa: E731
    fixed = correct([(v.status, v.why) for v in plain], decide_at, target, level)
    parts = []
    for (name, rule), v, (word, why, note) in zip(members, plain, fixed, strict=True):
        v = dataclasses.replace(v, status=word, why=why, correction=note) if note else v
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
