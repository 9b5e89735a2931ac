"""Seeds sized before the runs: from a pilot study on a seed block that is never reported, the
number of seeds each claim needs for its detectable effect to reach its δ.

The detectable effect at n paired seeds is ``(t₀.₉₇₅,ₙ₋₁ + t₀.₈,ₙ₋₁) · s / √n`` (the one
``claims.Estimate`` reports), with ``s`` the 80 % upper confidence limit of the pilot's
seed-to-seed spread, ``sd · √((k − 1) / χ²₀.₂,ₖ₋₁)`` over its k seeds: a spread read from a
handful of seeds is itself uncertain, and sizing from the point estimate leaves half the
claims short (Browne 1995, "On the use of a pilot sample for sample size determination"). A
rule with δ = 0 (the
"fails"/"trains" thresholds, whose margin sits in the constant) is sized so that the detectable
effect reaches the pilot's own effect instead. A compound claim needs what its most demanding
part needs. The pilot's effects decide nothing: only its spread is read.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normlab.lab.study.report.claims_json import read_claims
from normlab.lab.study.spec import Study
from normlab.lab.verdict import detectable, statistic


def sd_upper(sd: float, k: int, confidence: float = 0.8) -> float:
    """The ``confidence`` upper limit of a spread ``sd`` estimated from ``k`` values."""
    from scipy import stats

    return sd * math.sqrt((k - 1) / stats.chi2.ppf(1 - confidence, k - 1))


def seeds_for(sd: float, target: float, cap: int) -> int | None:
    """The fewest seeds (2..``cap``) whose detectable effect is at most ``target``; None if
    even ``cap`` seeds do not reach it."""
    if sd == 0:
        return 2
    return next((n for n in range(2, cap + 1) if detectable(sd, n) <= target), None)


def part_values(claim, entry: dict[str, Any]) -> list[tuple[str, Any, list[float]]]:
    """``(label, rule, values)`` per part of ``claim``: the per-seed values its entry of a
    finished study's ``claims.json`` holds (none: [])."""
    got = {p.get("part", ""): p for p in entry.get("parts") or [entry]}
    return [(lb, rule, (got.get(lb) or {}).get("values") or []) for lb, rule in claim.rule.parts()]


@dataclass(frozen=True)
class SeedPlan:
    claim: str
    part: str  # "" for a claim of one rule
    pilot_n: int
    sd: float  # the pilot's spread
    sd_upper: float  # its 80 % upper limit, what the plan is sized for
    target: float  # δ, or the pilot's |effect| where δ = 0
    needed: int | None  # None: more than the cap
    current: int  # the seeds the spec asks for now


def size_seeds(study: Study, pilot: dict[str, Any], cap: int = 16) -> list[SeedPlan]:
    """One plan per rule (claim or part) of ``study`` that the pilot's ``claims.json`` decided
    on at least two seeds; timing claims (decided on rounds, not seeds) are left out."""
    by_name = {c["name"]: c for c in pilot["claims"]}
    plans = []
    for claim in study.claims:
        got = by_name.get(claim.name)
        if claim.timed or got is None:
            continue
        for label, rule, values in part_values(claim, got):
            if len(values) < 2:
                continue
            sd = statistic(rule.trim).spread(values)
            upper = sd_upper(sd, len(values))
            target = rule.delta if rule.delta > 0 else abs(statistics.fmean(values))
            needed = seeds_for(upper, target, cap) if target > 0 else None
            plans.append(
                SeedPlan(claim.name, label, len(values), sd, upper, target, needed, claim.seeds)
            )
    return plans


def format_plans(plans: list[SeedPlan], cap: int) -> str:
    from normlab.lab.kit.render import text_table

    rows = []
    for p in plans:
        spreads = [f"{x:.3g}" for x in (p.sd, p.sd_upper, p.target)]
        needed = p.needed if p.needed is not None else f"> {cap}"
        rows.append([p.claim, p.part or "–", p.pilot_n, *spreads, p.current, needed])
    header = ["claim", "part", "pilot n", "sd", "sd (80 % upper)", "δ (target)", "seeds now",
              "needed"]  # fmt: skip
    return text_table(header, rows)


def main(study: Study, pilot_dir: str, cap: int = 16) -> int:
    """``normlab study --size-seeds DIR``: the seeds each claim of ``study`` needs, printed,
    from the pilot study in ``pilot_dir``."""
    path = Path(pilot_dir) / "claims.json"
    pilot = read_claims(path, f"--size-seeds {pilot_dir}: {path}")  # bounded, to its leaves
    print(f"seeds per claim from the pilot {path} (seed block {pilot.get('seed_block')}):")
    print(format_plans(size_seeds(study, pilot, cap), cap))
    return 0
