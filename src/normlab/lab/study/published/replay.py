"""A published ``claims.json`` decided again from the per-seed values it stores, without its runs:
for a study whose runs are not at hand when the verdict rule changes.

Every claim of ``study`` (the design that wrote the file) is decided by the claim machinery
itself: each leaf rule (a contrast, a timing, a sensitivity, a threshold) is replaced by a
contrast of the same claim form, δ and statistic over one stand-in arm whose per-seed value is
the stored ``v``, so the statistic, the rule, Holm across a compound's parts and the design's
"not testable here" are today's. The controls keep their published verdicts (they store no
values); the means and seed outcomes are the published ones. A seed whose measure was bounded
stores only one end of its range, so a file with bounded seeds is refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from normlab.lab.study.decide import (
    Claim,
    Context,
    Contrast,
    Controlled,
    by_design,
    compound_parts,
    rivals,
    rules_compound,
)
from normlab.lab.study.decide.looks import with_look
from normlab.lab.study.published.coverage import stored_design
from normlab.lab.train.result import RunResult
from normlab.lab.verdict import Estimate, Seeds, Verdict, Word
from normlab.lab.verdict.sequential import Look

MEASURE = "final_val_loss"  # the stand-in arm's one measure: the stored v


@dataclasses.dataclass(frozen=True)
class _Stored:
    """A control as published: its verdict, not decided again."""

    status: Word
    why: str

    def decide(self, results, ctx) -> Verdict:
        return Verdict(self.status, self.why)


def _stand_in(key: str, rule, entry: dict, results: dict) -> Contrast:
    """A contrast of ``rule``'s claim form, δ and statistic over one arm whose per-seed value
    is the ``v`` ``entry`` stores (added to ``results``)."""
    values = entry.get("values") or []
    arm = f"v:{key}"
    results[arm] = {i: RunResult({}, summary={MEASURE: v}) for i, v in enumerate(values)}
    terms = ((1, arm, MEASURE),)
    return Contrast(terms, rule.expect, rule.delta, max(len(values), 1), trim=rule.trim)


def _stored(controls, entry: dict) -> tuple[tuple[str, _Stored], ...]:
    published = {c["control"]: c for c in entry.get("controls") or []}
    missing = [label for label, _ in controls if label not in published]
    if missing:
        raise ValueError(f"no published verdict of the control(s) {missing}")
    return tuple(
        (label, _Stored(Word(published[label]["verdict"]), published[label]["why"]))
        for label, _ in controls
    )


def _seeds(d: dict | None) -> Seeds | None:
    if not d:
        return None
    kinds = ("diverged", "stalled", "bounded", "unpaired")
    return Seeds(tuple(range(d["n"])), *(tuple(d.get(f"{k}_seeds", ())) for k in kinds))


def _published_view(v: Verdict, entry: dict) -> Verdict:
    """``v`` with the means and seed outcomes the study published (the stand-ins have none)."""
    parts = {p["part"]: p for p in entry.get("parts") or []}
    return dataclasses.replace(
        v,
        means=entry.get("means") or {},
        seeds=_seeds(entry.get("seed_outcomes")),
        parts=tuple((label, _published_view(pv, parts[label])) for label, pv in v.parts),
        controls=tuple(
            (label, dataclasses.replace(c, seeds=_seeds(pub.get("seed_outcomes"))))
            for (label, c), pub in zip(v.controls, entry.get("controls") or [], strict=False)
        ),
    )


def _decide(claim: Claim, entry: dict, ctx: Context) -> Verdict:
    """``claim`` decided on stand-ins of its leaf rules, its controls as published."""
    results: dict[str, dict[int, RunResult]] = {}
    split = compound_parts(claim.rule)
    if split is None:
        v = _stand_in(claim.name, claim.rule, entry, results).decide(results, ctx)
    else:
        stored = {p["part"]: p for p in entry["parts"]}
        members = []
        for label, rule in split[0]:
            stand_in = _stand_in(f"{claim.name}/{label}", rule, stored[label], results)
            members.append((label, Controlled(stand_in, _stored(rule.controls, stored[label]))))
        v = rules_compound.decide_parts(tuple(members), claim.rule.TARGET, results, ctx)
    v = rules_compound.with_controls(v, _stored(claim.controls, entry), results, ctx)
    return rivals.checked(v, _checks(claim, entry))


def _checks(claim: Claim, entry: dict) -> tuple[tuple[str, Verdict], ...]:
    """The claim's rate checks as published (like its controls, they store no per-seed values:
    each keeps its verdict and estimate)."""
    if not claim.rate_checks:
        return ()
    published = {r["rate"]: r for r in entry.get("rate_checks") or []}
    missing = [c.label for c in claim.rate_checks if c.label not in published]
    if missing:
        raise ValueError(f"{claim.name}: no published verdict of the rate check(s) {missing}")
    out = []
    for c in claim.rate_checks:
        r = published[c.label]
        est = Estimate(r["effect"], r["lo"], r["hi"], r["n"], None) if r.get("n") else None
        out.append((c.label, Verdict(Word(r["verdict"]), r["why"], est)))
    return tuple(out)


def published_design(docs: Path, preset: str):
    """The design that decided ``docs/data/<preset>/claims.json``: the ``spec.toml`` stored
    beside it (today's preset may have changed since), else today's built-in preset."""
    from normlab.lab.study.spec import load_builtin

    return stored_design(docs / "data" / preset) or load_builtin(preset, whole=True)


def replay(study, doc: dict[str, Any]) -> list[tuple[Claim, Verdict]]:
    """Every claim of ``study`` decided again from ``doc`` (a ``claims.json`` it wrote)."""
    entries = {c["name"]: c for c in doc["claims"]}
    ctx = Context(doc.get("plateau_h"))
    out = []
    for claim in study.claims:
        entry = entries.get(claim.name)
        if entry is None:
            raise ValueError(f"{claim.name}: not in the published claims.json")
        if (entry.get("seed_outcomes") or {}).get("bounded"):
            raise ValueError(f"{claim.name}: a bounded seed stores one end of its range only")
        seq = entry.get("sequential")  # decided at the look it stopped at, as it ran
        look = Look(study.sequential, claim.seeds, seq["look"] - 1) if seq else None
        at = dataclasses.replace(ctx, look=look) if look else ctx
        v = by_design(study, claim, _published_view(_decide(claim, entry, at), entry))
        out.append((claim, with_look(v, look, seq["stopped"]) if look else v))
    return out
