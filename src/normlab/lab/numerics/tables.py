"""Op-level findings: an article's statement decided like a study claim, for ``normlab numerics``
and ``normlab bench``.

A finding has one or more parts; each part is a rule fixed before the measurement: per
repetition (an input draw, a timing round, a training step) a value ``v``, its mean with a
Student-t interval (timings: the 20 %-trimmed mean with Yuen's interval) and a decision against
δ in the study's words. A finding holds iff every part holds (each at 95 %); it does not hold iff
some part does not hold with its interval at 1 − 5 %/k (Bonferroni over the k parts); a part
that cannot be measured here is *not testable here*.

This module is the one place the op-level findings take the study's statistics from;
``lab.study.coverage`` reads the published findings with its ``combine`` and ``interval_text``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from normlab.lab.study.stats import (
    EXPECT,
    FAILS,
    HOLDS,
    LEVEL,
    UNSURE,
    UNTESTABLE,
    VERDICTS,
    Estimate,
    decide,
)

__all__ = [
    "EXPECT",
    "FAILS",
    "HOLDS",
    "LEVEL",
    "UNSURE",
    "UNTESTABLE",
    "VERDICTS",
    "Estimate",
    "Finding",
    "Rule",
    "decide",
]


@dataclass(frozen=True)
class Rule:
    """Per repetition ``v`` = ``what``, decided as ``expect`` (``EXPECT``) against ``delta``."""

    what: str
    expect: str
    delta: float
    trimmed: bool = False  # timings: a round stalled by the machine moves neither mean nor CI

    def describe(self) -> str:
        stat = (
            "20 % trimmed mean over rounds, Yuen's interval"
            if self.trimmed
            else "mean over repetitions, Student-t interval"
        )
        return f"v = {self.what}; {stat}; {EXPECT[self.expect]} (δ = {self.delta:.3g})"

    def estimate(self, values: Sequence[float], level: float) -> Estimate:
        vals = [float(v) for v in values]
        return Estimate.trimmed(vals, level) if self.trimmed else Estimate.of(vals, level)


@dataclass(frozen=True)
class Finding:
    """One statement of the articles with the rules of its parts (``label -> Rule``)."""

    name: str
    statement: str
    source: str
    parts: tuple[tuple[str, Rule], ...]
    unit: str = "input draw"  # what one repetition is

    def decide(
        self,
        values: Mapping[str, Sequence[float] | None],
        *,
        means: Mapping[str, Any] | None = None,
        untestable: Mapping[str, str] | None = None,
        level: float = LEVEL,
    ) -> dict:
        """The verdict as a JSON-able dict from ``values`` (part label -> ``v`` per
        repetition); a part named in ``untestable`` (label -> why) or without values is not
        testable here. ``means``: what to show beside the verdict (raw means, counts)."""
        untestable = dict(untestable or {})
        k = len(self.parts)
        strict = 1 - (1 - level) / k
        parts = []
        for label, rule in self.parts:
            vals = values.get(label)
            if label in untestable or not vals:
                why = untestable.get(label, "not measured in this run")
                parts.append({"part": label, "verdict": UNTESTABLE, "why": why})
                continue
            est = rule.estimate(vals, level)
            status, why = decide(rule.expect, est, rule.delta)
            if status == FAILS and k > 1:
                strict_status, strict_why = decide(
                    rule.expect, rule.estimate(vals, strict), rule.delta
                )
                if strict_status != FAILS:
                    status = UNSURE
                    why = (
                        f"{why}, but not at {strict:.4g} (Bonferroni over the {k} parts): "
                        f"{strict_why}"
                    )
            parts.append({"part": label, "verdict": status, "why": why, **est.to_dict()})
        return {
            "name": self.name,
            "statement": self.statement,
            "source": self.source,
            "unit": self.unit,
            "rule": self.describe(),
            "verdict": combine([p["verdict"] for p in parts]),
            "parts": parts,
            "means": dict(means or {}),
        }

    def describe(self) -> str:
        groups: dict[str, list[str]] = {}  # parts that share a rule are named together
        for label, rule in self.parts:
            groups.setdefault(rule.describe(), []).append(label)
        text = " ".join(f"[{', '.join(labels)}] {rule}." for rule, labels in groups.items())
        if len(self.parts) > 1:
            text += (
                f" Holds iff every part holds (each at {LEVEL:.0%}); does not hold iff some part "
                f"does not hold at 1 − {1 - LEVEL:.0%}/{len(self.parts)} (Bonferroni)."
            )
        return text


def combine(statuses: Sequence[str]) -> str:
    """A finding's verdict from its parts' (the study's ``all_of``)."""
    if FAILS in statuses:
        return FAILS
    if statuses and all(s == HOLDS for s in statuses):
        return HOLDS
    rest = [s for s in statuses if s != HOLDS]
    return UNTESTABLE if rest and all(s == UNTESTABLE for s in rest) else UNSURE


def interval_text(part: Mapping[str, Any], digits: int = 3) -> str:
    """``+0.52 [+0.50, +0.54], n=8`` of a decided part, or its verdict."""
    if part.get("effect") is None:
        return part["verdict"]
    f = lambda x: "?" if x is None else f"{x:+.{digits}g}"  # noqa: E731
    return f"{f(part['effect'])} [{f(part.get('lo'))}, {f(part.get('hi'))}], n={part['n']}"


FINDINGS_HEADER = ["finding", "verdict", "part", "part verdict", "v: mean [95 % CI], n", "δ"]


def table_rows(findings: Sequence[Mapping[str, Any]], rules: Mapping[str, Finding]) -> list:
    """One row per part of every finding (the finding's name and verdict on its first row)."""
    rows = []
    for f in findings:
        deltas = dict((label, r.delta) for label, r in rules[f["name"]].parts)
        for i, p in enumerate(f["parts"]):
            rows.append(
                [
                    f["name"] if i == 0 else "",
                    f"**{f['verdict']}**" if i == 0 else "",
                    p["part"],
                    p["verdict"],
                    interval_text(p),
                    f"{deltas[p['part']]:.3g}",
                ]
            )
    return rows


def markdown(findings: Sequence[Mapping[str, Any]], rules: Mapping[str, Finding]) -> str:
    """The findings as Markdown: the table, then each statement with its rule and the why."""
    from normlab.lab.render import md_table

    out = [md_table(FINDINGS_HEADER, table_rows(findings, rules)), ""]
    for f in findings:
        out += [
            f"### {f['name']}: {f['verdict']}",
            "",
            f"*{f['statement']}* ({f['source']}; one repetition = one {f['unit']})",
            "",
            f"Rule (fixed before the measurement): {f['rule']}",
            "",
        ]
        out += [f"- {p['part']}: **{p['verdict']}** — {p['why']}" for p in f["parts"]]
        if f["means"]:
            shown = "; ".join(f"{k} = {_show(v)}" for k, v in f["means"].items())
            out += ["", f"Measured: {shown}."]
        out.append("")
    return "\n".join(out)


def _show(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)
