"""Op-level findings: an article's statement decided from repeated measurements, for
``normlab numerics`` and ``normlab bench``, by the same rule and correction as a study's claim.

A finding has one or more parts, each fixed before the measurement: per repetition (an input
draw, a timing round, a training step) a value ``v``, its statistic with an interval, and the
symmetric rule against δ (``rule.decide``). A finding holds iff every part holds (each at 95 %);
it does not hold iff some part does not after Holm's step-down across the parts
(``holm.correct``); a part that cannot be measured here is *not testable here*.

``Finding.design`` is everything that decides a finding, as canonical JSON-ready data: published
beside its verdict with the seed block it was measured on, so that a design changed after its
data shows (the lead fingerprints it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from normlab.lab.kit.reading import check_strings, read_json
from normlab.lab.kit.shapes import ANY, Choice, Int, Num, check_shape
from normlab.lab.verdict.holm import ALL_OF_TEXT, combine, correct
from normlab.lab.verdict.rule import EXPECT, decide
from normlab.lab.verdict.statistic import LEVEL, Estimate, statistic
from normlab.lab.verdict.words import CLAIM_WORDS, Word

TARGET = Word.DOES_NOT_HOLD  # the decision Holm corrects: all parts must hold
# What a published finding carries beside its verdict, kept as published when it is redecided:
# what its plots read, and the design and seeds it was measured under.
KEPT = ("record", "design", "seed_block", "seeds", "began")


@dataclass(frozen=True)
class Part:
    """Per repetition ``v`` = ``what``, decided as ``expect`` (``EXPECT``) against ``delta`` on
    the statistic ``trim`` names (timings: 0.2, so a round stalled by the machine moves neither
    the estimate nor its interval)."""

    what: str
    expect: str
    delta: float
    trim: float = 0.0
    delta_why: str = ""  # why this δ: registered with the design, not part of the rule's text

    def describe(self) -> str:
        stat = statistic(self.trim).words("repetitions")
        return f"v = {self.what}; {stat}; {EXPECT[self.expect]} (δ = {self.delta:.3g})"

    def estimate(self, values: Sequence[float], level: float) -> Estimate:
        return statistic(self.trim).estimate([float(v) for v in values], level)

    def design(self, label: str) -> dict[str, Any]:
        """This part of a finding's design (``Finding.design``)."""
        return {
            "label": label,
            "measure": self.what,
            "expect": self.expect,
            "delta": float(self.delta),
            "trim": float(self.trim),
            "delta_why": self.delta_why,
        }


@dataclass(frozen=True)
class Finding:
    """One statement of the articles with its parts (``label -> Part``)."""

    name: str
    statement: str
    source: str
    parts: tuple[tuple[str, Part], ...]
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
        skipped = {
            label: untestable.get(label, "not measured in this run")
            for label, _ in self.parts
            if label in untestable or not values.get(label)
        }
        measured = [(label, part) for label, part in self.parts if label not in skipped]

        def at(j: int, lvl: float) -> tuple[Word, str, Estimate]:
            label, part = measured[j]
            est = part.estimate(values[label], lvl)
            return (*decide(part.expect, est, part.delta), est)

        plain = [at(j, level) for j in range(len(measured))]
        fixed = correct(
            [(w, why) for w, why, _ in plain], lambda j, lvl: at(j, lvl)[0], TARGET, level
        )
        decided = {
            label: {"verdict": word, "why": why, **est.to_dict()}
            | ({"correction": note} if note and len(measured) > 1 else {})
            for (label, _), (word, why, note), (_, _, est) in zip(
                measured, fixed, plain, strict=True
            )
        }
        parts = [
            {"part": label, **decided[label]}
            if label in decided
            else {"part": label, "verdict": Word.NOT_TESTABLE, "why": skipped[label]}
            for label, _ in self.parts
        ]
        return {
            **self._said(),
            "rule": self.describe(),
            "verdict": combine(TARGET, [p["verdict"] for p in parts]),
            "parts": parts,
            "means": dict(means or {}),
        }

    def design(self) -> dict[str, Any]:
        """Everything that decides this finding, as JSON-ready data in a fixed order (name,
        statement, source, unit, and per part its label, measure, expect, δ, trim and why that
        δ): equal designs give equal canonical JSON, so a fingerprint of it (e.g. the sha256 of
        ``json.dumps(design, sort_keys=True)``) tells whether a design changed after its data."""
        return {**self._said(), "parts": [part.design(label) for label, part in self.parts]}

    def _said(self) -> dict[str, str]:
        """What the finding states: its name, statement, source and unit (in that order)."""
        return {k: getattr(self, k) for k in ("name", "statement", "source", "unit")}

    def redecide(self, published: Mapping[str, Any]) -> dict:
        """``published`` (a finding as ``decide`` wrote it) decided again from its stored
        per-repetition values, with today's parts and rule; its means, record and registration
        (the design it was measured under, its seed block and seeds) are kept."""
        values = {p["part"]: p.get("values") for p in published["parts"] if p.get("values")}
        untestable = {
            p["part"]: p["why"]
            for p in published["parts"]
            if p["verdict"] == Word.NOT_TESTABLE and not p.get("values")
        }
        extra = {k: v for k, v in published.items() if k in KEPT}
        return self.decide(values, means=published.get("means"), untestable=untestable) | extra

    def describe(self) -> str:
        groups: dict[str, list[str]] = {}  # parts that share a rule are named together
        for label, part in self.parts:
            groups.setdefault(part.describe(), []).append(label)
        text = " ".join(f"[{', '.join(labels)}] {rule}." for rule, labels in groups.items())
        return text + (f" {ALL_OF_TEXT}" if len(self.parts) > 1 else "")


def interval_text(part: Mapping[str, Any], digits: int = 3) -> str:
    """``+0.52 [+0.50, +0.54], n=8`` of a decided part (a finding's or a claim's), or its
    verdict."""
    if part.get("effect") is None:
        return str(part["verdict"])
    f = lambda x: "?" if x is None else f"{x:+.{digits}g}"  # noqa: E731
    return f"{f(part['effect'])} [{f(part.get('lo'))}, {f(part.get('hi'))}], n={part['n']}"


# A findings file (``numerics-findings.json``, ``bench-findings.json``: a list of what
# ``Finding.decide`` returns), to the leaves its readers take.
CLAIM_WORD = Choice(tuple(w.value for w in CLAIM_WORDS))  # a claim's or a finding's
_PARTS = [
    {
        "part": str,
        "verdict": CLAIM_WORD,
        "why": str,
        **dict.fromkeys(("effect?", "lo?", "hi?", "mde?"), Num()),
        "n?": Int(0),
        "values?": [Num()],
    }
]
_CONTROL = {"verdict": CLAIM_WORD, "parts": _PARTS}
FINDINGS_SCHEMA = [
    {
        "name": str,
        "verdict": CLAIM_WORD,
        "parts": _PARTS,
        "means?": {"*": ANY},
        # normlab vision's: what overturned the parts' verdict, its control and rate checks
        "why?": str,
        "control?": _CONTROL,
        "rate_checks?": [
            {"factor": Num(0), "verdict": CLAIM_WORD, "parts": _PARTS, "control": _CONTROL}
        ],
    }
]


def read_findings(path, what: str | None = None) -> list[dict]:
    """A findings file read bounded (``normlab.lab.kit.reading``), its strings without control
    characters and its values of the types its readers take; a ``ReadError`` naming the file
    and the key otherwise."""
    what = what or str(path)
    return check_shape(check_strings(read_json(path, what), what), FINDINGS_SCHEMA, what)
