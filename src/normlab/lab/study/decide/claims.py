"""Claims are data: a statement, where it comes from, the rule that decides it (``rules``), the
controls that must hold for it to be testable in the study's setting, and its plots. Results are
``RunResult.to_dict()`` dicts, grouped ``arm -> {seed index: result}`` (``stats.Results``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from normlab.lab.study.decide import rivals
from normlab.lab.study.decide.rules_compound import control_arms, controls_text, with_controls
from normlab.lab.study.decide.rules_protocol import Rule
from normlab.lab.study.decide.stats import Context, Results
from normlab.lab.verdict import LEVEL, Verdict, Word


@dataclass(frozen=True)
class Claim:
    """One claim of the articles (or of later work), tested by one rule on named arms."""

    name: str
    statement: str
    source: str
    rule: Rule
    plots: tuple[str, ...] = ("loss", "seeds")
    # (label, rule): what must hold in the same setting for the claim to be testable there
    controls: tuple[tuple[str, Any], ...] = ()
    # Why the design cannot test the claim as its source states it (a recipe the lab cannot run
    # within budget): the verdict is then "not testable here" whatever the runs show.
    not_testable: str = ""
    # The same claim with its arms at other learning rates (``rivals``: the standard for rivals)
    rate_checks: tuple[rivals.RateCheck, ...] = ()
    # Run only when the study asks for its extended claims (a spec's ``extended = true``): what
    # a preset leaves out of its default run to stay within its budget.
    extended: bool = False

    @property
    def arms(self) -> tuple[str, ...]:
        own = control_arms(self.rule, self.controls)
        return (*own, *(at for c in self.rate_checks for _, at in c.arms))

    @property
    def seeds(self) -> int:
        return self.rule.seeds

    @property
    def timed(self) -> bool:
        return self.rule.timed

    def describe(self) -> str:
        """The rule as the report states it, with the claim's controls and rate checks."""
        text = self.rule.describe() + controls_text(self.controls)
        if self.rate_checks:
            rates = " and ".join(c.label for c in self.rate_checks)
            text += (
                f" Rate check: the same claim at {rates} on the same seeds; if one decides the "
                f"opposite, the verdict is '{Word.NOT_TESTABLE}' ({rivals.ANCHOR})."
            )
        return text

    def decide(self, results: Results, ctx: Context) -> Verdict:
        def on(runs: Results) -> Verdict:
            return with_controls(self.rule.decide(runs, ctx), self.controls, runs, ctx)

        v = on(results)
        return rivals.checked(v, tuple((c.label, on(c.results(results))) for c in self.rate_checks))


def by_design(study, claim: Claim, v: Verdict) -> Verdict:
    """``v``, or "not testable here" where the claim says why its design cannot test it
    (``Claim.not_testable``) or where ``study`` runs too few seeds for any interval of a
    part of ``claim`` (``Study.without_interval``) and nothing decided it: no outcome of its
    runs could, which "inconclusive" (more of the same would decide it) would hide. Seeds
    missing from a run directory leave a claim inconclusive: the design could decide it."""
    if claim.not_testable:
        why = f"{claim.not_testable} (its own result, not decided on: {v.why})"
        return dataclasses.replace(v, status=Word.NOT_TESTABLE, why=why)
    if v.status != Word.NOT_TESTABLE:
        v = rivals.unmet(study, claim, v)
    if v.status != Word.INCONCLUSIVE or not study.without_interval(claim):
        return v
    n = min(study.seeds(a) for a in claim.rule.arms())
    why = (
        f"the study runs {n} seed(s) of an arm, too few for any {LEVEL:.0%} interval: the "
        f"design cannot decide the claim, whatever its runs show (its own result, not decided "
        f"on: {v.why})"
    )
    return dataclasses.replace(v, status=Word.NOT_TESTABLE, why=why)
