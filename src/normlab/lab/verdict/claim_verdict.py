"""A claim's verdict, the type every study rule returns: its word and why, its estimate, its
parts and controls, and what became of its seeds.

No seed is left out silently. A seed index that some arm of a rule lacks is *unpaired*: it
enters neither the values nor the displayed means, and is counted. A run whose measure is
undefined (a diverged run has no end-of-training probe) stays in: its value is a range, and the
rule decides "holds" on the least favourable end of that range and "does not hold" on the most
favourable one, so an unstable seed helps neither verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from normlab.lab.train.result import RunResult
from normlab.lab.verdict.statistic import Estimate
from normlab.lab.verdict.words import Word


def _state(res: RunResult) -> str:
    return "diverged" if res.status == "diverged" else "stalled" if res.stopped_step else "ok"


@dataclass(frozen=True)
class Seeds:
    """The seeds a rule was decided on, and what became of them: none is left out silently."""

    paired: tuple[int, ...] = ()  # seed indices every arm of the rule has a run under
    diverged: tuple[int, ...] = ()  # of them, those where some arm's run diverged
    stalled: tuple[int, ...] = ()  # ... where some arm's run was stopped by the stall rule
    bounded: tuple[int, ...] = ()  # ... whose value needed a bound: a measure was undefined
    unpaired: tuple[int, ...] = ()  # seed indices some arm lacks: in no value and no mean

    @classmethod
    def of(
        cls,
        results: Mapping[str, Mapping[int, RunResult]],
        arms: tuple[str, ...],
        bounded=(),
    ) -> Seeds:
        have = [set(results.get(a, {})) for a in arms]
        paired = tuple(sorted(set.intersection(*have))) if have else ()
        unpaired = tuple(sorted(set.union(*have) - set(paired))) if have else ()

        def where(state: str) -> tuple[int, ...]:
            return tuple(i for i in paired if any(_state(results[a][i]) == state for a in arms))

        return cls(paired, where("diverged"), where("stalled"), tuple(bounded), unpaired)

    def merge(self, other: Seeds) -> Seeds:
        names = [f.name for f in dataclasses.fields(self)]
        return Seeds(*(tuple(sorted({*getattr(self, n), *getattr(other, n)})) for n in names))

    @property
    def n(self) -> int:
        return len(self.paired)

    def text(self) -> str:
        """ "1 of 3 seeds diverged, 0 stalled" and what else a reader must know."""
        out = f"{len(self.diverged)} of {self.n} seeds diverged, {len(self.stalled)} stalled"
        if self.bounded:
            out += f"; {len(self.bounded)} with an undefined measure, bounded"
        if self.unpaired:
            out += f"; {len(self.unpaired)} unpaired, left out"
        return out

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"n": self.n}
        for f in dataclasses.fields(self)[1:]:
            d[f.name] = len(getattr(self, f.name))
            d[f"{f.name}_seeds"] = list(getattr(self, f.name))
        return d | {"text": self.text()}


@dataclass(frozen=True)
class Verdict:
    status: Word
    why: str
    estimate: Estimate | None = None
    parts: tuple[tuple[str, Verdict], ...] = ()
    means: dict[str, float | None] = field(default_factory=dict)  # per-term means, to show
    seeds: Seeds | None = None  # None: not decided over seeds (a timing claim)
    correction: str = ""  # how the looks of a compound claim were corrected
    controls: tuple[tuple[str, Verdict], ...] = ()  # what the controls showed
    rate_checks: tuple[tuple[str, Verdict], ...] = ()  # the same claim at other rates (rivals)
    sequential: dict[str, Any] = field(default_factory=dict)  # the look it was decided at

    def to_dict(self) -> dict[str, Any]:
        shown = ("verdict", "why", "seed_outcomes")  # of a control
        return (
            {
                "verdict": self.status,
                "why": self.why,
                **(self.estimate.to_dict() if self.estimate else {}),
                "means": self.means,
                "seed_outcomes": self.seeds.to_dict() if self.seeds else None,
                "correction": self.correction,
                "controls": [
                    {"control": name} | {k: v.to_dict()[k] for k in shown}
                    for name, v in self.controls
                ],
                "parts": [{"part": name, **v.to_dict()} for name, v in self.parts],
            }
            | self._checks()
            | ({"sequential": self.sequential} if self.sequential else {})
        )

    def _checks(self) -> dict[str, Any]:
        if not self.rate_checks:  # claims.json without the key where the claim has no check
            return {}
        shown = ("verdict", "why", "effect", "lo", "hi", "n")
        rows = [
            {"rate": name} | {k: v.to_dict().get(k) for k in shown} for name, v in self.rate_checks
        ]
        return {"rate_checks": rows}
